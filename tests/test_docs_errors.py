"""docs/errors.md has one entry per error class, and every class is rooted at VarstoreError."""

from __future__ import annotations

from pathlib import Path

import varstore.errors as errors

DOC = (Path(__file__).resolve().parent.parent / "docs" / "errors.md").read_text(encoding="utf-8")


def test_every_error_class_is_documented_and_rooted() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.VarstoreError), name
        assert f"| `{name}` |" in DOC, f"docs/errors.md lacks {name}"


def test_errors_keep_builtin_bases_for_tf_style_callers() -> None:
    assert issubclass(errors.ShapeMismatchError, ValueError)
    assert issubclass(errors.DtypeMismatchError, TypeError)
    assert issubclass(errors.CheckpointNotFoundError, FileNotFoundError)
    assert issubclass(errors.ChecksumError, errors.CorruptCheckpointError)
    assert issubclass(errors.UnsafeFormatError, errors.UnsupportedFormatError)
    err = errors.RestoreError("2 missing", missing=["a"], unexpected=["b"])
    assert str(err) == "2 missing" and err.missing == ["a"] and err.unexpected == ["b"]
