"""Hostile names from safetensors, npz, HDF5 and file paths across ls/show/diff/verify/convert and the error line (issue 26, item 5)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import Result
from safetensors.numpy import save_file

from varstore_cli.terminal import escape_for_terminal

CLEAR = "a\x1b[2Jb"            # CSI: clear screen
FAKE_ROW = "w\nfake 1 float32"  # a newline that would print a second row
BELL = "bell\x07\x00\x7f\x9b"   # BEL, NUL, DEL, C1 CSI
BIDI = "x\u202egpj.exe"         # right-to-left override spoofs the rest
UNICODE = "層/é"                 # printable: stays as it is
NAMES = [CLEAR, FAKE_ROW, BELL, BIDI, UNICODE]

# Anything a terminal interprets: C0 (but the row separator), DEL, C1, bidi overrides and isolates.
_RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _hostile_safetensors(path: Path) -> Path:
    save_file({name: np.full((2,), i, np.float32) for i, name in enumerate(NAMES)}, str(path),
              metadata={"note": "\x1b[31mred\x1b[0m\nsecond line"})
    return path


def _assert_terminal_safe(result: Result) -> None:
    for stream in (result.stdout, result.stderr):
        assert not _RAW.search(stream), repr(stream)


def test_escape_for_terminal_writes_python_style_escapes() -> None:
    assert escape_for_terminal(CLEAR) == "a\\x1b[2Jb"
    assert escape_for_terminal(FAKE_ROW) == "w\\x0afake 1 float32"
    assert escape_for_terminal(BELL) == "bell\\x07\\x00\\x7f\\x9b"
    assert escape_for_terminal(BIDI) == "x\\u202egpj.exe"
    assert escape_for_terminal("\t\r\u2066\u2069") == "\\x09\\x0d\\u2066\\u2069"
    assert escape_for_terminal(UNICODE + "🙂 \\x") == "層/é🙂 \\x"


def test_ls_escapes_names_and_prints_one_row_per_variable(run: Callable[..., Result], tmp_path: Path) -> None:
    result = run("ls", _hostile_safetensors(tmp_path / "h.safetensors"))
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result)
    lines = result.stdout.splitlines()
    rows = lines[2:-1]  # header line, column line, ..., total line
    assert len(rows) == len(NAMES)
    assert lines[-1].startswith("total: 5 variables")
    for name in ("a\\x1b[2Jb", "w\\x0afake 1 float32", "bell\\x07\\x00\\x7f\\x9b", "x\\u202egpj.exe", UNICODE):
        assert sum(row.startswith(name) for row in rows) == 1, (name, rows)


def test_ls_json_keeps_exact_names(run: Callable[..., Result], tmp_path: Path) -> None:
    result = run("ls", "--json", _hostile_safetensors(tmp_path / "h.safetensors"))
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result)
    document = json.loads(result.stdout)
    assert sorted(v["name"] for v in document["variables"]) == sorted(NAMES)


def test_show_escapes_name_and_metadata(run: Callable[..., Result], tmp_path: Path) -> None:
    path = _hostile_safetensors(tmp_path / "h.safetensors")
    result = run("show", path, CLEAR)
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result)
    assert "a\\x1b[2Jb" in result.stdout


def test_show_unknown_hostile_name_error_is_escaped(run: Callable[..., Result], tmp_path: Path) -> None:
    result = run("show", _hostile_safetensors(tmp_path / "h.safetensors"), "no\x1b]0;title\x07")
    assert result.exit_code != 0
    _assert_terminal_safe(result)
    assert "no\\x1b]0;title\\x07" in result.stderr


def test_verify_and_diff_are_escaped(run: Callable[..., Result], tmp_path: Path) -> None:
    a = _hostile_safetensors(tmp_path / "a\x1b[2J.safetensors")
    save_file({CLEAR: np.zeros(3, np.float32), FAKE_ROW: np.zeros(2, np.float32),
               "new\x1bname": np.zeros(1, np.float32)}, str(tmp_path / "b.safetensors"))
    verify = run("verify", a)
    assert verify.exit_code == 0, verify.output
    _assert_terminal_safe(verify)
    assert "a\\x1b[2J.safetensors" in verify.stdout
    diff = run("diff", a, tmp_path / "b.safetensors")
    _assert_terminal_safe(diff)
    assert "a\\x1b[2J.safetensors" in diff.stdout
    rows = diff.stdout.splitlines()[2:-1]  # ---, +++, one row per change, summary
    assert [row.split()[:2] for row in rows] == [
        ["added", "new\\x1bname"], ["removed", "bell\\x07\\x00\\x7f\\x9b"], ["removed", "x\\u202egpj.exe"],
        ["removed", "層/é"], ["shape", "a\\x1b[2Jb"],
        ["values", "w\\x0afake"]]
    assert not any(row.startswith("fake") for row in rows)


def test_diff_json_keeps_exact_names(run: Callable[..., Result], tmp_path: Path) -> None:
    a = _hostile_safetensors(tmp_path / "a.safetensors")
    save_file({BIDI: np.zeros(1, np.float32)}, str(tmp_path / "b.safetensors"))
    result = run("diff", "--json", a, tmp_path / "b.safetensors")
    _assert_terminal_safe(result)
    assert "x\\u202egpj.exe" in result.stdout  # a JSON escape: parses back to the exact name
    document = json.loads(result.stdout)
    assert BIDI in json.dumps(document, ensure_ascii=False)


def test_npz_member_names_are_escaped(run: Callable[..., Result], tmp_path: Path) -> None:
    path = tmp_path / "h.npz"
    np.savez(path, **{"m\x1b[1mbold": np.zeros(2), "n\u202ex": np.ones(1)})
    result = run("ls", path)
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result)
    assert "m\\x1b[1mbold" in result.stdout and "n\\u202ex" in result.stdout


def test_hdf5_dataset_names_are_escaped(run: Callable[..., Result], tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["k\x1b[2Jx"] = np.zeros(2, np.float32)
        f["line\nbreak"] = np.ones(2, np.float32)
    result = run("ls", path)
    _assert_terminal_safe(result)
    assert ("k\\x1b[2Jx" in result.stdout) or ("k\\x1b[2Jx" in result.stderr)


def test_open_error_shows_escaped_path(run: Callable[..., Result], tmp_path: Path) -> None:
    bad = tmp_path / "bad\x1b[2J\x9b.safetensors"
    bad.write_bytes(b"not a safetensors file at all")
    for command in ("ls", "verify", "show"):
        result = run(command, bad, "x") if command == "show" else run(command, bad)
        assert result.exit_code == 2, result.output
        _assert_terminal_safe(result)
        assert "bad\\x1b[2J\\x9b.safetensors" in result.stderr
        assert result.stderr.count("\n") == 1


def test_error_with_newline_in_path_stays_one_line(run: Callable[..., Result], tmp_path: Path) -> None:
    missing = tmp_path / "gone\nvarstore: error: fake"
    result = run("ls", missing)
    assert result.exit_code == 2, result.output
    _assert_terminal_safe(result)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("varstore: error: ")


def test_convert_report_is_escaped(run: Callable[..., Result], tmp_path: Path) -> None:
    source = tmp_path / "h.safetensors"
    save_file({CLEAR: np.zeros(2, np.float32), "keep": np.ones(1, np.float32)}, str(source))
    result = run("convert", source, tmp_path / "out.h5", "--rename", f"{CLEAR}=clean", "-v")
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result)
    assert "a\\x1b[2Jb" in result.stdout and "clean" in result.stdout


def test_convert_refusing_a_hostile_name_escapes_it(run: Callable[..., Result], tmp_path: Path) -> None:
    result = run("convert", _hostile_safetensors(tmp_path / "h.safetensors"), tmp_path / "out.h5")
    assert result.exit_code == 2, result.output
    _assert_terminal_safe(result)
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "out.h5").exists()
