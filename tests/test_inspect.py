"""varstore.inspect: variable_stats, diff_checkpoints, scope_tree."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo, checked_out
from varstore.dtypes import as_dtype, bfloat16, dtype_name
from varstore.errors import UnsupportedDtypeError
from varstore.inspect import (
    CheckpointDiff,
    DtypeChange,
    ShapeChange,
    ValueDifference,
    diff_checkpoints,
    scope_tree,
    variable_stats,
)


class MemoryReader(CheckpointReader):
    """A CheckpointReader over a dict of arrays, counting reads (to check streaming)."""

    format = "memory"

    def __init__(self, arrays: dict[str, Any]) -> None:
        super().__init__(Path("memory"))
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self.reads: list[str] = []

    def keys(self) -> list[str]:
        return list(self.arrays)

    def info(self, name: str) -> VariableInfo:
        a = self.arrays[name]
        return VariableInfo(name, tuple(a.shape), dtype_name(a.dtype), a.nbytes)

    def read(self, name: str, out: Any = None) -> Any:
        self.reads.append(name)
        a = self.arrays[name]
        result = checked_out(name, a.shape, a.dtype, out)
        result[...] = a
        return result


# ---------------------------------------------------------------- variable_stats
def test_float_stats_skip_nan_and_inf_and_count_them():
    x = np.array([1.0, -2.0, np.nan, np.inf, 0.0, 4.0, -np.inf], dtype=np.float32)
    s = variable_stats(x)
    assert (s.kind, s.dtype, s.count) == ("float", "float32", 7)
    assert (s.min, s.max) == (-2.0, 4.0)
    assert s.mean == pytest.approx(0.75)
    assert s.std == pytest.approx(np.std([1.0, -2.0, 0.0, 4.0]))
    assert (s.nan_count, s.inf_count, s.zeros) == (1, 2, 1)


def test_chunked_stats_match_numpy_in_float64():
    x = np.random.default_rng(7).standard_normal((301, 17)).astype(np.float32) * 3 + 5
    s = variable_stats(x, chunk_elements=64)  # 80 chunks, the last one short
    wide = x.astype(np.float64)
    assert s.mean == pytest.approx(wide.mean(), rel=1e-12)
    assert s.std == pytest.approx(wide.std(), rel=1e-12)
    assert (s.min, s.max) == (float(x.min()), float(x.max()))


def test_chunked_stats_do_not_copy_the_whole_variable():
    # 2**21 float32 elements = 8 MiB; a float64 copy would be 16 MiB. tracemalloc sees numpy buffers.
    import tracemalloc

    x = np.ones(1 << 21, dtype=np.float32)
    tracemalloc.start()
    variable_stats(x, chunk_elements=1 << 16)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * (1 << 20), peak  # a few chunks of 512 KiB, not 16 MiB


def test_int_stats_are_exact_python_ints():
    x = np.array([2**62, -5, 0, 0], dtype=np.int64)
    s = variable_stats(x)
    assert s.kind == "int" and s.min == -5 and s.max == 2**62 and isinstance(s.max, int)
    assert (s.nan_count, s.inf_count, s.zeros) == (None, None, 2)


def test_bool_stats_give_fraction_true():
    s = variable_stats(np.array([True, False, True, True]))
    assert (s.kind, s.min, s.max, s.zeros) == ("bool", 0, 1, 1)
    assert s.mean == 0.75 and s.nan_count is None


def test_bfloat16_stats():
    s = variable_stats(np.array([1.5, -3.0, 0.0], dtype=bfloat16))
    assert (s.dtype, s.kind, s.min, s.max, s.zeros) == ("bfloat16", "float", -3.0, 1.5, 1)


def test_complex_stats_use_magnitude():
    s = variable_stats(np.array([3 + 4j, 0, complex(np.nan, 1), complex(np.inf, 0)], dtype=np.complex64))
    assert (s.kind, s.min, s.max, s.nan_count, s.inf_count, s.zeros) == ("complex", 0.0, 5.0, 1, 1, 1)
    assert s.mean == 2.5


def test_string_stats_count_empty_strings_only():
    s = variable_stats(np.array([b"ab", b"", b"c"]))
    assert (s.kind, s.dtype, s.count, s.zeros) == ("string", "S2", 3, 1)
    assert s.min is None and s.mean is None and s.nan_count is None
    assert variable_stats(np.array(["x", ""])).dtype == "U1"


def test_scalar_and_empty_stats():
    s = variable_stats(np.float64(2.5))
    assert (s.count, s.min, s.max, s.mean, s.std) == (1, 2.5, 2.5, 2.5, 0.0)
    e = variable_stats(np.zeros((0, 4), np.float32))
    assert (e.count, e.min, e.mean, e.nan_count) == (0, None, None, 0)


def test_all_nan_has_no_min():
    s = variable_stats(np.full(3, np.nan))
    assert (s.min, s.max, s.mean, s.nan_count) == (None, None, None, 3)


def test_object_arrays_are_refused():
    with pytest.raises(UnsupportedDtypeError, match="object"):
        variable_stats(np.array([1, "a"], dtype=object))


def test_stats_to_json_spells_non_finite_as_strings():
    s = variable_stats(np.array([np.inf, 1.0]))
    doc = s.to_json()
    assert doc == {"dtype": "float64", "kind": "float", "count": 2, "min": 1.0, "max": 1.0, "mean": 1.0,
                   "std": 0.0, "nan_count": 0, "inf_count": 1, "zeros": 0}
    json.dumps(doc, allow_nan=False)


@given(hnp.arrays(st.sampled_from([np.float16, np.float32, np.float64]), hnp.array_shapes(min_dims=0, max_side=40),
                  elements=st.floats(-1e4, 1e4, width=16)),
       st.integers(1, 50))
def test_stats_match_numpy_for_any_chunking(x, chunk):
    s = variable_stats(x, chunk_elements=chunk)
    wide = x.astype(np.float64).reshape(-1)
    assert s.count == wide.size
    assert s.min == float(wide.min()) and s.max == float(wide.max())
    assert s.mean == pytest.approx(wide.mean(), rel=1e-9, abs=1e-9)
    assert s.std == pytest.approx(wide.std(), rel=1e-6, abs=1e-6)
    assert s.zeros == int(np.count_nonzero(wide == 0))


# ---------------------------------------------------------------- diff_checkpoints
def _pair() -> tuple[MemoryReader, MemoryReader]:
    a = MemoryReader({
        "same": np.arange(6, dtype=np.float32),
        "gone": np.zeros(2),
        "reshaped": np.zeros((2, 3)),
        "retyped": np.array([1, 2, 3], dtype=np.int32),
        "changed": np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32),
        "nan_same": np.array([np.nan, 1.0]),
        "text": np.array([b"a", b"b"]),
    })
    b = MemoryReader({
        "same": np.arange(6, dtype=np.float32),
        "reshaped": np.zeros((3, 2)),
        "retyped": np.array([1, 2, 3], dtype=np.int64),
        "changed": np.array([1.0, 2.5, 3.0, 4.0001], dtype=np.float32),
        "nan_same": np.array([np.nan, 1.0]),
        "text": np.array([b"a", b"c"]),
        "new": np.ones(1),
    })
    return a, b


def test_diff_reports_every_kind_of_change():
    a, b = _pair()
    d = diff_checkpoints(a, b)
    assert d.added == ("new",)
    assert d.removed == ("gone",)
    assert d.shape_changed == (ShapeChange("reshaped", (2, 3), (3, 2)),)
    assert d.dtype_changed == (DtypeChange("retyped", "int32", "int64"),)
    changed, text = d.values_differ
    assert (changed.name, changed.count, changed.mismatched) == ("changed", 4, 2)
    assert changed.max_abs_diff == pytest.approx(0.5)
    assert changed.max_rel_diff == pytest.approx(0.2)
    assert text == ValueDifference("text", 2, 1, None, None)
    assert d.equal == ("same", "nan_same")
    assert d.differs


def test_diff_tolerance_follows_math_isclose():
    a, b = _pair()
    d = diff_checkpoints(a, b, rtol=1e-3, names=["changed", "same"])
    assert [v.name for v in d.values_differ] == ["changed"]
    assert d.values_differ[0].mismatched == 1  # 4.0 vs 4.0001 is within rtol, 2.0 vs 2.5 is not
    d = diff_checkpoints(a, b, atol=0.6, names=["changed"])
    assert d.equal == ("changed",) and not d.differs and d.atol == 0.6


def test_diff_of_equal_checkpoints_reads_each_pair_once():
    a, _ = _pair()
    b = MemoryReader(dict(a.arrays))
    d = diff_checkpoints(a, b)
    assert not d.differs and d.equal == tuple(a.keys())
    assert a.reads == list(a.keys()) and b.reads == list(a.keys())


def test_diff_skips_reads_when_shapes_differ():
    a, b = _pair()
    diff_checkpoints(a, b, names=["reshaped"])
    assert a.reads == [] and b.reads == []


def test_diff_nan_against_number_is_infinite():
    a = MemoryReader({"x": np.array([np.nan, 1.0, np.inf])})
    b = MemoryReader({"x": np.array([0.0, 1.0, np.inf])})
    (v,) = diff_checkpoints(a, b).values_differ
    assert (v.mismatched, v.max_abs_diff, v.max_rel_diff) == (1, math.inf, math.inf)
    assert v.to_json()["max_abs_diff"] == "inf"


def test_diff_negative_tolerance_is_refused():
    a, b = _pair()
    with pytest.raises(ValueError, match="rtol=-1"):
        diff_checkpoints(a, b, rtol=-1)


def test_diff_to_json():
    a, b = _pair()
    doc = diff_checkpoints(a, b, names=["reshaped", "new", "same"]).to_json()
    assert doc == {"differs": True, "rtol": 0.0, "atol": 0.0, "added": ["new"], "removed": [],
                   "shape_changed": [{"name": "reshaped", "shape_a": [2, 3], "shape_b": [3, 2]}],
                   "dtype_changed": [], "values_differ": [], "equal": ["same"]}
    assert CheckpointDiff().differs is False


def test_diff_complex_and_bool_values():
    a = MemoryReader({"c": np.array([1 + 1j, 2j], np.complex64), "flag": np.array([True, False])})
    b = MemoryReader({"c": np.array([1 + 1j, 3j], np.complex64), "flag": np.array([True, True])})
    c, flag = diff_checkpoints(a, b).values_differ
    assert (c.name, c.mismatched, c.max_abs_diff) == ("c", 1, 1.0)
    assert (flag.name, flag.mismatched, flag.max_abs_diff) == ("flag", 1, 1.0)


# ---------------------------------------------------------------------- scope_tree
def test_scope_tree_totals_per_scope():
    infos = [VariableInfo("enc/dense/kernel", (4, 3), "float32", 48),
             VariableInfo("enc/dense/bias", (3,), "float32", 12),
             VariableInfo("enc", (2,), "int64", 16),  # both a variable and a scope
             VariableInfo("head/w", (), "float64", 8)]
    root = scope_tree(infos)
    assert (root.variables, root.nbytes, root.elements) == (4, 84, 18)
    enc, head = root.children
    assert (enc.path, enc.is_variable, enc.variables, enc.nbytes) == ("enc", True, 3, 76)
    assert enc.variable == infos[2]
    (dense,) = enc.children
    assert [c.name for c in dense.children] == ["bias", "kernel"]
    assert (head.variables, head.elements) == (1, 1)
    assert [(d, n.path) for d, n in root.walk()] == [
        (0, ""), (1, "enc"), (2, "enc/dense"), (3, "enc/dense/bias"), (3, "enc/dense/kernel"),
        (1, "head"), (2, "head/w")]


def test_scope_tree_from_bare_names():
    root = scope_tree(["a/b", "a/c", "d"])
    assert root.variables == 3 and root.nbytes == 0
    doc = root.to_json()
    assert doc["children"][0]["path"] == "a" and doc["children"][0]["variables"] == 2
    assert doc["children"][1] == {"name": "d", "path": "d", "is_variable": True, "variables": 1, "nbytes": 0,
                                  "elements": 0, "variable": None, "children": []}


def test_as_dtype_names_round_trip_for_memory_reader():
    # the MemoryReader above relies on dtype_name/as_dtype agreeing
    assert as_dtype(dtype_name(bfloat16)) == bfloat16


# ------------------------------------------------------------ on real checkpoint files
def _save(path: Path, arrays: dict[str, Any]) -> Path:
    from varstore import save

    save(path, arrays)
    return path


def test_diff_checkpoints_opens_and_closes_paths(tmp_path):
    a = _save(tmp_path / "a.h5", {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3)})
    b = _save(tmp_path / "b.zarr", {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([0, 0, 1e-9])})
    d = diff_checkpoints(a, b)
    assert d.equal == ("w",)
    assert [v.name for v in d.values_differ] == ["b"] and d.values_differ[0].max_abs_diff == 1e-9
    assert diff_checkpoints(str(a), str(b), atol=1e-8).differs is False


def test_stats_of_a_tf_fixture_variable_match_the_manifest(fixtures_dir):
    from varstore import open_checkpoint

    manifest = json.loads((fixtures_dir / "tf1_scopes" / "model.ckpt.manifest.json").read_text())
    expected = {v["name"]: v for v in manifest["variables"]}["zoo/f64"]["values"]
    with open_checkpoint(fixtures_dir / "tf1_scopes" / "model.ckpt") as reader:
        s = variable_stats(reader["zoo/f64"])
    flat = np.array(expected, dtype=np.float64).reshape(-1)
    assert (s.count, s.min, s.max) == (6, flat.min(), flat.max())
    assert s.mean == pytest.approx(flat.mean()) and s.std == pytest.approx(flat.std())


def test_diff_compares_large_ints_exactly():
    a = MemoryReader({"n": np.array([2**62, 5], np.int64)})
    b = MemoryReader({"n": np.array([2**62 + 1, 5], np.int64)})  # equal once rounded to float64
    (v,) = diff_checkpoints(a, b).values_differ
    assert v.mismatched == 1


def test_diff_streams_in_chunks_with_nan_and_strings():
    x = np.arange(1000, dtype=np.float32)
    y = x.copy()
    x[10] = y[10] = np.nan
    y[999] = 0.0
    a = MemoryReader({"x": x, "s": np.array([b"a", b"b", b"c"])})
    b = MemoryReader({"x": y, "s": np.array([b"a", b"b", b"d"])})
    d = diff_checkpoints(a, b, chunk_elements=7)
    assert [(v.name, v.mismatched, v.max_abs_diff) for v in d.values_differ] == [("x", 1, 999.0), ("s", 1, None)]
