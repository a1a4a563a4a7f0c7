"""TF tensor bundles built by tests/convert/tf_bundle_writer.py: dtypes, shards, slices, TF2 keys, damage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tf_bundle_writer import BundleWriter, entry_proto, header_proto, table

from varstore import dtypes
from varstore import open_checkpoint
from varstore.formats.tensorflow import _bundle_format as fmt
from varstore.formats.tensorflow.reader import TFCheckpointReader
from varstore.errors import (
    ChecksumError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    UnknownVariableError,
    UnsupportedFormatError,
)

ALL_DTYPES = ["float32", "float64", "int32", "uint8", "int16", "int8", "complex64", "int64", "bool",
              "bfloat16", "uint16", "complex128", "float16", "uint32", "uint64", "float8_e5m2", "float8_e4m3fn"]


def _value(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = dtypes.as_dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    return rng.standard_normal(shape).astype(dt)


@pytest.mark.parametrize("big_endian", [False, True])
def test_every_numeric_dtype_reads_back_bit_exact(tmp_path: Path, big_endian: bool) -> None:
    writer = BundleWriter(tmp_path / "model.ckpt", big_endian=big_endian)
    values = {f"zoo/{d}": _value(d, (3, 2), seed=i) for i, d in enumerate(ALL_DTYPES)}
    values["zoo/scalar"] = np.float64(2.5).reshape(())
    values["zoo/empty"] = np.zeros((0, 4), np.float32)
    for key, value in values.items():
        writer.add(key, value)
    writer.finish()
    with open_checkpoint(tmp_path / "model.ckpt") as reader:
        assert reader.format == "tf"
        assert reader.keys() == sorted(values)
        for key, value in values.items():
            got = reader[key]
            assert reader.info(key).dtype == dtypes.dtype_name(value.dtype)
            assert got.shape == value.shape and got.dtype == value.dtype.newbyteorder("=")
            assert got.tobytes() == value.tobytes(), key


def test_strings_read_as_fixed_length_bytes(tmp_path: Path) -> None:
    writer = BundleWriter(tmp_path / "s")
    elements = [b"alpha", b"", b"\xff\x00bin", b"x" * 300]
    writer.add("names", elements, shape=(2, 2))
    writer.add("none", [], shape=(0,))
    writer.finish()
    reader = TFCheckpointReader(tmp_path / "s")
    assert reader.info("names").dtype == "S300"
    assert reader.info("names").nbytes == 4 * 300
    assert reader["names"].reshape(-1).tolist() == elements
    assert reader.info("none").dtype == "S1" and reader["none"].shape == (0,)


def test_several_shards_and_many_table_blocks(tmp_path: Path) -> None:
    writer = BundleWriter(tmp_path / "big", num_shards=3)
    values = {f"layer_{i:03d}/w": np.full((i % 5 + 1,), i, np.int32) for i in range(120)}
    for i, (key, value) in enumerate(values.items()):
        writer.add(key, value, shard=i % 3)
    writer.finish(entries_per_block=7)  # 18 data blocks
    reader = TFCheckpointReader(tmp_path / "big.data-00002-of-00003")  # a shard names the bundle too
    assert reader.metadata["num_shards"] == 3
    assert len(reader) == 120
    for key, value in values.items():
        np.testing.assert_array_equal(reader[key], value)
    assert reader.info("layer_004/w").attributes["shard"] == 1


def test_partitioned_variables_are_reassembled(tmp_path: Path) -> None:
    full = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    grid = np.arange(4 * 6, dtype=np.int64).reshape(4, 6)
    writer = BundleWriter(tmp_path / "p", num_shards=2)
    writer.add_partitioned("emb", full, [((0, 2), (0, -1)), ((2, 3), (0, -1)), ((5, 1), (0, -1))], shards=[0, 1, 1])
    writer.add_partitioned("grid", grid, [((0, 2), (0, 3)), ((0, 2), (3, 3)), ((2, 2), (0, -1))])
    writer.add("plain", np.ones(2, np.float32), shard=1)
    writer.finish()
    reader = TFCheckpointReader(tmp_path / "p")
    assert reader.keys() == ["emb", "grid", "plain"]  # slice entries are not listed
    np.testing.assert_array_equal(reader["emb"], full)
    np.testing.assert_array_equal(reader["grid"], grid)
    assert reader.info("emb").attributes["partitions"] == 3
    out = np.empty((6, 4), np.float32)
    assert reader.read("emb", out=out) is out
    np.testing.assert_array_equal(out, full)


def test_missing_slice_is_corrupt(tmp_path: Path) -> None:
    full = np.arange(8, dtype=np.float32).reshape(4, 2)
    writer = BundleWriter(tmp_path / "p")
    writer.add_partitioned("emb", full, [((0, 2), (0, -1)), ((2, 2), (0, -1))])
    writer.pairs = [p for p in writer.pairs if not (fmt.is_slice_key(p[0]) and p is writer.pairs[1])]
    writer.finish()
    with pytest.raises(CorruptCheckpointError, match="'emb'.*missing"):
        TFCheckpointReader(tmp_path / "p")["emb"]


def test_tf2_object_keys_and_strip_attributes(tmp_path: Path) -> None:
    writer = BundleWriter(tmp_path / "ckpt-1")
    kernel = np.eye(3, dtype=np.float32)
    writer.add("model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", kernel)
    writer.add("save_counter/.ATTRIBUTES/VARIABLE_VALUE", np.int64(1).reshape(()))
    writer.add("_CHECKPOINTABLE_OBJECT_GRAPH", [b"\x0a\x02\x08\x01"], shape=())
    writer.finish()
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')
    full = open_checkpoint(tmp_path)
    assert full.keys() == ["model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", "save_counter/.ATTRIBUTES/VARIABLE_VALUE"]
    assert [(s.name, "object graph" in s.reason) for s in full.skipped] == [("_CHECKPOINTABLE_OBJECT_GRAPH", True)]
    short = open_checkpoint(tmp_path, strip_attributes=True)
    assert short.keys() == ["model/dense/kernel", "save_counter"]
    np.testing.assert_array_equal(short["model/dense/kernel"], kernel)
    assert short.metadata["tf_keys"]["save_counter"] == "save_counter/.ATTRIBUTES/VARIABLE_VALUE"


def test_checkpoint_state_file_picks_latest(tmp_path: Path) -> None:
    for step in (1, 2):
        writer = BundleWriter(tmp_path / f"model.ckpt-{step}")
        writer.add("global_step", np.int64(step * 100).reshape(()))
        writer.finish()
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "model.ckpt-2"\nall_model_checkpoint_paths: "model.ckpt-1"\n'
        'all_model_checkpoint_paths: "model.ckpt-2"\n')
    with open_checkpoint(tmp_path) as reader:
        assert reader.step == 200
        assert str(reader.prefix).endswith("model.ckpt-2")


def test_state_file_naming_a_missing_prefix(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "gone"\n')
    with pytest.raises(CheckpointNotFoundError, match="gone.index"):
        open_checkpoint(tmp_path)


def _simple_bundle(tmp_path: Path) -> Path:
    writer = BundleWriter(tmp_path / "m")
    writer.add("a/w", np.arange(64, dtype=np.float32))
    writer.add("b/names", [b"one", b"two"], shape=(2,))
    writer.finish()
    return tmp_path / "m"


def test_flipped_data_bit_fails_the_entry_crc(tmp_path: Path) -> None:
    prefix = _simple_bundle(tmp_path)
    data = tmp_path / "m.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[10] ^= 0x04
    data.write_bytes(bytes(raw))
    reader = TFCheckpointReader(prefix)
    with pytest.raises(ChecksumError, match=r"'a/w' in '.*m\.data-00000-of-00001'"):
        reader["a/w"]
    with pytest.raises(ChecksumError, match="'a/w'"):
        reader.verify()


def test_flipped_string_length_fails_the_length_crc(tmp_path: Path) -> None:
    _simple_bundle(tmp_path)
    data = tmp_path / "m.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[256] ^= 0x01  # first varint length of b/names (after 256 bytes of a/w)
    data.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError, match="b/names"):
        TFCheckpointReader(tmp_path / "m")["b/names"]


def test_flipped_index_bit_fails_the_block_crc(tmp_path: Path) -> None:
    _simple_bundle(tmp_path)
    index = tmp_path / "m.index"
    raw = bytearray(index.read_bytes())
    raw[5] ^= 0x10
    index.write_bytes(bytes(raw))
    with pytest.raises(ChecksumError, match=r"m\.index.*crc32c"):
        TFCheckpointReader(tmp_path / "m")


def test_truncated_index_and_data(tmp_path: Path) -> None:
    _simple_bundle(tmp_path)
    data = tmp_path / "m.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        TFCheckpointReader(tmp_path / "m")["a/w"]
    index = tmp_path / "m.index"
    index.write_bytes(index.read_bytes()[:-3])
    with pytest.raises(CorruptCheckpointError, match="m.index"):
        open_checkpoint(tmp_path / "m.index")


def test_missing_data_shard(tmp_path: Path) -> None:
    _simple_bundle(tmp_path)
    (tmp_path / "m.data-00000-of-00001").unlink()
    with pytest.raises(CorruptCheckpointError, match="data shard"):
        TFCheckpointReader(tmp_path / "m")["a/w"]


def test_snappy_blocks_are_unsupported(tmp_path: Path) -> None:
    pairs = [(b"", header_proto(1)), (b"w", entry_proto(1, (1,), size=4, crc32c=0))]
    (tmp_path / "s.index").write_bytes(table(pairs, kind=1))
    (tmp_path / "s.data-00000-of-00001").write_bytes(b"\0" * 4)
    with pytest.raises(UnsupportedFormatError, match="snappy"):
        TFCheckpointReader(tmp_path / "s")


def test_entry_size_contradicting_shape_is_corrupt(tmp_path: Path) -> None:
    pairs = [(b"", header_proto(1)), (b"w", entry_proto(1, (4,), size=12, crc32c=0))]
    (tmp_path / "s.index").write_bytes(table(pairs))
    with pytest.raises(CorruptCheckpointError, match="'w'.*12 bytes"):
        TFCheckpointReader(tmp_path / "s")


def test_unknown_name_and_unsupported_dtype(tmp_path: Path) -> None:
    pairs = [(b"", header_proto(1)), (b"handle", entry_proto(20, (), size=0, crc32c=0))]
    (tmp_path / "r.index").write_bytes(table(pairs))
    reader = TFCheckpointReader(tmp_path / "r")
    assert reader.keys() == []
    assert reader.skipped[0].name == "handle" and "DT_RESOURCE" in reader.skipped[0].reason
    with pytest.raises(UnknownVariableError, match="'nope'"):
        reader.info("nope")


def test_real_tf_index_decodes_to_its_manifest_keys(fixtures_dir: Path) -> None:
    import json

    manifest = json.loads((fixtures_dir / "tf1_scopes/model.ckpt.manifest.json").read_text())
    data = (fixtures_dir / "tf1_scopes/model.ckpt.index").read_bytes()
    pairs = fmt.read_table(data, "model.ckpt.index")
    header = fmt.parse_header(pairs[0][1], "x")
    assert (header.num_shards, header.big_endian, header.producer) == (1, False, 1)
    keys = [k.decode() for k, _ in pairs[1:]]
    assert keys == sorted(v["checkpoint_key"] for v in manifest["variables"])


def test_mask_and_unmask_match_leveldb() -> None:
    assert fmt.mask_crc(0) == 0xA282EAD8
    for value in (0, 1, 0xDEADBEEF, 0xFFFFFFFF, 0x12345678):
        assert fmt.unmask_crc(fmt.mask_crc(value)) == value
    assert fmt.crc32c(b"123456789") == 0xE3069283


def test_ordered_code_signed_numbers_match_tf_examples() -> None:
    # examples from tensorflow/core/lib/strings/ordered_code.cc
    assert fmt._write_signed_num_increasing(0x424242) == bytes.fromhex("f0424242")
    assert fmt._write_signed_num_increasing(-0x800) == bytes.fromhex("3800")
    assert fmt._write_signed_num_increasing(-1) == b"\x7f"
    assert fmt._write_signed_num_increasing(0) == b"\x80"
    assert fmt.encode_tensor_name_slice(b"w", ((0, -1),)) == b"\x00w\x00\x01\x01\x01\x80\x7f"


def test_tf2_checkpoint_converts_with_stripped_names(tmp_path: Path) -> None:
    from varstore.formats import convert

    writer = BundleWriter(tmp_path / "ckpt-3")
    kernel = np.arange(6, dtype=np.float32).reshape(2, 3)
    writer.add("model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE", kernel)
    writer.add("_CHECKPOINTABLE_OBJECT_GRAPH", [b"graph"], shape=())
    writer.finish()
    full = convert(tmp_path / "ckpt-3", tmp_path / "full.h5")
    assert [s.name for s in full.skipped] == ["_CHECKPOINTABLE_OBJECT_GRAPH"]
    short = convert(tmp_path / "ckpt-3.index", tmp_path / "short.zarr", strip_attributes=True)
    assert short.variables == 1
    with open_checkpoint(tmp_path / "full.h5") as a, open_checkpoint(tmp_path / "short.zarr") as b:
        assert a.keys() == ["model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"]
        assert b.keys() == ["model/dense/kernel"]
        np.testing.assert_array_equal(b["model/dense/kernel"], kernel)
