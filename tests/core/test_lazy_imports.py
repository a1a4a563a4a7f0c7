"""import varstore loads the core only; checkpoints, converters, inspection, h5py, zarr, ml_dtypes on first use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import varstore


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_import_varstore_loads_no_checkpoint_layer_or_optional_library() -> None:
    loaded = _modules_after("import varstore")
    for heavy in ("varstore.checkpoint", "varstore.formats", "varstore.inspect", "h5py", "zarr", "ml_dtypes",
                  "crc32c", "hashlib", "importlib.metadata", "numpy.typing"):
        assert heavy not in loaded, heavy


def test_reading_an_own_hdf5_file_needs_neither_h5py_nor_the_crc32c_package(tmp_path: Path) -> None:
    varstore.save(tmp_path / "ck.h5", {"a/b": np.arange(6, dtype=np.float32)})
    loaded = _modules_after(f"import varstore as vs\nassert vs.open_checkpoint({str(tmp_path / 'ck.h5')!r})"
                            "['a/b'].tolist() == [0, 1, 2, 3, 4, 5]")
    assert "h5py" not in loaded and "zarr" not in loaded and "crc32c" not in loaded
    assert "crc32c._crc32c" in loaded  # the C extension alone


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in varstore.__all__:
        assert getattr(varstore, name) is not None, name
        assert name in dir(varstore)
    assert callable(varstore.convert) and varstore.convert.__module__ == "varstore.formats"
    assert varstore.dtypes.bfloat16.name == "bfloat16"
    assert varstore.dtypes.as_dtype("float8_e5m2").itemsize == 1


def test_core_names_are_loaded_together_on_first_use() -> None:
    from varstore import _core_api

    assert list(varstore._CORE_NAMES) == list(_core_api.__all__)
    loaded = _modules_after("import varstore")
    for core in ("varstore._core_api", "varstore.store.variables", "varstore.store.scopes", "varstore.store.default_store",
                 "varstore.initializers", "varstore.store.devices"):
        assert core not in loaded, core
    # no submodule shares a public function's name: the function is what varstore.variable_scope is
    out = subprocess.run([sys.executable, "-c", "import varstore.store._variable_scope, varstore.formats, varstore\n"
                          "print(varstore.variable_scope.__module__, varstore.VariableScope.__name__,\n"
                          "      varstore.initializers.__name__, callable(varstore.get_variable))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["varstore.store.default_store", "VariableScope", "varstore.initializers", "True"]


_HEAVY_FOR_A_READ = ("varstore.formats", "varstore.formats.registry", "varstore._core_api", "varstore.store.variables",
                     "varstore.store.scopes", "varstore.checkpoint.publish.remote", "varstore.checkpoint.write.write_engine",
                     "varstore.checkpoint.write.writer", "varstore.storage.object_storage", "h5py", "zarr", "tempfile",
                     # URL splitting/settings, tree removal (bz2, lzma), threads and pools: not for a local read
                     "varstore.storage._urls", "shutil", "bz2", "lzma", "threading", "concurrent.futures", "logging",
                     "numpy.typing",  # annotations only
                     "unicodedata")  # control-character names only


def test_a_fresh_process_reads_its_own_checkpoints_without_registry_core_or_writer(tmp_path: Path) -> None:
    for name in ("ck.h5", "ck.zarr"):
        varstore.save(tmp_path / name, {"a/b": np.arange(6, dtype=np.float32), "c": np.ones((2, 2), np.int8)})
        loaded = _modules_after(f"import varstore as vs\nr = vs.open_checkpoint({str(tmp_path / name)!r})\n"
                                "assert r['a/b'].tolist() == [0, 1, 2, 3, 4, 5] and r.info('c').shape == (2, 2)\n"
                                "assert r.format == " + repr("varstore-hdf5" if name.endswith("h5") else "varstore-zarr"))
        for heavy in _HEAVY_FOR_A_READ:
            assert heavy not in loaded, (name, heavy)


def test_open_checkpoint_still_goes_through_the_registry_when_it_must(tmp_path: Path) -> None:
    from varstore.checkpoint.read.detection import own_container
    from varstore.formats.registry import FormatEntry, register_format, unregister_format
    from varstore.errors import UnsupportedFormatError

    own = varstore.save(tmp_path / "ck.h5", {"w": np.arange(3, dtype=np.float32)})
    np.savez(tmp_path / "plain.npz", w=np.arange(3))
    assert own_container(own) == "h5" and own_container(tmp_path / "plain.npz") is None
    assert own_container(tmp_path / "missing.h5") is None
    with varstore.open_checkpoint(tmp_path / "plain.npz") as reader:  # foreign: detected by the registry
        assert reader.format == "npz" and reader["w"].tolist() == [0, 1, 2]

    def refuse(path: Path, **_: object) -> None:
        raise UnsupportedFormatError(f"claimed '{path}' first")

    register_format(FormatEntry("claims-all", "test format asked before varstore's", sniff=lambda probe: probe.path,
                                open=refuse, order=1))
    try:
        with pytest.raises(UnsupportedFormatError, match="claimed '.*ck.h5' first"):
            varstore.open_checkpoint(own)
    finally:
        unregister_format("claims-all")
    with varstore.open_checkpoint(own) as reader:
        assert reader.format == "varstore-hdf5" and reader["w"].tolist() == [0.0, 1.0, 2.0]


def test_write_back_looks_up_sync_file_range_on_first_use_only(tmp_path: Path) -> None:
    code = ("import os, sys\nfrom varstore.storage import local\nassert local._SYNC_FILE_RANGE is local._UNSET\n"
            f"fd = os.open({str(tmp_path / 'f')!r}, os.O_CREAT | os.O_RDWR)\nos.write(fd, b'x' * 8192)\n"
            "local.start_writeback(fd, 0, 0)\nassert local._SYNC_FILE_RANGE is local._UNSET\n"
            "local.start_writeback(fd, 0, 8192)\nos.close(fd)\n"
            "assert local._SYNC_FILE_RANGE is not local._UNSET\n"
            "assert (local._SYNC_FILE_RANGE is not None) == sys.platform.startswith('linux')")
    _modules_after(code)
    assert (tmp_path / "f").read_bytes() == b"x" * 8192


def test_open_and_read_one_array_runs_no_dataclass_generation(tmp_path: Path) -> None:
    # W3 as the benchmark runs it: open, read one array; VariableInfo (a dataclass) loads on first info()
    for name in ("ck.h5", "ck.zarr"):
        varstore.save(tmp_path / name, {"a/b": np.arange(6, dtype=np.float32)})
        loaded = _modules_after(f"import varstore as vs\na = vs.open_checkpoint({str(tmp_path / name)!r})['a/b']\n"
                                "assert a.tolist() == [0, 1, 2, 3, 4, 5]")
        for heavy in ("dataclasses", "varstore.checkpoint.format.variable_info"):
            assert heavy not in loaded, (name, heavy)
        with varstore.open_checkpoint(tmp_path / name) as reader:
            info = reader.info("a/b")
        assert (info.name, info.shape, info.dtype, info.nbytes) == ("a/b", (6,), "float32", 24)


def test_variable_info_is_one_class_under_every_public_name() -> None:
    from varstore.checkpoint.read import reader_api
    from varstore.checkpoint.format import variable_info
    from varstore.checkpoint.read.reader_api import SkippedEntry, VariableInfo

    assert VariableInfo is varstore.VariableInfo is variable_info.VariableInfo is reader_api.VariableInfo
    assert SkippedEntry is varstore.SkippedEntry is variable_info.SkippedEntry
    assert VariableInfo("w", (2,), "float32", 8) == VariableInfo("w", (2,), "float32", 8, attributes={"x": 1})
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        reader_api.Nope  # noqa: B018
