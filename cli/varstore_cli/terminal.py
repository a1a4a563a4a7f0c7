"""Terminal-safe text: control characters in names, attributes and paths from files are escaped before output.

A checkpoint is hostile until checked, and so are its names: "a\x1b[2Jb" would clear the user's
screen, "w\nfake 1 float32" would print a row that is not there, U+202E would reverse what follows.
Every line the CLI prints (tables, trees, summaries, notes, error messages) goes through
`escape_for_terminal`, which writes C0 (U+0000-U+001F), DEL, C1 (U+0080-U+009F), the Unicode bidi
controls and marks (U+202A-U+202E, U+2066-U+2069, U+061C, U+200E, U+200F) and the line and paragraph
separators (U+2028, U+2029) as `\\xNN` / `\\uNNNN`; printable text ("é", "層", emoji) and a
backslash stay as they are. `--json` output keeps exact names (JSON escapes); only C1 and bidi controls,
which JSON allows raw, are written as `\\uNNNN` there. Knows no checkpoint; imports only click.
"""

from __future__ import annotations

import re

import click

__all__ = ["escape_for_terminal", "echo_line", "escape_json_text"]

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")  # JSON itself escapes U+0000-U+001F


def _spell(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_for_terminal(text: str) -> str:
    """`text` with every control character spelled out ("a\\x1b[2Jb"); a newline too, so one call is one line."""
    return _UNSAFE.sub(_spell, text)


def escape_json_text(text: str) -> str:
    """JSON text with C1 and bidi controls as \\uNNNN escapes (still the same JSON value when parsed)."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def echo_line(text: str, err: bool = False) -> None:
    """Prints one line, escaped (click.echo adds the newline)."""
    click.echo(escape_for_terminal(str(text)), err=err)
