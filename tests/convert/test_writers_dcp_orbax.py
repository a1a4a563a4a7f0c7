"""The DCP and Orbax writers: DCP written through torch.distributed.checkpoint, Orbax through tensorstore in
Orbax's own layout; read back by those libraries and by varstore's readers; without the library, one error
naming the extra."""

from __future__ import annotations

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.format.entry import SaveEntry
from varstore.errors import CheckpointExistsError, ConversionError, MissingDependencyError, UnsupportedDtypeError

VALUES = {
    "encoder/dense/kernel": np.arange(12, dtype=np.float32).reshape(3, 4) / 3,
    "encoder/dense/bias": np.array([1.5, -2.0], dtype=np.float64),
    "step": np.array(7, dtype=np.int64),
    "bf16": (np.arange(6) - 2.5).astype(ml_dtypes.bfloat16).reshape(2, 3),
    "half": np.array([0.5, 65504.0], dtype=np.float16),
    "flags": np.array([True, False, True]),
    "u16": np.array([65535, 1], dtype=np.uint16),
    "i8": np.array([-128, 127], dtype=np.int8),
    "empty": np.zeros((0, 3), dtype=np.int32),
    "f8": np.array([1.0, -0.5], dtype=ml_dtypes.float8_e4m3fn),
}


def _entries(values: dict[str, np.ndarray]) -> list[SaveEntry]:
    return [SaveEntry(name, value.shape, value.dtype, (lambda v=value: v)) for name, value in values.items()]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


