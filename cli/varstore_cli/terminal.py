"""Escape text from files before it reaches a terminal: control and bidi characters as \\xNN / \\uNNNN.

Pure functions, used at every point where the CLI prints a name, an
attribute, a metadata value, a path or an error message. Does no I/O and
leaves --json text valid JSON (escape_json_for_terminal spells the same characters as JSON escapes).
"""

from __future__ import annotations

__all__ = ["escape_for_terminal", "escape_json_for_terminal"]

# C0 (0x00-0x1f, \t \n \r included), DEL and C1 (0x80-0x9f): a terminal acts on them
_CONTROL = [*range(0x00, 0x20), *range(0x7F, 0xA0)]
# bidi controls that reorder what follows (Trojan Source), and the Unicode line/paragraph separators
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029]
_TABLE = {code: f"\\x{code:02x}" for code in _CONTROL} | {code: f"\\u{code:04x}" for code in _BIDI}


def escape_for_terminal(text: str) -> str:
    """Escape text from files before it reaches a terminal: control and bidi characters as \\xNN / \\uNNNN.

    Args:
      text: a name, attribute, metadata value, path or message, any length.

    Returns:
      `text` with every C0 character (0x00-0x1f, including tab, newline and
      carriage return), DEL (0x7f) and C1 character (0x80-0x9f) written as
      `\\xNN`, and every bidi control (U+061C, U+200E, U+200F, U+202A-U+202E,
      U+2066-U+2069) and line/paragraph separator (U+2028, U+2029) as
      `\\uNNNN`. Everything else, a literal backslash and printable Unicode
      (é, 層, emoji) included, is unchanged, so a printed line stays one row.
    """
    return text.translate(_TABLE)


_JSON_TABLE = {code: f"\\u{code:04x}" for code in [*range(0x00, 0x20), *range(0x7F, 0xA0), *_BIDI]}


def escape_json_for_terminal(text: str) -> str:
    """JSON text with the characters escape_for_terminal escapes written as JSON `\\uNNNN` escapes.

    json.dumps(..., ensure_ascii=False) escapes C0 itself but leaves DEL, C1 and
    bidi controls raw; outside strings JSON text is ASCII, so replacing them
    anywhere keeps the document valid and json.loads gives the exact names back.
    """
    return text.translate(_JSON_TABLE)
