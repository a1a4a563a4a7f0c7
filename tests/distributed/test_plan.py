"""Collective save / restore plans: every byte written once, every rank reads exactly what it holds, N ranks -> M ranks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import varstore as vs
from varstore.distributed import VariableLayout, byte_runs, layouts_of, plan_restore, plan_save


def build_job(ranks: int, parts: int | None) -> vs.VariableStore:
    """The issue's model: a partitioned embedding and a kernel on ps tasks (one per rank), a replicated step and bias."""
    store = vs.VariableStore()
    with vs.device(vs.replica_device_setter(ps_tasks=ranks)):
        with store.variable_scope("model"):
            store.get_variable("embedding", [11, 3],
                               partitioner=None if parts is None else vs.fixed_size_partitioner(parts))
            store.get_variable("dense/kernel", [3, 2])
    store.get_variable("global_step", [], dtype=np.int64, trainable=False)
    store.get_variable("bias", [20, 5])  # replicated, split over ranks when split_bytes is small
    return store


def global_values(layouts):
    rng = np.random.default_rng(0)
    arrays = {}
    for layout in layouts:
        if layout.array not in arrays:
            arrays[layout.array] = rng.standard_normal(layout.array_shape).astype(layout.dtype)
    return arrays


def simulate_save(layouts, world_size, values, split_bytes):
    plan = plan_save(layouts, world_size, split_bytes=split_bytes)
    files = {name: np.zeros(spec.shape, dtype=spec.dtype) for name, spec in plan.arrays.items()}
    written = {name: np.zeros(spec.shape, dtype=np.int64) for name, spec in plan.arrays.items()}
    by_name = {layout.name: layout for layout in layouts}
    for write in plan.writes:
        layout = by_name[write.variable]
        assert layout.owner in (None, write.rank), "only the owner writes an owned variable"
        variable_value = values[layout.array][tuple(slice(o, o + n) for o, n in zip(layout.offset, layout.shape))]
        files[write.array][write.array_index] = variable_value[write.variable_index]
        written[write.array][write.array_index] += 1
    for name in files:
        assert (written[name] == 1).all(), f"{name}: every element exactly once"
    return plan, files


@pytest.mark.parametrize("saving, restoring", list(itertools.product([1, 2, 3, 4], repeat=2)))
def test_a_checkpoint_saved_by_n_ranks_restores_on_m_ranks(saving, restoring):
    save_layouts = layouts_of(build_job(saving, parts=saving))
    values = global_values(save_layouts)
    plan, files = simulate_save(save_layouts, saving, values, split_bytes=64)
    assert sorted(plan.arrays) == ["bias", "global_step", "model/dense/kernel", "model/embedding"]
    assert plan.arrays["model/embedding"].shape == (11, 3)
    restore_layouts = layouts_of(build_job(restoring, parts=None if restoring == 3 else restoring + 1))
    saved = {name: (array.shape, vs.dtypes.dtype_name(array.dtype)) for name, array in files.items()}
    for rank in range(restoring):
        restore = plan_restore(saved, restore_layouts, rank)
        assert restore.missing == () and restore.unexpected == ()
        held = {l.name for l in restore_layouts if l.owner in (None, rank)}
        assert {r.variable for r in restore.reads} == held
        for read in restore.reads:
            layout = next(l for l in restore_layouts if l.name == read.variable)
            expected = values[layout.array][tuple(slice(o, o + n) for o, n in zip(layout.offset, layout.shape))]
            np.testing.assert_array_equal(files[read.array][read.array_index], expected)


def test_owners_write_their_parts_and_replicated_work_is_spread():
    layouts = layouts_of(build_job(2, parts=4))
    plan = plan_save(layouts, 2, split_bytes=64)
    parts = [(w.rank, w.offset, w.shape) for w in plan.writes if w.array == "model/embedding"]
    # parts 0..3 of 11 rows: 3,3,3,2 rows, round robin over ps tasks 0,1,0,1
    assert parts == [(0, (0, 0), (3, 3)), (1, (3, 0), (3, 3)), (0, (6, 0), (3, 3)), (1, (9, 0), (2, 3))]
    bias = [(w.rank, w.offset, w.shape) for w in plan.writes if w.array == "bias"]
    assert bias == [(0, (0, 0), (10, 5)), (1, (10, 0), (10, 5))]
    assert plan.arrays["bias"].chunks == (10, 5)
    assert plan.arrays["model/embedding"].chunks == (1, 3)  # boundaries 3, 6, 9, 11: gcd 1
    assert sum(plan.bytes_per_rank()) == (33 + 6 + 100) * 4 + 8


def test_small_replicated_variables_go_whole_to_the_least_loaded_rank():
    layouts = [VariableLayout(f"v{i}", (4,), "float32", None, f"v{i}", (4,), (0,)) for i in range(4)]
    layouts.append(VariableLayout("owned", (8,), "float32", 0, "owned", (8,), (0,)))
    plan = plan_save(layouts, 2)
    assert {w.variable: w.rank for w in plan.writes} == {"owned": 0, "v0": 1, "v1": 1, "v2": 0, "v3": 1}
    assert plan.bytes_per_rank() == [48, 48]


def test_parts_that_do_not_tile_their_variable_are_refused():
    layouts = [VariableLayout("e/part_0", (2, 3), "float32", 0, "e", (5, 3), (0, 0)),
               VariableLayout("e/part_1", (2, 3), "float32", 1, "e", (5, 3), (3, 0))]
    with pytest.raises(vs.PartitionError, match="cover 12 of its 15 elements"):
        plan_save(layouts, 2)


def test_restore_plan_checks_shapes_and_reports_missing_and_unexpected():
    layouts = layouts_of(build_job(2, parts=2))
    saved = {"model/embedding": ((11, 3), "float32"), "model/dense/kernel": ((3, 2), "float32"),
             "global_step": ((), "int64"), "old/thing": ((1,), "float32")}
    plan = plan_restore(saved, layouts, 1)
    assert plan.missing == ("bias",) and plan.unexpected == ("old/thing",)
    assert [(r.variable, r.offset) for r in plan.reads] == [("model/embedding/part_1", (6, 0)), ("global_step", ())]
    with pytest.raises(vs.ShapeMismatchError, match=r"partitioned variable 'model/embedding' \(part 'model/embedding/part_0'\).*\(12, 3\)"):
        plan_restore(dict(saved, **{"model/embedding": ((12, 3), "float32")}), layouts, 0)
    with pytest.raises(vs.DtypeMismatchError, match="complex64"):
        plan_restore(dict(saved, **{"model/dense/kernel": ((3, 2), "complex64")}), layouts, 0)


def test_byte_runs_of_regions():
    assert byte_runs((10, 4), (4, 0), (3, 4), 4) == [(64, 48)]
    assert byte_runs((2, 6), (0, 2), (2, 3), 2) == [(4, 6), (16, 6)]
    assert byte_runs((3,), (0,), (3,), 8) == [(0, 24)]
    assert byte_runs((), (), (), 8) == [(0, 8)]
    full = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    runs = byte_runs(full.shape, (0, 1, 0), (2, 2, 4), 1)
    assert [full.reshape(-1)[s:s + n].tolist() for s, n in runs] == [full[0, 1:3].ravel().tolist(), full[1, 1:3].ravel().tolist()]
