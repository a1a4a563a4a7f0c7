"""CheckpointManager(format="icechunk"): one Icechunk repository, only changed chunks written, every kept
step restored bit-exactly, retention shrinking the repository, plain zarr reads, compression, faults."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.manage import incremental
from varstore.checkpoint.manage.incremental_manager import IncrementalCheckpointManager
from varstore.errors import CheckpointConflictError, CheckpointNotFoundError

icechunk = pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")
zarr = pytest.importorskip("zarr")

ROOT = Path(__file__).resolve().parents[2]


def _disk_bytes(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _model(seed: int = 0) -> dict[str, np.ndarray]:
    """A frozen base (4 x 64 KiB) and a small trainable adapter with its Adam moments."""
    rng = np.random.default_rng(seed)
    model = {f"base/layer_{i}/kernel": rng.standard_normal((128, 128)).astype(np.float32) for i in range(4)}
    model["base/embed"] = rng.standard_normal((64, 32)).astype(vs.dtypes.bfloat16)
    model["adapter/a"] = rng.standard_normal((128, 4)).astype(np.float32)
    model["adam/m/adapter/a"] = np.zeros((128, 4), np.float32)
    model["adam/v/adapter/a"] = np.zeros((128, 4), np.float32)
    model["global_step"] = np.array(0, np.int64)
    model["empty"] = np.zeros((0, 3), np.float32)
    return model


def _train(model: dict[str, np.ndarray], step: int) -> None:
    model["adapter/a"] = model["adapter/a"] + np.float32(0.01 * step)
    model["adam/m/adapter/a"] = model["adam/m/adapter/a"] * 0.9 + 0.1
    model["adam/v/adapter/a"] = model["adam/v/adapter/a"] * 0.99 + 0.01
    model["global_step"] = np.array(step, np.int64)


def test_each_step_writes_only_what_changed_and_restores_bit_exactly(tmp_path: Path) -> None:
    repo = tmp_path / "run"
    manager = vs.CheckpointManager(repo, max_to_keep=None, format="icechunk")
    assert isinstance(manager, IncrementalCheckpointManager)
    model, saved = _model(), {}
    for step in range(1, 5):
        _train(model, step)
        location = manager.save(model, step=step, metadata={"lr": 0.1})
        assert location == f"{repo}@ckpt-{step}"
        saved[step] = {name: value.copy() for name, value in model.items()}
        written = set(manager.last_save.written)
        if step == 1:
            assert written == {name for name, value in model.items() if value.size}
        else:  # the frozen base kept the parent's chunks
            assert written == {"adapter/a", "adam/m/adapter/a", "adam/v/adapter/a", "global_step"}
            assert manager.last_save.added_bytes == 3 * 128 * 4 * 4 + 8
    assert manager.checkpoints == [f"{repo}@ckpt-{k}" for k in range(1, 5)]
    assert manager.latest == f"{repo}@ckpt-4"
    for step, expected in saved.items():  # every kept step, through every public door
        loaded = vs.load(f"{repo}@ckpt-{step}")
        assert loaded.keys() == expected.keys()
        for name, value in expected.items():
            assert loaded[name].dtype == value.dtype and loaded[name].tobytes() == value.tobytes(), (step, name)
        targets = {name: np.zeros_like(value) for name, value in expected.items()}
        vs.restore(f"{repo}@ckpt-{step}", targets)
        assert all(targets[n].tobytes() == v.tobytes() for n, v in expected.items())
        with vs.open_checkpoint(f"{repo}@ckpt-{step}") as reader:
            assert reader.step == step and reader.metadata == {"lr": 0.1}
            reader.verify()
    targets = {name: np.zeros_like(value) for name, value in saved[4].items()}
    assert manager.restore_latest(targets) is not None
    assert targets["global_step"] == 4


def test_a_snapshot_records_what_a_varstore_zarr_checkpoint_records(tmp_path: Path) -> None:
    store = vs.VariableStore()
    with store.variable_scope("dense"):
        store.get_variable("kernel", shape=(3, 4), initializer=vs.random_normal_initializer(seed=1))
        store.get_variable("bias", shape=(4,), trainable=False, collections=["variables", "moving"])
    vs.save(tmp_path / "plain.zarr", store, step=7, metadata={"run": "a"})
    manager = vs.CheckpointManager(tmp_path / "run", format="icechunk")
    manager.save(store, step=7, metadata={"run": "a"})
    with vs.open_checkpoint(tmp_path / "plain.zarr") as plain, vs.open_checkpoint(manager.latest) as snap:
        assert snap.keys() == plain.keys()
        assert [snap.info(n) for n in snap.keys()] == [plain.info(n) for n in plain.keys()]  # incl. crc32c
        assert (snap.step, snap.metadata) == (plain.step, plain.metadata)
        assert all(snap.read(n).tobytes() == plain.read(n).tobytes() for n in plain.keys())


def test_an_unchanged_step_adds_under_one_percent(tmp_path: Path) -> None:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    model = _model()
    manager.save(model, step=1)
    before = _disk_bytes(tmp_path / "run")
    manager.save(model, step=2)
    assert manager.last_save.added_bytes == 0 and manager.last_save.written == ()
    full = sum(value.nbytes for value in model.values())
    assert _disk_bytes(tmp_path / "run") - before < 0.01 * full + 16 * 1024  # snapshot + manifest metadata
    steps = vs.incremental_steps(tmp_path / "run")
    assert [(s.step, s.added_bytes) for s in steps] == [(1, manager.steps()[0].added_bytes), (2, 0)]


def test_retention_expires_tags_and_collects_their_chunks(tmp_path: Path) -> None:
    clock = [1000.0]
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=2, keep_every_n_hours=1.0, format="icechunk",
                                   clock=lambda: clock[0])
    rng = np.random.default_rng(3)
    sizes = []
    for step in range(1, 7):  # every step changes every byte: each one 256 KiB of new chunks
        clock[0] += 1800.0  # half an hour per step
        manager.save({"w": rng.standard_normal((256, 256)).astype(np.float32)}, step=step)
        sizes.append(_disk_bytes(tmp_path / "run"))
    kept = [s.step for s in manager.steps()]
    assert kept[-2:] == [5, 6] and set(kept[:-2]) == {2, 4}  # one per hour among those dropped
    assert manager.last_gc_bytes >= 256 * 256 * 4  # a dropped step's chunk was deleted
    chunk = 256 * 256 * 4
    assert sizes[-1] < (len(kept) + 0.5) * chunk  # 6 steps saved, 4 kept: only their chunks remain
    for location in manager.checkpoints:
        vs.open_checkpoint(location).verify()
    tighter = vs.CheckpointManager(tmp_path / "run", max_to_keep=1, format="icechunk", clock=lambda: clock[0])
    tighter.save({"w": np.zeros((256, 256), np.float32)}, step=7)  # drops 2, 4, 5 and 6
    assert [s.step for s in tighter.steps()] == [7]
    assert _disk_bytes(tmp_path / "run") < sizes[-1] - 3 * chunk  # the repository shrank on disk
    with pytest.raises(CheckpointNotFoundError):
        vs.open_checkpoint(f"{tmp_path / 'run'}@ckpt-1")


def test_plain_icechunk_and_zarr_read_every_variable_at_its_name(tmp_path: Path) -> None:
    manager = vs.CheckpointManager(tmp_path / "run", format="icechunk")
    model = _model()
    manager.save(model, step=5)
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "run")))
    group = zarr.open_group(repo.readonly_session(tag="ckpt-5").store, mode="r")
    for name, value in model.items():
        stored = group[name][...]
        if value.dtype == vs.dtypes.bfloat16:  # stored as its uint16 bits, as in a varstore Zarr checkpoint
            stored = stored.view(vs.dtypes.bfloat16)
        assert stored.tobytes() == value.tobytes(), name
        assert "checksum" not in group[name].attrs  # in the manifest: the zarr.json stays while the chunk changes


def test_compression_zstd_is_standard_zarr_and_deduplicates(tmp_path: Path) -> None:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk", compression="zstd")
    rng = np.random.default_rng(0)
    weights = {"w": np.round(rng.standard_normal((256, 256)), 2).astype(np.float32),
               "h": rng.standard_normal((128, 128)).astype(vs.dtypes.bfloat16)}
    manager.save(weights, step=1)
    raw = sum(v.nbytes for v in weights.values())
    assert manager.last_save.added_bytes < 0.9 * raw
    manager.save(weights, step=2)
    assert manager.last_save.added_bytes == 0
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "run")))
    group = zarr.open_group(repo.readonly_session(tag="ckpt-1").store, mode="r")
    assert group["w"].metadata.codecs[1].to_dict()["name"] == "blosc"
    assert group["w"][...].tobytes() == weights["w"].tobytes()
    assert group["h"][...].view(vs.dtypes.bfloat16).tobytes() == weights["h"].tobytes()
    loaded = vs.load(f"{tmp_path / 'run'}@ckpt-2")
    assert all(loaded[n].tobytes() == v.tobytes() for n, v in weights.items())


def test_two_managers_one_wins_the_other_gets_a_conflict(tmp_path: Path) -> None:
    first = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    second = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    first.save({"w": np.zeros(4, np.float32)}, step=1)
    ones = {"w": np.ones(4, np.float32)}

    def commit_first_meanwhile(name: str, written: bool) -> None:
        first.save({"w": np.full(4, 2, np.float32)}, step=2)

    with pytest.raises(CheckpointConflictError, match="another writer committed"):
        incremental.save_snapshot(second.repository, ones, 3, progress=commit_first_meanwhile)
    assert [s.step for s in first.steps()] == [1, 2]  # nothing of the loser is visible
    assert vs.load(f"{tmp_path / 'run'}@ckpt-2")["w"].tolist() == [2, 2, 2, 2]
    second.save(ones, step=3)  # and the loser's next save works
    assert vs.load(second.latest)["w"].tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("fault", ["incremental_after_chunks", "incremental_after_commit"])
def test_a_save_killed_midway_leaves_previous_steps_whole(tmp_path: Path, fault: str) -> None:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    manager.save({"w": np.zeros(1024, np.float32)}, step=1)
    script = textwrap.dedent(f"""
        import numpy as np, varstore as vs
        m = vs.CheckpointManager({str(tmp_path / 'run')!r}, max_to_keep=None, format="icechunk")
        m.save({{"w": np.ones(1024, np.float32), "new": np.ones(8, np.float32)}}, step=2)
    """)
    env = {**os.environ, "VARSTORE_FAULT": fault, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'cli'}"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert [s.step for s in manager.steps()] == [1]  # killed before its tag: step 2 is not listed
    assert vs.load(f"{tmp_path / 'run'}@ckpt-1")["w"].tolist() == [0.0] * 1024
    manager.save({"w": np.full(1024, 3, np.float32)}, step=3)
    assert vs.load(manager.latest)["w"][0] == 3 and [s.step for s in manager.steps()] == [1, 3]
    vs.open_checkpoint(f"{tmp_path / 'run'}@ckpt-1").verify()


def test_locations_name_a_step_only_where_one_can_be(tmp_path: Path) -> None:
    from varstore.checkpoint.read.snapshot_reader import split_location

    manager = vs.CheckpointManager(tmp_path / "run", format="icechunk")
    manager.save({"w": np.ones(2, np.float32)}, step=9)
    assert split_location(f"{tmp_path / 'run'}@ckpt-9") == (str(tmp_path / "run"), "ckpt-9")
    assert split_location(tmp_path / "run") == (str(tmp_path / "run"), None)  # its newest step
    assert split_location("s3://bucket/runs/a7@ckpt-1300") == ("s3://bucket/runs/a7", "ckpt-1300")
    assert split_location("s3://bucket/model@v2.safetensors") is None  # an object named with '@'
    assert split_location(tmp_path / "model@v2.h5") is None
    vs.save(tmp_path / "plain@1.zarr", {"w": np.ones(2, np.float32)})  # ordinary paths with '@' still open
    assert vs.load(tmp_path / "plain@1.zarr")["w"].tolist() == [1.0, 1.0]
    with pytest.raises(CheckpointNotFoundError, match="no tag 'ckpt-8'"):
        vs.load(f"{tmp_path / 'run'}@ckpt-8")


def test_names_that_come_and_go_between_steps(tmp_path: Path) -> None:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    manager.save({"a": np.ones(3, np.float32), "b/c": np.zeros(2, np.int32)}, step=1)
    manager.save({"a/x": np.full(3, 2, np.float32), "b": np.ones(4, np.int8)}, step=2)  # array <-> group
    manager.save({"a": np.ones(3, np.float32)}, step=3)  # back: the step-1 chunk is new bytes again here
    assert vs.load(f"{tmp_path / 'run'}@ckpt-1")["b/c"].tolist() == [0, 0]
    assert {n: v.tolist() for n, v in vs.load(f"{tmp_path / 'run'}@ckpt-2").items()} == \
        {"a/x": [2.0, 2.0, 2.0], "b": [1, 1, 1, 1]}
    assert list(vs.load(f"{tmp_path / 'run'}@ckpt-3")) == ["a"]
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "run")))
    group = zarr.open_group(repo.readonly_session(tag="ckpt-3").store, mode="r")
    assert sorted(group.keys()) == ["_varstore", "a"]  # nothing stale for a plain reader
