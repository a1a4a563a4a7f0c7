"""An incremental save's "unchanged" test: crc32c and BLAKE3 hashed ahead in helper threads whatever the
window, one retention clock look-up per save, a tip not written by varstore."""

from __future__ import annotations

from pathlib import Path

import blake3
import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.format.checksum import crc32c_raw
from varstore.checkpoint.format.manifest import decode_manifest
from varstore.checkpoint.manage import incremental, snapshot_parent
from varstore.storage.icechunk_repo import IcechunkRepository

icechunk = pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")
zarr = pytest.importorskip("zarr")


def _model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(9)
    model = {f"base/{i}": rng.standard_normal((96, 40 + i)).astype(np.float32) for i in range(5)}
    model["base/bf16"] = rng.standard_normal((8, 8)).astype(vs.dtypes.bfloat16)
    model["adapter"] = rng.standard_normal((40, 4)).astype(np.float32)
    model["step"] = np.array(0, np.int64)
    model["empty"] = np.zeros((0,), np.float32)
    return model


@pytest.mark.parametrize("ahead, threads, threaded", [(1, 1, 1 << 30), (96 * 42 * 4, 2, 1), (64 << 20, 3, 4096)])
def test_digests_hashed_ahead_are_each_values_blake3_and_only_changes_are_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: int, threads: int, threaded: int) -> None:
    monkeypatch.setattr(incremental, "HASH_AHEAD_BYTES", ahead)
    monkeypatch.setattr(incremental, "HASH_THREADS", threads)
    monkeypatch.setattr(snapshot_parent, "THREADED_DIGEST_BYTES", threaded)  # BLAKE3's own threads or not
    model = _model()
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    manager.save(model, step=1)
    model["adapter"] = model["adapter"] + np.float32(1)
    model["step"] = np.array(2, np.int64)
    model["base/3"] = model["base/3"].copy()  # same bytes, new array: not written
    manager.save(model, step=2)
    assert set(manager.last_save.written) == {"adapter", "step"}
    assert manager.last_save.added_bytes == 40 * 4 * 4 + 8
    view = IcechunkRepository(tmp_path / "run").readonly("ckpt-2")
    header, records = decode_manifest(view.get(snapshot_parent.manifest_key()) or b"", "ckpt-2")
    recorded = {record.name: (record.checksum, digest) for record, digest in zip(records, header["blake3"])}
    for name, value in model.items():
        assert recorded[name] == (crc32c_raw(value.tobytes()), blake3.blake3(value.tobytes()).hexdigest()), name
    loaded = vs.load(f"{tmp_path / 'run'}@ckpt-2")
    assert all(loaded[n].tobytes() == v.tobytes() for n, v in model.items())


