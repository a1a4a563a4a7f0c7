"""What a save knows of its parent snapshot: BLAKE3 in the manifest, a parent written before BLAKE3 (sha256
attributes) continued correctly, the cache of the snapshot a manager committed last and its invalidation."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import blake3
import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.format.checksum import crc32c_raw
from varstore.checkpoint.format.manifest import decode_manifest, format_checksum
from varstore.checkpoint.manage import incremental, snapshot_parent
from varstore.errors import CheckpointConflictError
from varstore.storage.icechunk_repo import IcechunkRepository, Transaction

icechunk = pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")
zarr = pytest.importorskip("zarr")


def _model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    model = {f"base/{i}": rng.standard_normal((64, 32 + i)).astype(np.float32) for i in range(4)}
    model["adapter"] = rng.standard_normal((32, 4)).astype(np.float32)
    model["step"] = np.array(1, np.int64)
    return model


def _manifest(location: Path, tag: str) -> tuple[dict[str, Any], list[Any]]:
    view = IcechunkRepository(location).readonly(tag)
    data = view.get(snapshot_parent.manifest_key())
    assert data is not None
    return decode_manifest(data, tag)


def _spy_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every key a Transaction writes (set_many), in order."""
    keys: list[str] = []
    original = Transaction.set_many

    def set_many(self: Transaction, items: Any, then: Any = None) -> None:
        keys.extend(key for key, _ in list(items) + list(then or []))
        original(self, items, then)

    monkeypatch.setattr(Transaction, "set_many", set_many)
    return keys


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    keys: list[str] = []
    get, get_many = Transaction.get, Transaction.get_many

    def one(self: Transaction, key: str) -> bytes | None:
        keys.append(key)
        return get(self, key)

    def many(self: Transaction, wanted: Any) -> list[bytes | None]:
        wanted = list(wanted)
        keys.extend(wanted)
        return get_many(self, wanted)

    monkeypatch.setattr(Transaction, "get", one)
    monkeypatch.setattr(Transaction, "get_many", many)
    return keys


def test_blake3_and_crc32c_are_in_the_manifest_and_a_changed_chunk_keeps_its_zarr_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    manager.save(model, step=1)
    writes = _spy_writes(monkeypatch)
    model["adapter"] = model["adapter"] * np.float32(2)
    model["step"] = np.array(2, np.int64)
    manager.save(model, step=2)
    # only the two changed chunks, the manifest (its zarr.json when its length changed) and the root's zarr.json
    assert set(writes) - {"_varstore/manifest/zarr.json"} == {"adapter/c/0/0", "step/c", "_varstore/manifest/c/0",
                                                               "zarr.json"}
    assert len(writes) == len(set(writes))
    header, records = _manifest(tmp_path / "run", "ckpt-2")
    by_name = {record.name: (record.checksum, digest) for record, digest in zip(records, header["blake3"])}
    for name, value in model.items():
        assert by_name[name] == (crc32c_raw(value.tobytes()), blake3.blake3(value.tobytes()).hexdigest()), name
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "run")))
    group = zarr.open_group(repo.readonly_session(tag="ckpt-2").store, mode="r")
    assert set(group["adapter"].attrs) == {"trainable", "collections", "dtype", "device"}
    loaded = vs.load(f"{tmp_path / 'run'}@ckpt-2")
    assert all(loaded[n].tobytes() == v.tobytes() for n, v in model.items())
    vs.open_checkpoint(f"{tmp_path / 'run'}@ckpt-2").verify()


def _write_legacy(monkeypatch: pytest.MonkeyPatch, location: Path, model: dict[str, np.ndarray],
                  wrong_sha256: str | None = None) -> None:
    """Saves step 1 as the previous release did: crc32c and sha256 array attributes, no BLAKE3 list."""
    document, encode = incremental.array_document, incremental.encode_manifest

    def legacy_document(record: Any, stored: np.ndarray, compression: str | None) -> dict[str, Any]:
        out = document(record, stored, compression)
        out["attributes"]["checksum"] = format_checksum(record.checksum)
        sha = hashlib.sha256(stored.tobytes()).hexdigest()
        out["attributes"]["sha256"] = "0" * 64 if record.name == wrong_sha256 else sha
        return out

    def legacy_manifest(header: dict[str, Any], records: Any, packed: int) -> bytes:
        return encode({k: v for k, v in header.items() if k != "blake3"}, records, packed)

    with monkeypatch.context() as patch:
        patch.setattr(incremental, "array_document", legacy_document)
        patch.setattr(incremental, "encode_manifest", legacy_manifest)
        vs.CheckpointManager(location, max_to_keep=None, format="icechunk").save(model, step=1)
    header, _ = _manifest(location, "ckpt-1")
    assert "blake3" not in header


