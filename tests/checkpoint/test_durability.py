"""save(..., durable=...): what a durable save syncs, what a non-durable one skips, and that both stay atomic."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from varstore import CheckpointManager, save
from varstore.checkpoint import open_varstore
from varstore.checkpoint.publish import atomic
from varstore.storage import local

VALUES = {"big": np.arange(3 << 20, dtype=np.float32),  # 12 MiB: written in 8 MiB pieces with write-back
          "small/a": np.arange(10, dtype=np.int64), "small/b": np.ones((2, 3), np.float16)}


class _Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fsync = 0
        self.writeback = 0
        self.syncfs = 0
        real_fsync, real_writeback, real_syncfs = os.fsync, local.start_writeback, atomic.syncfs

        def fsync(fd: int) -> None:
            self.fsync += 1
            real_fsync(fd)

        def writeback(fd: int, offset: int, nbytes: int) -> None:
            self.writeback += 1
            real_writeback(fd, offset, nbytes)

        def syncfs(path: Path) -> bool:
            self.syncfs += 1
            return real_syncfs(path)

        monkeypatch.setattr(atomic.os, "fsync", fsync)
        monkeypatch.setattr(local, "start_writeback", writeback)
        monkeypatch.setattr(atomic, "syncfs", syncfs)


def _check(path: Path) -> None:
    with open_varstore(path) as reader:
        assert sorted(reader.keys()) == sorted(VALUES)
        for name, value in VALUES.items():
            np.testing.assert_array_equal(reader.read(name), value)
        reader.verify()


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_durable_default_syncs_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    counts = _Counts(monkeypatch)
    path = tmp_path / f"ck.{fmt}"
    save(path, VALUES, format=fmt)
    _check(path)
    # 12 MiB: its first 8 MiB go to write-back at once; in HDF5 the last 4 MiB wait for more bytes of the
    # same file (the fsync takes them), a Zarr chunk file of its own hands them over when finished
    assert counts.writeback == {"h5": 1, "zarr": 2}[fmt]
    assert counts.fsync + counts.syncfs >= 2  # the data (fsyncs or one syncfs), then the parent directory


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_many_values_of_a_few_mib_go_to_write_back_before_the_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    fmt: str) -> None:
    # a model's layers: 20 values of 1 MiB, none large enough alone to be written back early before
    sent: list[tuple[int, int]] = []
    real_writeback = local.start_writeback

    def writeback(fd: int, offset: int, nbytes: int) -> None:
        sent.append((offset, nbytes))
        real_writeback(fd, offset, nbytes)

    monkeypatch.setattr(local, "start_writeback", writeback)
    values = {f"layer_{i:02d}/w": np.full(1 << 18, i, np.float32) for i in range(20)}
    path = save(tmp_path / f"m.{fmt}", values, format=fmt)
    if fmt == "h5":  # one file: every 8 MiB written, one request covering them (16 of the 20 MiB)
        assert len(sent) == 2 and all(nbytes >= 8 << 20 for _, nbytes in sent)
        with open_varstore(path) as reader:
            starts = sorted(reader.record(name).file_offset for name in values)
        # the first request starts at the first value; the second ends past the 16th (in file order)
        assert sent[0][0] == starts[0] and sent[1][0] + sent[1][1] >= starts[15] + (1 << 20)
    else:  # a file per value: each handed over whole when finished
        assert sorted(sent) == [(0, 1 << 20)] * 20
    with open_varstore(path) as reader:
        reader.verify()


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_non_durable_save_skips_fsync_and_writeback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    fmt: str) -> None:
    path = tmp_path / f"ck.{fmt}"
    save(path, {"old": np.zeros(3)}, format=fmt)
    counts = _Counts(monkeypatch)
    save(path, VALUES, format=fmt, durable=False)  # replaces the old checkpoint atomically
    _check(path)
    assert (counts.fsync, counts.writeback, counts.syncfs) == (0, 0, 0)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind
    counts.writeback = 0
    save(tmp_path / f"again.{fmt}", VALUES, format=fmt)  # a later durable save writes back again
    assert counts.writeback == {"h5": 1, "zarr": 2}[fmt]


def test_manager_and_async_saves_take_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _Counts(monkeypatch)
    manager = CheckpointManager(tmp_path / "run", max_to_keep=2)
    manager.save(VALUES, step=1, durable=False)
    handle = save(tmp_path / "async.h5", VALUES, blocking=False, durable=False)
    handle.wait()
    assert counts.writeback == 0
    _check(tmp_path / "run" / "ckpt-1.h5")
    _check(tmp_path / "async.h5")


def test_many_paths_are_made_durable_with_one_syncfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counts = _Counts(monkeypatch)
    values = {f"layer_{i:02d}/w": np.full((4, 4), i, np.float32) for i in range(atomic.SYNCFS_MIN_PATHS)}
    save(tmp_path / "many.zarr", values)
    assert counts.syncfs == 1
    assert counts.fsync <= 1  # only the parent directory after the rename (where syncfs is available)
    with open_varstore(tmp_path / "many.zarr") as reader:
        assert float(reader.read("layer_07/w")[0, 0]) == 7.0
    counts.syncfs = counts.fsync = 0
    atomic.fsync_paths([tmp_path / "many.zarr"])  # few paths: fsync each
    assert (counts.syncfs, counts.fsync) == (0, 1)
