"""varstore.open_checkpoint recognises varstore's own HDF5 files by their index header first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from varstore import save
from varstore.checkpoint.read.reader import VarstoreReader
from varstore import detect_format, open_checkpoint


def test_own_hdf5_file_skips_format_sniffing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save(tmp_path / "model.h5", {"enc/w": np.arange(6, dtype=np.float32).reshape(2, 3)})

    def no_walk(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("no HDF5 walk or varstore check should run for a file with an index header")

    import varstore.backends.hdf5.walker as walker
    import varstore.checkpoint as checkpoint

    monkeypatch.setattr(walker, "HDF5Walker", no_walk)
    monkeypatch.setattr(checkpoint, "is_varstore_checkpoint", no_walk)
    with open_checkpoint(path) as reader:
        assert isinstance(reader, VarstoreReader) and reader.format == "varstore-hdf5"
        assert reader["enc/w"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_damaged_index_header_falls_back_to_full_detection(tmp_path: Path) -> None:
    path = save(tmp_path / "model.h5", {"w": np.ones(3, np.float32)})
    data = bytearray(path.read_bytes())
    data[20] ^= 0x01  # inside the header's JSON: it no longer parses or its crc no longer matches
    path.write_bytes(bytes(data))
    with open_checkpoint(path) as reader:
        assert reader.format == "varstore-hdf5" and reader["w"].tolist() == [1.0, 1.0, 1.0]
    assert detect_format(path) == "varstore-hdf5"
