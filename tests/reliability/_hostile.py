"""Hostile files: headers claiming 10**15 bytes, stores that point outside themselves, hidden pickles.

Each builder writes one file or directory under a given folder and returns
the path to open. Values that live outside a checkpoint are SENTINEL-filled
(a float that appears nowhere else), so a test can prove nothing outside
was read by checking that no result contains it. Pickle payloads create
MARKER-named files when unpickled, so a test can prove nothing ran.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np

from ._sources import FIXTURES, plant_zarr_manifest, write_own

#: A float32 value that appears in no checkpoint varstore writes in these tests.
SENTINEL = np.float32(-7.7777e-33)
HUGE = 10**15


# ------------------------------------------------------- huge claims
def huge_manifest(folder: Path) -> Path:
    """A varstore Zarr checkpoint whose manifest says 'dense/kernel' has 10**15 bytes (shape and nbytes agree)."""
    path = write_own(folder / "huge_manifest", "zarr")
    manifest = path / "_varstore/manifest/0"
    document = json.loads(manifest.read_bytes())
    columns = document["variables"]
    row = columns["name"].index("dense/kernel")
    columns["shape"][row] = [HUGE // 4]
    columns["nbytes"][row] = HUGE
    raw = json.dumps(document).encode()
    plant_zarr_manifest(path, raw)
    array_meta_file = path / "dense/kernel/zarr.json"
    array_meta = json.loads(array_meta_file.read_text())
    array_meta["shape"] = [HUGE // 4]
    array_meta["chunk_grid"]["configuration"]["chunk_shape"] = [HUGE // 4]
    array_meta_file.write_text(json.dumps(array_meta))
    return path


def huge_safetensors(folder: Path) -> Path:
    """A safetensors file whose header claims a (10**15/4,) float32 tensor in 16 bytes of data."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [HUGE // 4], "data_offsets": [0, HUGE]}}).encode()
    path = folder / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    return path


def huge_safetensors_header(folder: Path) -> Path:
    """A safetensors file whose 8-byte prefix claims a 10**15-byte JSON header."""
    path = folder / "huge_header.safetensors"
    path.write_bytes(struct.pack("<Q", HUGE) + b"{}")
    return path


