"""Regression tests for the checkpoint layer's reliability fixes (see docs/reliability.md).

Each test names the bug it guards: symlinks out of a Zarr checkpoint, the
manifest's own crc32c, claimed sizes checked before allocating, nbytes
against shape x itemsize, a damaged root format attribute, and descriptors
leaked by CheckpointManager.restore_latest.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from varstore.checkpoint import CheckpointManager, open_checkpoint, save
from varstore.errors import CorruptCheckpointError

VALUES = {"dense/kernel": np.arange(8 * 16, dtype=np.float32).reshape(8, 16),
          "dense/bias": np.arange(16, dtype=np.float32), "global_step": np.array(7, np.int64)}


def _rewrite_zarr_manifest(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Applies `edit` to a Zarr checkpoint's manifest document and stores it back (its crc32c updated)."""
    from varstore.checkpoint.checksum import crc32c_raw

    chunk = path / "_varstore/manifest/c/0"
    document = json.loads(chunk.read_bytes())
    edit(document)
    raw = json.dumps(document).encode()
    chunk.write_bytes(raw)
    meta_file = path / "_varstore/manifest/zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["shape"] = meta["chunk_grid"]["configuration"]["chunk_shape"] = [len(raw)]
    meta_file.write_text(json.dumps(meta))
    root = json.loads((path / "zarr.json").read_text())
    if "varstore_manifest_crc32c" in root["attributes"]:
        root["attributes"]["varstore_manifest_crc32c"] = crc32c_raw(raw)
        (path / "zarr.json").write_text(json.dumps(root))


# ------------------------------------------------------------ 1. symlinks out of a Zarr checkpoint
@pytest.mark.parametrize("link", ["dense/kernel", "dense/kernel/c", "dense"])
def test_zarr_symlink_leading_outside_is_refused(tmp_path: Path, link: str) -> None:
    """An array directory, a chunk directory or a group that is a symlink out of the checkpoint is refused."""
    outside = tmp_path / "outside.zarr"
    save(outside, {"dense/kernel": np.full((8, 16), -1.5, np.float32), "dense/bias": np.zeros(16, np.float32)},
         pack_threshold_bytes=0)
    path = tmp_path / "model.zarr"
    save(path, VALUES, pack_threshold_bytes=0)
    shutil.rmtree(path / link)
    os.symlink(outside / link, path / link)
    with open_checkpoint(path) as reader:
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*outside.*outside\.zarr"):
            reader.read("dense/kernel")
        np.testing.assert_array_equal(reader.read("global_step"), VALUES["global_step"])


def test_zarr_symlink_inside_the_checkpoint_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES, pack_threshold_bytes=0)
    os.rename(path / "dense/kernel/c", path / "moved_c")
    os.symlink(path / "moved_c", path / "dense/kernel/c")
    link = tmp_path / "link.zarr"
    os.symlink(path, link)  # the checkpoint itself reached through a symlink
    with open_checkpoint(link) as reader:
        np.testing.assert_array_equal(reader.read("dense/kernel"), VALUES["dense/kernel"])


