"""The bulk write engine and the commit step (checkpoint/write/write_engine.py, commit.py) go through the Storage seam."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from varstore import save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.checkpoint.publish.commit import publish
from varstore.checkpoint.format.manifest import assign_paths
from varstore.checkpoint.write.plan import entries_from, header, plan_records
from varstore.errors import CheckpointError
from varstore.storage import LocalStorage, StorageWriter


class CountingStorage(LocalStorage):
    """A LocalStorage that counts the bytes written through it (the seam, observed)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[str, int] = {}

    def writer(self, key: str, *, keep_open: bool = False) -> StorageWriter:
        inner = super().writer(key, keep_open=keep_open)
        written = self.written

        class Counting:
            def __init__(self) -> None:
                self.key = inner.key

            def reserve(self, nbytes: int) -> None:
                inner.reserve(nbytes)

            def write_at(self, offset: int, data: object) -> None:
                written[key] = written.get(key, 0) + memoryview(data).nbytes  # type: ignore[arg-type]
                inner.write_at(offset, data)  # type: ignore[arg-type]

            def finish(self) -> None:
                inner.finish()

            def abort(self) -> None:
                inner.abort()

        return Counting()


class NoRenameStorage(LocalStorage):
    renames = False


def _plan(values: dict[str, np.ndarray], final: Path, fmt: str, pack: int) -> tuple:
    entries = entries_from(values)
    records = plan_records(entries)
    packed_nbytes = assign_paths(records, pack)
    return entries, records, packed_nbytes, header(fmt, 3, {"run": "a"}, final)


@pytest.mark.parametrize("fmt,suffix", [("h5", ".h5"), ("zarr", ".zarr")])
def test_every_value_byte_goes_through_the_storage(tmp_path: Path, fmt: str, suffix: str) -> None:
    values = {"enc/w": np.arange(4096, dtype=np.float32).reshape(64, 64), "enc/b": np.arange(8, dtype=np.float32),
              "step": np.array(7, np.int64)}
    final = tmp_path / f"m{suffix}"
    storage = CountingStorage()
    entries, records, packed_nbytes, planned = _plan(values, final, fmt, 64)
    assert publish(final, fmt, entries, records, packed_nbytes, planned, True, storage=storage) == final
    value_bytes = values["enc/w"].nbytes + values["enc/b"].nbytes + values["step"].nbytes
    assert sum(storage.written.values()) >= value_bytes  # plus the manifest and, in HDF5, the index header
    with open_checkpoint(final) as reader:
        assert reader.step == 3 and reader.metadata == {"run": "a"}
        for name, value in values.items():
            np.testing.assert_array_equal(reader[name], value)


def test_a_storage_without_rename_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    final = tmp_path / "m.zarr"
    entries, records, packed_nbytes, planned = _plan({"w": np.ones(3, np.float32)}, final, "zarr", 0)
    with pytest.raises(CheckpointError, match=r"'.*m\.zarr'.*without rename"):
        publish(final, "zarr", entries, records, packed_nbytes, planned, True, storage=NoRenameStorage())
    assert list(tmp_path.iterdir()) == []


def test_save_still_writes_a_checkpoint_the_reader_verifies(tmp_path: Path) -> None:
    values = {f"layer_{i}/w": np.full((32, 32), i, np.float32) for i in range(4)}
    path = save(tmp_path / "m.h5", values, pack_threshold_bytes=8192, layout="packed")
    with open_checkpoint(path) as reader:
        reader.verify()
        assert [reader.info(name).attributes["storage"] for name in sorted(values)] == ["packed"] * 4


def test_entries_of_a_mapping_of_arrays_take_the_arrays_themselves() -> None:
    """NumPy values skip the Variable and device probes (issue 39) and give the entries the general path gives."""
    from varstore.checkpoint.write.plan import _array_entry
    from varstore.errors import InvalidNameError, UnsupportedDtypeError

    values = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.float64(2.5), "c": [1, 2],
              "d": np.arange(4, dtype=np.int8)[::2]}
    entries = entries_from(values)
    general = [_array_entry(name, value) for name, value in values.items()]
    assert [(e.name, e.shape, e.dtype, e.trainable, e.collections, e.device) for e in entries] == \
        [(e.name, e.shape, e.dtype, e.trainable, e.collections, e.device) for e in general]
    assert [e.shape for e in entries] == [(2, 3), (), (2,), (2,)]
    assert entries[0].get() is values["a"] and entries[3].get() is values["d"]  # no copy, not even a view
    np.testing.assert_array_equal(entries[2].get(), [1, 2])
    with pytest.raises(UnsupportedDtypeError, match="'o'.*object arrays"):
        entries_from({"o": np.array([object()], dtype=object)})
    with pytest.raises(InvalidNameError, match="must be strings"):
        entries_from({1: np.zeros(2)})
