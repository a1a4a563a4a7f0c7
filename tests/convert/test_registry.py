"""The format registry: a format is one entry; everyone (open, convert, detect, CLI) reads the registry.

A toy format (a ".toy" JSON file of arrays) is registered at run time to
show that open_checkpoint, convert (both directions), detect_format and the
CLI's help and --from/--format/--to pick up a new entry without other edits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from click.testing import CliRunner

from varstore.checkpoint import save_entries
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo, checked_out
from varstore.formats import (
    READ_FORMATS,
    WRITE_FORMATS,
    FormatEntry,
    WriteRequest,
    convert,
    detect_format,
    formats,
    register_format,
    unregister_format,
)
from varstore import open_checkpoint
from varstore.formats import registry
from varstore.formats.probe import Probe
from varstore.errors import NotACheckpointError, UnknownVariableError, UnsupportedFormatError

TOY_MAGIC = b'{"toy-format": 1'


# ------------------------------------------------------------------ the toy format (one module's worth)
class ToyReader(CheckpointReader):
    """A ".toy" file: {"toy-format": 1, "step": n, "arrays": {name: {"dtype", "shape", "data"}}}."""

    format = "toy"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        document = json.loads(Path(path).read_text())
        self._arrays = document["arrays"]
        self.step = document.get("step")
        self.metadata = {"written_by": "toy"}

    def keys(self) -> list[str]:
        return list(self._arrays)

    def info(self, name: str) -> VariableInfo:
        if name not in self._arrays:
            raise UnknownVariableError(f"no variable '{name}' in toy file '{self.path}'")
        spec = self._arrays[name]
        dtype = np.dtype(spec["dtype"])
        shape = tuple(spec["shape"])
        return VariableInfo(name=name, shape=shape, dtype=dtype.name,
                            nbytes=int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        info = self.info(name)
        spec = self._arrays[name]
        result = checked_out(name, info.shape, np.dtype(spec["dtype"]), out)
        result[...] = np.asarray(spec["data"], dtype=spec["dtype"]).reshape(info.shape)
        return result


def sniff_toy(probe: Probe) -> Path | None:
    return probe.path if probe.is_file and probe.head.startswith(TOY_MAGIC) else None


def open_toy(path: Path, *, probe: Probe | None = None, **options: Any) -> ToyReader:
    return ToyReader(path)


def write_toy(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    arrays = {}
    for entry in entries:
        value = np.asarray(entry.get())
        arrays[entry.name] = {"dtype": value.dtype.name, "shape": list(value.shape), "data": value.ravel().tolist()}
    document = {"toy-format": 1, "step": request.step, "from": request.source_format, "arrays": arrays}
    path.write_text(json.dumps(document))
    return (f"{len(arrays)} arrays as JSON",)


TOY = FormatEntry("toy", "toy JSON file of arrays (test only)", aliases=("toyjson",), suffixes=(".toy",),
                  sniff=sniff_toy, open=open_toy, write=write_toy, order=55)


@pytest.fixture
def toy() -> Iterator[FormatEntry]:
    register_format(TOY)
    try:
        yield TOY
    finally:
        unregister_format("toy")


def _toy_file(path: Path) -> Path:
    path.write_text(json.dumps({"toy-format": 1, "step": 7, "arrays": {
        "enc/w": {"dtype": "float32", "shape": [2, 2], "data": [1.5, -2.0, 0.25, 8.0]},
        "enc/b": {"dtype": "int16", "shape": [3], "data": [1, 2, 3]}}}))
    return path


# ------------------------------------------------------------------ the toy through every entry point
def test_a_registered_format_is_detected_opened_and_converted_both_ways(toy: FormatEntry, tmp_path: Path) -> None:
    src = _toy_file(tmp_path / "weights.data")  # no .toy suffix: found by its magic bytes
    assert detect_format(src) == "toy"
    with open_checkpoint(src) as reader:
        assert reader.format == "toy" and reader.keys() == ["enc/w", "enc/b"]
        assert reader["enc/w"].tolist() == [[1.5, -2.0], [0.25, 8.0]]
    with open_checkpoint(src, format="TOYJSON") as reader:  # an alias, any case
        assert reader["enc/b"].tolist() == [1, 2, 3]

    report = convert(src, tmp_path / "out.h5")
    assert (report.source_format, report.destination_format, report.variables) == ("toy", "h5", 2)
    with open_checkpoint(tmp_path / "out.h5") as reader:
        assert reader.step == 7 and reader["enc/w"].dtype == np.float32
        assert reader["enc/w"].tolist() == [[1.5, -2.0], [0.25, 8.0]] and reader["enc/b"].tolist() == [1, 2, 3]

    back = convert(tmp_path / "out.h5", tmp_path / "again.toy")  # picked by the destination suffix
    assert back.destination_format == "toy" and back.notes == ("2 arrays as JSON",)
    document = json.loads((tmp_path / "again.toy").read_text())
    assert document["step"] == 7 and document["from"] == "varstore-hdf5"
    assert document["arrays"]["enc/b"] == {"dtype": "int16", "shape": [3], "data": [1, 2, 3]}
    assert convert(tmp_path / "out.h5", tmp_path / "named.json", to_format="toyjson").destination_format == "toy"


def test_the_cli_lists_and_uses_a_registered_format(toy: FormatEntry, tmp_path: Path) -> None:
    from varstore_cli.main import cli

    runner = CliRunner()
    for command, option in (("ls", "--format F"), ("show", "--format F"), ("verify", "--format F"),
                            ("convert", "--from F")):
        page = " ".join(runner.invoke(cli, [command, "--help"]).output.split())
        assert option in page and "tf, toy, safetensors, npz, gguf, keras3-sharded, pytorch." in page, command
    convert_help = " ".join(runner.invoke(cli, ["convert", "--help"]).output.split())
    assert "(default: from DST's suffix): h5, zarr, orbax, dcp, safetensors-sharded, tf, toy, safetensors, npz, gguf, pt." in convert_help

    src = _toy_file(tmp_path / "model.bin")  # a pickle suffix, but its bytes are the toy's
    listed = runner.invoke(cli, ["ls", "--json", str(src)])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)["format"] == "toy"
    result = runner.invoke(cli, ["convert", "--json", "--from", "toy", str(src), str(tmp_path / "out.npz")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["source_format"] == "toy"
    with np.load(tmp_path / "out.npz") as arrays:
        assert arrays["enc/w"].tolist() == [[1.5, -2.0], [0.25, 8.0]]


def test_an_unregistered_format_is_gone_everywhere(tmp_path: Path) -> None:
    register_format(TOY)
    assert unregister_format("toy") is TOY
    src = _toy_file(tmp_path / "weights.toy")
    with pytest.raises(UnsupportedFormatError, match="unknown checkpoint format 'toy'"):
        open_checkpoint(src, format="toy")
    with pytest.raises(UnsupportedFormatError, match="cannot tell the destination format of .*'.toy'"):
        convert(tmp_path / "x.npz", tmp_path / "y.toy")
    assert "toy" not in [e.name for e in formats()]
    with pytest.raises(UnsupportedFormatError, match="no format named 'toy'"):
        unregister_format("toy")


def test_registering_a_taken_name_fails_unless_replacing(toy: FormatEntry) -> None:
    with pytest.raises(UnsupportedFormatError, match="safetensors already names format 'safetensors'"):
        register_format(FormatEntry("safetensors", "another", open=open_toy))
    with pytest.raises(UnsupportedFormatError, match="toyjson already names format 'toy'"):
        register_format(FormatEntry("toy2", "another", aliases=("toyjson",), open=open_toy))
    with pytest.raises(UnsupportedFormatError, match="h5 already names format 'varstore-hdf5'"):
        register_format(FormatEntry("mine", "another", write=write_toy, write_names=("h5",)))
    quieter = FormatEntry("toy", "toy, replaced", suffixes=(".toy",), open=open_toy)
    register_format(quieter, replace=True)
    assert [e for e in formats() if e.name == "toy"] == [quieter]


# ------------------------------------------------------------------ the built-in table
def test_builtin_names_aliases_and_order() -> None:
    assert [e.name for e in formats()] == ["varstore-hdf5", "varstore-zarr", "keras3", "keras2", "keras", "hdf5",
                                           "zarr", "orbax", "dcp", "safetensors-sharded", "tf", "safetensors", "npz",
                                           "gguf", "keras3-sharded", "pytorch", "pickle"]
    assert READ_FORMATS == {
        "varstore-hdf5": "varstore-hdf5", "varstore": "varstore-hdf5", "varstore-zarr": "varstore-zarr",
        "keras3": "keras3", "keras2": "keras2", "keras": "keras", "hdf5": "hdf5", "h5": "hdf5", "zarr": "zarr",
        "tf": "tf", "tensorflow": "tf", "safetensors": "safetensors", "npz": "npz",
        "orbax": "orbax", "jax-orbax": "orbax", "dcp": "dcp", "torch-dcp": "dcp", "distcp": "dcp",
        "safetensors-sharded": "safetensors-sharded", "hf-sharded": "safetensors-sharded",
        "sharded-safetensors": "safetensors-sharded", "gguf": "gguf", "ggml": "gguf",
        "keras3-sharded": "keras3-sharded", "keras-sharded": "keras3-sharded",
        "pytorch": "pytorch", "torch": "pytorch", "pt": "pytorch", "pth": "pytorch"}
    assert WRITE_FORMATS == {"h5": "h5", "hdf5": "h5", "varstore-hdf5": "h5", "zarr": "zarr",
                             "zarr3": "zarr", "varstore-zarr": "zarr", "safetensors": "safetensors", "npz": "npz",
                             "safetensors-sharded": "safetensors-sharded", "hf-sharded": "safetensors-sharded",
                             "sharded-safetensors": "safetensors-sharded", "gguf": "gguf", "ggml": "gguf",
                             "pt": "pt", "pytorch": "pt", "torch": "pt", "pth": "pt",
                             "tf": "tf", "tensorflow": "tf", "dcp": "dcp", "distcp": "dcp", "torch-dcp": "dcp",
                             "orbax": "orbax", "jax-orbax": "orbax"}
    assert registry.read_format_names() == ["varstore-hdf5", "varstore-zarr", "keras3", "keras2", "keras", "hdf5",
                                     "zarr", "orbax", "dcp", "safetensors-sharded", "tf", "safetensors", "npz",
                                     "gguf", "keras3-sharded", "pytorch"]
    assert registry.write_format_names() == ["h5", "zarr", "orbax", "dcp", "safetensors-sharded", "tf", "safetensors", "npz", "gguf", "pt"]
    with pytest.raises(UnsupportedFormatError, match="cannot tell the destination format"):
        registry.writer_for_path(Path("out/model.safetensors.index.json"))  # sharded output is named, not implied
    assert registry.writer_for_path(Path("a/model.weights.h5")).name == "varstore-hdf5"
    assert registry.writer_for_path(Path("run.ZARR")).name == "varstore-zarr"
    assert registry.reader_format("H5").name == "hdf5" and registry.writer_format("H5").name == "varstore-hdf5"


def test_unknown_names_list_what_is_accepted() -> None:
    with pytest.raises(UnsupportedFormatError, match=r"unknown checkpoint format 'onnx': use one of dcp, distcp, ggml, gguf, h5, hdf5, hf-sharded, "
                                                     r"jax-orbax, keras,"):
        registry.reader_format("onnx")
    with pytest.raises(UnsupportedFormatError, match=r"cannot convert to format 'onnx': use one of dcp, distcp, ggml, gguf, h5, "
                                                     r"hdf5, hf-sharded, jax-orbax, npz, orbax, pt, pth, pytorch, "
                                                     r"safetensors, safetensors-sharded, sharded-safetensors, "
                                                     r"tensorflow, tf, torch, torch-dcp, varstore-hdf5, varstore-zarr, zarr"):
        registry.writer_format("onnx")


def test_lazy_entries_import_nothing_until_called() -> None:
    code = ("import sys, varstore; from varstore.formats import registry as r; r.formats(); r.read_format_names(); "
            "heavy = [m for m in ('h5py', 'zarr', 'safetensors', 'varstore.formats.keras.reader', 'varstore.formats.plain.npz', "
            "'varstore.formats.safetensors.single', 'varstore.formats.tensorflow.reader', 'varstore.formats.plain.generic') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ})
    assert out.stdout.strip() == "[]"
    calls: list[str] = []

    def load() -> Any:
        calls.append("loaded")
        return json

    dumps = registry.lazy(load, "dumps")
    assert calls == [] and dumps([1, 2]) == "[1, 2]" and dumps({}) == "{}" and calls == ["loaded"]


# ------------------------------------------------------------------ detection opens a file once
@pytest.fixture
def count_walks(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Counts HDF5Walker constructions and fails on any is_varstore_checkpoint call (a second HDF5 open)."""
    import varstore.backends.hdf5.walker as walker_module
    import varstore.checkpoint as checkpoint

    made = [0]
    real = walker_module.HDF5Walker

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made[0] += 1
            super().__init__(*args, **kwargs)

    def no_second_open(_path: object) -> bool:
        raise AssertionError("an HDF5 file was opened again to ask whether it is a varstore checkpoint")

    monkeypatch.setattr(walker_module, "HDF5Walker", Counting)
    monkeypatch.setattr(checkpoint, "is_varstore_checkpoint", no_second_open)
    return lambda: made[0]


