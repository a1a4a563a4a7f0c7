"""A reader racing a writer of the same path reads one checkpoint whole, or gets CheckpointReplacedError.

A writer thread saves two models in turn (every value 1.0, then every value
2.0) to one path while the reader opens it and reads every variable without
checksums (so a mix of the two could not hide behind a ChecksumError). Each
read must be all 1.0, all 2.0, or CheckpointReplacedError; never a mix, never
a healthy checkpoint blamed as corrupt (issue 26, item 7).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from varstore import save
from varstore.checkpoint import open_varstore
from varstore.checkpoint.read.load import load_varstore
from varstore.errors import CheckpointReplacedError

ROUNDS = 50


def _model(value: float) -> dict[str, np.ndarray]:
    return {f"layer{i}/kernel": np.full((8, 16), value, np.float32) for i in range(12)}


def _read_one_by_one(path: Path) -> list[np.ndarray]:
    reader = open_varstore(path)
    try:
        assert len(reader.keys()) == 12
        return [reader.read(name, verify=False) for name in reader.keys()]
    finally:
        reader.close()


def _load_in_bulk(path: Path) -> list[np.ndarray]:
    values = load_varstore(path, verify=False)  # the bulk engine (varstore.load)
    assert len(values) == 12
    return list(values.values())


@pytest.mark.parametrize("read", [_read_one_by_one, _load_in_bulk], ids=["read", "load"])
@pytest.mark.parametrize("pack_threshold_bytes", [0, 1 << 20], ids=["per-variable", "packed"])
@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_reader_racing_a_writer_sees_one_checkpoint_whole_or_replaced(
        tmp_path: Path, fmt: str, pack_threshold_bytes: int, read: Callable[[Path], list[np.ndarray]]) -> None:
    path = tmp_path / f"model.{fmt}"
    models = [_model(1.0), _model(2.0)]
    save(path, models[0], format=fmt, pack_threshold_bytes=pack_threshold_bytes)
    stop = threading.Event()
    saves = [0]

    def writer() -> None:
        while not stop.is_set():
            save(path, models[saves[0] % 2], format=fmt, overwrite=True, durable=False,
                 pack_threshold_bytes=pack_threshold_bytes)
            saves[0] += 1

    thread = threading.Thread(target=writer)
    thread.start()
    outcomes: list[str] = []
    try:
        for _ in range(ROUNDS):
            try:
                values = {float(v) for array in read(path) for v in np.unique(array)}
            except CheckpointReplacedError as err:
                assert f"checkpoint '{path}' was replaced (or removed) by another save while it was being read" in str(err)
                outcomes.append("replaced")
                continue
            assert values in ({1.0}, {2.0}), f"a read mixed two checkpoints: {sorted(values)}"
            outcomes.append(f"whole {values.pop()}")
    finally:
        stop.set()
        thread.join()
    assert len(outcomes) == ROUNDS and saves[0] > 0
    assert any(outcome.startswith("whole") for outcome in outcomes)


def test_a_read_after_the_path_was_replaced_raises_replaced(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, _model(1.0), format="zarr", pack_threshold_bytes=0)
    reader = open_varstore(path)
    try:
        assert float(reader.read("layer0/kernel")[0, 0]) == 1.0
        save(path, _model(2.0), format="zarr", overwrite=True, pack_threshold_bytes=0)
        with pytest.raises(CheckpointReplacedError, match=r"model.zarr' was replaced \(or removed\) by another save"):
            reader.read("layer1/kernel", verify=False)
    finally:
        reader.close()


def test_an_hdf5_reader_keeps_reading_the_file_it_opened(tmp_path: Path) -> None:
    path = tmp_path / "model.h5"
    save(path, _model(1.0), pack_threshold_bytes=0)
    reader = open_varstore(path)
    try:
        reader.read("layer0/kernel")
        save(path, _model(2.0), overwrite=True, pack_threshold_bytes=0)
        # every read goes through the descriptor opened first: the old file, whole
        assert {float(reader.read(name, verify=False)[0, 0]) for name in reader.keys()} == {1.0}
    finally:
        reader.close()


def test_an_hdf5_read_through_h5py_after_a_replace_raises_replaced(tmp_path: Path) -> None:
    path = tmp_path / "model.h5"
    save(path, {"step": np.array(1.0), **_model(1.0)}, pack_threshold_bytes=0)
    reader = open_varstore(path)
    try:
        assert float(reader.read("layer0/kernel")[0, 0]) == 1.0
        save(path, {"step": np.array(2.0), **_model(2.0)}, overwrite=True, pack_threshold_bytes=0)
        with pytest.raises(CheckpointReplacedError, match="model.h5' was replaced"):
            reader.read("step")  # an HDF5 scalar is read through h5py, which opens the path by name
        with pytest.raises(CheckpointReplacedError):
            reader.read("step")  # the new file h5py opened was not kept
        assert float(reader.read("layer1/kernel")[0, 0]) == 1.0  # still whole through the descriptor
    finally:
        reader.close()
