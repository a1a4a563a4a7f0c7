"""A durable incremental step (the default, as varstore.save): Icechunk's commit, then one syncfs of the
repository's file system, then the tag ckpt-<step>, then an fsync of the tag, then the save returns;
durable=False skips both; without syncfs every file of the repository is fsynced; a write-back error
is a typed error and leaves the step untagged. Counted through varstore's own seams (atomic's syncfs
and fsync helpers, varstore's Transaction.commit and IcechunkRepository.tag), not by mocking icechunk."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.publish import atomic
from varstore.errors import CheckpointWriteError
from varstore.storage import icechunk_repo

pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")


def _record(monkeypatch: pytest.MonkeyPatch, syncfs_works: bool = True) -> list[tuple[str, str]]:
    """Events ("commit" | "tag" | "syncfs" | "fsync", detail) in the order they happen."""
    events: list[tuple[str, str]] = []
    commit, tag = icechunk_repo.Transaction.commit, icechunk_repo.IcechunkRepository.tag
    real_syncfs, real_fsync = atomic.syncfs, atomic._fsync_one

    def committed(self: Any, message: str, metadata: Any) -> str:
        snapshot = commit(self, message, metadata)
        events.append(("commit", message))
        return snapshot

    def tagged(self: Any, name: str, snapshot_id: str) -> None:
        events.append(("tag", name))
        tag(self, name, snapshot_id)

    def syncfs(path: Path) -> bool:
        events.append(("syncfs", str(path)))
        return real_syncfs(path) if syncfs_works else False

    def fsync_one(path: Path) -> None:
        events.append(("fsync", str(path)))
        real_fsync(path)

    monkeypatch.setattr(icechunk_repo.Transaction, "commit", committed)
    monkeypatch.setattr(icechunk_repo.IcechunkRepository, "tag", tagged)
    monkeypatch.setattr(atomic, "syncfs", syncfs)
    monkeypatch.setattr(atomic, "_fsync_one", fsync_one)
    return events


def _files(root: Path) -> set[str]:
    return {os.path.join(folder, name) for folder, _, files in os.walk(root) for name in files}


def test_a_durable_step_syncs_its_commit_before_the_tag_and_the_tag_before_returning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    manager = vs.CheckpointManager(root, max_to_keep=None, format="icechunk")
    events = _record(monkeypatch)
    for step in (1, 2):
        events.clear()
        manager.save({"base": np.arange(1024, dtype=np.float32), "adapter": np.full(8, step, np.float32)}, step=step)
        ref = root / "refs" / f"tag.ckpt-{step}" / "ref.json"
        assert ref.is_file()
        assert events[:3] == [("commit", f"ckpt-{step}"), ("syncfs", str(root)), ("tag", f"ckpt-{step}")]
        assert sorted(events[3:]) == sorted([("fsync", str(ref)), ("fsync", str(ref.parent)),
                                             ("fsync", str(root / "refs"))])
    assert manager.last_save is not None and manager.last_save.written == ("adapter",)
    assert vs.load(f"{root}@ckpt-2")["adapter"].tolist() == [2.0] * 8


def test_durable_false_syncs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    manager = vs.CheckpointManager(root, max_to_keep=None, format="icechunk")
    events = _record(monkeypatch)
    manager.save({"w": np.ones(64, np.float32)}, step=1, durable=False)
    assert events == [("commit", "ckpt-1"), ("tag", "ckpt-1")]
    assert vs.load(f"{root}@ckpt-1")["w"].tolist() == [1.0] * 64


def test_without_syncfs_every_file_of_the_repository_is_fsynced_before_the_tag(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    manager = vs.CheckpointManager(root, max_to_keep=None, format="icechunk")
    manager.save({"w": np.zeros(8192, np.float32)}, step=1, durable=False)  # 32 KiB: chunk objects (not inline), covered too
    events = _record(monkeypatch, syncfs_works=False)
    manager.save({"w": np.zeros(8192, np.float32), "a": np.ones(8192, np.float32)}, step=2)
    at_tag = events.index(("tag", "ckpt-2"))
    fsynced = {detail for kind, detail in events[:at_tag] if kind == "fsync"}
    on_disk = _files(root) - {str(root / "refs" / "tag.ckpt-2" / "ref.json")}
    assert len(on_disk) > 10 and on_disk <= fsynced  # old chunks, new chunks, manifests, snapshots, refs
    assert {str(root), str(root / "chunks"), str(root / "refs")} <= fsynced  # and the directories
    assert events[at_tag - len(fsynced) - 1] == ("syncfs", str(root))  # tried first, after the commit
    assert events[0] == ("commit", "ckpt-2")


def test_a_write_back_error_is_typed_and_leaves_the_step_untagged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    manager = vs.CheckpointManager(root, max_to_keep=None, format="icechunk")
    manager.save({"w": np.zeros(16, np.float32)}, step=1)

    def failing(path: Path) -> bool:
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(atomic, "syncfs", failing)
    with pytest.raises(CheckpointWriteError, match=r"step 'ckpt-2' durable.*not tagged.*Input/output error.*save again") as info:
        manager.save({"w": np.ones(16, np.float32)}, step=2)
    assert info.value.errno == errno.EIO and str(root) in str(info.value)
    assert [s.step for s in manager.steps()] == [1]  # committed, never tagged
    monkeypatch.undo()
    manager.save({"w": np.full(16, 3, np.float32)}, step=3)
    assert [s.step for s in manager.steps()] == [1, 3]
    assert vs.load(f"{root}@ckpt-3")["w"].tolist() == [3.0] * 16


def _record_retention(monkeypatch: pytest.MonkeyPatch, events: list[tuple[str, str]]) -> None:
    expire, collect = icechunk_repo.IcechunkRepository.expire_snapshots, icechunk_repo.IcechunkRepository.collect_garbage
    delete_tag = icechunk_repo.IcechunkRepository.delete_tag

    def expiring(self: Any) -> None:
        events.append(("expire", ""))
        expire(self)

    def collecting(self: Any, older_than: Any) -> int:
        events.append(("collect", ""))
        return int(collect(self, older_than))

    def deleting(self: Any, name: str) -> None:
        events.append(("delete tag", name))
        delete_tag(self, name)

    monkeypatch.setattr(icechunk_repo.IcechunkRepository, "expire_snapshots", expiring)
    monkeypatch.setattr(icechunk_repo.IcechunkRepository, "collect_garbage", collecting)
    monkeypatch.setattr(icechunk_repo.IcechunkRepository, "delete_tag", deleting)


def _state(step: int) -> dict[str, np.ndarray]:
    return {"w": np.full(8192, step, np.float32)}  # 32 KiB: a chunk object per step, collected when dropped


def test_durable_retention_syncs_the_dropped_tags_and_expired_history_before_collecting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    manager = vs.CheckpointManager(root, max_to_keep=2, format="icechunk")
    for step in (1, 2):
        manager.save(_state(step), step=step)
    events = _record(monkeypatch)
    _record_retention(monkeypatch, events)
    manager.save(_state(3), step=3)
    after_tag = [event for event in events if event[0] in ("delete tag", "expire", "syncfs", "collect")]
    assert after_tag == [("syncfs", str(root)),  # the step's commit
                         ("delete tag", "ckpt-1"), ("expire", ""), ("syncfs", str(root)), ("collect", "")]
    assert manager.last_gc_bytes >= 8192 * 4  # step 1's chunk collected
    assert [s.step for s in manager.steps()] == [2, 3]
    assert vs.load(f"{root}@ckpt-2")["w"].tolist() == [2.0] * 8192


def test_retention_with_durable_false_syncs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    manager = vs.CheckpointManager(root, max_to_keep=1, format="icechunk")
    manager.save(_state(1), step=1, durable=False)
    events = _record(monkeypatch)
    _record_retention(monkeypatch, events)
    manager.save(_state(2), step=2, durable=False)
    assert [kind for kind, _ in events] == ["commit", "tag", "delete tag", "expire", "collect"]
    assert [s.step for s in manager.steps()] == [2]


def test_a_write_back_error_in_retention_collects_nothing_and_keeps_the_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    manager = vs.CheckpointManager(root, max_to_keep=1, format="icechunk")
    manager.save(_state(1), step=1)
    real_syncfs, calls = atomic.syncfs, []

    def failing_second(path: Path) -> bool:  # the step's own sync works; retention's fails
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error", str(path))
        return real_syncfs(path)

    events: list[tuple[str, str]] = []
    _record_retention(monkeypatch, events)
    monkeypatch.setattr(atomic, "syncfs", failing_second)
    with pytest.raises(CheckpointWriteError, match=r"retention durable.*Input/output error.*nothing was collected") as info:
        manager.save(_state(2), step=2)
    assert info.value.errno == errno.EIO and str(root) in str(info.value)
    assert ("collect", "") not in events and events[:2] == [("delete tag", "ckpt-1"), ("expire", "")]
    assert [s.step for s in manager.steps()] == [2]  # the step is saved and tagged
    assert vs.load(f"{root}@ckpt-2")["w"].tolist() == [2.0] * 8192
    monkeypatch.undo()
    manager.save(_state(3), step=3)  # the next retention collects what was left
    assert [s.step for s in manager.steps()] == [3] and manager.last_gc_bytes >= 2 * 8192 * 4
