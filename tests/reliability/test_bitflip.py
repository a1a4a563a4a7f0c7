"""Bit flips: data flips are ChecksumErrors naming the variable (read, restore, `varstore verify`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ._damage import flip_campaign
from ._sources import CHECKSUMMED, make_sources, write_own


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("flips")
    return flip_campaign(make_sources(work / "sources"), work / "runs", flips=12, seed=3)


@pytest.mark.parametrize("label", sorted(CHECKSUMMED))
def test_data_flips_are_detected_everywhere(figures: dict, label: str) -> None:
    data = figures[label]["data"]
    assert data["flips"] == 12
    assert data["detected"] == 12, data["misses"]


@pytest.mark.parametrize("label", ["varstore .h5", "varstore .zarr", "TF .index", "safetensors", "npz",
                                   "npz (deflated)", "Keras .weights.h5", "PyTorch .pt (zip)",
                                   "PyTorch .pt (legacy)", "GGUF"])
def test_other_flips_never_crash_hang_or_escape_untyped(figures: dict, label: str) -> None:
    other = figures[label]["other"]
    assert other["cases"] == 12
    assert (other["untyped"], other["crashes"], other["hangs"]) == (0, 0, 0), other


def test_tf_index_flips_never_change_values_silently(figures: dict) -> None:
    assert figures["TF .index"]["other"]["wrong"] == 0  # every table block carries a masked crc32c


def test_npz_data_flip_is_caught_by_the_zip_crc(tmp_path: Path) -> None:
    """Regression: npz members were read without reaching the end, so zipfile never checked CRC-32."""
    import numpy as np

    from varstore.formats.plain.npz import NpzReader
    from varstore.errors import CorruptCheckpointError

    path = tmp_path / "a.npz"
    np.savez(path, weights=np.arange(100, dtype=np.float32))
    raw = bytearray(path.read_bytes())
    raw[raw.index(np.arange(100, dtype=np.float32).tobytes()) + 40] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError, match="weights"):
        with NpzReader(path) as reader:
            reader.read("weights")


def test_deflated_npz_damage_is_a_typed_error(tmp_path: Path) -> None:
    """Regression: a damaged deflate stream escaped as a raw zlib.error."""
    import numpy as np

    from varstore.formats.plain.npz import NpzReader
    from varstore.errors import CorruptCheckpointError

    path = tmp_path / "a.npz"
    np.savez_compressed(path, weights=np.arange(1000, dtype=np.float32))
    raw = bytearray(path.read_bytes())
    for offset in range(60, 90):
        raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError):
        with NpzReader(path) as reader:
            reader.read("weights")


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_flip_in_a_variable_name_is_detected(tmp_path: Path, fmt: str) -> None:
    """Regression: the manifest had no checksum of its own; a flipped name bit renamed a variable silently."""
    from varstore.checkpoint import open_varstore as open_checkpoint
    from varstore.errors import VarstoreError

    path = write_own(tmp_path, fmt)
    target = path if fmt == "h5" else path / "_varstore/manifest/0"
    raw = bytearray(target.read_bytes())
    at = raw.index(b'"global_step"') + 8  # "global_step" -> "global_qtep"
    raw[at] ^= 0x02
    target.write_bytes(bytes(raw))
    with pytest.raises(VarstoreError):
        with open_checkpoint(path) as reader:
            names = reader.keys()
            for name in names:
                reader.read(name)
            assert "global_step" in names, json.dumps(names)


def test_zip_with_a_damaged_version_field_is_a_typed_error(tmp_path: Path) -> None:
    """Regression (full flip run): a flipped 'version needed' byte escaped detection as NotImplementedError."""
    import numpy as np

    from varstore import open_checkpoint
    from varstore.errors import VarstoreError

    path = tmp_path / "a.npz"
    np.savez_compressed(path, weights=np.arange(10.0))
    raw = bytearray(path.read_bytes())
    central = raw.index(b"PK\x01\x02")
    raw[central + 6] = 109  # "version needed to extract" 10.9
    path.write_bytes(bytes(raw))
    with pytest.raises(VarstoreError):
        with open_checkpoint(path) as reader:
            reader.read("weights")
