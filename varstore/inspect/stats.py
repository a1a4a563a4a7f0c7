"""Per-variable statistics (min, max, mean, std, NaN/inf/zero counts) in bounded memory.

The library side of `varstore show`. Values are reduced in float64 chunks so a 1 GB
variable never gets a full-size float64 copy. Never prints, never imports click.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from varstore.dtypes import as_dtype, dtype_name, is_floating

__all__ = ['VariableStats', 'variable_stats', 'DEFAULT_CHUNK_ELEMENTS']

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
