"""Terminal safety: escape control and bidi characters before text from files reaches a terminal.

The one place the CLI makes names, paths and messages printable; pure string functions,
no click, no I/O, nothing about checkpoints (options.say does the printing).
"""

from __future__ import annotations

import re

__all__ = ["escape_for_terminal", "escape_json_text"]

# C0 (incl. tab, newline, carriage return), DEL, C1, and the Unicode bidi overrides/isolates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_for_terminal(text: str) -> str:
    """Returns `text` with every C0/C1 control, DEL and bidi override escaped, as Python would write it.

    Control characters become `\\xNN` (ESC -> `\\x1b`, newline -> `\\x0a`), bidi overrides and
    isolates (U+202A-U+202E, U+2066-U+2069) become `\\uNNNN`. Printable Unicode ('é', '層')
    stays as it is; a backslash is not doubled, so the output is for eyes, not for parsing
    (use `--json` for exact names). One logical line in, one terminal line out.
    """
    return _UNSAFE.sub(_escape, text)


def escape_json_text(text: str) -> str:
    """Returns JSON text with DEL, C1 and bidi characters written as `\\uNNNN` escapes.

    `json.dumps(ensure_ascii=False)` already escapes C0; the result parses back to the exact
    same strings, so `--json` keeps names exact while the raw bytes never reach a terminal.
    """
    return _UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)

