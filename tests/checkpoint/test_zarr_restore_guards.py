"""A bulk restore from a Zarr checkpoint keeps every guard of its per-array metadata (issue 39, round 3).

The restore reads each array's zarr.json (through one descriptor, special_files.read_regular_file) and
its chunk file by name; issue 39 made those reads cheaper, not fewer. Pinned here for both restores
cpu.py measures, into variables holding memory (W1 `restore`) and into variables without memory (a
fresh store): a chunk file symlinked out of the checkpoint, a chunk file swapped for a FIFO, a truncated
chunk and a zarr.json edited to another data type or shape are each refused with a typed error naming
the variable or file, and no target changes; a symlink that stays inside the checkpoint still reads.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from varstore import restore, save
from varstore.errors import CorruptCheckpointError, SpecialFileError
from varstore.store.scopes import VariableStore

VALUES = {"dense/kernel": np.arange(24, dtype=np.float32).reshape(4, 6) / 7,
          "dense/bias": np.linspace(-1, 1, 6).astype(np.float32)}
KERNEL_CHUNK = "dense/kernel/0.0"


@pytest.fixture
def ck(tmp_path: Path) -> Path:
    path = tmp_path / "model.zarr"
    save(path, VALUES, pack_threshold_bytes=0)  # per-variable: one chunk file per array
    assert (path / KERNEL_CHUNK).is_file()
    return path


def _store(materialized: bool) -> VariableStore:
    store = VariableStore()
    for name, value in VALUES.items():
        store.get_variable(name, shape=value.shape, dtype=value.dtype,
                           initializer=lambda shape, dtype, *a, **k: np.full(shape, 9.0, dtype))
    if materialized:
        store.initialize()
    return store


def _unchanged(store: VariableStore, materialized: bool) -> None:
    for variable in store.variables():
        if materialized:
            assert (variable.host_view() == 9.0).all(), variable.name
        else:
            assert not variable.is_initialized, variable.name


@pytest.mark.parametrize("materialized", [True, False])
def test_a_chunk_symlinked_out_of_the_checkpoint_is_refused(ck: Path, tmp_path: Path, materialized: bool) -> None:
    outside = tmp_path / "secret.bin"
    outside.write_bytes((ck / KERNEL_CHUNK).read_bytes())  # the right bytes, the right size: still refused
    (ck / KERNEL_CHUNK).unlink()
    (ck / KERNEL_CHUNK).symlink_to(outside)
    store = _store(materialized)
    with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*outside.*secret\.bin"):
        restore(ck, store)
    _unchanged(store, materialized)


@pytest.mark.parametrize("materialized", [True, False])
def test_a_symlink_that_stays_inside_the_checkpoint_still_reads(ck: Path, materialized: bool) -> None:
    shutil.copyfile(ck / KERNEL_CHUNK, ck / "dense" / "kernel-copy")
    (ck / KERNEL_CHUNK).unlink()
    (ck / KERNEL_CHUNK).symlink_to(Path("..") / "kernel-copy")
    store = _store(materialized)
    restore(ck, store)
    for variable in store.variables():
        np.testing.assert_array_equal(variable.host_view(), VALUES[variable.name])


@pytest.mark.parametrize("materialized", [True, False])
def test_a_chunk_swapped_for_a_fifo_is_refused_never_opened_blocking(ck: Path, materialized: bool) -> None:
    chunk = ck / KERNEL_CHUNK
    chunk.unlink()
    os.mkfifo(chunk)
    keeper = os.open(chunk, os.O_RDWR | os.O_NONBLOCK)  # a writer held: a broken guard fails here, never hangs
    try:
        store = _store(materialized)
        with pytest.raises(SpecialFileError, match=r"dense/kernel/0\.0.*FIFO"):
            restore(ck, store)
        _unchanged(store, materialized)
    finally:
        os.close(keeper)


@pytest.mark.parametrize("materialized", [True, False])
def test_a_truncated_chunk_is_refused_before_any_target_changes(ck: Path, materialized: bool) -> None:
    chunk = ck / KERNEL_CHUNK
    chunk.write_bytes(chunk.read_bytes()[:50])
    store = _store(materialized)
    with pytest.raises(CorruptCheckpointError, match=r"dense/kernel/0\.0.*50 bytes"):
        restore(ck, store)
    _unchanged(store, materialized)


@pytest.mark.parametrize("materialized", [True, False])
@pytest.mark.parametrize(("field", "edited", "found"), [("data_type", "int32", r"data type int32"),
                                                        ("shape", [6, 4], r"shape \[6, 4\]")])
def test_a_zarr_json_edited_to_another_dtype_or_shape_is_refused(ck: Path, materialized: bool, field: str,
                                                                 edited: object, found: str) -> None:
    meta = ck / "dense" / "kernel" / "zarr.json"
    document = json.loads(meta.read_text())
    document[field] = edited
    if field == "shape":
        document["chunk_grid"]["configuration"]["chunk_shape"] = edited
    meta.write_text(json.dumps(document))
    store = _store(materialized)
    with pytest.raises(CorruptCheckpointError,
                       match=rf"'dense/kernel'.*{found}.*its index says \[4, 6\] and float32"):
        restore(ck, store)
    _unchanged(store, materialized)
