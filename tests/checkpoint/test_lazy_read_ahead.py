"""The lazy reader reads ahead of a loop over the keys in order (Zarr chunk files), and stops when it jumps."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from varstore.checkpoint import open_varstore, save
from varstore.errors import ChecksumError

VALUES = {f"layer_{i}/w": np.full((8, 8), i, np.float32) for i in range(6)}


def _threads() -> int:
    return sum(t.name == "varstore-readahead" for t in threading.enumerate())


def test_zarr_loop_in_key_order_reads_ahead_then_stops(tmp_path: Path) -> None:
    save(tmp_path / "ck.zarr", VALUES)
    reader = open_varstore(tmp_path / "ck.zarr")
    names = reader.keys()
    assert reader.hint_files(names[1:3]) == [
        (str(tmp_path / "ck.zarr" / names[1] / "c" / "0" / "0"), 256),
        (str(tmp_path / "ck.zarr" / names[2] / "c" / "0" / "0"), 256)]
    for i, name in enumerate(names[:3]):
        np.testing.assert_array_equal(reader[name], VALUES[name])
        assert (reader._ahead is not None) == (i >= 1)  # from the second read in order on
    np.testing.assert_array_equal(reader[names[0]], VALUES[names[0]])  # a jump back stops it
    assert reader._ahead is None and _threads() == 0
    for name in names:
        np.testing.assert_array_equal(reader[name], VALUES[name])
    reader.close()
    assert _threads() == 0


def test_read_ahead_never_skips_the_checksum(tmp_path: Path) -> None:
    save(tmp_path / "ck.zarr", VALUES)
    with open_varstore(tmp_path / "ck.zarr") as reader:
        names = reader.keys()
        chunk = Path(reader.hint_files([names[3]])[0][0])
    data = bytearray(chunk.read_bytes())
    data[5] ^= 0x10
    chunk.write_bytes(bytes(data))
    with open_varstore(tmp_path / "ck.zarr") as reader:
        for name in names[:3]:
            reader[name]
        with pytest.raises(ChecksumError, match=names[3]):
            reader[names[3]]
