"""Terminal safety beyond the tables: click's usage errors, a newline in an error's path, skipped lists.

Complements test_terminal_safety.py and test_terminal_safety_formats.py: every
error line, click's own included, and every "skipped" row reach the terminal
escaped, one line each.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import Result

#: what a terminal must never receive: C0 but the row-ending newline, DEL, C1, bidi controls
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _assert_safe(text: str) -> None:
    assert not RAW.search(text), repr(RAW.search(text))


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    raw = json.dumps({"a\x1b[2Jb": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + np.zeros(2, dtype="<f4").tobytes())
    return path


@pytest.mark.parametrize(("args", "expected"), [
    (("convert", "{src}", "{dst}", "--rename", "a\x1b[2J"), "rename rule 'a\\x1b[2J' needs the form OLD=NEW"),
    (("cmd\x1b[2J",), "No such command 'cmd\\x1b[2J'."),
    (("ls", "--nope\x07", "{src}"), "No such option '--nope\\x07'."),
    (("ls", "--format", "x\u202e", "{src}"), "unknown checkpoint format 'x\\u202e'"),
])
def test_usage_errors_repeat_the_argument_escaped(run: Callable[..., Result], hostile: Path, tmp_path: Path,
                                                  args: tuple[str, ...], expected: str) -> None:
    result = run(*(a.format(src=hostile, dst=tmp_path / "out.h5") for a in args))
    assert result.exit_code == 2
    _assert_safe(result.stdout + result.stderr)
    assert expected in result.stderr


@pytest.mark.parametrize("content", [b"garbage", None])
def test_a_newline_in_an_error_path_shows_as_an_escape(run: Callable[..., Result], tmp_path: Path,
                                                       content: bytes | None) -> None:
    path = tmp_path / "bad\x1b[2J\n\u202e.h5"
    if content is not None:
        path.write_bytes(content)
    result = run("ls", path)
    assert result.exit_code == 2 and result.stdout == ""
    _assert_safe(result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("varstore: error: ")
    assert "bad\\x1b[2J\\x0a\\u202e.h5" in result.stderr  # the newline visible, not folded into a space


def test_skipped_lists_of_ls_and_convert_are_escaped(run: Callable[..., Result], tmp_path: Path) -> None:
    path = tmp_path / "objects.npz"
    np.savez(path, **{"obj\x1b[2J\n": np.array([{"a": 1}], dtype=object), "ok": np.zeros(2)})
    expected = ("  obj\\x1b[2J\\x0a  member 'obj\\x1b[2J\\x0a.npy' holds an object array (object): "
                "loading it would unpickle Python objects, which varstore never does")
    listing = run("ls", "--skip-object-arrays", path)
    converted = run("convert", "--skip-object-arrays", path, tmp_path / "out.safetensors")
    refused = run("ls", path)
    for result in (listing, converted):
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[-2:] == ["skipped 1 entry:", expected]
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1
    assert "member 'obj\\x1b[2J\\x0a.npy' holds an object array" in refused.stderr
    _assert_safe(listing.stdout + converted.stdout + converted.stderr + refused.stderr)
    document = json.loads(run("ls", "--json", "--skip-object-arrays", path).stdout)
    assert [s["name"] for s in document["skipped"]] == ["obj\x1b[2J\n"]