def test_a_repository_written_before_blake3_continues_comparing_by_sha256(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    _write_legacy(monkeypatch, tmp_path / "run", model)
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    first = model["adapter"]
    model["adapter"] = first + np.float32(1)
    manager.save(model, step=2)
    assert set(manager.last_save.written) == {"adapter"}  # the base: equal sha256 and crc32c, not written
    assert manager.last_save.added_bytes == 32 * 4 * 4
    manager.save(model, step=3)  # the parent now records BLAKE3
    assert manager.last_save.written == () and manager.last_save.added_bytes == 0
    header, records = _manifest(tmp_path / "run", "ckpt-3")
    assert len(header["blake3"]) == len(records)
    old = vs.load(f"{tmp_path / 'run'}@ckpt-1")
    assert old["adapter"].tobytes() == first.tobytes()
    new = vs.load(f"{tmp_path / 'run'}@ckpt-3")
    assert all(new[n].tobytes() == v.tobytes() for n, v in model.items())
    for step in (1, 2, 3):
        vs.open_checkpoint(f"{tmp_path / 'run'}@ckpt-{step}").verify()


def test_a_legacy_parent_whose_sha256_differs_is_written_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    _write_legacy(monkeypatch, tmp_path / "run", model, wrong_sha256="base/2")
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    manager.save(model, step=2)  # same values; crc32c equal everywhere, sha256 not for base/2
    assert manager.last_save.written == ("base/2",)


def test_the_next_save_reads_nothing_of_the_snapshot_its_manager_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    manager.save(model, step=1)
    assert manager.last_save.parent_cached is False  # a fresh repository: its empty snapshot was asked
    reads = _spy_reads(monkeypatch)
    model["adapter"] = model["adapter"] + np.float32(1)
    manager.save(model, step=2)
    assert manager.last_save.parent_cached is True and reads == []
    assert manager.last_save.written == ("adapter",)
    model["extra/new"] = np.ones(3, np.float32)  # a new name: only its own nodes are asked
    manager.save(model, step=3)
    assert reads == ["extra/new/zarr.json", "extra/zarr.json"]
    assert manager.last_save.written == ("extra/new",)
    fresh = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    fresh.save(model, step=4)  # another manager knows nothing: reads the parent, writes nothing
    assert fresh.last_save.parent_cached is False and fresh.last_save.written == ()
    assert "_varstore/manifest/c/0" in reads


def test_another_writers_commit_invalidates_the_cache(tmp_path: Path) -> None:
    first = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    second = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    a = {"w": np.zeros(64, np.float32), "base": np.arange(64, dtype=np.float32)}
    first.save(a, step=1)
    second.save({"w": np.ones(64, np.float32), "base": a["base"]}, step=2)
    first.save(a, step=3)  # equal to what `first` committed last, not to the tip: w must be written again
    assert first.last_save.parent_cached is False and first.last_save.written == ("w",)
    assert vs.load(f"{tmp_path / 'run'}@ckpt-3")["w"].tolist() == [0.0] * 64
    assert vs.load(f"{tmp_path / 'run'}@ckpt-2")["w"].tolist() == [1.0] * 64
    first.save(a, step=4)  # its own tip again: cached, nothing changed
    assert first.last_save.parent_cached is True and first.last_save.written == ()


def test_a_conflict_leaves_the_cache_of_the_last_committed_snapshot(tmp_path: Path) -> None:
    first = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    second = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    second.save({"w": np.zeros(16, np.float32)}, step=1)

    def commit_first_meanwhile(name: str, written: bool) -> None:
        first.save({"w": np.full(16, 2, np.float32)}, step=2)

    cache = second._parent
    with pytest.raises(CheckpointConflictError):
        incremental.save_snapshot(second.repository, {"w": np.ones(16, np.float32)}, 3,
                                  progress=commit_first_meanwhile, cache=cache)
    second.save({"w": np.full(16, 2, np.float32)}, step=3)  # equal to the tip (first's step 2): not written
    assert second.last_save.parent_cached is False and second.last_save.written == ()
    assert vs.load(second.latest)["w"].tolist() == [2.0] * 16


def test_a_parent_manifest_that_fails_its_crc32c_is_not_trusted(tmp_path: Path) -> None:
    model = _model()
    vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk").save(model, step=1)
    repo = IcechunkRepository(tmp_path / "run")
    txn = repo.writable()  # the manifest altered behind the root's crc32c (a damaged or foreign commit)
    manifest = txn.get(snapshot_parent.manifest_key())
    assert manifest is not None and b'"step":1,' in manifest
    txn.set(snapshot_parent.manifest_key(), manifest.replace(b'"step":1,', b'"step":9,', 1))
    txn.commit("damage", {})
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=None, format="icechunk")
    manager.save(model, step=2)
    assert sorted(manager.last_save.written) == sorted(n for n, v in model.items() if v.nbytes)
    loaded = vs.load(manager.latest)
    assert all(loaded[n].tobytes() == v.tobytes() for n, v in model.items())


def test_retention_keeps_the_cache_of_the_tip(tmp_path: Path) -> None:
    manager = vs.CheckpointManager(tmp_path / "run", max_to_keep=2, format="icechunk")
    base = np.arange(1000, dtype=np.float32)
    for step in range(1, 6):
        manager.save({"w": np.full(1000, step, np.float32), "base": base}, step=step)
        assert manager.last_save.written == (("w", "base") if step == 1 else ("w",))
        assert manager.last_save.parent_cached is (step > 1)  # expiry and GC leave the tip as it was
    assert manager.last_gc_bytes > 0
    assert [vs.load(location)["w"][0] for location in manager.checkpoints] == [4.0, 5.0]
    assert vs.load(manager.latest)["base"].tobytes() == base.tobytes()
