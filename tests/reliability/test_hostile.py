"""Hostile input: bad names, stores pointing outside themselves, hidden pickles. Nothing outside is read,
nothing is executed, every refusal is a typed error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from varstore.checkpoint import open_varstore
from varstore import save
from varstore import open_checkpoint
from varstore.errors import InvalidNameError, UnsafeFormatError, VarstoreError

from . import _hostile as hostile


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
@pytest.mark.parametrize("name", ["a/../b", "..", "/a", "a/", "a//b", "a\x00b", "a\nb", "./a", ""])
def test_save_refuses_bad_names(tmp_path: Path, fmt: str, name: str) -> None:
    with pytest.raises(InvalidNameError):
        save(tmp_path / f"m.{fmt}", {name: np.zeros(2)})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_long_and_unicode_names_round_trip(tmp_path: Path, fmt: str) -> None:
    values = {"x" * 300: np.arange(5000.0), "enc/" + "é" * 150 + "/w": np.ones(5000), "層/重み": np.arange(3),
              "a/__init__": np.zeros(5000), "zarr.json": np.ones(4000), "emoji/🙂": np.full(2, 7)}
    path = save(tmp_path / f"m.{fmt}", values)
    with open_varstore(path) as reader:
        assert sorted(reader.keys()) == sorted(values)
        for name, value in values.items():
            np.testing.assert_array_equal(reader[name], value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written next to it


def _values_of(path: Path) -> tuple[list[bytes], list[str], list[str]]:
    """Reads everything readable; returns (raw bytes of values, typed error names, skipped names)."""
    raw, errors = [], []
    try:
        reader = open_checkpoint(path)
    except VarstoreError as err:
        return [], [type(err).__name__], []
    with reader:
        for name in reader.keys():
            try:
                raw.append(np.ascontiguousarray(reader.read(name)).tobytes())
            except VarstoreError as err:
                errors.append(type(err).__name__)
        return raw, errors, [s.name for s in getattr(reader, "skipped", [])]


def _no_sentinel(raw: list[bytes]) -> bool:
    return all(hostile.SENTINEL.tobytes() not in value for value in raw)


def test_zarr_v2_symlink_out_of_the_group_is_skipped(tmp_path: Path) -> None:
    """Regression: the Zarr walker followed a symlinked array directory and read the outside file."""
    raw, errors, skipped = _values_of(hostile.zarr_v2_symlink_out(tmp_path))
    assert _no_sentinel(raw) and errors == []
    assert skipped == ["w"]
    assert len(raw) == 1 and raw[0] == np.arange(4, dtype=np.float32).tobytes()


def test_hdf5_links_vds_and_external_storage_are_not_followed(tmp_path: Path) -> None:
    raw, errors, skipped = _values_of(hostile.hdf5_links_out(tmp_path))
    assert _no_sentinel(raw) and errors == []
    assert sorted(skipped) == ["external_link", "external_raw", "virtual"]
    assert raw == [np.arange(4, dtype=np.float32).tobytes()]


def test_varstore_hdf5_with_an_external_link_never_reads_the_other_file(tmp_path: Path) -> None:
    raw, errors, _ = _values_of(hostile.varstore_h5_external_link(tmp_path))
    assert _no_sentinel(raw)
    assert all(e in ("ChecksumError", "CorruptCheckpointError") for e in errors)


def test_zarr_manifest_path_outside_is_refused(tmp_path: Path) -> None:
    """Regression: a manifest path with '..' parts was joined to the checkpoint directory and read."""
    raw, errors, _ = _values_of(hostile.zarr_manifest_path_out(tmp_path))
    assert _no_sentinel(raw) and errors == ["CorruptCheckpointError"]


def test_zarr_array_symlinked_outside_is_refused(tmp_path: Path) -> None:
    """Regression: an array directory symlinked out of the checkpoint was followed (only the crc32c stood in the way)."""
    raw, errors, _ = _values_of(hostile.zarr_symlink_out(tmp_path))
    assert _no_sentinel(raw) and errors == ["CorruptCheckpointError"]


@pytest.mark.parametrize("builder", sorted(hostile.PICKLES))
def test_pickles_are_never_unpickled(tmp_path: Path, builder: str) -> None:
    marker = tmp_path / "MARKER"
    path = hostile.PICKLES[builder](tmp_path, marker)
    targets = [path, tmp_path / "raw.pt"] if path.suffix == ".pt" else [path]
    for target in targets:
        raw, errors, skipped = _values_of(target)
        if target.suffix == ".h5":
            assert errors == [] and raw == [np.arange(3, dtype=np.int32).tobytes()]
            assert sorted(skipped) == ["opaque", "reference", "vlen_bytes", "vlen_string"]
        else:
            assert errors == ["UnsafeFormatError"]
    assert not marker.exists()


def test_pickle_refusal_says_why(tmp_path: Path) -> None:
    path = hostile.npz_with_pickle(tmp_path, tmp_path / "MARKER")
    with pytest.raises(UnsafeFormatError, match="w.npy.*object array"):
        open_checkpoint(path)
    assert not (tmp_path / "MARKER").exists()
