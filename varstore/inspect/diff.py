"""Checkpoint diff: added, removed, shape/dtype changed and differing variables, streamed.

The library side of `varstore diff`. One variable pair is read at a time through
the CheckpointReader interface and compared in chunks (math.isclose's symmetric
rule for floats, exact comparison for integers). Never prints, never imports click.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.checkpoint.read.reader_api import CheckpointReader
from varstore.dtypes import as_dtype
from varstore.inspect.stats import DEFAULT_CHUNK_ELEMENTS, _json_number, _kind

__all__ = ['ShapeChange', 'DtypeChange', 'ValueDifference', 'CheckpointDiff', 'diff_checkpoints']

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
    from varstore._open import open_checkpoint  # the formats sit above checkpoint; import late

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
                     chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
                     progress: Callable[[int, int, str], None] | None = None) -> CheckpointDiff:
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
        `varstore.open_checkpoint` (and closed again here).
      rtol: relative tolerance (unitless, >= 0).
      atol: absolute tolerance (in the variable's units, >= 0).
      names: compare only these names (the others are ignored on both sides);
        None compares every name.
      chunk_elements: elements compared at once.
      progress: called as progress(done_bytes, total_bytes, name) after each pair of values is compared
        (bytes of both sides), and once with (0, total_bytes, "") first; the CLI draws its bar from it.

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
            return _diff(reader_a, reader_b, rtol, atol, names, chunk_elements, progress)
        finally:
            if close_b:
                reader_b.close()
    finally:
        if close_a:
            reader_a.close()


def _diff(a: CheckpointReader, b: CheckpointReader, rtol: float, atol: float,
          names: Iterable[str] | None, chunk_elements: int,
          progress: Callable[[int, int, str], None] | None = None) -> CheckpointDiff:
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
    total = done = 0
    if progress is not None:
        total = sum(a.info(n).nbytes + b.info(n).nbytes for n in keys_a if n in set_b)
        progress(0, total, "")
    for name in keys_a:
        if name not in set_b:
            continue
        info_a, info_b = a.info(name), b.info(name)
        if progress is not None:
            done += info_a.nbytes + info_b.nbytes
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
        if progress is not None:
            progress(done, total, name)
        if difference is not None:
            values_differ.append(difference)
        elif same_dtype:
            equal.append(name)
    return CheckpointDiff(added=added, removed=removed, shape_changed=tuple(shape_changed),
                          dtype_changed=tuple(dtype_changed), values_differ=tuple(values_differ),
                          equal=tuple(equal), rtol=float(rtol), atol=float(atol))


# ------------------------------------------------------------------ scope tree
