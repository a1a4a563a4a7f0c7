"""Did-you-mean hints for variable names a restore could not match, from the names the checkpoint holds.

Pure functions over lists of names: close names (difflib), names that share
the last path component, and the '.' / '/' separator swap (a PyTorch-style
"encoder.dense.kernel" for a TF-style "encoder/dense/kernel"). Knows nothing
about files, readers or variables; never raises.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

__all__ = ["suggestions", "missing_with_hints"]

#: At most this many suggestions per name.
MAX_SUGGESTIONS = 3
#: Names listed in full in one message; the rest are counted.
MAX_LISTED = 20

_SEPARATORS = re.compile(r"[./]")


def _last(name: str) -> str:
    return _SEPARATORS.split(name)[-1]


def suggestions(name: str, candidates: Sequence[str]) -> list[str]:
    """Up to three stored names that `name` may have meant, best first.

    First the same name with the other separator ('.' for '/', or '/' for
    '.'), then difflib.get_close_matches on the whole names, then names whose
    last path component is close to `name`'s, ordered by similarity of the
    whole names (`encoder/dense/kernel` finds `encoder/dense_1/kernel` and
    `decoder/w/kernel`).
    """
    found: list[str] = []
    pool = set(candidates)
    for swapped in (name.replace("/", "."), name.replace(".", "/")):
        if swapped != name and swapped in pool and swapped not in found:
            found.append(swapped)
    found += [c for c in difflib.get_close_matches(name, candidates, n=MAX_SUGGESTIONS, cutoff=0.75)
              if c not in found]
    if len(found) < MAX_SUGGESTIONS:
        last = _last(name)
        close_last = set(difflib.get_close_matches(last, sorted({_last(c) for c in candidates}), n=5, cutoff=0.8))
        same_tail = [c for c in candidates if _last(c) in close_last and c not in found]
        same_tail.sort(key=lambda c: -difflib.SequenceMatcher(None, name, c).ratio())
        found += same_tail
    return found[:MAX_SUGGESTIONS]


def missing_with_hints(missing: Iterable[str], candidates: Sequence[str]) -> str:
    """`missing` as a message fragment: each name with its suggestions from `candidates`, the first twenty listed.

    A name stored with the other separator is called out as such, since the
    remedy is a rename (assignment_map, or `varstore convert --rename`), not a
    typo fix: "'encoder/dense/kernel' (stored as 'encoder.dense.kernel': '.'
    where the target has '/')".
    """
    names = list(missing)
    parts = []
    for name in names[:MAX_LISTED]:
        close = suggestions(name, candidates)
        if not close:
            parts.append(repr(name))
            continue
        first = close[0]
        if first in (name.replace("/", "."), name.replace(".", "/")):
            stored_sep, target_sep = (".", "/") if "/" in name else ("/", ".")
            rest = [c for c in close[1:]]
            more = f"; or did you mean {', '.join(map(repr, rest))}?" if rest else ""
            parts.append(f"{name!r} (stored as {first!r}: {stored_sep!r} where the target has {target_sep!r}{more})")
        else:
            parts.append(f"{name!r} (did you mean {', '.join(map(repr, close))}?)")
    if len(names) > MAX_LISTED:
        parts.append(f"and {len(names) - MAX_LISTED} more")
    return "[" + ", ".join(parts) + "]"
