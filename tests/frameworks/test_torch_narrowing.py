"""Issue 37 item 1 for varstore.torch: a restore into a narrower tensor never changes a value silently.

TF refuses a restore whose dtype differs (InvalidArgumentError); varstore.torch allows a 'same_kind'
cast that changes no value and raises ValueOutOfRangeError for one that would (torch's copy_ would
give inf or wrap).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from varstore.errors import ValueOutOfRangeError

torch = pytest.importorskip("torch")
vt = pytest.importorskip("varstore.torch")


def test_staged_and_direct_tensors_refuse_a_changed_value(tmp_path: Path) -> None:
    path = tmp_path / "tied.h5"
    shared = torch.tensor([1.0, 1e5])
    vt.save(path, {"a": shared, "b": shared})  # saved once, 'b' an alias: 'b' is restored through staging
    a, b = torch.zeros(2, dtype=torch.float16), torch.zeros(2, dtype=torch.float16)
    with pytest.raises(ValueOutOfRangeError, match=r"'b'.*100000\.0.*float16.*inf"):
        vt.restore(path, {"a": a, "b": b})
    assert a.tolist() == [0.0, 0.0] and b.tolist() == [0.0, 0.0]  # nothing changed
    with pytest.raises(ValueOutOfRangeError, match="100000.0"):
        vt.restore(path, {"a": a}, strict=False)
    fits = tmp_path / "fits.h5"
    vt.save(fits, {"a": torch.tensor([1.5, -2.0])})
    vt.restore(fits, {"a": a})  # a cast that changes nothing stays allowed
    assert a.tolist() == [1.5, -2.0]