@pytest.mark.parametrize("fixture,fmt", [("keras3/model.weights.h5", "keras3"), ("foreign_h5/generic.h5", "hdf5")])
def test_an_hdf5_file_is_walked_once_and_the_walk_is_handed_to_its_reader(
        fixtures_dir: Path, count_walks: Callable[[], int], fixture: str, fmt: str) -> None:
    with open_checkpoint(fixtures_dir / fixture) as reader:
        assert reader.format == fmt and count_walks() == 1
        first = reader.keys()[0]
        assert reader[first].shape == reader.info(first).shape
    assert count_walks() == 1
    assert detect_format(fixtures_dir / fixture) == fmt and count_walks() == 2  # one walk per detection


def test_a_keras2_file_is_walked_once(tmp_path: Path, count_walks: Callable[[], int]) -> None:
    import h5py

    path = tmp_path / "legacy.h5"
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [b"dense"]
        f.attrs["keras_version"] = "2.15.0"
        f.create_group("dense").attrs["weight_names"] = [b"dense/kernel:0"]
        f["dense"].create_dataset("dense/kernel:0", data=np.arange(4, dtype=np.float32).reshape(2, 2))
    with open_checkpoint(path) as reader:
        assert reader.format == "keras2" and reader["dense/kernel:0"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert count_walks() == 1


def test_save_entries_output_detects_as_varstore_without_the_hdf5_walker(
        tmp_path: Path, count_walks: Callable[[], int]) -> None:
    value = np.arange(3, dtype=np.float64)
    path = save_entries(tmp_path / "own.h5", [SaveEntry("v", (3,), value.dtype, lambda: value)])
    assert detect_format(path) == "varstore-hdf5" and count_walks() == 0


def test_a_refused_format_claimed_by_suffix_is_refused_by_detection_too(tmp_path: Path) -> None:
    path = tmp_path / "model.pkl"
    path.write_bytes(b"not a pickle at all")
    from varstore.errors import UnsafeFormatError

    with pytest.raises(UnsafeFormatError, match=r"model.pkl'.*suffix '.pkl'.*never unpickles"):
        detect_format(path)
    assert "pickle" not in registry.read_format_names() and "pickle" in registry.read_format_names(include_refusals=True)
    # a PyTorch suffix is claimed by the real reader, which says what the bytes are not
    torch_named = tmp_path / "model.pth"
    torch_named.write_bytes(b"not a pickle at all")
    assert detect_format(torch_named) == "pytorch"
    with pytest.raises(NotACheckpointError, match=r"model.pth' \(suffix '.pth'\) is neither a torch.save zip"):
        open_checkpoint(torch_named)
