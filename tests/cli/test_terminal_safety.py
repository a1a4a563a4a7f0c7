"""Names, attributes, metadata and paths from hostile files never reach a terminal raw (issue 26).

varstore's own save refuses control characters in names, so the hostile files
here are foreign formats the CLI reads: a hand-written safetensors header, npz
member names and a plain HDF5 file written with h5py.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

from varstore_cli.terminal import escape_for_terminal

HOSTILE = ["a\x1b[2Jb", "x\ny", "bel\x07", "rtl\u202eevil", "enc.c1\x85", "é層😀/ok"]
ESCAPED = ["a\\x1b[2Jb", "x\\x0ay", "bel\\x07", "rtl\\u202eevil", "enc.c1\\x85", "é層😀/ok"]
# every C0 but the row-ending newline, DEL, C1, and the bidi controls
_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _assert_terminal_safe(text: str) -> None:
    found = _UNSAFE.findall(text)
    assert not found, f"raw control characters reached the terminal: {found!r} in {text!r}"


def _safetensors(path: Path, names: list[str]) -> Path:
    header: dict[str, object] = {}
    data = b""
    for name in names:
        header[name] = {"dtype": "F32", "shape": [2], "data_offsets": [len(data), len(data) + 8]}
        data += np.array([1.5, -2.0], dtype="<f4").tobytes()
    header["__metadata__"] = {"note": "csi\x1b[31mred"}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    return _safetensors(tmp_path / "hostile.safetensors", HOSTILE)


@pytest.fixture
def hostile_h5(tmp_path: Path) -> Path:
    path = tmp_path / "hostile.h5"
    with h5py.File(path, "w") as f:
        dataset = f.create_dataset("d\x1bE\nx", data=np.zeros(2))
        dataset.attrs["note"] = "v\x1b[2J"
        f.create_dataset("plain", data=np.ones(2))
    return path


@pytest.mark.parametrize(("text", "expected"), [
    ("a\x1b[2Jb", "a\\x1b[2Jb"), ("x\ny\r\tz", "x\\x0ay\\x0d\\x09z"), ("\x00\x7f\x80\x9f", "\\x00\\x7f\\x80\\x9f"),
    ("rtl\u202eevil\u2066", "rtl\\u202eevil\\u2066"), ("back\\slash", "back\\slash"), ("é層😀", "é層😀"),
])
def test_escape_for_terminal_spells_controls_as_escapes(text: str, expected: str) -> None:
    assert escape_for_terminal(text) == expected


def test_ls_escapes_names_and_keeps_one_row_per_variable(run, hostile: Path) -> None:
    result = run("ls", hostile)
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result.stdout + result.stderr)
    lines = result.stdout.splitlines()
    assert len(lines) == 1 + 1 + len(HOSTILE) + 1  # description, header, one row per variable, total
    assert [line.split("  ")[0] for line in lines[2:-1]] == ESCAPED
    assert lines[-1] == "total: 6 variables, 12 elements, 48 B"


def test_ls_tree_escapes_names(run, hostile: Path) -> None:
    result = run("ls", "--tree", hostile)
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result.stdout + result.stderr)
    for escaped in ["a\\x1b[2Jb", "x\\x0ay", "bel\\x07", "rtl\\u202eevil", "enc.c1\\x85"]:
        assert sum(escaped in line for line in result.stdout.splitlines()) == 1
    # root, 5 top-level variables, the scope "é層😀/" and its variable "ok", the total
    assert len(result.stdout.splitlines()) == 1 + 1 + 5 + 2 + 1


@pytest.mark.parametrize("args", [(), ("--tree",)])
def test_ls_json_keeps_the_exact_names(run, hostile: Path, args: tuple[str, ...]) -> None:
    result = run("ls", "--json", *args, hostile)
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result.stdout)
    document = json.loads(result.stdout)
    assert [v["name"] for v in document["variables"]] == HOSTILE
    assert document["metadata"] == {"note": "csi\x1b[31mred"}


def test_npz_member_names_are_escaped(run, tmp_path: Path) -> None:
    path = tmp_path / "hostile.npz"
    np.savez(path, **{"a\x1b[2Jb": np.zeros(2), "x\ny": np.ones(3)})
    result = run("ls", path)
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result.stdout)
    assert [line.split("  ")[0] for line in result.stdout.splitlines()[2:-1]] == ["a\\x1b[2Jb", "x\\x0ay"]


def test_show_escapes_the_name_and_attributes_of_a_plain_hdf5_dataset(run, hostile_h5: Path) -> None:
    result = run("show", hostile_h5, "d\x1bE\nx")
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result.stdout + result.stderr)
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines() if not line.startswith("attribute"))
    assert rows["name"] == "d\\x1bE\\x0ax"
    assert 'attribute note  "v\\u001b[2J"' in result.stdout.splitlines()
    document = json.loads(run("show", "--json", hostile_h5, "d\x1bE\nx").stdout)
    assert document["variable"]["name"] == "d\x1bE\nx"
    assert document["variable"]["attributes"] == {"note": "v\x1b[2J"}


def test_ls_and_verify_of_a_plain_hdf5_file(run, hostile_h5: Path) -> None:
    listing = run("ls", hostile_h5)
    assert [line.split("  ")[0] for line in listing.stdout.splitlines()[2:-1]] == ["d\\x1bE\\x0ax", "plain"]
    verified = run("verify", hostile_h5)
    assert verified.exit_code == 0, verified.output
    _assert_terminal_safe(listing.stdout + verified.stdout + verified.stderr)
    assert verified.stdout.startswith("ok: ") and len(verified.stdout.splitlines()) == 1


def test_diff_escapes_names(run, tmp_path: Path) -> None:
    a = _safetensors(tmp_path / "a.safetensors", HOSTILE[:3])
    b = _safetensors(tmp_path / "b.safetensors", HOSTILE[2:])
    result = run("diff", a, b)
    assert result.exit_code == 1, result.output
    _assert_terminal_safe(result.stdout + result.stderr)
    rows = result.stdout.splitlines()[2:-1]
    assert [row.split()[:2] for row in rows] == [
        ["added", "rtl\\u202eevil"], ["added", "enc.c1\\x85"], ["added", "é層😀/ok"],
        ["removed", "a\\x1b[2Jb"], ["removed", "x\\x0ay"]]
    document = json.loads(run("diff", "--json", a, b).stdout)
    assert document["added"] == HOSTILE[3:] and document["removed"] == HOSTILE[:2]


def test_convert_escapes_the_rename_listing_and_summary(run, hostile: Path, tmp_path: Path) -> None:
    result = run("convert", hostile, tmp_path / "out.safetensors", "--separator", ".", "--rename", "a=A", "-v")
    assert result.exit_code == 0, result.output
    _assert_terminal_safe(result.stdout + result.stderr)
    assert result.stdout.splitlines()[1:] == [
        "renamed 2 variables:",
        "  a\\x1b[2Jb   ->  A\\x1b[2Jb",
        "  enc.c1\\x85  ->  enc/c1\\x85",
    ]
    document = json.loads(run("convert", "--json", "--force", hostile, tmp_path / "out.safetensors",
                              "--separator", ".", "--rename", "a=A").stdout)
    assert document["renamed"] == {"a\x1b[2Jb": "A\x1b[2Jb", "enc.c1\x85": "enc/c1\x85"}


def test_convert_refusal_names_the_variable_escaped(run, hostile: Path, tmp_path: Path) -> None:
    result = run("convert", hostile, tmp_path / "out.h5")
    assert result.exit_code == 2
    _assert_terminal_safe(result.stdout + result.stderr)
    assert result.stderr.count("\n") == 1
    assert "'a\\x1b[2Jb'" in result.stderr


@pytest.mark.parametrize("content", [b"garbage", None])
def test_an_error_about_a_hostile_path_is_one_escaped_line(run, tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "bad\x1b[2J\n\u202e.h5"
    if content is not None:
        path.write_bytes(content)
    result = run("ls", path)
    assert result.exit_code == 2
    assert result.stdout == ""
    _assert_terminal_safe(result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("varstore: error: ")
    assert "bad\\x1b[2J\\x0a\\u202e.h5" in result.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (("convert", "{src}", "{dst}", "--rename", "a\x1b[2J"), "rename rule 'a\\x1b[2J' needs the form OLD=NEW"),
    (("cmd\x1b[2J",), "No such command 'cmd\\x1b[2J'."),
    (("ls", "--nope\x07", "{src}"), "No such option '--nope\\x07'."),
    (("ls", "--format", "x\u202e", "{src}"), "unknown checkpoint format 'x\\u202e'"),
])
def test_usage_errors_repeat_the_argument_escaped(run, hostile: Path, tmp_path: Path,
                                                  args: tuple[str, ...], expected: str) -> None:
    result = run(*(a.format(src=hostile, dst=tmp_path / "out.h5") for a in args))
    assert result.exit_code == 2
    _assert_terminal_safe(result.stdout + result.stderr)
    assert expected in result.stderr


def test_skipped_lists_of_ls_and_convert_are_escaped(run, tmp_path: Path) -> None:
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
    _assert_terminal_safe(listing.stdout + converted.stdout + converted.stderr + refused.stderr)
    document = json.loads(run("ls", "--json", "--skip-object-arrays", path).stdout)
    assert [s["name"] for s in document["skipped"]] == ["obj\x1b[2J\n"]
