"""Did-you-mean hints for variable names a restore could not match, from the names the checkpoint holds.

Pure functions over lists of names: close names (difflib), names that share
the last path component, and the '.' / '/' separator swap (a PyTorch-style
"encoder.dense.kernel" for a TF-style "encoder/dense/kernel"). Linear in the
stored names: past SMALL of them a missing name is compared only with its
neighbours in sort order, never with all of them. Knows nothing about files,
readers or variables; never raises.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Iterable, Sequence

__all__ = ["suggestions", "missing_with_hints"]

#: At most this many suggestions per name.
MAX_SUGGESTIONS = 3
#: Names listed in full in one message; the rest are counted.
MAX_LISTED = 20
#: Up to this many stored names, every one is compared with a missing name (the hints as they always were).
#: Past it, a missing name is compared only with its neighbours: the _WINDOW names on each side of it in
#: the sorted names, in the names sorted by their reversed text (a shared tail), and among the names with
#: a close last component; so a hint costs O(_WINDOW) comparisons, not one per stored name.
SMALL = 2000
_WINDOW = 200

_SEPARATORS = re.compile(r"[./]")


def _last(name: str) -> str:
    return _SEPARATORS.split(name)[-1]


class _Neighbours:
    """Names that may be close to a given text: all of them when few, else those around it in two sort orders."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.few = len(self.names) <= SMALL
        self.forward = [] if self.few else sorted(self.names)
        self.backward = [] if self.few else sorted(name[::-1] for name in self.names)

    def around(self, text: str) -> list[str]:
        """The names to compare with `text`: every name (in order) when few, else up to 4 x _WINDOW neighbours."""
        if self.few:
            return self.names
        found: dict[str, None] = {}
        for ordered, key, flip in ((self.forward, text, False), (self.backward, text[::-1], True)):
            at = bisect.bisect_left(ordered, key)
            for item in ordered[max(0, at - _WINDOW):at + _WINDOW]:
                found[item[::-1] if flip else item] = None
        return list(found)


class _Index:
    """The stored names, indexed once for every missing name of one message."""

    def __init__(self, candidates: Sequence[str]) -> None:
        self.candidates = list(candidates)
        self.pool = set(self.candidates)
        self.names = _Neighbours(self.candidates)
        self.by_last: dict[str, list[str]] = {}
        for candidate in self.candidates:
            self.by_last.setdefault(_last(candidate), []).append(candidate)
        self.lasts = _Neighbours(sorted(self.by_last))
        self._tails: dict[frozenset[str], _Neighbours] = {}  # by the set of close last components

    def same_tail(self, name: str, close_last: set[str], found: list[str]) -> list[str]:
        """Names whose last component is in `close_last` (stored order; only those near `name` when many)."""
        if self.names.few:
            return [c for c in self.candidates if _last(c) in close_last and c not in found]
        key = frozenset(close_last)
        tails = self._tails.get(key)
        if tails is None:
            tails = self._tails[key] = _Neighbours([c for last in sorted(key) for c in self.by_last[last]])
        return [c for c in tails.around(name) if c not in found]


def _suggest(name: str, index: _Index) -> list[str]:
    found: list[str] = []
    for swapped in (name.replace("/", "."), name.replace(".", "/")):
        if swapped != name and swapped in index.pool and swapped not in found:
            found.append(swapped)
    found += [c for c in difflib.get_close_matches(name, index.names.around(name), n=MAX_SUGGESTIONS, cutoff=0.75)
              if c not in found]
    if len(found) < MAX_SUGGESTIONS:
        last = _last(name)
        close_last = set(difflib.get_close_matches(last, index.lasts.around(last), n=5, cutoff=0.8))
        same_tail = index.same_tail(name, close_last, found)
        same_tail.sort(key=lambda c: -difflib.SequenceMatcher(None, name, c).ratio())
        found += same_tail
    return found[:MAX_SUGGESTIONS]


def suggestions(name: str, candidates: Sequence[str]) -> list[str]:
    """Up to three stored names that `name` may have meant, best first.

    First the same name with the other separator ('.' for '/', or '/' for
    '.'), then difflib.get_close_matches on the whole names, then names whose
    last path component is close to `name`'s, ordered by similarity of the
    whole names (`encoder/dense/kernel` finds `encoder/dense_1/kernel` and
    `decoder/w/kernel`). Over more than SMALL stored names, only `name`'s
    neighbours are compared (see SMALL): linear in the names, not in names x names.
    """
    return _suggest(name, _Index(candidates))


def missing_with_hints(missing: Iterable[str], candidates: Sequence[str]) -> str:
    """`missing` as a message fragment: each name with its suggestions from `candidates`, the first twenty listed.

    A name stored with the other separator is called out as such, since the
    remedy is a rename (assignment_map, or `varstore convert --rename`), not a
    typo fix: "'encoder/dense/kernel' (stored as 'encoder.dense.kernel': '.'
    where the target has '/')". The candidates are indexed once; each of the
    at most MAX_LISTED names listed costs O(_WINDOW) comparisons past SMALL names.
    """
    names = list(missing)
    index = _Index(candidates if names else ())
    parts = []
    for name in names[:MAX_LISTED]:
        close = _suggest(name, index)
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
