"""Issue 9, finding 2: restore(lazy=False) reads and checks every value before it returns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.checkpoint.damage import flip_packed
from varstore.backends import get_backend
from varstore import restore, save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.checkpoint.format.manifest import storage_layout
from varstore.errors import ChecksumError
from varstore.store.scopes import VariableStore
from varstore.store.host_arrays import owns_memory


def _flip(path: Path, name: str, at: int = 8) -> None:
    """Flips one bit of variable `name`'s stored bytes (per-variable layout)."""
    with open_checkpoint(path) as reader:
        record = reader.record(name)
    fmt = "h5" if path.suffix == ".h5" else "zarr"
    store = get_backend(fmt).open_reader(path)
    dtype, shape = storage_layout(record.numpy_dtype, record.shape, fmt == "h5")
    extent = store.raw_extent(record.path, dtype, shape)
    store.close()
    with open(extent.file, "r+b") as handle:
        handle.seek(extent.offset + at)
        byte = handle.read(1)
        handle.seek(extent.offset + at)
        handle.write(bytes([byte[0] ^ 0x01]))


def _fresh_store() -> tuple[VariableStore, dict[str, object]]:
    store = VariableStore()
    calls: list[str] = []

    def never(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        calls.append("init")
        return np.full(shape, -7, dtype)

    w = store.get_variable("target", [64, 32], initializer=never)
    b = store.get_variable("bias", [32], initializer=never)
    return store, {"w": w, "b": b, "calls": calls}


def _source(path: Path) -> tuple[np.ndarray, np.ndarray]:
    w = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    b = np.linspace(0, 1, 32, dtype=np.float32)
    save(path, {"target": w, "bias": b})
    return w, b


def test_restore_into_uninitialized_variables_reads_and_initializes(ckpt: Path) -> None:
    w, b = _source(ckpt)
    store, parts = _fresh_store()
    assert store.report_uninitialized() == ["target", "bias"]
    result = restore(ckpt, store)
    assert result.restored == ["target", "bias"]
    assert store.report_uninitialized() == []
    assert parts["w"].is_initialized and not parts["w"].is_restore_pending
    np.testing.assert_array_equal(parts["w"].numpy(), w)
    np.testing.assert_array_equal(parts["b"].numpy(), b)
    assert parts["calls"] == []  # the initializer never ran


def test_corrupt_value_raises_from_restore_and_leaves_uninitialized_variables_untouched(ckpt: Path) -> None:
    _source(ckpt)
    _flip(ckpt, "bias")  # the second variable: the first one was already read when it fails
    store, parts = _fresh_store()
    with pytest.raises(ChecksumError, match=r"variable 'bias' in '.*model"):
        restore(ckpt, store)
    # all-or-nothing: neither variable got memory or a pending restore
    assert store.report_uninitialized() == ["target", "bias"]
    assert not parts["w"].is_allocated and not parts["w"].is_restore_pending
    assert not parts["b"].is_allocated and not parts["b"].is_restore_pending
    assert parts["calls"] == []


def test_lazy_restore_keeps_todays_lazy_mode(ckpt: Path) -> None:
    _source(ckpt)
    _flip(ckpt, "bias")
    store, parts = _fresh_store()
    result = restore(ckpt, store, lazy=True)
    assert result.restored == ["target", "bias"]
    assert parts["b"].is_restore_pending and store.report_uninitialized() == ["target", "bias"]
    with pytest.raises(ChecksumError, match="'bias'"):
        parts["b"].numpy()  # lazily: raised at first use
    np.testing.assert_array_equal(parts["w"].numpy()[1], np.arange(32, 64, dtype=np.float32))


def test_deferred_restore_for_variables_created_later_is_unchanged(ckpt: Path) -> None:
    w, _ = _source(ckpt)
    store = VariableStore()
    result = restore(ckpt, store)
    assert result.restored == [] and sorted(result.deferred) == ["bias", "target"]
    v = store.get_variable("target", [64, 32], initializer=lambda s, d: np.zeros(s, d))
    assert v.is_restore_pending
    np.testing.assert_array_equal(v.numpy(), w)


def _digests_on_the_way(folder: Path) -> bool:
    """Whether a read of a file just written in `folder` is checksummed on the way (a tmpfs, or cachestat(2))."""
    from varstore.checkpoint.format.checksum import crc32c_raw
    from varstore.storage.local import LocalStorage

    probe = folder / "digest-probe.bin"
    probe.write_bytes(b"x" * 8192)
    try:
        return LocalStorage().read_range_digest(str(probe), 0, 8192, bytearray(8192), crc32c_raw) is not None
    finally:
        probe.unlink()


@pytest.mark.parametrize("on_the_way", [True, False])
def test_corrupt_large_value_into_initialized_variables_is_documented_partial(
        ckpt: Path, monkeypatch: pytest.MonkeyPatch, on_the_way: bool) -> None:
    """docs/errors.md: a large damaged value in memory already (a file just written: in the page cache) is
    checksummed as it is read, piece by piece: the targets before it are new, the targets after it unchanged
    (as for a small value). Where the storage cannot checksum on the way (object storage, a disk), the helper
    thread checks it and the error is raised once all are read: every other in-place target holds its value."""
    from varstore.storage.local import LocalStorage

    if not on_the_way:
        monkeypatch.delattr(LocalStorage, "read_range_digest")  # as a storage without it
    elif not _digests_on_the_way(ckpt.parent):
        pytest.skip("no cachestat(2) (Linux 6.5+) outside a tmpfs: nothing is checksummed on the way")
    big = np.arange(1 << 19, dtype=np.float32)  # 2 MiB: two pieces of 1 MiB
    save(ckpt, {"a": np.full(8, 3, np.float32), "big": big, "c": np.full(4, 5, np.float32)})
    _flip(ckpt, "big", at=4096)
    store = VariableStore()
    a = store.get_variable("a", [8], initializer=lambda s, d: np.zeros(s, d)).initialize()
    g = store.get_variable("big", [1 << 19], initializer=lambda s, d: np.zeros(s, d)).initialize()
    c = store.get_variable("c", [4], initializer=lambda s, d: np.zeros(s, d)).initialize()
    with pytest.raises(ChecksumError, match="'big'"):
        restore(ckpt, store)
    assert a.numpy().tolist() == [3.0] * 8 and c.numpy().tolist() == [0.0 if on_the_way else 5.0] * 4
    # filled in place: the damaged variable holds the bytes as read, one bit off at element 1024
    assert g.numpy()[0] == big[0] and g.numpy()[1024] != big[1024]
    np.testing.assert_array_equal(np.delete(g.numpy(), 1024), np.delete(big, 1024))
    assert store.report_uninitialized() == []


def test_corrupt_small_value_into_initialized_variables_stops_there(ckpt: Path) -> None:
    """docs/errors.md: a small own-array value is checked as it is read: targets after it keep their values."""
    save(ckpt, {"a": np.full(8, 3, np.float32), "b": np.arange(16, dtype=np.float32),
                "c": np.full(4, 5, np.float32)})
    _flip(ckpt, "b", at=0)
    store = VariableStore()
    a = store.get_variable("a", [8], initializer=lambda s, d: np.zeros(s, d)).initialize()
    b = store.get_variable("b", [16], initializer=lambda s, d: np.zeros(s, d)).initialize()
    c = store.get_variable("c", [4], initializer=lambda s, d: np.zeros(s, d)).initialize()
    with pytest.raises(ChecksumError, match="'b'"):
        restore(ckpt, store)
    assert a.numpy().tolist() == [3.0] * 8
    assert b.numpy()[1:].tolist() == list(range(1, 16)) and b.numpy()[0] != 0.0  # damaged bytes as read
    assert c.numpy().tolist() == [0.0] * 4  # not reached


def test_mixed_restore_failing_in_place_leaves_uninitialized_variables_untouched(ckpt: Path) -> None:
    save(ckpt, {"fresh": np.full(8, 3, np.float32), "held": np.arange(16, dtype=np.float32)})
    _flip(ckpt, "held", at=0)
    store = VariableStore()
    fresh = store.get_variable("fresh", [8], initializer=lambda s, d: np.zeros(s, d))
    store.get_variable("held", [16], initializer=lambda s, d: np.zeros(s, d)).initialize()
    with pytest.raises(ChecksumError, match="'held'"):
        restore(ckpt, store)
    assert not fresh.is_allocated and not fresh.is_restore_pending
    assert store.report_uninitialized() == ["fresh"]


def _packed_source(path: Path) -> dict[str, np.ndarray]:
    values = {f"slot/{i:02d}": np.arange(i, i + 6, dtype=np.float32).reshape(2, 3) for i in range(12)}
    values["count"] = np.array(41, dtype=np.int64)  # a scalar: a 0-d view of the blob
    values["big"] = np.arange(1 << 19, dtype=np.float32)  # 2 MiB: its own dataset / array
    save(path, values, layout="packed")
    return values


def _never_store(values: dict[str, np.ndarray]) -> tuple[VariableStore, dict[str, object], list[str]]:
    store, calls = VariableStore(), []

    def never(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        calls.append("init")
        return np.zeros(shape, dtype)

    made = {name: store.get_variable(name, list(value.shape), dtype=value.dtype, initializer=never)
            for name, value in values.items()}
    return store, made, calls


def test_packed_values_into_uninitialized_variables_are_own_copies(ckpt: Path) -> None:
    values = _packed_source(ckpt)
    with open_checkpoint(ckpt) as reader:
        assert reader.record("slot/03").path is None and reader.record("big").path is not None  # packed / own
    store, made, calls = _never_store(values)
    restore(ckpt, store)
    assert calls == [] and store.report_uninitialized() == []
    for name, value in values.items():
        got = made[name].numpy()
        np.testing.assert_array_equal(got, value)
        assert got.dtype == value.dtype and got.shape == value.shape
    buffers = [made[name]._state.buffer for name in values if name != "big"]
    # each owns its memory: no variable keeps the packed blob (or a neighbour) alive
    assert all(owns_memory(b) and b.flags.c_contiguous and b.flags.writeable for b in buffers)
    made["slot/04"].assign(np.full((2, 3), -1, np.float32))
    np.testing.assert_array_equal(made["slot/05"].numpy(), values["slot/05"])


def test_damaged_packed_value_leaves_uninitialized_variables_untouched(ckpt: Path) -> None:
    values = _packed_source(ckpt)
    flip_packed(ckpt, "slot/07")
    store, made, calls = _never_store(values)
    with pytest.raises(ChecksumError, match=r"variable 'slot/07' in '.*model"):
        restore(ckpt, store)
    assert not any(v.is_allocated or v.is_restore_pending for v in made.values())
    assert calls == [] and len(store.report_uninitialized()) == len(values)


def test_damaged_large_value_leaves_uninitialized_packed_variables_untouched(ckpt: Path) -> None:
    values = _packed_source(ckpt)
    _flip(ckpt, "big", at=4096)
    store, made, calls = _never_store(values)
    with pytest.raises(ChecksumError, match="'big'"):
        restore(ckpt, store)
    assert not any(v.is_allocated or v.is_restore_pending for v in made.values())
    assert calls == []


def test_packed_shape_mismatch_into_uninitialized_variables_names_it_and_changes_nothing(ckpt: Path) -> None:
    values = _packed_source(ckpt)
    store, made, _ = _never_store({**values, "slot/02": np.zeros((3, 2), np.float32)})
    with pytest.raises(ValueError, match="slot/02"):
        restore(ckpt, store)
    assert not any(v.is_allocated or v.is_restore_pending for v in made.values())


def test_packed_values_replace_a_pending_lazy_restore_in_place(ckpt: Path, tmp_path: Path) -> None:
    values = _packed_source(ckpt)
    other = tmp_path / f"other{ckpt.suffix}"
    save(other, {name: np.zeros_like(value) for name, value in values.items()}, layout="packed")
    store, made, calls = _never_store(values)
    slot = made["slot/03"]
    slot.assign(np.ones((2, 3), np.float32))
    pointer = slot._state.buffer.ctypes.data
    restore(other, store, lazy=True)
    assert slot.is_allocated and slot.is_restore_pending
    restore(ckpt, store)  # eager: the packed value replaces the pending one, in the same buffer
    assert not slot.is_restore_pending and slot._state.buffer.ctypes.data == pointer
    np.testing.assert_array_equal(slot.numpy(), values["slot/03"])
    assert calls == [] and store.report_uninitialized() == []
