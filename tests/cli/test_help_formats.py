"""`varstore --help` names every format read and written, from the format registry (issue 38, item 6)."""

from __future__ import annotations

from varstore import read_format_names, write_format_names
from varstore.formats import FormatEntry, register_format, unregister_format


def _help_words(run) -> str:
    result = run("--help")
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())  # click wraps the lists: compare without line breaks


def test_help_lists_every_registered_format(run):
    text = _help_words(run)
    assert f"read {', '.join(read_format_names())}" in text
    assert f"written {', '.join(write_format_names())}" in text
    for family in ("pytorch", "gguf", "orbax", "dcp", "safetensors", "tf", "keras3", "npz"):
        assert family in read_format_names()
    for family in ("pt", "gguf", "orbax", "dcp", "safetensors", "tf", "npz", "h5", "zarr"):
        assert family in write_format_names()


def test_help_follows_the_registry(run):
    register_format(FormatEntry("toyfmt", "a toy format", suffixes=(".toy",), open=lambda path, **_: None))
    try:
        assert "toyfmt" in _help_words(run).split("written")[0]
    finally:
        unregister_format("toyfmt")
    assert "toyfmt" not in _help_words(run)
