"""Tells which checkpoint format a path holds: magic bytes first, file suffix second.

Recognises varstore's own HDF5/Zarr checkpoints (asked of
varstore.checkpoint.reader), TF tensor bundles (prefix, .index, .data shard,
or a directory with a `checkpoint` state file), HDF5 files (Keras 3, Keras 2
or plain), `.keras` zips, safetensors, npz, Zarr v2/v3 hierarchies, and
refuses pickle-based files (PyTorch zips and raw pickles) with
UnsafeFormatError without unpickling anything. Opens nothing but a few
header bytes and zip directories; the readers do the parsing.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zipfile
from pathlib import Path

from varstore.errors import (
    CheckpointNotFoundError,
    NotACheckpointError,
    UnsafeFormatError,
    VarstoreError,
)

__all__ = ["Sniffed", "sniff", "detect_format", "HDF5_SIGNATURE", "TORCH_ADVICE"]

#: HDF5 superblock signature; found at byte 0, 512, 1024, 2048, ... (a user block precedes it).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_TABLE_MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
_PICKLE_SUFFIXES = {".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt"}

#: How to turn a PyTorch checkpoint into something varstore reads (part of UnsafeFormatError messages).
TORCH_ADVICE = (
    "PyTorch checkpoints are Python pickles, and unpickling can run arbitrary code, so varstore "
    "never unpickles them. Convert it in a trusted environment with torch installed: "
    "`sd = torch.load(path, map_location='cpu', weights_only=True)` then "
    "`safetensors.torch.save_file({k: v.contiguous().clone() for k, v in sd.items()}, 'model.safetensors')`, "
    "and open the .safetensors file")


@dataclasses.dataclass(frozen=True)
class Sniffed:
    """What `sniff` found.

    Attributes:
      kind: "varstore", "tf", "hdf5" (any HDF5 file: Keras or plain),
        "keras-archive", "safetensors", "npz" or "zarr".
      path: the path to open (for "tf", the bundle prefix).
    """

    kind: str
    path: Path


def _is_varstore(path: Path) -> bool:
    try:
        from varstore.checkpoint.reader import is_varstore_checkpoint
    except ImportError:
        return False
    try:
        return bool(is_varstore_checkpoint(path))
    except (VarstoreError, OSError):
        return False


def _has_hdf5_signature(f: "os.PathLike[str] | object", size: int) -> bool:
    offset = 0
    while offset + len(HDF5_SIGNATURE) <= size:
        f.seek(offset)  # type: ignore[attr-defined]
        if f.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:  # type: ignore[attr-defined]
            return True
        offset = 512 if offset == 0 else offset * 2
    return False


def _sniff_zip(path: Path) -> Sniffed | None:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError,
            RuntimeError):  # NotImplementedError: a damaged "version needed" field
        return None
    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        raise UnsafeFormatError(f"refusing '{path}': it is a PyTorch zip checkpoint (holds data.pkl). "
                                f"{TORCH_ADVICE}")
    if "model.weights.h5" in names:
        return Sniffed("keras-archive", path)
    if any(n.endswith(".npy") for n in names) or not names and path.suffix == ".npz":
        return Sniffed("npz", path)
    if any(n.endswith(".pkl") for n in names):
        raise UnsafeFormatError(f"refusing '{path}': the zip holds pickle members "
                                f"({', '.join(n for n in names if n.endswith('.pkl'))}). {TORCH_ADVICE}")
    raise NotACheckpointError(
        f"'{path}' is a zip archive but neither a Keras .keras archive (model.weights.h5), "
        f"an .npz (.npy members) nor a PyTorch file")


def _sniff_directory(path: Path) -> Sniffed:
    if _is_varstore(path):
        return Sniffed("varstore", path)
    if any((path / marker).is_file() for marker in ("zarr.json", ".zgroup", ".zarray", ".zmetadata")):
        return Sniffed("zarr", path)
    from varstore.convert.tf_checkpoint import resolve_prefix

    prefix = resolve_prefix(path)
    if prefix is not None:
        return Sniffed("tf", Path(prefix))
    raise NotACheckpointError(
        f"directory '{path}' holds no checkpoint: not a varstore or Zarr checkpoint "
        f"(no zarr.json / .zgroup) and no TensorFlow 'checkpoint' state file")


def sniff(path: os.PathLike[str] | str) -> Sniffed:
    """Finds the format family of `path` from magic bytes, then from its suffix.

    Raises:
      CheckpointNotFoundError: nothing at `path` (and it is no TF prefix).
      UnsafeFormatError: a pickle-based file (PyTorch .pt/.bin zip or raw pickle).
      NotACheckpointError: an empty file or one in no format varstore reads.
    """
    from varstore.convert.tf_checkpoint import resolve_prefix

    path = Path(path)
    if not path.exists():
        prefix = resolve_prefix(path)
        if prefix is not None:
            return Sniffed("tf", Path(prefix))
        raise CheckpointNotFoundError(f"no checkpoint at '{path}': no such file or directory")
    if path.is_dir():
        return _sniff_directory(path)
    size = path.stat().st_size
    if size == 0:
        raise NotACheckpointError(f"'{path}' is an empty file, not a checkpoint")
    if _is_varstore(path):
        return Sniffed("varstore", path)
    with open(path, "rb") as f:
        head = f.read(16)
        f.seek(max(0, size - 8))
        tail = f.read(8)
        is_hdf5 = _has_hdf5_signature(f, size)
    if is_hdf5:
        return Sniffed("hdf5", path)
    if head[:4] in _ZIP_MAGICS:
        found = _sniff_zip(path)
        if found is not None:
            return found
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise UnsafeFormatError(f"refusing '{path}': it is a Python pickle (a legacy PyTorch "
                                f"checkpoint or similar). {TORCH_ADVICE}")
    if tail == _TABLE_MAGIC or path.suffix == ".index" or ".data-" in path.name:
        prefix = resolve_prefix(path)
        if prefix is not None:
            return Sniffed("tf", Path(prefix))
    if size >= 9:
        (length,) = struct.unpack("<Q", head[:8])
        if 2 <= length <= size - 8 and head[8:9] == b"{":
            return Sniffed("safetensors", path)
    return _sniff_suffix(path)


def _sniff_suffix(path: Path) -> Sniffed:
    name = path.name.lower()
    if name.endswith(".safetensors"):
        return Sniffed("safetensors", path)
    if name.endswith(".npz"):
        return Sniffed("npz", path)
    if name.endswith(".keras"):
        return Sniffed("keras-archive", path)
    if name.endswith((".h5", ".hdf5", ".he5")):
        return Sniffed("hdf5", path)
    if path.suffix.lower() in _PICKLE_SUFFIXES:
        raise UnsafeFormatError(
            f"refusing '{path}': its suffix {path.suffix!r} marks a pickle-based (PyTorch) checkpoint and "
            f"its bytes match no safe format. {TORCH_ADVICE}")
    raise NotACheckpointError(
        f"'{path}' is not a checkpoint varstore reads: its first bytes match none of varstore HDF5/Zarr, "
        f"TensorFlow bundle, Keras, safetensors, npz or Zarr, and its suffix {path.suffix!r} names none")


def detect_format(path: os.PathLike[str] | str) -> str:
    """The reader format name for `path`: "varstore-hdf5", "varstore-zarr", "tf", "keras3",
    "keras2", "safetensors", "npz", "hdf5" or "zarr".

    HDF5 files are walked (metadata only) to tell Keras 3, Keras 2 and plain
    HDF5 apart.

    Raises:
      As `sniff`; CorruptCheckpointError when an HDF5 file cannot be walked.
    """
    found = sniff(path)
    if found.kind == "varstore":
        return "varstore-zarr" if found.path.is_dir() else "varstore-hdf5"
    if found.kind == "keras-archive":
        return "keras3"
    if found.kind == "hdf5":
        from varstore.backends.hdf5.walker import HDF5Walker
        from varstore.convert.keras import keras_layout

        walker = HDF5Walker(found.path)
        try:
            return keras_layout(walker) or "hdf5"
        finally:
            walker.close()
    return found.kind
