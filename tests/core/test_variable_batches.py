"""host_views and restore_many (varstore/store/variable_batches.py): the batch hooks for many small variables."""

from __future__ import annotations

import numpy as np
import pytest

from varstore.errors import DtypeMismatchError, ShapeMismatchError
from varstore.store.scopes import VariableStore
from varstore.store.variable_batches import host_views, mismatched, restore_many


def _store(count: int = 5) -> tuple[VariableStore, list]:
    store = VariableStore()
    variables = [store.get_variable(f"small/v{i}", shape=(3,), dtype=np.float32,
                                    initializer=lambda shape, dtype, i=i: np.full(shape, i, dtype))
                 for i in range(count)]
    return store, variables


def test_host_views_match_host_view_and_are_read_only() -> None:
    _, variables = _store()
    views = host_views(variables)
    assert [v.tolist() for v in views] == [[float(i)] * 3 for i in range(5)]
    assert all(not v.flags.writeable for v in views)
    variables[2].assign([7, 8, 9])
    assert views[2].tolist() == [7.0, 8.0, 9.0]  # a view of the live buffer, not a copy


def test_host_views_read_write_false_gives_live_buffers() -> None:
    _, variables = _store(2)
    buffers = host_views(variables, read_only=False)
    assert buffers[1].tolist() == [1.0, 1.0, 1.0]


def test_restore_many_copies_into_existing_buffers() -> None:
    _, variables = _store(3)
    host_views(variables)  # materialize
    pointers = [v.host_view().ctypes.data for v in variables]
    blob = np.arange(9, dtype=np.float32)
    restore_many(variables, list(blob.reshape(3, 3)))
    assert [v.numpy().tolist() for v in variables] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert [v.host_view().ctypes.data for v in variables] == pointers
    blob[:] = -1  # no variable aliases the blob
    assert variables[0].numpy().tolist() == [0, 1, 2]


def test_restore_many_casts_same_kind_and_fills_unmaterialized_without_initializer() -> None:
    store = VariableStore()
    calls = []
    v = store.get_variable("w", shape=(2,), dtype=np.float64,
                           initializer=lambda shape, dtype: calls.append(1) or np.zeros(shape, dtype))
    restore_many([v], [np.array([1.5, 2.5], np.float32)])
    assert v.numpy().tolist() == [1.5, 2.5] and v.dtype == np.float64 and calls == []


def test_restore_many_gives_unmaterialized_variables_own_copies_of_blob_views() -> None:
    store = VariableStore()
    variables = [store.get_variable(f"p/v{i}", shape=(2, 2), dtype=np.float32) for i in range(3)]
    scalar = store.get_variable("p/step", shape=(), dtype=np.int64)
    blob = np.arange(12, dtype=np.float32)
    step = np.arange(3, dtype=np.int64)[1:2].reshape(())  # a 0-d view, as packed scalars are
    for adopt in (False, True):
        restore_many(variables + [scalar], list(blob.reshape(3, 2, 2)) + [step], adopt=adopt)
        buffers = [v._state.buffer for v in variables + [scalar]]
        assert all(type(b) is np.ndarray and b.flags.owndata and b.flags.c_contiguous for b in buffers)
        assert [v.numpy().ravel().tolist() for v in variables] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        assert scalar.numpy().shape == () and int(scalar.numpy()) == 1 and scalar.dtype == np.int64
        blob[:] = -1  # no variable aliases the blob
        assert variables[1].numpy().ravel().tolist() == [4, 5, 6, 7]
        blob[:] = np.arange(12)
        for v in variables + [scalar]:
            v._state.buffer = None  # back to no memory for the second pass


def test_restore_many_validates_everything_first() -> None:
    _, variables = _store(3)
    host_views(variables)
    good = np.ones(3, np.float32)
    with pytest.raises(ShapeMismatchError, match="small/v2"):
        restore_many(variables, [good, good, np.ones(4, np.float32)])
    assert variables[0].numpy().tolist() == [0.0, 0.0, 0.0]  # nothing changed
    with pytest.raises(DtypeMismatchError, match="small/v1"):
        restore_many(variables, [good, np.ones(3, np.complex64), good])
    with pytest.raises(ValueError):
        restore_many(variables, [good])


def test_mismatched_names_the_pairs_that_differ_in_shape_or_dtype_only() -> None:
    _, variables = _store(5)
    equal_dtype = np.dtype(np.float32).newbyteorder("<")  # == float32, another object: no mismatch
    values = [np.ones(3, np.float32), np.ones(4, np.float32), np.ones(3, np.float64),
              np.ones(3, np.float32).view(equal_dtype), np.ones((3, 1), np.float32)]
    assert mismatched(variables, values) == [1, 2, 4]
    assert mismatched(variables, [np.ones(3, np.float32)] * 5) == []


def test_initializer_result_is_adopted_only_when_nobody_else_holds_it() -> None:
    store = VariableStore()
    shared = np.ones(3, np.float32)
    a = store.get_variable("a", shape=(3,), dtype=np.float32, initializer=lambda shape, dtype: shared)
    a.assign_add(1.0)
    assert shared.tolist() == [1.0, 1.0, 1.0] and a.numpy().tolist() == [2.0, 2.0, 2.0]


def test_the_engine_still_imports_the_batch_hooks_from_varstore_variables() -> None:
    """checkpoint/write/writer.py and checkpoint/read/restoration.py import these names from their old home (a re-export)."""
    from varstore.store import value_sources
    from varstore.store import values
    from varstore.store import variable_batches
    from varstore.store import variables

    assert variables.host_views is variable_batches.host_views
    assert variables.restore_many is variable_batches.restore_many
    assert variables.check_restorable is value_sources.check_restorable
    assert variables.ValueSource is value_sources.ValueSource
    assert variables.convert_value is values.convert_value
