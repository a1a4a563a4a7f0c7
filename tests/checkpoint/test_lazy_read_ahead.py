"""The lazy reader reads ahead of a loop over the keys in order (Zarr chunk files), and stops when it jumps."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tests.checkpoint.damage import flip_packed
from varstore import save
from varstore.checkpoint import open_varstore
from varstore.errors import ChecksumError

VALUES = {f"layer_{i}/w": np.full((8, 8), i, np.float32) for i in range(6)}


def _threads() -> int:
    return sum(t.name == "varstore-readahead" for t in threading.enumerate())


def test_zarr_loop_in_key_order_reads_ahead_then_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from varstore.storage import local

    monkeypatch.setattr(local, "cached_already", lambda paths: False)  # as on a cold disk (just written: cached)
    save(tmp_path / "ck.zarr", VALUES)
    reader = open_varstore(tmp_path / "ck.zarr")
    names = reader.keys()
    root = tmp_path / "ck.zarr"
    assert reader.hint_files(names[1:3]) == [  # metadata (0: the whole file) and the chunk, for each
        (str(root / names[1] / "zarr.json"), 0), (str(root / names[1] / "0.0"), 256),
        (str(root / names[2] / "zarr.json"), 0), (str(root / names[2] / "0.0"), 256)]
    for i, name in enumerate(names[:3]):
        np.testing.assert_array_equal(reader[name], VALUES[name])
        assert (reader._order.ahead is not None) == (i >= 1)  # from the second read in order on
    np.testing.assert_array_equal(reader[names[0]], VALUES[names[0]])  # a jump back stops it
    assert reader._order.ahead is None and _threads() == 0
    for name in names:
        np.testing.assert_array_equal(reader[name], VALUES[name])
    reader.close()
    assert _threads() == 0


def test_read_ahead_never_skips_the_checksum(tmp_path: Path) -> None:
    save(tmp_path / "ck.zarr", VALUES)
    with open_varstore(tmp_path / "ck.zarr") as reader:
        names = reader.keys()
        chunk = Path(reader.hint_files([names[3]])[1][0])
    assert chunk.name == "0.0"
    data = bytearray(chunk.read_bytes())
    data[5] ^= 0x10
    chunk.write_bytes(bytes(data))
    with open_varstore(tmp_path / "ck.zarr") as reader:
        for name in names[:3]:
            reader[name]
        with pytest.raises(ChecksumError, match=names[3]):
            reader[names[3]]


SMALL = {f"small/v{i:03d}": np.arange(i, i + 5, dtype=np.float32) for i in range(40)}
SMALL["small/text"] = np.array([b"ab", b"cd"])


def test_packed_loop_and_load_read_the_blob_once_and_check_every_value(tmp_path: Path) -> None:
    import varstore

    path = tmp_path / "ck.h5"
    save(path, SMALL, layout="packed")
    with open_varstore(path) as reader:
        got = {name: reader[name] for name in reader.keys()}
        assert reader._order.blob is not None  # the loop read the blob whole
    loaded = varstore.load(path)
    for values in (got, loaded):
        assert list(values) == list(SMALL)
        for name, value in SMALL.items():
            np.testing.assert_array_equal(values[name], value)
            assert values[name].dtype == value.dtype and values[name].flags.writeable
    got["small/v001"][0] = 99.0  # a copy, not a view into the blob
    assert float(loaded["small/v001"][0]) == 1.0

    flip_packed(path, "small/v017", at=3)
    with open_varstore(path) as reader:
        for name in reader.keys()[:17]:
            reader[name]
        with pytest.raises(ChecksumError, match="small/v017"):
            reader["small/v017"]
    with pytest.raises(ChecksumError, match="small/v017"):
        varstore.load(path)
    from varstore.checkpoint.read.load import load_varstore

    assert load_varstore(path, verify=False)["small/v016"].tolist() == [16, 17, 18, 19, 20]
