"""The byte ranges a manifest claims for its variables: refuses two that overlap (aliasing).

varstore lays packed variables one after another in the blob and gives each
own array its own dataset, so no two variables ever share bytes; a hostile
manifest naming 600 variables over one 4 MiB range would load 2.4 GiB from
a 4 MiB file. Pure checks on the manifest's columns; no file I/O.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

from varstore.errors import UnsafeCheckpointError

__all__ = ["check_disjoint"]


def check_disjoint(names: list[str], starts: list[int | None], sizes: list[int], where: str) -> None:
    """Refuses two variables whose byte ranges (`starts` x `sizes`, None: not there) overlap.

    varstore never writes overlapping ranges (packed variables are aligned one
    after another, each own array is its own dataset); a manifest pointing many
    names at the same bytes would make a 4 MiB file load as gigabytes.

    Raises:
      UnsafeCheckpointError: naming both variables and their ranges.
    """
    missing = starts.count(None)
    if len(starts) - missing < 2:  # a per-variable layout has no packed offsets at all
        return
    rows: list[int] = list(range(len(starts)))
    begins: list[Any] = starts  # ints once the Nones are left out
    lengths = sizes
    if missing:
        present = list(map(operator.is_not, starts, itertools.repeat(None)))
        rows = list(itertools.compress(rows, present))
        begins, lengths = list(itertools.compress(starts, present)), list(itertools.compress(sizes, present))
    if any(map(operator.gt, begins, itertools.islice(begins, 1, None))):  # not in written order: sort
        order = sorted((i for i in range(len(rows)) if lengths[i]), key=begins.__getitem__)
        rows, begins, lengths = [rows[i] for i in order], [begins[i] for i in order], [lengths[i] for i in order]
    ends = map(operator.add, begins, lengths)
    overlap = next(itertools.compress(itertools.count(), map(operator.lt, itertools.islice(begins, 1, None), ends)),
                   None)
    if overlap is not None:
        a, b = rows[overlap], rows[overlap + 1]
        start_a, start_b = int(starts[a] or 0), int(starts[b] or 0)
        raise UnsafeCheckpointError(
            f"variables {names[a]!r} (bytes {start_a}..{start_a + sizes[a]}) and {names[b]!r} (bytes "
            f"{start_b}..{start_b + sizes[b]}) overlap in {where}: varstore never writes aliased byte "
            f"ranges, so reading both would load the same bytes twice; damaged or hostile manifest")
