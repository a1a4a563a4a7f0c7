"""Names, attributes and paths from hostile files never reach the terminal raw: control characters are
escaped, a newline in a name never starts a row, --json keeps exact names."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from varstore_cli.main import cli
from varstore_cli.terminal import escape_for_terminal

HOSTILE = ["a\x1b[2Jb", "x\ny 1 float32", "bel\x07", "nul\x00z", "rtl\u202eevil", "c1\x9bq", "del\x7f", "ok/é層"]
#: what a terminal must never receive: C0 but the row-ending newline, DEL, C1, bidi controls
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _safetensors(path: Path, names: list[str], metadata: dict[str, str] | None = None) -> Path:
    header: dict[str, object] = {}
    offset = 0
    for name in names:
        header[name] = {"dtype": "F32", "shape": [2], "data_offsets": [offset, offset + 8]}
        offset += 8
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + np.arange(2 * len(names), dtype=np.float32).tobytes())
    return path


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _assert_safe(text: str) -> None:
    assert not RAW.search(text), repr(RAW.search(text))


def test_the_escape_rule() -> None:
    assert escape_for_terminal("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert escape_for_terminal("x\ny") == "x\\x0ay" and escape_for_terminal("rtl\u202eevil") == "rtl\\u202eevil"
    assert escape_for_terminal("c1\x9b del\x7f") == "c1\\x9b del\\x7f"
    assert escape_for_terminal("ok/é層🙂 back\\slash") == "ok/é層🙂 back\\slash"


@pytest.mark.parametrize("command", [["ls"], ["ls", "--tree"], ["verify"], ["show", "a\x1b[2Jb"]])
def test_ls_show_verify_escape_names_and_metadata(tmp_path: Path, command: list[str]) -> None:
    path = _safetensors(tmp_path / "evil.safetensors", HOSTILE, {"note": "\x1b]0;pwned\x07"})
    code, out, err = _invoke(command[0], str(path), *command[1:])
    assert code == 0, err
    _assert_safe(out + err)
    if command == ["ls"]:
        rows = [line for line in out.splitlines() if line.startswith(tuple(escape_for_terminal(n)[:3] for n in HOSTILE))]
        assert len(rows) == len(HOSTILE)  # 'x\ny 1 float32' did not add a fake row
        assert "a\\x1b[2Jb" in out and "x\\x0ay 1 float32" in out and "rtl\\u202eevil" in out and "ok/é層" in out


def test_json_keeps_exact_names(tmp_path: Path) -> None:
    path = _safetensors(tmp_path / "evil.safetensors", HOSTILE)
    code, out, _ = _invoke("ls", str(path), "--json")
    assert code == 0
    _assert_safe(out)
    names = sorted(v["name"] for v in json.loads(out)["variables"])
    assert names == sorted(HOSTILE)


def test_diff_and_convert_escape_names(tmp_path: Path) -> None:
    a = _safetensors(tmp_path / "a.safetensors", HOSTILE)
    b = _safetensors(tmp_path / "b.safetensors", HOSTILE[1:] + ["new\x1bname"])
    code, out, err = _invoke("diff", str(a), str(b))
    assert code == 1
    _assert_safe(out + err)
    assert "new\\x1bname" in out and "a\\x1b[2Jb" in out
    # a NUL is never written as a member name (zipfile cuts names at it: issue 36); the rest are kept
    a = _safetensors(tmp_path / "a_no_nul.safetensors", [name for name in HOSTILE if "\x00" not in name])
    code, out, err = _invoke("convert", str(a), str(tmp_path / "out.npz"), "--rename", "a\x1b=A", "-v")
    assert code == 0, err
    _assert_safe(out + err)
    assert "a\\x1b[2Jb" in out and "A[2Jb" in out


def test_an_error_naming_a_hostile_path_is_one_escaped_line(tmp_path: Path) -> None:
    path = tmp_path / "evil\x1b[31m\nname.safetensors"
    path.write_bytes(b"not a checkpoint at all")
    code, out, err = _invoke("ls", str(path))
    assert code == 2 and out == ""
    _assert_safe(err)
    assert err.count("\n") == 1 and "evil\\x1b[31m" in err


def test_the_progress_bar_escapes_the_variable_name() -> None:
    pytest.importorskip("tqdm")
    import io

    from varstore_cli.convert_command import make_progress

    stream = io.StringIO()
    update, close = make_progress(True, stream=stream, mininterval_s=0)
    assert update is not None
    update(0, 16, "")
    update(8, 16, "a\x1b[2Jb")
    close()
    assert "a\\x1b[2Jb" in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_bidi_marks_and_unicode_line_separators_are_escaped_too() -> None:
    assert escape_for_terminal("a\u200fb\u061cc\u2028d\u2029e\u200ef") == "a\\u200fb\\u061cc\\u2028d\\u2029e\\u200ef"
