"""Library words -> command-line words in error messages shown by the CLI.

Library messages tell Python callers which parameter to pass
(`overwrite=True`, `to_format`, `skip_object_arrays=True`); on the command
line the same advice must name the option (`--force`, `--to`,
`--skip-object-arrays`). `cli_words` rewrites a message with the table
below; tests/cli/test_words.py checks that no message raised on the CLI
path still names a library parameter. Pure text; no I/O.
"""

from __future__ import annotations

import re

__all__ = ["LIBRARY_TO_CLI", "LIBRARY_PARAMETERS", "cli_words"]

#: (library phrase, command-line phrase), applied in order (longer phrases first).
LIBRARY_TO_CLI: tuple[tuple[str, str], ...] = (
    ("pass overwrite=True to replace it", "pass --force to replace it"),
    ("pass force=True to replace it", "pass --force to replace it"),
    ("even with force", "even with --force"),
    ("overwrite=True", "--force"),
    ("force=True", "--force"),
    ("skip_object_arrays=True", "--skip-object-arrays"),
    ("strip_attributes=True", "--strip-attributes"),
    ("pass to_format", "pass --to"),
    ("to_format=", "--to "),
    ("to_format", "--to"),
    ("from_format=", "--from "),
    ("from_format", "--from"),
    ("format=", "--format "),
    ("dtype=", "--dtype "),
    ("separator=", "--separator "),
)

#: Python parameter spellings that must never reach a command-line user.
LIBRARY_PARAMETERS: tuple[str, ...] = (
    "overwrite=", "force=", "to_format", "from_format", "skip_object_arrays", "strip_attributes=",
    "pack_threshold_bytes", "assignment_map", "lazy=", "strict=", "blocking=", "layout=",
)

_FORMAT_ARG = re.compile(r"(?<![\w-])format=")


def cli_words(message: str) -> str:
    """`message` with library parameter spellings replaced by the matching command-line options."""
    for library, cli in LIBRARY_TO_CLI:
        if library == "format=":
            message = _FORMAT_ARG.sub("--format ", message)
        elif library == "dtype=":
            message = re.sub(r"(?<![\w-])dtype=", "--dtype ", message)
        else:
            message = message.replace(library, cli)
    return message
