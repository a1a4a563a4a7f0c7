"""Checkpoint contract, part 1 (both formats): on-disk layout, names, dtypes, checksums, typed errors."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.checkpoint.plain import plain_array, plain_attrs, plain_manifest, plain_packed_value, plain_root_attrs
from varstore import dtypes
from varstore.backends import get_backend
from varstore import save
from varstore.checkpoint import is_varstore_checkpoint, open_varstore as open_checkpoint
from varstore.errors import (
    CheckpointNotFoundError,
    ChecksumError,
    CorruptCheckpointError,
    InvalidMetadataError,
    InvalidNameError,
    NotACheckpointError,
    UnknownVariableError,
    UnsupportedDtypeError,
    UnsupportedFormatError,
)

ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "bfloat16", "float8_e4m3fn", "float8_e5m2",
              "complex64", "complex128", "S5", "U3"]


def _value(dtype_name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = dtypes.as_dtype(dtype_name)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype.kind in "SU":
        words = [("ab\u00e9z"[: i % 4] if dtype.kind == "U" else bytes([97 + i % 26]) * (i % 6))
                 for i in range(count)]
        return np.array(words, dtype=dtype).reshape(shape)
    raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    if dtype.kind == "b":
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def _bits(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).tobytes()


# ------------------------------------------------------------------ layout
def test_groups_mirror_scopes_with_attributes(ckpt: Path) -> None:
    kernel = np.arange(12, dtype=np.float32).reshape(3, 4)
    save(ckpt, {"encoder/dense/kernel": kernel, "encoder/dense/bias": np.ones(4, np.float32)},
         step=1200, metadata={"run": "a7"}, pack_threshold_bytes=0)
    np.testing.assert_array_equal(plain_array(ckpt, "encoder/dense/kernel"), kernel)
    attrs = plain_attrs(ckpt, "encoder/dense/kernel")
    assert bool(attrs["trainable"]) is True
    assert attrs["dtype"] == "float32" and attrs["device"] == "cpu:0"
    assert attrs["checksum"] == "crc32c:%08x" % __import__("crc32c").crc32c(kernel.tobytes())
    collections = attrs["collections"]
    assert (json.loads(collections) if isinstance(collections, str) else list(collections)) == []
    root = plain_root_attrs(ckpt)
    assert root["varstore_format"] == ("varstore-hdf5" if ckpt.suffix == ".h5" else "varstore-zarr")
    assert root["varstore_format_version"] == "1.0" and root["varstore_library_version"] == "0.1.0"
    assert int(root["step"]) == 1200 and root["created_utc"].endswith("Z")
    metadata = root["metadata"]
    assert (json.loads(metadata) if isinstance(metadata, str) else metadata) == {"run": "a7"}


def test_packed_small_variables_are_found_through_the_manifest(ckpt: Path) -> None:
    small = {f"layer_{i}/b": np.full(3, i, dtype=np.int16) for i in range(5)}
    save(ckpt, {**small, "big": np.zeros(5000, np.float32)}, layout="packed")
    manifest = plain_manifest(ckpt)
    assert manifest["variables"]["name"] == [*small, "big"]
    assert manifest["variables"]["path"] == [None] * 5 + ["big"]
    assert manifest["packed"]["path"] == "_varstore/packed"
    for name, value in small.items():
        assert plain_packed_value(ckpt, name) == value.tobytes()
    with open_checkpoint(ckpt) as reader:
        assert reader.info("layer_3/b").attributes["storage"] == "packed"
        np.testing.assert_array_equal(reader["layer_3/b"], small["layer_3/b"])


def test_name_that_is_also_a_scope_round_trips(ckpt: Path) -> None:
    values = {"a": np.arange(5000, dtype=np.float32), "a/b": np.ones(5000, np.float32),
              "_varstore/x": np.full(5000, 2.0, np.float32)}
    save(ckpt, values)
    with open_checkpoint(ckpt) as reader:
        assert reader.keys() == ["a", "a/b", "_varstore/x"]
        for name, value in values.items():
            np.testing.assert_array_equal(reader[name], value)
    aliased = reader.info("a").attributes["storage"]
    assert aliased.startswith("_varstore/aliased/") and plain_attrs(ckpt, aliased)["name"] == "a"


@pytest.mark.parametrize("name", ["", "/a", "a/", "a//b", "a/../b", "a/./b", "..", "a\x00b", "a\nb",
                                  "tab\there", "bell\x07"])
def test_bad_names_are_rejected(ckpt: Path, name: str) -> None:
    with pytest.raises(InvalidNameError, match="variable name"):
        save(ckpt, {name: np.zeros(2)})
    assert not ckpt.exists()


def test_unicode_names_are_kept(ckpt: Path) -> None:
    save(ckpt, {"caf\u00e9/\u6743\u91cd": np.ones(5000, np.float32), "\u03bb": np.zeros(1)})
    with open_checkpoint(ckpt) as reader:
        assert reader.keys() == ["caf\u00e9/\u6743\u91cd", "\u03bb"]
    np.testing.assert_array_equal(plain_array(ckpt, "caf\u00e9/\u6743\u91cd"), np.ones(5000, np.float32))


# ------------------------------------------------------------------ dtypes
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 4), (2, 0, 3)])
@pytest.mark.parametrize("pack", [0, 1 << 20])
def test_dtypes_round_trip_bit_exactly(tmp_path: Path, fmt: str, dtype: str, shape: tuple[int, ...],
                                        pack: int) -> None:
    path = tmp_path / f"m.{fmt}"
    value = _value(dtype, shape)
    save(path, {"v": value}, pack_threshold_bytes=pack, layout="packed")
    with open_checkpoint(path) as reader:
        got = reader["v"]
        info = reader.info("v")
    assert got.dtype == value.dtype and got.shape == value.shape and _bits(got) == _bits(value)
    assert info.dtype == dtypes.dtype_name(value.dtype) and info.nbytes == value.nbytes


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "U3", "complex64", "bool", "S5"])
def test_plain_library_sees_documented_storage(ckpt: Path, dtype: str) -> None:
    value = _value(dtype, (2, 3))
    save(ckpt, {"v": value}, pack_threshold_bytes=0)
    stored = plain_array(ckpt, "v")
    assert plain_attrs(ckpt, "v")["dtype"] == dtypes.dtype_name(value.dtype)
    assert stored.tobytes() == value.tobytes()
    if dtype == "bfloat16":
        assert stored.dtype == np.uint16 and stored.shape == (2, 3)
    if dtype == "U3":
        assert stored.dtype == np.uint32 and stored.shape == (2, 3, 3)
    if dtype == "S5":
        assert stored.shape == ((2, 3) if ckpt.suffix == ".h5" else (2, 3, 5))
    if dtype in ("complex64", "bool"):
        assert stored.dtype == value.dtype


def test_fortran_noncontiguous_and_big_endian_inputs(ckpt: Path) -> None:
    base = np.arange(60, dtype=np.float64).reshape(6, 10)
    values = {"fortran": np.asfortranarray(base), "strided": base[::2, ::3],
              "big_endian": base.astype(">i4"), "transposed": base.T}
    save(ckpt, values)
    with open_checkpoint(ckpt) as reader:
        for name, value in values.items():
            got = reader[name]
            np.testing.assert_array_equal(got, value)
            assert got.flags.c_contiguous
        assert reader.info("big_endian").dtype == "int32"


def test_object_arrays_are_refused_naming_the_variable(ckpt: Path) -> None:
    with pytest.raises(UnsupportedDtypeError, match="enc/objects"):
        save(ckpt, {"ok": np.ones(2), "enc/objects": np.array([{"a": 1}, None], dtype=object)})
    assert not ckpt.exists()


_NUMERIC = st.sampled_from(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                            "uint64", "float16", "float32", "float64", "complex64", "complex128"])


@given(fmt=st.sampled_from(["h5", "zarr"]), shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                                     max_side=4),
       dtype=st.one_of(_NUMERIC, st.sampled_from(["bfloat16", "float8_e4m3fn", "float8_e5m2",
                                                  "S1", "S4", "U1", "U5"])),
       pack=st.sampled_from([0, 64, 1 << 20]), order=st.sampled_from(["C", "F", "strided"]),
       seed=st.integers(0, 2**16))
def test_round_trip_property(fmt: str, shape: tuple[int, ...], dtype: str, pack: int, order: str,
                             seed: int) -> None:
    value = _value(dtype, shape, seed)
    if order == "F":
        value = np.asfortranarray(value)
    elif order == "strided" and value.ndim:
        value = np.repeat(value, 2, axis=0)[::2]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"m.{fmt}"
        save(path, {"s/v": value, "s/w": value}, pack_threshold_bytes=pack, layout="packed")
        with open_checkpoint(path) as reader:
            reader.verify()
            for name in ("s/v", "s/w"):
                got = reader[name]
                assert got.dtype == value.dtype and got.shape == value.shape
                assert _bits(got) == _bits(value)


# --------------------------------------------------------- reader metadata
def test_reader_reports_metadata_and_infos(ckpt: Path) -> None:
    save(ckpt, {"w": np.ones((2, 3), np.float32), "s": np.array(b"xyz")}, step=7, metadata={"k": [1, 2]})
    with open_checkpoint(ckpt) as reader:
        assert reader.step == 7 and reader.metadata == {"k": [1, 2]} and reader.format_version == "1.0"
        assert reader.format in ("varstore-hdf5", "varstore-zarr") and len(reader) == 2
        info = reader.info("w")
        assert (info.name, info.shape, info.dtype, info.nbytes, info.trainable) == ("w", (2, 3), "float32", 24,
                                                                                      True)
        assert info.checksum.startswith("crc32c:") and len(info.checksum) == 15
        with pytest.raises(UnknownVariableError, match="nope"):
            reader.info("nope")
        out = np.empty((2, 3), np.float32)
        assert reader.read("w", out=out) is out and out.sum() == 6
    assert is_varstore_checkpoint(ckpt) is True


def test_metadata_must_be_json(ckpt: Path) -> None:
    with pytest.raises(InvalidMetadataError, match="JSON"):
        save(ckpt, {"w": np.ones(2)}, metadata={"bad": object()})


def test_format_from_suffix_or_argument(tmp_path: Path) -> None:
    save(tmp_path / "x.hdf5", {"w": np.ones(2)})
    save(tmp_path / "noext", {"w": np.ones(2)}, format="zarr")
    assert open_checkpoint(tmp_path / "x.hdf5").format == "varstore-hdf5"
    assert open_checkpoint(tmp_path / "noext").format == "varstore-zarr"
    with pytest.raises(UnsupportedFormatError, match="suffix"):
        save(tmp_path / "x.bin", {"w": np.ones(2)})


# --------------------------------------------------------------- checksums
def _data_location(path: Path, name: str) -> tuple[Path, int]:
    with open_checkpoint(path) as reader:
        record = reader.record(name)
        fmt = "h5" if path.suffix == ".h5" else "zarr"
        store = get_backend(fmt).open_reader(path)
        from varstore.checkpoint.format.manifest import storage_layout
        dtype, shape = storage_layout(record.numpy_dtype, record.shape, fmt == "h5")
        extent = store.raw_extent(record.path, dtype, shape)
        store.close()
    return extent.file, extent.offset


@pytest.mark.parametrize("pack", [0, 1 << 20])
def test_flipped_bit_raises_checksum_error_naming_variable_and_file(ckpt: Path, pack: int) -> None:
    value = np.arange(4096, dtype=np.float32)
    save(ckpt, {"layer/kernel": value, "other": np.ones(3)}, pack_threshold_bytes=pack, layout="packed")
    with open_checkpoint(ckpt) as reader:
        record = reader.record("layer/kernel")
    if pack:
        manifest = plain_manifest(ckpt)
        store = get_backend("h5" if ckpt.suffix == ".h5" else "zarr").open_reader(ckpt)
        extent = store.raw_extent("_varstore/packed", np.dtype("u1"), (manifest["packed"]["nbytes"],))
        store.close()
        file, offset = extent.file, extent.offset + record.offset
    else:
        file, offset = _data_location(ckpt, "layer/kernel")
    with open(file, "r+b") as handle:
        handle.seek(offset + 1000)
        byte = handle.read(1)
        handle.seek(offset + 1000)
        handle.write(bytes([byte[0] ^ 0x10]))
    with open_checkpoint(ckpt) as reader:
        with pytest.raises(ChecksumError, match=r"'layer/kernel' in '.*model") as err:
            reader["layer/kernel"]
        assert isinstance(err.value, CorruptCheckpointError)
        with pytest.raises(ChecksumError, match="layer/kernel"):
            reader.verify()
        unchecked = reader.read("layer/kernel", verify=False)
        assert np.count_nonzero(unchecked != value) == 1
        np.testing.assert_array_equal(reader["other"], np.ones(3))


def test_missing_path_raises_not_found(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError, match="nothing.h5"):
        open_checkpoint(tmp_path / "nothing.h5")


def test_non_checkpoint_files_raise_not_a_checkpoint(tmp_path: Path) -> None:
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x00" * 100)
    with pytest.raises(NotACheckpointError, match="junk.h5"):
        open_checkpoint(junk)
    import h5py
    import zarr
    with h5py.File(tmp_path / "plain.h5", "w") as handle:
        handle["x"] = np.ones(3)
    with pytest.raises(NotACheckpointError, match="not a varstore checkpoint"):
        open_checkpoint(tmp_path / "plain.h5")
    zarr.open_group(str(tmp_path / "plain.zarr"), mode="w").create_array("x", shape=(2,), dtype="f4")
    with pytest.raises(NotACheckpointError, match="not a varstore checkpoint"):
        open_checkpoint(tmp_path / "plain.zarr")
    (tmp_path / "empty.zarr").mkdir()
    with pytest.raises(NotACheckpointError):
        open_checkpoint(tmp_path / "empty.zarr")
    assert is_varstore_checkpoint(tmp_path / "plain.h5") is False
    assert is_varstore_checkpoint(junk) is False


def test_truncated_checkpoint_raises_typed_error(ckpt: Path) -> None:
    save(ckpt, {"a": np.arange(100000, dtype=np.float64), "b": np.ones(100000)}, pack_threshold_bytes=0)
    if ckpt.suffix == ".h5":
        size = ckpt.stat().st_size
        with open(ckpt, "r+b") as handle:
            handle.truncate(size // 2)
        with pytest.raises(CorruptCheckpointError, match="model.h5"):
            with open_checkpoint(ckpt) as reader:
                reader.verify()
    else:
        chunk = ckpt / "b" / "0"
        with open(chunk, "r+b") as handle:
            handle.truncate(1000)
        with open_checkpoint(ckpt) as reader:
            np.testing.assert_array_equal(reader["a"], np.arange(100000, dtype=np.float64))
            with pytest.raises(CorruptCheckpointError, match="truncated"):
                reader["b"]


def test_damaged_manifest_raises_corrupt(ckpt: Path) -> None:
    save(ckpt, {"a": np.ones(3)})
    if ckpt.suffix == ".h5":
        import h5py
        with h5py.File(ckpt, "r+") as handle:
            data = handle["_varstore/manifest"][()]
            data[:10] = ord("x")
            handle["_varstore/manifest"][...] = data
    else:
        (ckpt / "_varstore/manifest/0").write_bytes(b"{not json")
    with pytest.raises(CorruptCheckpointError, match="manifest"):
        open_checkpoint(ckpt)


def test_many_small_variables_share_one_packed_array(ckpt: Path) -> None:
    values = {f"block_{i // 100:03d}/v{i}": np.full(64, i, np.float32) for i in range(5000)}
    save(ckpt, values, layout="packed")
    if ckpt.suffix == ".h5":
        import h5py
        names: list[str] = []
        with h5py.File(ckpt, "r") as handle:
            handle.visit(names.append)
        assert sorted(names) == ["_varstore", "_varstore/manifest", "_varstore/packed"]
    else:
        assert sorted(p.name for p in ckpt.iterdir()) == ["_varstore", "zarr.json"]
    with open_checkpoint(ckpt) as reader:
        assert len(reader) == 5000
        reader.verify()
        np.testing.assert_array_equal(reader["block_049/v4999"], np.full(64, 4999, np.float32))
    target = {name: np.zeros(64, np.float32) for name in values}
    from varstore import restore
    assert len(restore(ckpt, target).restored) == 5000
    assert all(target[name][0] == i for i, name in enumerate(values))