def huge_npz(folder: Path) -> Path:
    """An npz whose .npy header says shape (10**15/8,) float64 over 16 bytes of data."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d,), }" % (HUGE // 8)
    header = header.ljust(118) + "\n"
    member = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 16
    path = folder / "huge.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("w.npy", member)
    return path


def huge_tf(folder: Path) -> Path:
    """A TF bundle whose first variable's entry claims shape (10**15/4,) float32 and size 10**15."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "convert"))
    try:
        from tf_bundle_writer import table
    finally:
        sys.path.pop(0)
    from varstore.formats.tensorflow import _bundle_format as fmt

    from ._fuzz import _field

    directory = folder / "huge_tf"
    directory.mkdir()
    pairs = fmt.read_table((FIXTURES / "tf1_scopes/model.ckpt.index").read_bytes(), "fixture")
    entry = (_field(1, 1) + _field(2, _field(2, _field(1, HUGE // 4))) + _field(3, 0) + _field(4, 0)
             + _field(5, HUGE) + _field(6, 0))
    pairs = [(k, entry if i == 1 else v) for i, (k, v) in enumerate(pairs)]
    (directory / "model.ckpt.index").write_bytes(table(pairs))
    shutil.copyfile(FIXTURES / "tf1_scopes/model.ckpt.data-00000-of-00001", directory / "model.ckpt.data-00000-of-00001")
    return directory / "model.ckpt"


HUGE_CLAIMS = {
    "own manifest (Zarr)": huge_manifest,
    "safetensors tensor": huge_safetensors,
    "safetensors header length": huge_safetensors_header,
    "npz .npy header": huge_npz,
    "TF entry size and shape": huge_tf,
}


# ------------------------------------------------ outside the store
def outside_zarr_array(folder: Path) -> Path:
    """A Zarr v3 array directory outside any checkpoint, holding SENTINEL values (8, 16) float32."""
    from varstore import save

    holder = folder / "outside_holder.zarr"
    save(holder, {"dense/kernel": np.full((8, 16), SENTINEL, np.float32)}, pack_threshold_bytes=0)
    return holder / "dense/kernel"


def zarr_symlink_out(folder: Path) -> Path:
    """A varstore Zarr checkpoint whose 'dense/kernel' array directory is a symlink to an outside array."""
    outside = outside_zarr_array(folder)
    path = write_own(folder / "symlink_out", "zarr")
    shutil.rmtree(path / "dense/kernel")
    os.symlink(outside, path / "dense/kernel")
    _set_checksum(path, "dense/kernel", np.full((8, 16), SENTINEL, np.float32))
    return path


def _set_checksum(path: Path, name: str, value: np.ndarray) -> None:
    """Rewrites one variable's manifest checksum to that of `value` (so only a path check can refuse it)."""
    from varstore.checkpoint.format.checksum import crc32c_of

    manifest = path / "_varstore/manifest/0"
    document = json.loads(manifest.read_bytes())
    columns = document["variables"]
    columns["checksum"][columns["name"].index(name)] = crc32c_of(value)
    raw = json.dumps(document).encode()
    plant_zarr_manifest(path, raw)


def zarr_manifest_path_out(folder: Path) -> Path:
    """A varstore Zarr checkpoint whose manifest says 'dense/kernel' lives at '../outside_holder.zarr/...'.

    The checksum in the manifest is set to the SENTINEL values' crc32c, so only a path check can stop it.
    """
    from varstore.checkpoint.format.checksum import crc32c_of

    outside = outside_zarr_array(folder)
    path = write_own(folder / "path_out", "zarr")
    manifest = path / "_varstore/manifest/0"
    document = json.loads(manifest.read_bytes())
    columns = document["variables"]
    row = columns["name"].index("dense/kernel")
    columns["path"][row] = os.path.relpath(outside, path)
    columns["checksum"][row] = crc32c_of(np.full((8, 16), SENTINEL, np.float32))
    raw = json.dumps(document).encode()
    plant_zarr_manifest(path, raw)
    return path


def zarr_v2_symlink_out(folder: Path) -> Path:
    """A plain Zarr v2 group (no varstore metadata) whose array 'w' is a symlink to an outside v2 array."""
    outside = folder / "outside_v2"
    outside.mkdir()
    (outside / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<f4", "compressor": None, "fill_value": 0.0,
        "filters": None, "order": "C", "dimension_separator": "."}))
    (outside / "0").write_bytes(np.full(4, SENTINEL, np.float32).tobytes())
    group = folder / "v2_group.zarr"
    group.mkdir()
    (group / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    inside = group / "inside"
    inside.mkdir()
    (inside / ".zarray").write_text((outside / ".zarray").read_text())
    (inside / "0").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    os.symlink(outside, group / "w")
    return group


def _outside_h5(folder: Path) -> Path:
    import h5py

    path = folder / "outside.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("secret", data=np.full((4,), SENTINEL, np.float32))
    (folder / "outside.raw").write_bytes(np.full((4,), SENTINEL, np.float32).tobytes())
    return path


def hdf5_links_out(folder: Path) -> Path:
    """A plain HDF5 file with an external link, a virtual dataset and external raw storage, all pointing at
    files holding SENTINEL values, next to one ordinary dataset 'inside'."""
    import h5py

    outside = _outside_h5(folder)
    path = folder / "links.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("inside", data=np.arange(4, dtype=np.float32))
        f["external_link"] = h5py.ExternalLink(str(outside), "/secret")
        layout = h5py.VirtualLayout(shape=(4,), dtype=np.float32)
        layout[:] = h5py.VirtualSource(str(outside), "secret", shape=(4,))
        f.create_virtual_dataset("virtual", layout)
        f.create_dataset("external_raw", shape=(4,), dtype=np.float32,
                         external=[(str(folder / "outside.raw"), 0, 16)])
    return path


def varstore_h5_external_link(folder: Path) -> Path:
    """A varstore HDF5 checkpoint whose 'dense/kernel' dataset was replaced by an external link to SENTINELs."""
    import h5py

    outside = folder / "outside_kernel.h5"
    with h5py.File(outside, "w") as f:
        f.create_dataset("k", data=np.full((8, 16), SENTINEL, np.float32), chunks=(8, 16))
    path = write_own(folder / "own_link", "h5")
    with h5py.File(path, "r+") as f:
        del f["dense/kernel"]
        f["dense/kernel"] = h5py.ExternalLink(str(outside), "/k")
    return path


OUTSIDE = {
    "Zarr array symlinked outside": zarr_symlink_out,
    "Zarr manifest path '../'": zarr_manifest_path_out,
    "Zarr v2 group with a symlinked array": zarr_v2_symlink_out,
    "HDF5 external link, VDS, external raw data": hdf5_links_out,
    "varstore HDF5 with an external link": varstore_h5_external_link,
}


# ------------------------------------------------------------ pickles
class _Payload:
    """Unpickling this creates the marker file (through os.system-free open())."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # noqa: ANN204 - pickle protocol
        return (open, (self.marker, "w"))


def pickle_payload(marker: Path) -> bytes:
    return pickle.dumps(_Payload(marker))


def npz_with_pickle(folder: Path, marker: Path) -> Path:
    """An npz whose member is an object array holding the payload."""
    array = np.empty(1, dtype=object)
    array[0] = _Payload(marker)
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)  # writing only; never loaded with pickle
    path = folder / "pickle.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("w.npy", buffer.getvalue())
        zf.writestr("ok.npy", _npy(np.arange(3.0)))
    return path


def _npy(value: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, value, allow_pickle=False)
    return buffer.getvalue()


def pt_with_pickle(folder: Path, marker: Path) -> Path:
    """A PyTorch-style zip (archive/data.pkl) and a raw pickle .pt, both with the payload."""
    path = folder / "model.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle_payload(marker))
        zf.writestr("archive/version", "3\n")
    (folder / "raw.pt").write_bytes(pickle_payload(marker))
    return path


def hdf5_with_pickles(folder: Path, marker: Path) -> Path:
    """An HDF5 file hiding the payload as opaque bytes, vlen bytes and a vlen string, next to an object
    reference and one plain dataset 'plain'."""
    import h5py

    payload = pickle_payload(marker)
    path = folder / "pickles.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("plain", data=np.arange(3, dtype=np.int32))
        f.create_dataset("opaque", data=np.void(payload))
        vlen = np.empty(1, dtype=h5py.vlen_dtype(np.uint8))
        vlen[0] = np.frombuffer(payload, np.uint8)
        f.create_dataset("vlen_bytes", data=vlen)
        f.create_dataset("vlen_string", data=[pickle.dumps(_Payload(marker), protocol=0).decode("latin1")],
                         dtype=h5py.string_dtype())
        f.create_dataset("reference", data=[f["plain"].ref], dtype=h5py.ref_dtype)
        f.attrs["pickled_attr"] = np.void(payload)
    return path


PICKLES = {"npz object array": npz_with_pickle, "PyTorch .pt (zip and raw)": pt_with_pickle,
           "HDF5 opaque / vlen / reference": hdf5_with_pickles}
