"""The PyTorch and GGUF writers: what varstore writes, the real tools (torch.load, gguf.GGUFReader) read back exactly."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.format.entry import SaveEntry
from varstore.formats.gguf.writer import write_gguf
from varstore.formats.pytorch.writer import write_pytorch
from varstore.errors import ConversionError, UnsupportedDtypeError

VALUES = {
    "encoder/dense/kernel": np.arange(12, dtype=np.float32).reshape(3, 4) / 3,
    "encoder.dense.bias": np.array([1.5, -2.0], dtype=np.float64),
    "scalar": np.array(3.5, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.int16),
    "bf16": (np.arange(6) - 2.5).astype(ml_dtypes.bfloat16).reshape(2, 3),
    "half": np.array([0.5, 65504.0], dtype=np.float16),
    "flags": np.array([True, False, True]),
    "i8": np.array([-128, 127], dtype=np.int8),
    "u8": np.array([0, 255], dtype=np.uint8),
    "i32": np.array([-(2**31), 2**31 - 1], dtype=np.int32),
    "i64": np.array([2**40 + 1], dtype=np.int64),
    "u16": np.array([65535], dtype=np.uint16),
    "u32": np.array([2**32 - 1], dtype=np.uint32),
    "u64": np.array([2**63 + 5], dtype=np.uint64),
    "c64": np.array([1 + 2j], dtype=np.complex64),
    "c128": np.array([3 - 4j], dtype=np.complex128),
    "f8": np.array([1.0, -0.5], dtype=ml_dtypes.float8_e4m3fn),
}


def _entries(values: dict[str, np.ndarray]) -> list[SaveEntry]:
    return [SaveEntry(name, value.shape, value.dtype, (lambda v=value: v)) for name, value in values.items()]


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


# ----------------------------------------------------------------- PyTorch
def test_pytorch_writer_round_trips_every_dtype_through_varstore(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    written = write_pytorch(path, _entries(VALUES))
    assert written == sum(v.nbytes for v in VALUES.values())
    with vs.open_checkpoint(path) as reader:
        assert reader.format == "pytorch"
        assert list(reader.keys()) == list(VALUES)
        for name, value in VALUES.items():
            _same(np.asarray(reader[name]), value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


@pytest.mark.parametrize("mmap", [False, True])
def test_torch_load_weights_only_opens_the_file(tmp_path: Path, mmap: bool) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "m.pt"
    write_pytorch(path, _entries(VALUES))
    state = torch.load(path, weights_only=True, mmap=mmap)
    assert list(state) == list(VALUES)
    for name, value in VALUES.items():
        tensor = state[name]
        assert tuple(tensor.shape) == value.shape and not tensor.requires_grad
        assert tensor.is_contiguous()
        raw = tensor.contiguous().view(-1).view(torch.uint8).numpy() if tensor.numel() else np.zeros(0, np.uint8)
        assert raw.tobytes() == value.tobytes(), name
    assert str(state["bf16"].dtype) == "torch.bfloat16" and str(state["u16"].dtype) == "torch.uint16"
    assert str(state["f8"].dtype) == "torch.float8_e4m3fn" and state["scalar"].item() == 3.5


def test_pytorch_records_start_on_64_byte_boundaries(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "m.pt"
    write_pytorch(path, _entries(VALUES))
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    assert [i.filename for i in infos[:4]] == ["archive/data.pkl", "archive/.format_version",
                                               "archive/.storage_alignment", "archive/byteorder"]
    assert infos[-1].filename == "archive/version"
    for info in infos:
        assert info.compress_type == zipfile.ZIP_STORED
        name_len, extra_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
            int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
        assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0, info.filename


def test_pytorch_writer_refuses_strings_naming_the_variable(tmp_path: Path) -> None:
    values = {"ok": np.ones(2, np.float32), "vocab": np.array(["a", "bc"])}
    with pytest.raises(UnsupportedDtypeError, match="variable 'vocab' has dtype .*PyTorch tensor cannot hold"):
        write_pytorch(tmp_path / "m.pt", _entries(values))
    assert list(tmp_path.iterdir()) == []


def test_convert_to_pt_by_suffix_and_name(tmp_path: Path) -> None:
    src = vs.save(tmp_path / "src.h5", {"a/w": np.arange(4.0), "b": np.ones((2, 2), np.float32)})
    report = vs.convert(src, tmp_path / "out.pth")
    assert report.destination_format == "pt" and report.variables == 2
    report = vs.convert(src, tmp_path / "out.bin", to_format="pytorch")
    for out in ("out.pth", "out.bin"):
        with vs.open_checkpoint(tmp_path / out) as reader:
            _same(reader["a/w"], np.arange(4.0))


# ----------------------------------------------------------------- GGUF
GGUF_VALUES = {k: VALUES[k] for k in ("encoder/dense/kernel", "encoder.dense.bias", "scalar", "bf16", "half",
                                      "i8", "i32", "i64")}


def test_gguf_writer_round_trips_through_gguf_and_varstore(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    write_gguf(path, _entries(GGUF_VALUES))
    with vs.open_checkpoint(path) as reader:
        assert list(reader.keys()) == list(GGUF_VALUES)
        for name, value in GGUF_VALUES.items():
            _same(np.asarray(reader[name]), value)
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    assert tensors["encoder/dense/kernel"].tensor_type.name == "F32"
    assert [int(d) for d in tensors["encoder/dense/kernel"].shape] == [4, 3]  # innermost first, as GGUF stores
    assert tensors["bf16"].tensor_type.name == "BF16" and tensors["half"].tensor_type.name == "F16"
    np.testing.assert_array_equal(np.asarray(tensors["i64"].data), GGUF_VALUES["i64"])


def test_gguf_q8_0_is_gguf_reference_quantization(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    weight = (np.arange(4 * 64, dtype=np.float32).reshape(4, 64) - 100) / 9
    path = tmp_path / "q.gguf"
    notes = write_gguf(path, _entries({"w": weight, "norm": np.ones(5, np.float32)}), gguf_type="q8_0")
    assert notes == ["'norm' stays F32: its last dimension 5 is not a multiple of 32"]
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    assert tensors["w"].tensor_type.name == "Q8_0" and tensors["norm"].tensor_type.name == "F32"
    expected = gguf.quants.quantize(weight, gguf.GGMLQuantizationType.Q8_0)
    assert np.asarray(tensors["w"].data).tobytes() == expected.tobytes()
    with vs.open_checkpoint(path, dequantize=True) as reader:
        np.testing.assert_allclose(reader["w"], weight, atol=np.abs(weight).max() / 127)


def test_gguf_source_key_values_are_kept_with_their_types(fixtures_dir: Path, tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    out = tmp_path / "copy.gguf"
    vs.convert(fixtures_dir / "gguf/mini.gguf", out, dequantize=True)
    fields = gguf.GGUFReader(out).fields
    source = gguf.GGUFReader(fixtures_dir / "gguf/mini.gguf").fields
    for key in ("general.architecture", "general.name", "qwen2.context_length", "qwen2.rope.freq_base",
                "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.add_bos_token",
                "general.parameter_count"):
        assert fields[key].types == source[key].types, key
        assert fields[key].contents() == source[key].contents(), key
    with vs.open_checkpoint(fixtures_dir / "gguf/mini.gguf", dequantize=True) as a, vs.open_checkpoint(out) as b:
        assert list(b.keys()) == list(a.keys())
        for name in a.keys():
            _same(np.asarray(b[name]), np.asarray(a[name]))


@pytest.mark.parametrize("name", ["flags", "u8", "c64", "u64"])
def test_gguf_writer_refuses_what_gguf_cannot_hold(tmp_path: Path, name: str) -> None:
    pytest.importorskip("gguf")
    with pytest.raises(UnsupportedDtypeError, match=f"variable '{name}' has dtype .*GGUF cannot hold"):
        write_gguf(tmp_path / "m.gguf", _entries({"ok": np.ones(2, np.float32), name: VALUES[name]}))
    assert list(tmp_path.iterdir()) == []


def test_convert_gguf_type_option_and_unknown_options(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    src = vs.save(tmp_path / "src.h5", {"w": np.ones((2, 32), np.float32)})
    vs.convert(src, tmp_path / "h.gguf", write_options={"gguf_type": "f16"})
    with vs.open_checkpoint(tmp_path / "h.gguf") as reader:
        assert reader.info("w").dtype == "float16"
    with pytest.raises(ConversionError, match="gguf_type 'q4' is not one of f32, f16, bf16, q8_0"):
        vs.convert(src, tmp_path / "x.gguf", write_options={"gguf_type": "q4"})
    assert not (tmp_path / "x.gguf").exists()


def test_reader_opens_torch_own_uint16_and_float8_files(tmp_path: Path) -> None:
    """torch 2.x pickles these storages as torch.storage.UntypedStorage with _rebuild_tensor_v3."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "real.pt"
    torch.save({"u16": torch.tensor([1, 65535], dtype=torch.uint16),
                "f8": torch.tensor([1.0, -0.5]).to(torch.float8_e4m3fn)}, path)
    with vs.open_checkpoint(path) as reader:
        _same(reader["u16"], np.array([1, 65535], np.uint16))
        _same(reader["f8"], np.array([1.0, -0.5], ml_dtypes.float8_e4m3fn))
