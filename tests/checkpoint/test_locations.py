"""Where variable bytes are (checkpoint/read/locations.py): claimed sizes are checked against real ones before allocating."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.checkpoint.damage import VALUES, rewrite_zarr_manifest
from varstore import save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.errors import CorruptCheckpointError, UnsafeCheckpointError

@pytest.mark.parametrize("packed", [False, True])
def test_huge_claim_is_refused_before_allocating(tmp_path: Path, packed: bool) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES, pack_threshold_bytes=1 << 20 if packed else 0, layout="packed")
    huge = 10**15

    def edit(document: dict) -> None:
        columns = document["variables"]
        row = columns["name"].index("dense/kernel")
        columns["shape"][row] = [huge // 4]
        columns["nbytes"][row] = huge
        if packed:
            document["packed"]["nbytes"] = huge + 10**6

    rewrite_zarr_manifest(path, edit)
    if not packed:
        meta_file = path / "dense/kernel/zarr.json"
        meta = json.loads(meta_file.read_text())
        meta["shape"] = meta["chunk_grid"]["configuration"]["chunk_shape"] = [huge // 4]
        meta_file.write_text(json.dumps(meta))
    if packed:  # its claimed range now covers the other packed variables': refused at open (aliasing)
        with pytest.raises(UnsafeCheckpointError, match=r"'dense/kernel' \(bytes 0\.\.1000000000000000\)"):
            open_checkpoint(path)
        return
    with open_checkpoint(path) as reader:
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*\d{16}"):
            reader.read("dense/kernel")
        with pytest.raises(CorruptCheckpointError, match="dense/kernel"):
            reader.verify()


def test_h5_claim_larger_than_the_file_is_refused(tmp_path: Path) -> None:
    from varstore.checkpoint.read.reader import VarstoreReader

    path = tmp_path / "model.h5"
    save(path, VALUES, pack_threshold_bytes=0)
    with open_checkpoint(path) as reader:
        assert reader._direct
        record = reader.record("dense/kernel")
        record.file_offset = path.stat().st_size - 16  # the claim runs past the end of the file
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*only \d+ bytes"):
            reader.read("dense/kernel")
    assert isinstance(reader, VarstoreReader)
