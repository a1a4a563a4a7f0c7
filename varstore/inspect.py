"""Inspect checkpoints: per-variable statistics, checkpoint diffs, the scope tree.

The library side of `varstore show`, `varstore diff` and `varstore ls --tree`:
it returns frozen dataclasses with `to_json()` and never prints, never exits,
never imports click. Values are read one variable (or one pair) at a time
through the `CheckpointReader` interface and reduced in float64 chunks, so
memory stays near the largest variable.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from varstore.checkpoint.info import CheckpointReader, VariableInfo
from varstore.dtypes import as_dtype, dtype_name, is_floating

__all__ = [
    "VariableStats",
    "variable_stats",
    "ShapeChange",
    "DtypeChange",
    "ValueDifference",
    "CheckpointDiff",
    "diff_checkpoints",
    "ScopeNode",
    "scope_tree",
    "DEFAULT_CHUNK_ELEMENTS",
]

#: Elements reduced at once (8 MiB of float64); bounds the extra memory of stats and diffs.
DEFAULT_CHUNK_ELEMENTS = 1 << 20

Number = Union[int, float]


def _json_number(value: Number | None) -> Number | str | None:
    """JSON has no NaN/Infinity: non-finite floats become "nan", "inf", "-inf"."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _chunks(flat: npt.NDArray[Any], chunk_elements: int) -> Iterator[npt.NDArray[Any]]:
    step = max(1, int(chunk_elements))
    for start in range(0, flat.size, step):
        yield flat[start:start + step]


def _kind(dtype: np.dtype) -> str:
    if dtype.kind in "SU":
        return "string"
    if dtype.kind == "b":
        return "bool"
    if dtype.kind == "c":
        return "complex"
    if is_floating(dtype):
        return "float"
    if dtype.kind in "iu":
        return "int"
    return "other"


# ------------------------------------------------------------------ statistics
@dataclasses.dataclass(frozen=True)
class VariableStats:
    """Summary statistics of one variable's value; a field is None where it does not apply.

    Attributes:
      dtype: logical dtype name of the value ("float32", "bfloat16", "S5").
      kind: "float" (float16/32/64, bfloat16, float8), "int", "bool",
        "complex" or "string"; says which fields apply.
      count: number of elements.
      min, max: smallest and largest value. Floats: over the finite elements
        (None when there are none). Ints: exact Python ints. Bool: 0 / 1.
        Complex: of the magnitude |x| of the finite elements. Strings: None.
      mean, std: float64 mean and population standard deviation (ddof=0) over
        the same elements as min/max (bool: the fraction of True and its std).
        Strings: None.
      nan_count: elements that are NaN (complex: either part NaN); None for
        int, bool and strings, which cannot hold NaN.
      inf_count: elements that are +-inf (complex: either part inf, neither NaN);
        None where NaN does not apply.
      zeros: elements equal to zero (bool: False; strings: the empty string).
    """

    dtype: str
    kind: str
    count: int
    min: Number | None = None
    max: Number | None = None
    mean: float | None = None
    std: float | None = None
    nan_count: int | None = None
    inf_count: int | None = None
    zeros: int = 0

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (the "stats" object of `varstore show --json`).

        Non-finite numbers become the strings "nan", "inf", "-inf".
        """
        return {
            "dtype": self.dtype,
            "kind": self.kind,
            "count": self.count,
            "min": _json_number(self.min),
            "max": _json_number(self.max),
            "mean": _json_number(self.mean),
            "std": _json_number(self.std),
            "nan_count": self.nan_count,
            "inf_count": self.inf_count,
            "zeros": self.zeros,
        }


class _Moments:
    """Running count / mean / sum of squared deviations, merged per chunk (Chan et al.)."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.min: Number | None = None
        self.max: Number | None = None

    def add(self, values: npt.NDArray[np.float64]) -> None:
        n = int(values.size)
        if n == 0:
            return
        mean = float(values.mean())
        m2 = float(np.square(values - mean).sum())
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.count = total

    def add_extremes(self, low: Number, high: Number) -> None:
        self.min = low if self.min is None or low < self.min else self.min
        self.max = high if self.max is None or high > self.max else self.max

    def result(self) -> tuple[float | None, float | None]:
        if self.count == 0:
            return None, None
        return self.mean, math.sqrt(max(self.m2, 0.0) / self.count)


