"""info() made from the manifest's columns equals the per-record VariableInfo; the packed loop's one-pass check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.checkpoint.damage import flip_packed
from varstore import dtypes as vs_dtypes
from varstore import save
from varstore.checkpoint import open_varstore
from varstore.checkpoint.format.manifest import format_checksum
from varstore.checkpoint.read.reader_api import VariableInfo
from varstore.errors import ChecksumError, UnknownVariableError
from varstore.store.scopes import VariableStore
from varstore.store.host_arrays import owns_memory


def _values() -> dict[str, np.ndarray]:
    bf16 = vs_dtypes.as_dtype("bfloat16")
    f8 = vs_dtypes.as_dtype("float8_e4m3fn")
    return {
        "a/f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "a/f64": np.array(2.5),  # a scalar
        "a/i8": np.array([-3, 4], np.int8),
        "a/u64": np.array([2**63], np.uint64),
        "a/bool": np.array([True, False, True]),
        "a/c64": np.array([1 + 2j], np.complex64),
        "a/bf16": np.array([1.5, -2.0], bf16),
        "a/f8": np.array([0.5, 1.0], f8),
        "a/text": np.array(["ab", "xyz"]),
        "a/bytes": np.array([b"hello", b"hi"]),
        "a/empty": np.zeros((0, 4), np.float32),
        "big/w": np.arange(5000, dtype=np.float32),  # its own array when not packed
    }


def _slow_info(reader, name: str) -> VariableInfo:
    """The VariableInfo built field by field from the record (what info() returned before)."""
    record = reader.record(name)
    return VariableInfo(record.name, record.shape, record.dtype, record.nbytes, record.trainable,
                        record.collections, format_checksum(record.checksum), record.device,
                        {"storage": "packed" if record.path is None else record.path})


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
@pytest.mark.parametrize("layout", ["packed", "per-variable"])
def test_info_from_columns_matches_the_record_for_every_dtype(tmp_path: Path, suffix: str, layout: str) -> None:
    values = _values()
    store = VariableStore()
    for name, value in values.items():
        store.get_variable(name, shape=value.shape, dtype=value.dtype, initializer=value.copy(),
                           trainable=not name.endswith("i8"),
                           collections=["extra"] if name.startswith("a/f") else None)
    path = save(tmp_path / f"ck{suffix}", store, layout=layout)
    with open_varstore(path) as reader:
        assert reader.keys() == list(values)
        infos = reader.infos()
        for name, from_list in zip(reader.keys(), infos):
            info = reader.info(name)
            slow = _slow_info(reader, name)
            assert info == slow == from_list
            assert type(info) is VariableInfo and hash(info) == hash(slow)
            assert info.attributes == slow.attributes and info.to_json() == slow.to_json()
            assert repr(info) == repr(slow)
            assert info.shape == values[name].shape and isinstance(info.shape, tuple)
            assert info.nbytes == values[name].nbytes
            assert info.dtype == vs_dtypes.dtype_name(values[name].dtype)
        f32 = reader.info("a/f32")
        assert f32.checksum is not None and f32.checksum.startswith("crc32c:") and len(f32.checksum) == 15
        assert "extra" in f32.collections and reader.info("a/i8").trainable is False
        assert reader.info("big/w").attributes == {"storage": "big/w"}  # over the pack threshold
        assert reader.info("a/i8").attributes == {"storage": "packed" if layout == "packed" else "a/i8"}
        assert reader.info("a/f32") is not reader.info("a/f32")  # a fresh object per call
        with pytest.raises(Exception):
            f32.name = "x"  # type: ignore[misc]  # still frozen
        with pytest.raises(UnknownVariableError, match="no variable 'nope' in '.*ck"):
            reader.info("nope")


def test_info_without_checksums(tmp_path: Path) -> None:
    path = save(tmp_path / "ck.h5", {"w": np.ones(3, np.float32)}, checksum=False)
    with open_varstore(path) as reader:
        assert reader.info("w") == _slow_info(reader, "w") and reader.info("w").checksum is None


def test_packed_loop_uses_one_checked_view_per_variable(tmp_path: Path) -> None:
    values = _values()
    path = save(tmp_path / "ck.h5", values, layout="packed")
    with open_varstore(path) as reader:
        names = reader.keys()
        got = {name: reader[name] for name in names}
        assert reader._order._checked and reader._order.packed_view(3, True) is not None
        again = reader[names[0]]  # a jump back: still a fresh array
    for name, value in values.items():
        np.testing.assert_array_equal(got[name], value)
        assert got[name].dtype == value.dtype and got[name].shape == value.shape
        assert got[name].flags.writeable and got[name].flags.c_contiguous and owns_memory(got[name])
    import varstore

    loaded = varstore.load(path)
    for name, value in values.items():  # vs.load's packed views: 0-d arrays for scalars too
        np.testing.assert_array_equal(loaded[name], value)
        assert isinstance(loaded[name], np.ndarray) and loaded[name].flags.writeable
    got[names[0]][0, 0] = 42.0
    assert float(again[0, 0]) == 0.0 and not np.shares_memory(got[names[0]], again)


def test_a_damaged_packed_variable_is_named_and_the_others_still_read(tmp_path: Path) -> None:
    values = {f"s/v{i:02d}": np.full(4, i, np.float32) for i in range(10)}
    path = save(tmp_path / "ck.h5", values, layout="packed")
    flip_packed(path, "s/v06")
    with open_varstore(path) as reader:
        for name in reader.keys()[:6]:
            np.testing.assert_array_equal(reader[name], values[name])
        assert not reader._order._checked  # the one-pass check failed: each read checks itself
        with pytest.raises(ChecksumError, match=r"'s/v06' in '.*ck\.h5'"):
            reader["s/v06"]
        for name in reader.keys()[7:]:  # jumps past the bad one: still checked and correct
            np.testing.assert_array_equal(reader[name], values[name])
        assert float(reader.read("s/v06", verify=False)[0]) != 6.0  # unchecked: the damaged bytes


def test_a_loop_in_key_order_copies_each_packed_variable_out_of_the_checked_blob(tmp_path: Path) -> None:
    values = {f"s/v{i:02d}": np.full(4, i, np.float32) for i in range(20)}
    path = save(tmp_path / "ck.zarr", values, layout="packed")
    with open_varstore(path) as reader:
        names = reader.keys()
        first = [reader[name] for name in names[:10]]
        assert reader._order.next_copy(10) is not None  # the fast path serves the next key in order...
        assert reader._order.next_copy(12) is None  # ...and nothing else
        rest = [reader[name] for name in names[11:]]  # a jump: the slow path, then fast again
        assert reader._order.next_copy(len(names) - 1) is None  # past the last read: not the next one
    for name, array in zip(names[:10] + names[11:], first + rest):
        np.testing.assert_array_equal(array, values[name])
        assert owns_memory(array) and array.flags.writeable
    first[0][:] = 9.0
    assert first[1].tolist() == [1.0] * 4
