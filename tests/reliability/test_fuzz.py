"""Fuzzing every parser varstore owns with hypothesis (profile "ci": 40 examples; HYPOTHESIS_PROFILE=long: 5000)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import settings

from ._fuzz import TARGETS, _manifest_in_checkpoint, campaign

@pytest.mark.parametrize("name", list(TARGETS))
def test_parser_raises_only_varstore_errors(name: str) -> None:
    stats = campaign(name, settings().max_examples)
    assert stats["cases"] >= 10
    assert stats["untyped"] == 0, json.dumps(stats["examples"], indent=1)


@pytest.mark.parametrize("edits", [
    [("shape", 0, [3, 3])],             # shape x itemsize != nbytes
    [("dtype", 1, "float99")],          # unknown dtype
    [("dup", 0, None)],                 # duplicate names
    [("offset", 1, 10**15)],            # packed offset out of range
    [("nbytes", 0, 10**15)],            # nbytes != shape x itemsize (regression: was not compared)
])
def test_wrong_manifest_columns_give_typed_errors(edits: list) -> None:
    from varstore.errors import VarstoreError

    with pytest.raises(VarstoreError):
        _manifest_in_checkpoint(edits)


@pytest.mark.parametrize("edits", [[("packed.path", 0, 0)], [("packed.nbytes", 0, [1])], [("packed.path", 0, None)]])
def test_wrong_packed_header_gives_typed_error(edits: list) -> None:
    """Regression: a non-string packed.path or non-integer packed.nbytes escaped as TypeError."""
    from varstore.errors import VarstoreError

    with pytest.raises(VarstoreError):
        _manifest_in_checkpoint(edits)


def test_negative_dimension_gives_typed_error() -> None:
    """Regression: a negative dimension escaped as numpy's ValueError when the value was allocated."""
    from varstore.errors import VarstoreError

    with pytest.raises(VarstoreError):
        _manifest_in_checkpoint([("shape", 2, [-1])])


def test_tf_shape_past_numpy_limits_is_a_typed_error() -> None:
    """Regression (long fuzz run): an empty shape with huge extents escaped as numpy's ValueError."""
    from varstore.formats.tensorflow import _bundle_format as fmt
    from varstore.errors import CorruptCheckpointError

    from ._fuzz import _field

    shape = _field(2, _field(1, 0)) + _field(2, _field(1, 2**63 - 1)) + _field(2, _field(1, 2**40))
    with pytest.raises(CorruptCheckpointError, match="larger than any array"):
        fmt.parse_entry(b"w", _field(1, 1) + _field(2, shape), "test")


def test_npz_shape_past_numpy_limits_is_a_typed_error(tmp_path: Path) -> None:
    """Regression (long fuzz run): shape (0, 2**64 + 5, 0) escaped as OverflowError."""
    import struct
    import zipfile

    from varstore.formats.plain.npz import NpzReader
    from varstore.errors import CorruptCheckpointError

    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': (0, %d, 0), }" % (2**64 + 5)).ljust(118) + "\n"
    path = tmp_path / "a.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    with pytest.raises(CorruptCheckpointError, match="a.npy"):
        NpzReader(path)
