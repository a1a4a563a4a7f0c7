"""Name rewriting for convert: OLD=NEW prefix rules and separator mapping, parsed in one place.

`parse_rename_rule` is the one parser of "OLD=NEW" text, used by
`varstore.formats.convert(rename=...)` and by the CLI's `--rename`;
`rewrite` applies `--separator` (every SEP becomes "/") and then the first
matching prefix rule, as TF's assignment_map. Pure string work: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from varstore.errors import ConversionError

__all__ = ["parse_rename_rule", "rename_pairs", "rewrite"]


def parse_rename_rule(text: str) -> tuple[str, str]:
    """"OLD=NEW" as (OLD, NEW): the first "=" splits; OLD must not be empty, NEW may be ("" strips OLD).

    Raises:
      ConversionError: no "=", or an empty OLD.
    """
    old, sep, new = str(text).partition("=")
    if not sep or not old:
        raise ConversionError(
            f"rename rule {text!r} needs the form OLD=NEW (a name prefix and its replacement, OLD not empty)")
    return old, new


def rename_pairs(rename: Iterable[tuple[str, str] | str]) -> list[tuple[str, str]]:
    """Rules given as "OLD=NEW" strings or (old, new) pairs, as (old, new) pairs in order.

    Raises:
      ConversionError: a malformed rule (see parse_rename_rule), or an empty OLD in a pair.
    """
    pairs = []
    for item in rename:
        if isinstance(item, str):
            pairs.append(parse_rename_rule(item))
            continue
        old, new = item
        if not str(old):
            raise ConversionError(f"rename rule {item!r} has an empty OLD prefix")
        pairs.append((str(old), str(new)))
    return pairs


def rewrite(name: str, pairs: Sequence[tuple[str, str]], separator: str | None = None) -> str:
    """`name` with every `separator` replaced by "/" (when given), then the first matching prefix rule applied.

    Example: rewrite("encoder.layer.0.query.weight", [("encoder/", "bert/")], ".")
    is "bert/layer/0/query/weight".
    """
    if separator:
        name = name.replace(separator, "/")
    for old, new in pairs:
        if name.startswith(old):
            return new + name[len(old):]
    return name
