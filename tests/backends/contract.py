"""BackendContract: the behaviour every storage backend must show; subclass it per backend.

Subclasses set `backend_name` and `suffix`, and implement `plain_read(path, array_path)`
that reads an array with the backend's own library (h5py / zarr), proving files are plain.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from varstore.backends import get_backend
from varstore.errors import CheckpointNotFoundError, NotACheckpointError


class BackendContract:
    backend_name = ""
    suffix = ""

    def plain_read(self, path: Path, array_path: str) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @pytest.fixture
    def backend(self) -> Any:
        return get_backend(self.backend_name)

    def _write(self, backend: Any, path: Path, arrays: dict[str, np.ndarray],
               attrs: dict[str, Any] | None = None) -> None:
        writer = backend.open_writer(path)
        for name, value in arrays.items():
            extent = writer.create_array(name, value.dtype, value.shape, {"note": name})
            if extent is None:
                writer.write_array(name, value)
            else:
                assert extent.nbytes == value.nbytes
                fd = os.open(extent.file, os.O_WRONLY | os.O_CREAT, 0o644)
                os.pwrite(fd, np.ascontiguousarray(value).tobytes(), extent.offset)
                os.close(fd)
        writer.set_root_attrs(attrs or {"kind": "test"})
        paths = writer.close()
        assert all(Path(p).exists() for p in paths)

    def test_raw_extent_bytes_read_back_with_plain_library(self, backend: Any, tmp_path: Path) -> None:
        path = tmp_path / f"x{self.suffix}"
        arrays = {"a/b/kernel": np.arange(12, dtype="<f4").reshape(3, 4),
                  "a/bias": np.array([1, -2, 3], dtype="<i8"),
                  "flags": np.array([True, False, True]),
                  "z": np.array([1 + 2j, -3.5j], dtype="<c8")}
        self._write(backend, path, arrays)
        for name, value in arrays.items():
            got = self.plain_read(path, name)
            assert got.dtype == value.dtype and got.tobytes() == value.tobytes(), name

    def test_reader_extent_and_library_read_agree(self, backend: Any, tmp_path: Path) -> None:
        path = tmp_path / f"x{self.suffix}"
        value = np.linspace(0, 1, 20, dtype="<f8").reshape(4, 5)
        self._write(backend, path, {"s/v": value})
        reader = backend.open_reader(path)
        extent = reader.raw_extent("s/v", value.dtype, value.shape)
        assert extent is not None and extent.nbytes == 160
        with open(extent.file, "rb") as handle:
            handle.seek(extent.offset)
            assert handle.read(160) == value.tobytes()
        out = np.empty_like(value)
        reader.read_array("s/v", out)
        np.testing.assert_array_equal(out, value)
        assert reader.array_attrs("s/v")["note"] == "s/v"
        assert reader.root_attrs()["kind"] == "test"
        reader.close()

    def test_scalar_and_zero_size_arrays(self, backend: Any, tmp_path: Path) -> None:
        path = tmp_path / f"x{self.suffix}"
        self._write(backend, path, {"s": np.array(2.5, dtype="<f4"), "e": np.zeros((0, 3), dtype="<i4")})
        assert float(self.plain_read(path, "s")) == 2.5
        assert self.plain_read(path, "e").shape == (0, 3)

    def test_sniff(self, backend: Any, tmp_path: Path) -> None:
        path = tmp_path / f"x{self.suffix}"
        self._write(backend, path, {"v": np.ones(2, dtype="<f4")})
        assert backend.sniff(path) is True
        other = tmp_path / "junk.bin"
        other.write_bytes(b"not a checkpoint at all")
        assert backend.sniff(other) is False
        assert backend.sniff(tmp_path / "missing") is False

    def test_missing_and_foreign_paths_raise_typed_errors(self, backend: Any, tmp_path: Path) -> None:
        with pytest.raises(CheckpointNotFoundError, match="missing"):
            backend.open_reader(tmp_path / f"missing{self.suffix}")
        junk = tmp_path / f"junk{self.suffix}"
        if backend.is_directory:
            junk.mkdir()
        else:
            junk.write_bytes(b"hello")
        with pytest.raises(NotACheckpointError, match="junk"):
            backend.open_reader(junk)