def test_the_retention_clock_survives_a_commit_not_made_by_varstore(tmp_path: Path) -> None:
    clock = [5000.0]
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=1, keep_every_n_hours=1.0, format="icechunk",
                                   clock=lambda: clock[0])
    manager.save({"w": np.zeros(4, np.float32)}, step=1)
    repo = IcechunkRepository(tmp_path / "run")
    txn = repo.writable()  # a plain Icechunk user's commit at the tip, without varstore's metadata
    txn.set("notes/zarr.json", b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    txn.commit("notes", {})
    clock[0] = 8000.0  # a new manager, started later: its own start is not the run's
    later = vs.CheckpointManager(tmp_path / "run", max_to_keep=1, keep_every_n_hours=1.0, format="icechunk",
                                 clock=lambda: clock[0])
    clock[0] = 8700.0  # over an hour after the run's start (5000), under one after this manager's (8000)
    later.save({"w": np.ones(4, np.float32)}, step=2)
    clock[0] += 60.0
    later.save({"w": np.full(4, 2, np.float32)}, step=3)
    # the run's clock started at 5000 (step 1's record, found past the foreign tip): step 2 is the hourly keep
    assert [s.step for s in later.steps()] == [2, 3]


def test_a_step_changing_only_small_values_writes_no_chunk_object(tmp_path: Path) -> None:
    """Chunks up to INLINE_CHUNK_BYTES live in their manifest: a step changing a 12 KiB adapter adds no file
    under chunks/, a larger change does; every step reads back bit-exactly, through varstore and plain zarr."""
    from varstore.storage.icechunk_repo import INLINE_CHUNK_BYTES
    rng = np.random.default_rng(4)
    model = {"base": rng.standard_normal((64, 512)).astype(np.float32),  # 128 KiB: a chunk object
             "lora/a": rng.standard_normal((8, 384)).astype(np.float32)}  # 12 KiB: inline
    assert model["lora/a"].nbytes <= INLINE_CHUNK_BYTES < model["base"].nbytes
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    manager.save(model, step=1)
    chunks = tmp_path / "run" / "chunks"
    before = set(chunks.iterdir())
    model["lora/a"] = model["lora/a"] * np.float32(0.5)
    manager.save(model, step=2)
    assert set(chunks.iterdir()) == before
    model["base"] = model["base"] + np.float32(1)
    manager.save(model, step=3)
    assert len(set(chunks.iterdir()) - before) == 1
    for step, expected_a in ((2, model["lora/a"]), (3, model["lora/a"])):
        loaded = vs.load(f"{tmp_path / 'run'}@ckpt-{step}")
        assert loaded["lora/a"].tobytes() == expected_a.tobytes()
    assert vs.load(f"{tmp_path / 'run'}@ckpt-3")["base"].tobytes() == model["base"].tobytes()
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "run")))
    group = zarr.open_group(repo.readonly_session(tag="ckpt-2").store, mode="r")
    assert group["lora/a"][...].tobytes() == model["lora/a"].tobytes()


def test_the_repository_configuration_restates_icechunks_manifest_defaults_without_regexes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """varstore's RepositoryConfig: no manifest preloading, one manifest per array for AnyArray (no regular
    expression to compile per array). The same manifests are written as with Icechunk's default
    configuration (one per changed array), and every step restores bit-exactly either way."""
    from varstore.storage import icechunk_repo

    config = icechunk_repo.repository_config(icechunk)
    assert config.inline_chunk_threshold_bytes == icechunk_repo.INLINE_CHUNK_BYTES
    assert "AnyArray" in repr(config.manifest.splitting) and "PathMatches" not in repr(config.manifest.splitting)
    assert config.manifest.preload.preload_if == icechunk.ManifestPreloadCondition.false()

    def default(ic: object) -> object:
        return icechunk.RepositoryConfig(inline_chunk_threshold_bytes=icechunk_repo.INLINE_CHUNK_BYTES)

    rng = np.random.default_rng(5)
    model = {f"w/{i}": rng.standard_normal((64, 128)).astype(np.float32) for i in range(4)}  # 32 KiB each
    counts = {}
    for name in ("varstore", "default"):
        if name == "default":
            monkeypatch.setattr(icechunk_repo, "repository_config", default)
        state = {key: value.copy() for key, value in model.items()}
        manager = vs.CheckpointManager(tmp_path / name, max_to_keep=None, format="icechunk")
        manager.save(state, step=1)
        before = len(list((tmp_path / name / "manifests").iterdir()))
        state["w/1"] = state["w/1"] + np.float32(1)
        state["w/3"] = state["w/3"] * np.float32(2)
        manager.save(state, step=2)
        counts[name] = len(list((tmp_path / name / "manifests").iterdir())) - before
        loaded = vs.load(f"{tmp_path / name}@ckpt-2")
        assert all(loaded[key].tobytes() == state[key].tobytes() for key in state)
    assert counts == {"varstore": 3, "default": 3}  # w/1, w/3 and varstore's manifest array
    config_yaml = (tmp_path / "varstore" / "config.yaml").read_text()
    assert "AnyArray" in config_yaml or "any_array" in config_yaml