def variable_stats(array: npt.ArrayLike, *, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> VariableStats:
    """Computes min / max / mean / std / NaN / inf / zero counts of one value.

    The value is reduced `chunk_elements` elements at a time in float64
    (complex: complex128), so the extra memory is about `chunk_elements * 16`
    bytes however large the variable is (a 1 GB float32 variable is not copied
    to float64 as a whole). Means and variances are merged per chunk with the
    pairwise update of Chan, Golub and LeVeque, so they match
    `np.mean(x, dtype=np.float64)` / `np.std` to rounding.

    Args:
      array: any array of a dtype `varstore.dtypes.as_dtype` accepts (numeric,
        bool, bfloat16/float8, complex, fixed-length bytes or unicode), any
        shape including () and zero-size.
      chunk_elements: elements reduced at once (default 2**20).

    Returns:
      VariableStats; see its docstring for which fields apply to which dtype.

    Raises:
      UnsupportedDtypeError: object, structured or void arrays.
    """
    value = np.asarray(array)
    dtype = as_dtype(value.dtype)
    kind = _kind(dtype)
    flat = value.reshape(-1)
    count = int(flat.size)
    name = dtype_name(dtype)

    if kind == "string":
        empty = dtype.type()
        zeros = sum(int(np.count_nonzero(chunk == empty)) for chunk in _chunks(flat, chunk_elements))
        return VariableStats(dtype=name, kind=kind, count=count, zeros=zeros)

    moments = _Moments()
    zeros = 0
    nan_count = 0
    inf_count = 0
    for chunk in _chunks(flat, chunk_elements):
        if kind in ("int", "bool"):
            zeros += int(chunk.size - np.count_nonzero(chunk))
            low, high = chunk.min(), chunk.max()
            moments.add_extremes(int(low), int(high))
            moments.add(chunk.astype(np.float64))
            continue
        if kind == "complex":
            wide = chunk.astype(np.complex128)
            nan = np.isnan(wide.real) | np.isnan(wide.imag)
            inf = ~nan & (np.isinf(wide.real) | np.isinf(wide.imag))
            zeros += int(np.count_nonzero(wide == 0))
            finite = np.abs(wide[~(nan | inf)])
        else:
            wide = chunk.astype(np.float64)
            nan = np.isnan(wide)
            inf = np.isinf(wide)
            zeros += int(np.count_nonzero(wide == 0))
            finite = wide[~(nan | inf)]
        nan_count += int(np.count_nonzero(nan))
        inf_count += int(np.count_nonzero(inf))
        if finite.size:
            moments.add_extremes(float(finite.min()), float(finite.max()))
            moments.add(finite)

    mean, std = moments.result()
    applies_nan = kind in ("float", "complex")
    return VariableStats(
        dtype=name, kind=kind, count=count, min=moments.min, max=moments.max, mean=mean, std=std,
        nan_count=nan_count if applies_nan else None, inf_count=inf_count if applies_nan else None,
        zeros=zeros)


# ------------------------------------------------------------------------ diff
@dataclasses.dataclass(frozen=True)
class ShapeChange:
    """A variable present in both checkpoints with different shapes."""

    name: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape_a": list(self.shape_a), "shape_b": list(self.shape_b)}


@dataclasses.dataclass(frozen=True)
class DtypeChange:
    """A variable present in both checkpoints with different logical dtypes."""

    name: str
    dtype_a: str
    dtype_b: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype_a": self.dtype_a, "dtype_b": self.dtype_b}


@dataclasses.dataclass(frozen=True)
class ValueDifference:
    """A variable whose values differ beyond the tolerance.

    Attributes:
      name: the variable's name.
      count: elements compared.
      mismatched: elements where |a - b| > atol + rtol * max(|a|, |b|), or
        where exactly one side is NaN, or where infinities differ.
      max_abs_diff: largest |a - b| over the elements both sides hold finite
        (inf when a finite value faces an infinity or NaN faces a number;
        None for strings, which have no distance).
      max_rel_diff: largest |a - b| / max(|a|, |b|) over the same elements
        (0 where both are 0); None for strings.
    """

    name: str
    count: int
    mismatched: int
    max_abs_diff: float | None
    max_rel_diff: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "count": self.count,
            "mismatched": self.mismatched,
            "max_abs_diff": _json_number(self.max_abs_diff),
            "max_rel_diff": _json_number(self.max_rel_diff),
        }


