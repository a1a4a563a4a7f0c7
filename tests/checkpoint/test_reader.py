"""The lazy reader (checkpoint/read/reader.py): the manifest's own crc32c guards both ways of reading it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.checkpoint.damage import (
    VALUES,
    flip_name,
    manifest_bytes,
    root_attrs,
    set_root_attr,
    wipe_index_header,
)
from varstore import save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.errors import CorruptCheckpointError

def test_manifest_crc32c_is_a_root_attribute(ckpt: Path) -> None:
    from varstore.checkpoint.format.checksum import crc32c_raw

    save(ckpt, VALUES)
    assert int(root_attrs(ckpt)["varstore_manifest_crc32c"]) == crc32c_raw(manifest_bytes(ckpt))


def test_flipped_manifest_is_refused_naming_the_file(ckpt: Path) -> None:
    save(ckpt, VALUES)
    flip_name(ckpt)
    with pytest.raises(CorruptCheckpointError, match=rf"manifest of '{ckpt}'.*crc32c"):
        open_checkpoint(ckpt)


@pytest.mark.parametrize("keep", ["index header", "root attribute"])
def test_h5_library_path_checks_the_manifest_crc32c(tmp_path: Path, keep: str) -> None:
    """Without a matching index header the manifest comes through h5py; either recorded crc32c still guards it."""
    path = tmp_path / "model.h5"
    save(path, VALUES)
    flip_name(path)
    if keep == "index header":
        set_root_attr(path, "varstore_manifest_crc32c", None)
    else:
        wipe_index_header(path)
    with pytest.raises(CorruptCheckpointError, match="manifest.*crc32c"):
        open_checkpoint(path)


def test_files_without_a_manifest_crc32c_still_read(ckpt: Path) -> None:
    """Older writers recorded no manifest checksum (no root attribute, no index header)."""
    save(ckpt, VALUES)
    set_root_attr(ckpt, "varstore_manifest_crc32c", None)
    if ckpt.suffix == ".h5":
        wipe_index_header(ckpt)
    with open_checkpoint(ckpt) as reader:
        assert sorted(reader.keys()) == sorted(VALUES)
        np.testing.assert_array_equal(reader.read("dense/kernel"), VALUES["dense/kernel"])
