"""The report's numbers of one variable, streamed chunk by chunk: statistics, L2 norm, histogram, change against another.

`summarize` merges `variable_stats` of each chunk (Chan's pairwise update of
mean and variance) and bins the finite values in a second pass over the
range the first found (one pass when the variable fits in one chunk);
`compare` walks two variables of one shape chunk by chunk for the relative
change ||b - a|| / ||a||, the largest |b - a|, the elements changed
(diff.py's rule) and the NaN/Inf that appeared. Chunks come from
report_chunks.py. Never renders, never writes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo
from varstore.inspect.diff import _compare_values
from varstore.inspect.report_chunks import fits_one_chunk, value_chunks
from varstore.inspect.stats import VariableStats, _kind, variable_stats

__all__ = ["VariableSummary", "VariableChange", "summarize", "compare", "DEFAULT_BINS"]

DEFAULT_BINS = 40


@dataclasses.dataclass(frozen=True)
class VariableSummary:
    """What the report shows of one variable.

    Attributes:
      info: the variable's VariableInfo (name, shape, dtype, trainable, device).
      stats: min / max / mean / std / NaN / Inf / zero counts (VariableStats; floats over the finite values).
      l2_norm: sqrt(sum x**2) over the values `stats` covers (complex: |x|); None for strings.
      edges, counts: the histogram of those values, len(edges) == len(counts) + 1; () for strings
        and for variables without a finite value.
      note: how the values were read, where it matters (a GGUF tensor's dequantization), or "".
    """

    info: VariableInfo
    stats: VariableStats
    l2_norm: float | None
    edges: tuple[float, ...] = ()
    counts: tuple[int, ...] = ()
    note: str = ""

    @property
    def flagged(self) -> bool:
        """True when the value holds a NaN or an infinity."""
        return bool(self.stats.nan_count or self.stats.inf_count)


@dataclasses.dataclass(frozen=True)
class VariableChange:
    """How one variable moved from checkpoint A to checkpoint B (same shape).

    Attributes:
      name: the variable's name.
      count: elements compared.
      relative_change: ||b - a|| / ||a|| over the elements finite on both sides (0 when
        nothing changed, inf when ||a|| is 0 and b differs); None for strings.
      max_abs_diff: largest |b - a| over those elements; None for strings.
      changed: elements that differ (|a - b| > atol + rtol * max(|a|, |b|), NaN on one side only, ...).
      nan_inf_appeared: elements that are NaN or infinite in B and finite in A.
      norm_a, norm_diff: ||a|| and ||b - a|| (the two terms of the ratio; per-scope totals add their squares).
    """

    name: str
    count: int
    relative_change: float | None
    max_abs_diff: float | None
    changed: int
    nan_inf_appeared: int
    norm_a: float = 0.0
    norm_diff: float = 0.0

    @property
    def share_changed(self) -> float:
        """changed / count (0 for an empty variable)."""
        return self.changed / self.count if self.count else 0.0


class _Merged:
    """VariableStats of chunks merged into one (counts added, moments by Chan's pairwise update)."""

    def __init__(self, dtype: str) -> None:
        from varstore.dtypes import as_dtype

        self.dtype, self.kind = dtype, _kind(as_dtype(dtype))
        self.count = self.zeros = self.nan = self.inf = self.n = 0
        self.mean = self.m2 = 0.0
        self.low: Any = None
        self.high: Any = None

    def add(self, part: VariableStats) -> None:
        self.kind = part.kind
        self.count += part.count
        self.zeros += part.zeros
        self.nan += part.nan_count or 0
        self.inf += part.inf_count or 0
        if part.mean is None or part.std is None:
            return
        n = part.count - (part.nan_count or 0) - (part.inf_count or 0)
        if n <= 0:
            return
        total = self.n + n
        delta = part.mean - self.mean
        self.mean += delta * n / total
        self.m2 += part.std * part.std * n + delta * delta * self.n * n / total
        self.n = total
        self.low = part.min if self.low is None or part.min < self.low else self.low  # type: ignore[operator]
        self.high = part.max if self.high is None or part.max > self.high else self.high  # type: ignore[operator]

    def result(self) -> tuple[VariableStats, float | None]:
        kind = self.kind
        nan_applies = kind in ("float", "complex")
        if kind == "string":
            return VariableStats(self.dtype, kind, self.count, zeros=self.zeros), None
        std = math.sqrt(max(self.m2, 0.0) / self.n) if self.n else None
        stats = VariableStats(self.dtype, kind, self.count, min=self.low, max=self.high,
                              mean=self.mean if self.n else None, std=std,
                              nan_count=self.nan if nan_applies else None,
                              inf_count=self.inf if nan_applies else None, zeros=self.zeros)
        return stats, math.sqrt(max(self.m2 + self.n * self.mean * self.mean, 0.0))


def _finite_values(chunk: npt.NDArray[Any]) -> npt.NDArray[np.float64] | None:
    """The values a histogram bins (float64; complex: |x|; NaN and infinities dropped), None for strings."""
    kind = _kind(chunk.dtype)
    if kind == "string" or kind == "other":
        return None
    wide = np.abs(chunk.astype(np.complex128)) if kind == "complex" else chunk.astype(np.float64)
    return wide[np.isfinite(wide)]


def _bin_range(stats: VariableStats) -> tuple[float, float] | None:
    if stats.min is None or stats.max is None or stats.kind == "string":
        return None
    low, high = float(stats.min), float(stats.max)
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    return (low - 0.5, high + 0.5) if low == high else (low, high)


def summarize(reader: CheckpointReader, name: str, *, bins: int = DEFAULT_BINS,
              chunk_elements: int = 1 << 20, note: str = "") -> VariableSummary:
    """Statistics, L2 norm and a `bins`-bin histogram of one variable, reading it chunk by chunk.

    A variable of at most `chunk_elements` elements is read once; a larger one twice (statistics,
    then the histogram over the [min, max] the first pass found), one chunk in memory at a time.

    Raises:
      what `reader.read` raises (UnknownVariableError, ChecksumError, CorruptCheckpointError, ...).
    """
    info = reader.info(name)
    merged = _Merged(info.dtype)
    if fits_one_chunk(tuple(info.shape), chunk_elements):
        whole = [chunk for chunk in value_chunks(reader, name, chunk_elements)]
        for chunk in whole:
            merged.add(variable_stats(chunk, chunk_elements=chunk_elements))
        stats, norm = merged.result()
        edges, counts = _histogram(whole, stats, bins)
        return VariableSummary(info, stats, norm, edges, counts, note)
    for chunk in value_chunks(reader, name, chunk_elements):
        merged.add(variable_stats(chunk, chunk_elements=chunk_elements))
    stats, norm = merged.result()
    edges, counts = _histogram(value_chunks(reader, name, chunk_elements), stats, bins)
    return VariableSummary(info, stats, norm, edges, counts, note)


def _histogram(chunks: Any, stats: VariableStats, bins: int) -> tuple[tuple[float, ...], tuple[int, ...]]:
    span = _bin_range(stats)
    if span is None:
        return (), ()
    if stats.kind in ("int", "bool"):  # one bin per integer where there are few
        bins = max(1, min(bins, int(span[1] - span[0]) + 1))
        if bins == int(span[1] - span[0]) + 1:
            span = (span[0] - 0.5, span[1] + 0.5)
    total = np.zeros(bins, dtype=np.int64)
    edges: npt.NDArray[np.float64] = np.linspace(span[0], span[1], bins + 1)
    for chunk in chunks:
        values = _finite_values(chunk)
        if values is not None and values.size:
            total += np.histogram(values, bins=edges)[0]
    return tuple(float(e) for e in edges), tuple(int(c) for c in total)


def compare(reader_a: CheckpointReader, reader_b: CheckpointReader, name: str, *, rtol: float = 0.0,
            atol: float = 0.0, chunk_elements: int = 1 << 20) -> VariableChange:
    """The change of variable `name` from A to B (same shape; dtypes may differ), chunk pair by chunk pair.

    Raises:
      ValueError: the shapes differ.
      what `read` raises on either side.
    """
    info_a, info_b = reader_a.info(name), reader_b.info(name)
    if tuple(info_a.shape) != tuple(info_b.shape):
        raise ValueError(f"cannot compare variable '{name}': shape {tuple(info_a.shape)} in "
                         f"'{reader_a.location}', {tuple(info_b.shape)} in '{reader_b.location}'")
    count = math.prod(info_a.shape)
    strings = "string" in (_kind_of(info_a), _kind_of(info_b))
    changed = appeared = 0
    max_abs = 0.0
    sq_a = sq_diff = 0.0
    for xa, xb in zip(value_chunks(reader_a, name, chunk_elements), value_chunks(reader_b, name, chunk_elements)):
        difference = _compare_values(name, xa, xb, rtol, atol, chunk_elements)
        if difference is not None:
            changed += difference.mismatched
        if strings:
            continue
        wide = np.complex128 if "complex" in (_kind(xa.dtype), _kind(xb.dtype)) else np.float64
        a, b = xa.astype(wide), xb.astype(wide)
        finite_a, finite_b = np.isfinite(a), np.isfinite(b)
        appeared += int(np.count_nonzero(finite_a & ~finite_b))
        both = finite_a & finite_b
        delta = np.abs(b[both] - a[both])
        magnitude = np.abs(a[finite_a])
        sq_a += float(np.dot(magnitude, magnitude))
        if delta.size:
            sq_diff += float(np.dot(delta, delta))
            max_abs = max(max_abs, float(delta.max()))
    if strings:
        return VariableChange(name, count, None, None, changed, 0)
    norm_a, norm_diff = math.sqrt(sq_a), math.sqrt(sq_diff)
    relative = norm_diff / norm_a if norm_a > 0 else (math.inf if norm_diff > 0 else 0.0)
    return VariableChange(name, count, relative, max_abs, changed, appeared, norm_a, norm_diff)


def _kind_of(info: VariableInfo) -> str:
    from varstore.dtypes import as_dtype

    return _kind(as_dtype(info.dtype))
