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
    pytest.param([("nbytes", 0, 10**15)], marks=pytest.mark.xfail(strict=True, reason=(
        "BUG (checkpoint layer, minor): the nbytes column is not compared with shape x itemsize; the values "
        "still read back correctly"))),  # huge byte count
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
