"""varstore_cli.formatting and the CLI's option parsing / progress helpers (no checkpoint files)."""

from __future__ import annotations

import io

import click
import numpy as np
import pytest

from varstore.checkpoint.read.reader_api import VariableInfo
from varstore.dtypes import bfloat16
from varstore.errors import ChecksumError
from varstore.inspect import scope_tree
from varstore_cli import formatting as fmt
from varstore_cli.convert_command import make_progress, parse_rename
from varstore_cli.main import error_message


@pytest.mark.parametrize("nbytes, text", [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * 2**20, "5.0 MiB"),
    (90_868_840, "86.7 MiB"), (3 * 2**30, "3.0 GiB"), (2**50, "1.0 PiB"), (2**60, "1024.0 PiB")])
def test_human_size(nbytes, text):
    assert fmt.human_size(nbytes) == text


def test_shapes_flags_collections():
    assert fmt.format_shape(()) == "[]"
    assert fmt.format_shape((5, 5, 3, 32)) == "[5, 5, 3, 32]"
    assert [fmt.format_flag(v) for v in (True, False, None)] == ["yes", "no", "-"]
    assert fmt.format_collections(()) == "-"
    assert fmt.format_collections(("global_variables", "mine")) == "global_variables,mine"


def test_numbers_and_values():
    assert fmt.format_number(None) == "-"
    assert fmt.format_number(2**62) == "4611686018427387904"
    assert fmt.format_number(1 / 3) == "0.3333333"
    assert fmt.format_number(float("-inf")) == "-inf"
    assert fmt.format_values(np.array([1.5, np.nan], dtype=bfloat16)) == "[1.5, nan]"
    assert fmt.format_values(np.array([b"ab", b""])) == "['ab', '']"
    assert fmt.format_values(np.array([b"ab", b"de"])) == fmt.format_values(np.array(["ab", "de"]))  # one rendering
    assert fmt.format_values(np.array([b"\xff\xc3\xbc"])) == r"['\\xffü']"  # invalid UTF-8 escaped
    assert fmt.format_values(np.array([1 - 2j], np.complex64)) == "[1-2j]"
    assert fmt.format_values(np.array([True, False])) == "[True, False]"


def test_json_values():
    assert fmt.json_values(np.array([1.0, np.inf, -np.inf, np.nan], np.float32)) == [1.0, "inf", "-inf", "nan"]
    assert fmt.json_values(np.array([3 + 4j])) == [[3.0, 4.0]]
    assert fmt.json_values(np.array([b"caf\xc3\xa9", b"\xff"])) == ["café", "\\xff"]
    assert fmt.json_values(np.array([[1, 2]], np.uint8)) == [1, 2]


def test_table_aligns_columns_and_right_aligns_sizes():
    lines = fmt.table([["a", "12 B"], ["long_name", "1.5 KiB"]], ["name", "size"], right=(1,))
    assert lines == ["name          size",
                     "a             12 B",
                     "long_name  1.5 KiB"]
    assert fmt.table([]) == []


def test_tree_lines_with_a_name_that_is_also_a_scope():
    tree = scope_tree([VariableInfo("a", (3,), "float32", 12), VariableInfo("a/b", (2, 2), "float64", 32),
                       VariableInfo("c/d", (), "int32", 4)])
    assert fmt.tree_lines(tree, "ckpt.h5") == [
        "ckpt.h5    3 variables           48 B",
        "├── a      [3]          float32  12 B",
        "├── a/     1 variable            32 B",
        "│   └── b  [2, 2]       float64  32 B",
        "└── c/     1 variable             4 B",
        "    └── d  []           int32     4 B",
    ]


def test_tree_lines_layout_exactly():
    tree = scope_tree([VariableInfo("enc/w", (4, 3), "float32", 48), VariableInfo("enc/b", (3,), "float32", 12),
                       VariableInfo("step", (), "int64", 8)])
    assert fmt.tree_lines(tree, ".") == [
        ".          3 variables           68 B",
        "├── enc/   2 variables           60 B",
        "│   ├── b  [3]          float32  12 B",
        "│   └── w  [4, 3]       float32  48 B",
        "└── step   []           int64     8 B",
    ]


def test_parse_rename():
    assert parse_rename(("a/=b/", "x=", "k=v=w")) == [("a/", "b/"), ("x", ""), ("k", "v=w")]
    with pytest.raises(click.BadParameter, match="OLD=NEW"):
        parse_rename(("nothing",))
    with pytest.raises(click.BadParameter, match="OLD=NEW"):
        parse_rename(("=new",))


def test_progress_bar_draws_bytes_and_name_on_the_given_stream():
    stream = io.StringIO()
    update, close = make_progress(True, stream=stream, mininterval_s=0)
    assert update is not None
    update(0, 2048, "enc/w")
    update(1024, 2048, "enc/w")
    update(2048, 2048, "enc/b")
    close()
    text = stream.getvalue()
    assert "50%" in text and "100%" in text and "enc/b" in text and "2.00k" in text


def test_no_progress_bar_when_disabled():
    update, close = make_progress(False)
    assert update is None
    close()


def test_error_message_is_one_line_and_names_the_path():
    # a VarstoreError's newline comes from a name or path in a file: kept, and shown as \x0a by the bridge
    # (tests/cli/test_terminal_safety_usage.py), never folded into a space that hides it
    assert error_message(ChecksumError("bad 'w' in 'x\n.h5'")) == "bad 'w' in 'x\n.h5'"
    assert error_message(ValueError("bad value\n  second line")) == "bad value second line"
    assert error_message(FileNotFoundError(2, "No such file or directory", "/no/such")) == \
        "'/no/such': No such file or directory"
    assert error_message(PermissionError(13, "Permission denied")) == "Permission denied"