# ------------------------------------------------------------ 3. claimed sizes checked before allocating
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

    _rewrite_zarr_manifest(path, edit)
    if not packed:
        meta_file = path / "dense/kernel/zarr.json"
        meta = json.loads(meta_file.read_text())
        meta["shape"] = meta["chunk_grid"]["configuration"]["chunk_shape"] = [huge // 4]
        meta_file.write_text(json.dumps(meta))
    with open_checkpoint(path) as reader:
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*\d{16}"):
            reader.read("dense/kernel")
        with pytest.raises(CorruptCheckpointError, match="dense/kernel"):
            reader.verify()


def test_h5_claim_larger_than_the_file_is_refused(tmp_path: Path) -> None:
    from varstore.checkpoint.reader import VarstoreReader

    path = tmp_path / "model.h5"
    save(path, VALUES, pack_threshold_bytes=0)
    with open_checkpoint(path) as reader:
        assert reader._direct
        record = reader.record("dense/kernel")
        record.file_offset = path.stat().st_size - 16  # the claim runs past the end of the file
        with pytest.raises(CorruptCheckpointError, match=r"'dense/kernel'.*only \d+ bytes"):
            reader.read("dense/kernel")
    assert isinstance(reader, VarstoreReader)


# ------------------------------------------------------------ 4. nbytes against shape x itemsize
def test_nbytes_disagreeing_with_shape_and_dtype_is_refused_on_open(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES)

    def edit(document: dict) -> None:
        columns = document["variables"]
        columns["nbytes"][columns["name"].index("dense/bias")] = 60

    _rewrite_zarr_manifest(path, edit)
    with pytest.raises(CorruptCheckpointError, match=r"'dense/bias' has nbytes 60.*\[16\].*float32 make 64"):
        open_checkpoint(path)


def test_unknown_dtype_is_refused_on_open(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES)

    def edit(document: dict) -> None:
        columns = document["variables"]
        columns["dtype"][columns["name"].index("dense/bias")] = "float99"

    _rewrite_zarr_manifest(path, edit)
    with pytest.raises(CorruptCheckpointError, match="'dense/bias' has an unknown dtype 'float99'"):
        open_checkpoint(path)


# ------------------------------------------------------------ 6. restore_latest closes its reader
def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_restore_latest_leaks_no_file_descriptors(tmp_path: Path, fmt: str) -> None:
    manager = CheckpointManager(tmp_path, format=fmt)
    manager.save(VALUES, step=1)
    target = {name: np.zeros_like(value) for name, value in VALUES.items()}
    manager.restore_latest(target)
    before = _open_descriptors()
    for _ in range(20):
        manager.restore_latest(target)
    assert _open_descriptors() == before
    np.testing.assert_array_equal(target["dense/kernel"], VALUES["dense/kernel"])


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_restore_latest_lazy_values_still_read_after_it_returns(tmp_path: Path, fmt: str) -> None:
    from varstore.scopes import VariableStore

    manager = CheckpointManager(tmp_path, format=fmt)
    manager.save(VALUES, step=1)
    store = VariableStore()
    kernel = store.get_variable("dense/kernel", shape=(8, 16))
    manager.restore_latest(store, lazy=True)
    np.testing.assert_array_equal(kernel.read_value(), VALUES["dense/kernel"])


# ------------------------------------------------------------ 2. the manifest's own crc32c
def _manifest_bytes(path: Path) -> bytes:
    from tests.checkpoint.plain import plain_array

    return plain_array(path, "_varstore/manifest").tobytes()


def _root_attrs(path: Path) -> dict:
    if path.suffix == ".zarr":
        return json.loads((path / "zarr.json").read_text())["attributes"]
    import h5py

    with h5py.File(path, "r") as handle:
        return {key: handle.attrs[key] for key in handle.attrs}


def _set_root_attr(path: Path, key: str, value: object) -> None:
    """Sets (value not None) or deletes a root attribute, as another tool would."""
    if path.suffix == ".zarr":
        document = json.loads((path / "zarr.json").read_text())
        if value is None:
            document["attributes"].pop(key, None)
        else:
            document["attributes"][key] = value
        (path / "zarr.json").write_text(json.dumps(document))
        return
    import h5py

    with h5py.File(path, "r+") as handle:
        if value is None:
            del handle.attrs[key]
        else:
            handle.attrs[key] = value


def _flip_name(path: Path) -> None:
    """'global_step' -> 'global_qtep' inside the stored manifest bytes (one bit)."""
    target = path if path.suffix == ".h5" else path / "_varstore/manifest/c/0"
    raw = bytearray(target.read_bytes())
    raw[raw.index(b'"global_step"') + 8] ^= 0x02
    target.write_bytes(bytes(raw))


def _wipe_index_header(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.write(b"\0" * 512)


def test_manifest_crc32c_is_a_root_attribute(ckpt: Path) -> None:
    from varstore.checkpoint.checksum import crc32c_raw

    save(ckpt, VALUES)
    assert int(_root_attrs(ckpt)["varstore_manifest_crc32c"]) == crc32c_raw(_manifest_bytes(ckpt))


def test_flipped_manifest_is_refused_naming_the_file(ckpt: Path) -> None:
    save(ckpt, VALUES)
    _flip_name(ckpt)
    with pytest.raises(CorruptCheckpointError, match=rf"manifest of '{ckpt}'.*crc32c"):
        open_checkpoint(ckpt)


@pytest.mark.parametrize("keep", ["index header", "root attribute"])
def test_h5_library_path_checks_the_manifest_crc32c(tmp_path: Path, keep: str) -> None:
    """Without a matching index header the manifest comes through h5py; either recorded crc32c still guards it."""
    path = tmp_path / "model.h5"
    save(path, VALUES)
    _flip_name(path)
    if keep == "index header":
        _set_root_attr(path, "varstore_manifest_crc32c", None)
    else:
        _wipe_index_header(path)
    with pytest.raises(CorruptCheckpointError, match="manifest.*crc32c"):
        open_checkpoint(path)


def test_files_without_a_manifest_crc32c_still_read(ckpt: Path) -> None:
    """Older writers recorded no manifest checksum (no root attribute, no index header)."""
    save(ckpt, VALUES)
    _set_root_attr(ckpt, "varstore_manifest_crc32c", None)
    if ckpt.suffix == ".h5":
        _wipe_index_header(ckpt)
    with open_checkpoint(ckpt) as reader:
        assert sorted(reader.keys()) == sorted(VALUES)
        np.testing.assert_array_equal(reader.read("dense/kernel"), VALUES["dense/kernel"])


# ------------------------------------------------------------ 5. a damaged root varstore_format
@pytest.mark.parametrize("found", ["varstore-zaxr", None])
def test_damaged_format_attribute_with_a_manifest_is_corrupt_not_plain(ckpt: Path, found: str | None) -> None:
    from varstore.convert import open_checkpoint as open_any
    from varstore.checkpoint import is_varstore_checkpoint

    save(ckpt, VALUES)
    if ckpt.suffix == ".h5":
        _wipe_index_header(ckpt)  # else the index header alone identifies the file (and it reads exactly)
    _set_root_attr(ckpt, "varstore_format", found)
    assert is_varstore_checkpoint(ckpt)
    for opener in (open_checkpoint, open_any):
        with pytest.raises(CorruptCheckpointError, match=rf"'{ckpt}'.*varstore_format is {found!r}"):
            opener(ckpt)


def test_plain_zarr_group_is_still_not_a_varstore_checkpoint(tmp_path: Path) -> None:
    from varstore.checkpoint import is_varstore_checkpoint
    from varstore.errors import NotACheckpointError

    path = tmp_path / "model.zarr"
    save(path, VALUES)
    shutil.rmtree(path / "_varstore")
    _set_root_attr(path, "varstore_format", None)
    assert not is_varstore_checkpoint(path)
    with pytest.raises(NotACheckpointError, match="not a varstore checkpoint"):
        open_checkpoint(path)
