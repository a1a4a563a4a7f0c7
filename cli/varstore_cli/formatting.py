"""Text formatting for the varstore CLI: human sizes, shapes, aligned tables, the scope tree.

Pure functions from values to strings; no I/O, no click, no checkpoint reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from varstore_cli.terminal import escape_for_terminal
from varstore import VariableInfo
from varstore import ScopeNode

__all__ = [
    "plural",
    "human_size",
    "format_shape",
    "format_flag",
    "format_collections",
    "format_number",
    "format_values",
    "table",
    "tree_lines",
    "json_values",
]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def plural(count: int, word: str, plural: str | None = None) -> str:
    """"1 variable", "1,024 variables" (`plural` for irregular words: "entry" / "entries")."""
    return f"{count:,} " + (word if count == 1 else plural or word + "s")


def human_size(nbytes: int) -> str:
    """Bytes in binary units: 512 -> "512 B", 1536 -> "1.5 KiB", 3 * 2**30 -> "3.0 GiB"."""
    size = float(nbytes)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def format_shape(shape: Sequence[int]) -> str:
    """A shape as TensorFlow prints it: [5, 5, 3, 32]; [] for a scalar."""
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def format_flag(value: bool | None) -> str:
    """True -> "yes", False -> "no", None (format has no such flag) -> "-"."""
    return "-" if value is None else ("yes" if value else "no")


def format_collections(collections: Sequence[str]) -> str:
    """Comma-separated collection names, "-" for none."""
    return ",".join(collections) if collections else "-"


def format_number(value: Any) -> str:
    """A statistic for humans: ints exact, floats with 7 significant digits, None as "-"."""
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        return str(number)
    return f"{number:.7g}"


def _scalar_text(value: Any) -> str:
    if isinstance(value, bytes):  # byte strings (HDF5, TF) shown as text strings (npz) are: one rendering
        return repr(value.decode("utf-8", errors="backslashreplace"))
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (complex, np.complexfloating)):
        return f"{format_number(value.real)}{'+' if value.imag >= 0 or math.isnan(value.imag) else '-'}" \
               f"{format_number(abs(value.imag))}j"
    return format_number(value)


def format_values(values: np.ndarray) -> str:
    """A flat array's first values for humans: "[0.1, -2, nan]"; strings, bytes (decoded as UTF-8, invalid bytes
    as backslash escapes) or not, as "['abc', 'de']"."""
    return "[" + ", ".join(_scalar_text(v) for v in _python_values(values)) + "]"


def _python_values(values: np.ndarray) -> list[Any]:
    flat = np.asarray(values).reshape(-1)
    if flat.dtype.kind in "biuSU" or flat.dtype.kind == "c":
        return flat.tolist()
    return [float(v) for v in flat.astype(np.float64)]  # bfloat16 / float8 / float16 print as float


def json_values(values: np.ndarray) -> list[Any]:
    """A flat array's values as JSON-compatible items (the "values" of `show --json`).

    Floats are numbers, non-finite floats the strings "nan" / "inf" / "-inf";
    complex numbers are [real, imag]; bytes are decoded as UTF-8 (invalid
    bytes as backslash escapes); bools and ints stay as they are.
    """
    out: list[Any] = []
    for value in _python_values(values):
        if isinstance(value, bytes):
            out.append(value.decode("utf-8", errors="backslashreplace"))
        elif isinstance(value, complex):
            out.append([_json_float(value.real), _json_float(value.imag)])
        elif isinstance(value, float):
            out.append(_json_float(value))
        else:
            out.append(value)
    return out


def _json_float(value: float) -> float | str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


#: Cells up to this many characters set their column's width; longer ones are printed as they are.
ALIGN_LIMIT = 200


def table(rows: Sequence[Sequence[str]], headers: Sequence[str] | None = None,
          right: Sequence[int] = ()) -> list[str]:
    """Aligns rows of cells into columns separated by two spaces.

    Args:
      rows: the cells, all rows of the same length.
      headers: optional header row.
      right: indices of the columns to right-align (sizes, counts).

    Returns:
      One string per line, trailing spaces stripped; control characters in cells escaped
      (varstore_cli.terminal), so a name holding a newline stays in its row. A cell longer than
      ALIGN_LIMIT characters is not padded to and pads no other row (it shifts its own row's later
      cells): the output stays linear in the cells' length, never rows x the longest name.
    """
    all_rows = [[escape_for_terminal(c) for c in r] for r in ([list(headers)] if headers else []) + [list(r) for r in rows]]
    if not all_rows:
        return []
    widths = [max((len(r[i]) for r in all_rows if len(r[i]) <= ALIGN_LIMIT), default=0)
              for i in range(len(all_rows[0]))]
    lines = []
    for row in all_rows:
        cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def _variable_cells(info: VariableInfo | None) -> list[str]:
    if info is None:
        return ["", "", ""]
    return [format_shape(info.shape), info.dtype, human_size(info.nbytes)]


def tree_lines(root: ScopeNode, label: str = ".") -> list[str]:
    """The scope tree, one line per scope or variable, with aligned columns.

    Scopes end in "/" and show their variable count and total size; variables
    show shape, dtype and size. `label` names the root line (the checkpoint path).
    """
    count = root.variables
    rows: list[list[str]] = [[label, f"{count} variable{'' if count == 1 else 's'}", "",
                              human_size(root.nbytes)]]

    def visit(node: ScopeNode, prefix: str) -> None:
        # a name that is both a variable and a scope ("a" and "a/b") gets two lines: "a" and "a/"
        entries = [(child, False) for child in node.children if child.is_variable]
        entries += [(child, True) for child in node.children if child.children]
        entries.sort(key=lambda e: (e[0].name, e[1]))
        for index, (child, as_scope) in enumerate(entries):
            last = index == len(entries) - 1
            branch = prefix + ("└── " if last else "├── ")
            if not as_scope:
                rows.append([branch + child.name, *_variable_cells(child.variable)])
                continue
            own = child.variable.nbytes if child.variable is not None else 0
            count = child.variables - int(child.is_variable)
            rows.append([branch + child.name + "/", f"{count} variable{'' if count == 1 else 's'}", "",
                         human_size(child.nbytes - own)])
            visit(child, prefix + ("    " if last else "│   "))

    visit(root, "")
    return table(rows, right=(3,))