# ----------------------------------------------------------------- DCP
def test_dcp_writer_is_loaded_by_torch_and_read_by_varstore(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    from varstore.formats.dcp.writer import write_dcp

    assert write_dcp(tmp_path / "ck", _entries(VALUES)) == sum(v.nbytes for v in VALUES.values())
    assert (tmp_path / "ck" / ".metadata").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    state = {name: torch.zeros(value.shape, dtype=getattr(torch, str(value.dtype)))
             for name, value in VALUES.items()}
    with pytest.warns(UserWarning, match="single process"):
        dcp.load(state, checkpoint_id=str(tmp_path / "ck"))
    for name, value in VALUES.items():
        tensor = state[name]
        raw = tensor.view(-1).view(torch.uint8).numpy() if tensor.numel() else np.zeros(0, np.uint8)
        assert raw.tobytes() == value.tobytes(), name
    with vs.open_checkpoint(tmp_path / "ck") as reader:
        assert reader.format == "dcp" and sorted(reader.keys()) == sorted(VALUES)
        for name, value in VALUES.items():
            _same(np.asarray(reader[name]), value)


def test_dcp_writer_refuses_strings_and_what_it_did_not_write(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from varstore.formats.dcp.writer import write_dcp

    with pytest.raises(UnsupportedDtypeError, match="variable 'vocab' has dtype S2, which a torch tensor cannot hold"):
        write_dcp(tmp_path / "ck", _entries({"w": np.ones(2), "vocab": np.array([b"ab"])}))
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(CheckpointExistsError, match="is not a DCP checkpoint directory; it is left as it is"):
        write_dcp(tmp_path / "mine", _entries({"w": np.ones(2)}), overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_convert_to_dcp_from_a_varstore_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    src = vs.save(tmp_path / "src.h5", {"a/w": np.arange(4.0), "b": np.ones((2, 2), np.float32)})
    report = vs.convert(src, tmp_path / "out.distcp")
    assert report.destination_format == "dcp" and report.variables == 2
    with vs.open_checkpoint(tmp_path / "out.distcp") as reader:
        _same(reader["a/w"], np.arange(4.0))


# ----------------------------------------------------------------- Orbax
ORBAX_VALUES = {k: v for k, v in VALUES.items() if k != "empty"}


def test_orbax_writer_is_restored_by_orbax_and_read_by_varstore(tmp_path: Path) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    from varstore.formats.orbax.writer import write_orbax

    write_orbax(tmp_path / "ck", _entries(ORBAX_VALUES))
    restored = ocp.StandardCheckpointer().restore((tmp_path / "ck").absolute())
    assert sorted(restored) == ["bf16", "encoder", "f8", "flags", "half", "i8", "step", "u16"]
    _same(np.asarray(restored["encoder"]["dense"]["kernel"]), ORBAX_VALUES["encoder/dense/kernel"])
    for name, value in ORBAX_VALUES.items():
        node = restored
        for part in name.split("/"):
            node = node[part]
        _same(np.asarray(node), value)
    with vs.open_checkpoint(tmp_path / "ck") as reader:
        assert reader.format == "orbax" and sorted(reader.keys()) == sorted(ORBAX_VALUES)
        for name, value in ORBAX_VALUES.items():
            _same(np.asarray(reader[name]), value)


def test_orbax_layout_is_what_orbax_itself_writes(tmp_path: Path) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    import json

    from varstore.formats.orbax.writer import write_orbax

    tree = {"enc": {"dense": {"kernel": ORBAX_VALUES["encoder/dense/kernel"], "bias": ORBAX_VALUES["bf16"]}},
            "step": ORBAX_VALUES["step"], "f8": ORBAX_VALUES["f8"]}
    reference = ocp.StandardCheckpointer(use_ocdbt=False)
    reference.save((tmp_path / "orbax").absolute(), tree)
    reference.wait_until_finished()
    write_orbax(tmp_path / "ours", _entries({"enc/dense/kernel": tree["enc"]["dense"]["kernel"],
                                             "enc/dense/bias": tree["enc"]["dense"]["bias"], "step": tree["step"],
                                             "f8": tree["f8"]}))
    theirs = sorted(str(p.relative_to(tmp_path / "orbax")) for p in (tmp_path / "orbax").rglob("*"))
    ours = sorted(str(p.relative_to(tmp_path / "ours")) for p in (tmp_path / "ours").rglob("*"))
    assert ours == theirs
    for array in ("enc.dense.kernel", "enc.dense.bias", "step", "f8"):
        assert (tmp_path / "ours" / array / ".zarray").read_bytes() == (tmp_path / "orbax" / array / ".zarray").read_bytes()
    assert json.loads((tmp_path / "ours" / "_METADATA").read_text()) == json.loads(
        (tmp_path / "orbax" / "_METADATA").read_text())
    with vs.open_checkpoint(tmp_path / "orbax") as reader:  # Orbax's own float8 arrays (dtype by name)
        _same(np.asarray(reader["f8"]), ORBAX_VALUES["f8"])


def test_orbax_writer_refuses_a_name_that_is_also_a_scope(tmp_path: Path) -> None:
    pytest.importorskip("orbax.checkpoint")
    from varstore.formats.orbax.writer import nested_tree, write_orbax

    with pytest.raises(ConversionError, match=r"variable 'empty' is empty \(shape \(0, 3\)\); Orbax cannot save"):
        write_orbax(tmp_path / "ck", _entries({"w": np.ones(2), "empty": VALUES["empty"]}))
    assert nested_tree(["a/b", "a/c/d", "e"]) == {"a": {"b": None, "c": {"d": None}}, "e": None}
    with pytest.raises(ConversionError, match="'a' is a variable and a scope of 'a/b'"):
        write_orbax(tmp_path / "ck", _entries({"a": np.ones(1), "a/b": np.ones(1)}))
    with pytest.raises(ConversionError, match="'a' is a variable and a scope of other variables"):
        nested_tree(["a/b", "a"])
    with pytest.raises(ConversionError, match="'a.b' and 'a/b' are both Orbax's 'a.b'"):
        write_orbax(tmp_path / "ck", _entries({"a.b": np.ones(1), "a/b": np.ones(1)}))
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------- missing libraries
@pytest.mark.parametrize("fmt, module, extra", [("dcp", "torch", "varstore[torch]"),
                                                ("orbax", "tensorstore", "varstore[orbax]")])
def test_without_the_library_one_error_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       fmt: str, module: str, extra: str) -> None:
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    src = vs.save(tmp_path / "src.h5", {"w": np.ones(2)})
    import re

    with pytest.raises(MissingDependencyError, match=re.escape(f"pip install '{extra}'")):
        vs.convert(src, tmp_path / "out", to_format=fmt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.h5"]


# ----------------------------------------------------------------- the command line
def test_cli_option_passes_writer_options(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from click.testing import CliRunner

    from varstore_cli.main import cli

    src = vs.save(tmp_path / "m.h5", {"emb": np.arange(50.0).reshape(10, 5), "w": np.ones((2, 32), np.float32)})
    runner = CliRunner()
    result = runner.invoke(cli, ["convert", str(src), str(tmp_path / "tf" / "model.ckpt"),
                                 "--option", 'partitions={"emb": 3}'])
    assert result.exit_code == 0, result.output
    with vs.open_checkpoint(tmp_path / "tf") as reader:
        np.testing.assert_array_equal(reader["emb"], np.arange(50.0).reshape(10, 5))
    result = runner.invoke(cli, ["convert", str(src), str(tmp_path / "q.gguf"), "--option", "gguf_type=q8_0"])
    assert result.exit_code == 0, result.output
    assert "note: 'emb' stays F32: its last dimension 5 is not a multiple of 32" in result.output
    with vs.open_checkpoint(tmp_path / "q.gguf") as reader:
        assert reader.info("w").attributes["ggml_type"] == "Q8_0"
    result = runner.invoke(cli, ["convert", str(src), str(tmp_path / "x.gguf"), "--option", "bad"])
    assert result.exit_code == 2 and "writer option 'bad' needs the form KEY=VALUE" in result.output


def test_orbax_writer_chunks_large_arrays_and_orbax_restores_them(tmp_path: Path) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    import json

    from varstore.formats.orbax.writer import write_orbax

    big = np.arange(6 * 1024 * 1024, dtype=np.float32).reshape(3072, 2048)  # 24 MiB: over one 16 MiB chunk
    write_orbax(tmp_path / "ck", _entries({"emb/table": big, "b": np.ones(3, np.float32)}))
    zarray = json.loads((tmp_path / "ck" / "emb.table" / ".zarray").read_text())
    assert zarray["chunks"] == [2048, 2048] and zarray["shape"] == [3072, 2048]
    assert sorted(p.name for p in (tmp_path / "ck" / "emb.table").iterdir()) == [".zarray", "0.0", "1.0"]
    restored = ocp.StandardCheckpointer().restore((tmp_path / "ck").absolute())
    _same(np.asarray(restored["emb"]["table"]), big)