@dataclasses.dataclass(frozen=True)
class CheckpointDiff:
    """What differs between checkpoint A and checkpoint B, name by name.

    Attributes:
      added: names in B only, in B's order.
      removed: names in A only, in A's order.
      shape_changed: names in both whose shapes differ (values not compared).
      dtype_changed: names in both whose dtypes differ. When the shapes agree
        and both dtypes are numeric, the values are still compared (after
        casting to float64) and may also appear in `values_differ` or `equal`.
      values_differ: names in both whose values differ beyond the tolerance.
      equal: names in both with equal shapes, equal dtypes and values within
        the tolerance.
      rtol, atol: the tolerances used (math.isclose's symmetric rule).
    """

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    shape_changed: tuple[ShapeChange, ...] = ()
    dtype_changed: tuple[DtypeChange, ...] = ()
    values_differ: tuple[ValueDifference, ...] = ()
    equal: tuple[str, ...] = ()
    rtol: float = 0.0
    atol: float = 0.0

    @property
    def differs(self) -> bool:
        """True when anything was added, removed, reshaped, retyped or changed value."""
        return bool(self.added or self.removed or self.shape_changed or self.dtype_changed
                    or self.values_differ)

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (the body of `varstore diff --json`)."""
        return {
            "differs": self.differs,
            "rtol": self.rtol,
            "atol": self.atol,
            "added": list(self.added),
            "removed": list(self.removed),
            "shape_changed": [c.to_json() for c in self.shape_changed],
            "dtype_changed": [c.to_json() for c in self.dtype_changed],
            "values_differ": [d.to_json() for d in self.values_differ],
            "equal": list(self.equal),
        }


def _open(checkpoint: CheckpointReader | os.PathLike[str] | str) -> tuple[CheckpointReader, bool]:
    if isinstance(checkpoint, CheckpointReader):
        return checkpoint, False
    from varstore.convert import open_checkpoint  # convert sits above checkpoint; import late

    return open_checkpoint(Path(checkpoint)), True


def _compare_values(name: str, a: npt.NDArray[Any], b: npt.NDArray[Any], rtol: float, atol: float,
                    chunk_elements: int) -> ValueDifference | None:
    """None when equal within tolerance, else the difference (arrays of one shape), chunk by chunk."""
    count = int(a.size)
    kinds = {_kind(a.dtype), _kind(b.dtype)}
    if "string" in kinds and kinds != {"string"}:
        return ValueDifference(name, count, count, None, None)
    integral = kinds <= {"int", "bool"}  # compared exactly in their own dtypes, not in float64
    tolerant = rtol > 0 or atol > 0
    wide = np.complex128 if "complex" in kinds else np.float64
    same_dtype = a.dtype == b.dtype
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    mismatched = 0
    max_abs = 0.0
    max_rel = 0.0
    step = max(1, int(chunk_elements))
    for start in range(0, count, step):
        xa, xb = flat_a[start:start + step], flat_b[start:start + step]
        if same_dtype and np.array_equal(xa, xb):  # the common case, without float64 copies
            continue
        if "string" in kinds:
            mismatched += int(np.count_nonzero(xa != xb))
            continue
        x, y = xa.astype(wide), xb.astype(wide)
        nan_x = np.isnan(x.real) | np.isnan(x.imag) if wide is np.complex128 else np.isnan(x)
        nan_y = np.isnan(y.real) | np.isnan(y.imag) if wide is np.complex128 else np.isnan(y)
        with np.errstate(invalid="ignore", over="ignore"):
            same = (xa == xb) if integral else (x == y) | (nan_x & nan_y)  # equal infinities are equal
            diff = np.abs(x - y)
            scale = np.maximum(np.abs(x), np.abs(y))
            close = diff <= atol + rtol * scale if tolerant else np.zeros(diff.shape, bool)
        mismatched += int(np.count_nonzero(~(same | close)))
        if np.any(nan_x ^ nan_y):
            max_abs = max_rel = math.inf
        check = ~same & ~nan_x & ~nan_y
        if np.any(check):
            d, s = diff[check], scale[check]
            max_abs = max(max_abs, float(d.max()))
            with np.errstate(invalid="ignore", divide="ignore"):
                rel = np.where(s > 0, d / np.where(s > 0, s, 1.0), 0.0)
            max_rel = max(max_rel, float(np.where(np.isnan(rel), math.inf, rel).max()))  # inf-inf, inf/inf
    if mismatched == 0:
        return None
    if "string" in kinds:
        return ValueDifference(name, count, mismatched, None, None)
    return ValueDifference(name, count, mismatched, max_abs, max_rel)


def diff_checkpoints(a: CheckpointReader | os.PathLike[str] | str,
                     b: CheckpointReader | os.PathLike[str] | str, *,
                     rtol: float = 0.0, atol: float = 0.0, names: Iterable[str] | None = None,
                     chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> CheckpointDiff:
    """Compares two checkpoints variable by variable, as `varstore diff` does.

    Metadata (names, shapes, dtypes) is compared first; then each pair of
    variables with equal shapes is read (A's, then B's: one pair in memory at a
    time) and compared in float64 chunks. Two values are equal when
    |a - b| <= atol + rtol * max(|a|, |b|) (math.isclose's symmetric rule),
    or both are NaN, or both are the same infinity. With the default
    rtol = atol = 0 that is exact equality (-0.0 equals 0.0; NaN payloads are
    not compared). Trainable flags, collections and checksums are not compared.

    Args:
      a, b: open CheckpointReaders, or paths opened with
        `varstore.convert.open_checkpoint` (and closed again here).
      rtol: relative tolerance (unitless, >= 0).
      atol: absolute tolerance (in the variable's units, >= 0).
      names: compare only these names (the others are ignored on both sides);
        None compares every name.
      chunk_elements: elements compared at once.

    Returns:
      CheckpointDiff; `.differs` says whether anything differs.

    Raises:
      ValueError: a negative tolerance.
      CheckpointError and subclasses: a path cannot be opened or a value is
        damaged (ChecksumError names the variable and the file).
    """
    if rtol < 0 or atol < 0 or math.isnan(rtol) or math.isnan(atol):
        raise ValueError(f"tolerances must be >= 0, got rtol={rtol}, atol={atol}")
    reader_a, close_a = _open(a)
    try:
        reader_b, close_b = _open(b)
        try:
            return _diff(reader_a, reader_b, rtol, atol, names, chunk_elements)
        finally:
            if close_b:
                reader_b.close()
    finally:
        if close_a:
            reader_a.close()


def _diff(a: CheckpointReader, b: CheckpointReader, rtol: float, atol: float,
          names: Iterable[str] | None, chunk_elements: int) -> CheckpointDiff:
    keys_a, keys_b = a.keys(), b.keys()
    if names is not None:
        wanted = set(names)
        keys_a = [k for k in keys_a if k in wanted]
        keys_b = [k for k in keys_b if k in wanted]
    set_a, set_b = set(keys_a), set(keys_b)
    added = tuple(k for k in keys_b if k not in set_a)
    removed = tuple(k for k in keys_a if k not in set_b)
    shape_changed: list[ShapeChange] = []
    dtype_changed: list[DtypeChange] = []
    values_differ: list[ValueDifference] = []
    equal: list[str] = []
    for name in keys_a:
        if name not in set_b:
            continue
        info_a, info_b = a.info(name), b.info(name)
        if tuple(info_a.shape) != tuple(info_b.shape):
            shape_changed.append(ShapeChange(name, tuple(info_a.shape), tuple(info_b.shape)))
            continue
        same_dtype = info_a.dtype == info_b.dtype
        if not same_dtype:
            dtype_changed.append(DtypeChange(name, info_a.dtype, info_b.dtype))
            numeric = {_kind(as_dtype(info_a.dtype)), _kind(as_dtype(info_b.dtype))}
            if "string" in numeric:
                continue
        value_a = a.read(name)
        value_b = b.read(name)
        difference = _compare_values(name, value_a, value_b, rtol, atol, chunk_elements)
        del value_a, value_b
        if difference is not None:
            values_differ.append(difference)
        elif same_dtype:
            equal.append(name)
    return CheckpointDiff(added=added, removed=removed, shape_changed=tuple(shape_changed),
                          dtype_changed=tuple(dtype_changed), values_differ=tuple(values_differ),
                          equal=tuple(equal), rtol=float(rtol), atol=float(atol))


# ------------------------------------------------------------------ scope tree
@dataclasses.dataclass(frozen=True)
class ScopeNode:
    """One scope of a checkpoint's names, with totals over everything below it.

    Attributes:
      name: the last part of the path ("kernel"); "" for the root.
      path: the full scope path ("encoder/dense"); "" for the root.
      is_variable: a variable is stored at exactly this path (a name can be
        both a variable and a scope: "a" and "a/b").
      variable: that variable's VariableInfo, or None (not a variable, or the
        tree was built from bare names).
      children: sub-scopes and variables, sorted by name.
      variables: number of variables at and below this node.
      nbytes: total bytes of those variables (0 when built from bare names).
      elements: total elements of those variables (0 when built from bare names).
    """

    name: str
    path: str
    is_variable: bool = False
    variable: VariableInfo | None = None
    children: tuple["ScopeNode", ...] = ()
    variables: int = 0
    nbytes: int = 0
    elements: int = 0

    def walk(self) -> Iterator[tuple[int, "ScopeNode"]]:
        """(depth, node) for this node and every descendant, depth-first; the root has depth 0."""
        stack: list[tuple[int, ScopeNode]] = [(0, self)]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, child) for child in reversed(node.children))

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (the "tree" object of `varstore ls --tree --json`)."""
        return {
            "name": self.name,
            "path": self.path,
            "is_variable": self.is_variable,
            "variables": self.variables,
            "nbytes": self.nbytes,
            "elements": self.elements,
            "variable": self.variable.to_json() if self.variable is not None else None,
            "children": [child.to_json() for child in self.children],
        }


def scope_tree(variables: Iterable[VariableInfo | str]) -> ScopeNode:
    """Builds the tree of scopes ("/"-separated name parts) over a checkpoint's variables.

    Args:
      variables: VariableInfos (for per-scope byte and element totals) or bare
        names (totals count variables only). Empty name parts (as in "a//b" or
        a leading "/") are dropped.

    Returns:
      The root ScopeNode (name "" and path ""); children sorted by name.
    """
    root: dict[str, Any] = {"children": {}, "is_variable": False, "info": None}
    for item in variables:
        info = item if isinstance(item, VariableInfo) else None
        name = item.name if isinstance(item, VariableInfo) else str(item)
        node = root
        for part in (p for p in name.split("/") if p):
            node = node["children"].setdefault(part, {"children": {}, "is_variable": False, "info": None})
        node["is_variable"] = True
        node["info"] = info
    return _freeze("", "", root)


def _freeze(name: str, path: str, node: dict[str, Any]) -> ScopeNode:
    children = tuple(_freeze(part, f"{path}/{part}" if path else part, child)
                     for part, child in sorted(node["children"].items()))
    info: VariableInfo | None = node["info"]
    return ScopeNode(
        name=name, path=path, is_variable=node["is_variable"], variable=info, children=children,
        variables=int(node["is_variable"]) + sum(c.variables for c in children),
        nbytes=(info.nbytes if info else 0) + sum(c.nbytes for c in children),
        elements=(math.prod(info.shape) if info else 0) + sum(c.elements for c in children))
