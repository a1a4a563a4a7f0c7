"""The real-file suite (issue 36): real legacy files, made the way old tools made them, open, convert and load.

Every hardening rule must hold against files no one here wrote. Each source below is listed (`varstore ls`),
loaded (`vs.load`) and converted to `.h5`, `.zarr` and `.safetensors`; every variable comes back bit-exact
or, where the destination cannot hold its dtype, is skipped with a reason naming the destination (never
the whole file refused). Sources: a legacy torch file as torch 0.4 and 0.3 wrote it under Python 2 (memo
numbered from 1; lpips' `weights/v0.1/alex.pth`), a PyTables-style HDF5 (CLASS/VERSION/TITLE attributes,
an x87 long double array, a compound table: PyTables' `tests/float.h5`), a llama.cpp-style GGUF written
by the `gguf` package, and every foreign fixture of `fixtures/` that is a real checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import varstore as vs
from tests.reliability._legacy_files import legacy_torch_py2, lpips_alex_v01
from varstore_cli.main import cli

#: Foreign fixtures (fixtures/, written by the real tools) that are real checkpoints (the refused ones,
#: evil pickles, a whole nn.Module and an object array, have their own tests).
FIXTURES = ["tf1_scopes/model.ckpt", "keras3/model.keras", "keras3/model.weights.h5",
            "keras3_sharded/model.weights.json", "safetensors/mixed_numpy.safetensors",
            "safetensors/mixed_torch.safetensors", "npz/arrays.npz", "npz/arrays_compressed.npz",
            "foreign_h5/generic.h5", "foreign_zarr/v2_group.zarr", "foreign_zarr/v3_group.zarr",
            "torch/state_dict.pt", "torch/state_dict_legacy.pt", "torch_zip/state_dict_mixed.pt",
            "torch_zip/optimizer.pt", "torch_zip/legacy_format.pt", "hf_sharded/model", "dcp/default",
            "dcp/per_item_files", "dcp/safetensors_format", "orbax/default", "orbax/no_ocdbt", "gguf/mini.gguf"]
DESTINATIONS = {".h5": "h5", ".zarr": "zarr", ".safetensors": "safetensors"}


def pytables_float_h5(path: Path) -> Path:
    """An HDF5 file laid out as PyTables writes one (its `tests/float.h5` style): the CLASS, VERSION, TITLE and
    PYTABLES_FORMAT_VERSION attributes, float16/32/64 arrays, a float128 (x87 long double) array and a
    compound table with its FIELD_<i>_NAME and NROWS attributes."""
    import h5py

    def tag(node: h5py.HLObject, **attributes: str) -> None:
        for key, text in attributes.items():
            node.attrs[key] = np.bytes_(text)

    with h5py.File(path, "w") as f:
        tag(f, CLASS="GROUP", VERSION="1.0", TITLE="", PYTABLES_FORMAT_VERSION="2.1", FILTERS="65793")
        for name, dtype in (("float16", np.float16), ("float32", np.float32), ("float64", np.float64),
                            ("float96", np.longdouble)):
            array = f.create_dataset(name, data=np.arange(-3, 9, dtype=dtype).reshape(3, 4) / 4)
            tag(array, CLASS="ARRAY", VERSION="2.4", TITLE="", FLAVOR="numpy")
        group = f.create_group("detector")
        tag(group, CLASS="GROUP", VERSION="1.0", TITLE="Detector information")
        rows = np.array([(1, 2.5, b"Particle: 1"), (2, 3.25, b"Particle: 2")],
                        dtype=[("idnumber", "<i8"), ("pressure", "<f4"), ("name", "S16")])
        table = group.create_dataset("readout", data=rows, chunks=(2,), maxshape=(None,))
        tag(table, CLASS="TABLE", VERSION="2.7", TITLE="Readout example", FIELD_0_NAME="idnumber",
            FIELD_1_NAME="pressure", FIELD_2_NAME="name")
        table.attrs["NROWS"] = np.int64(2)
    return path


def llama_gguf(path: Path) -> Path:
    """A GGUF file as llama.cpp's convert script writes one through the `gguf` package: llama architecture
    key-values, a tokenizer vocabulary (string and int arrays), F32 norms, F16 and Q8_0 weights."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(36)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(64)
    writer.add_embedding_length(32)
    writer.add_block_count(1)
    writer.add_head_count(4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(7)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "<s>", "</s>", "▁the"])
    writer.add_token_scores([0.0, 0.0, 0.0, -1.5])
    writer.add_token_types([2, 3, 3, 1])
    writer.add_tensor("token_embd.weight", rng.standard_normal((4, 32)).astype(np.float16))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(32, np.float32))
    q8 = gguf.quants.quantize(rng.standard_normal((32, 32)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("blk.0.attn_q.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


#: source -> builder(folder) -> path (made in the test's tmp_path), and the values it must give where known
MADE: dict[str, Callable[[Path], Path]] = {
    "torch 0.4 legacy, Python 2 (lpips alex.pth)": lambda d: legacy_torch_py2(d / "alex.pth", lpips_alex_v01()),
    "torch 0.3 legacy, Python 2, a unicode name": lambda d: legacy_torch_py2(
        d / "old.pth", {"fc.weight": np.arange(6.0).reshape(2, 3), "fc.steps": np.arange(3, dtype=np.int64)},
        rebuild="v1", unicode_names=frozenset({"fc.steps"})),
    "PyTables float.h5": lambda d: pytables_float_h5(d / "float.h5"),
    "llama.cpp GGUF": lambda d: llama_gguf(d / "tiny.gguf"),
}


def _source(name: str, tmp_path: Path, fixtures_dir: Path) -> Path:
    if name in MADE:
        (tmp_path / "src").mkdir()
        return MADE[name](tmp_path / "src")
    return fixtures_dir / name


@pytest.mark.parametrize("name", [*MADE, *FIXTURES])
def test_real_file_lists_loads_and_converts_skipping_only_what_a_destination_cannot_hold(
        tmp_path: Path, fixtures_dir: Path, name: str) -> None:
    if name.startswith("orbax/default"):
        pytest.importorskip("tensorstore")
    path = _source(name, tmp_path, fixtures_dir)
    listed = CliRunner().invoke(cli, ["ls", str(path)], prog_name="varstore")
    assert listed.exit_code == 0, listed.output
    with vs.open_checkpoint(path) as reader:
        values = {key: np.asarray(reader[key]) for key in reader.keys()}
    assert values, name
    assert all(key in listed.output for key in values if key.isprintable())
    loaded = vs.load(path)
    assert loaded.keys() == values.keys()
    for key, value in values.items():
        assert loaded[key].dtype == value.dtype and loaded[key].tobytes() == value.tobytes(), key
    for suffix, destination in DESTINATIONS.items():
        out = tmp_path / f"out{suffix}"
        report = vs.convert(path, out)
        refused = {s.name: s.reason for s in report.skipped if s.reason.startswith(f"not written to {destination}")}
        assert report.variables == len(values) - len(refused), (name, destination, refused)
        with vs.open_checkpoint(out) as back:
            assert sorted(back.keys()) == sorted(set(values) - set(refused)), (name, destination)
            for key in back.keys():
                got = np.asarray(back[key])
                assert got.dtype == values[key].dtype and got.tobytes() == values[key].tobytes(), (key, destination)


def test_python2_legacy_torch_file_gives_its_exact_values_through_ls_convert_and_load(tmp_path: Path) -> None:
    expected = lpips_alex_v01()
    path = legacy_torch_py2(tmp_path / "alex.pth", expected)
    assert path.read_bytes()[:24].count(b"q\x01") == 0  # the magic number pickle memoizes nothing
    assert b"}q\x01(U\x10protocol_version" in path.read_bytes()  # sys_info: EMPTY_DICT, BINPUT 1 (cPickle)
    listed = CliRunner().invoke(cli, ["ls", str(path)], prog_name="varstore")
    assert listed.exit_code == 0 and "pytorch, version legacy" in listed.output, listed.output
    assert "lin2.model.1.weight  [1, 384, 1, 1]  float32" in listed.output
    converted = CliRunner().invoke(cli, ["convert", str(path), str(tmp_path / "alex.zarr")], prog_name="varstore")
    assert converted.exit_code == 0, converted.output
    loaded = vs.load(path)
    assert list(loaded) == list(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(loaded[key], value)
        np.testing.assert_array_equal(vs.load(tmp_path / "alex.zarr")[key], value)


def test_torch_itself_reads_the_python2_legacy_files_as_built(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    expected = lpips_alex_v01()
    state = torch.load(legacy_torch_py2(tmp_path / "alex.pth", expected), weights_only=False)
    assert list(state) == list(expected)
    assert list(state._metadata) == ["", *(f"lin{i}.model.1" for i in range(5))]  # torch 0.4's state_dict
    for key, value in expected.items():
        assert state[key].dtype == torch.float32 and not state[key].requires_grad
        np.testing.assert_array_equal(state[key].numpy(), value)
    old = {"fc.weight": np.arange(6.0).reshape(2, 3), "fc.steps": np.arange(3, dtype=np.int64)}
    state = torch.load(legacy_torch_py2(tmp_path / "old.pth", old, rebuild="v1",
                                        unicode_names=frozenset({"fc.steps"})), weights_only=False)
    for key, value in old.items():
        np.testing.assert_array_equal(state[key].numpy(), value)


def test_pytables_long_double_is_skipped_by_zarr_naming_it_and_kept_by_h5(tmp_path: Path) -> None:
    path = pytables_float_h5(tmp_path / "float.h5")
    expected = (np.arange(-3, 9, dtype=np.longdouble).reshape(3, 4) / 4)
    report = vs.convert(path, tmp_path / "out.zarr")
    reasons = {s.name: s.reason for s in report.skipped}
    assert "float96" in reasons and "Zarr v3 core has no data type for float128" in reasons["float96"]
    assert "compound dtype" in reasons["detector/readout"]  # not a variable: listed with its reason
    assert report.variables == 3
    back = vs.load(tmp_path / "out.zarr")
    assert sorted(back) == ["float16", "float32", "float64"]
    np.testing.assert_array_equal(back["float64"], expected.astype(np.float64))
    result = CliRunner().invoke(cli, ["convert", str(path), str(tmp_path / "cli.zarr")], prog_name="varstore")
    assert result.exit_code == 0 and "float96" in result.output and "float128" in result.output, result.output
    vs.convert(path, tmp_path / "out.h5")
    kept = vs.load(tmp_path / "out.h5")["float96"]
    assert kept.dtype == np.longdouble  # values, not bytes: 6 of a long double's 16 bytes are padding
    np.testing.assert_array_equal(kept, expected)
