"""Tells which checkpoint format a path holds: magic bytes first, file suffix second.

Recognises varstore's own HDF5/Zarr checkpoints (asked of
varstore.checkpoint.reader), TF tensor bundles (prefix, .index, .data shard,
or a directory with a `checkpoint` state file), HDF5 files (Keras 3, Keras 2
or plain), `.keras` zips, safetensors, npz, Zarr v2/v3 hierarchies, and the
round-2 formats through each module's `sniff(path, head_bytes)`: PyTorch
torch.save files (zip with data.pkl, legacy magic), sharded safetensors,
PyTorch DCP and Orbax directories, Keras 3 sharded weights and GGUF. Other
pickles are refused with UnsafeFormatError without unpickling anything.
Opens nothing but a few header bytes and zip directories; the readers do
the parsing (and the PyTorch reader's restricted unpickler judges pickles).
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zipfile
from pathlib import Path
from typing import Any

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

#: What to do with a pickle that is not a torch.save state dict (part of UnsafeFormatError messages).
TORCH_ADVICE = (
    "Arbitrary Python pickles can run code when loaded, so varstore never unpickles them; it reads only "
    "torch.save files (zip or legacy) through a restricted unpickler that accepts tensors and containers. "
    "If this holds weights, re-save them in a trusted environment with torch installed: "
    "`sd = torch.load(path, map_location='cpu', weights_only=True)` then `torch.save(sd, 'weights.pt')` or "
    "`safetensors.torch.save_file({k: v.contiguous().clone() for k, v in sd.items()}, 'model.safetensors')`")

#: Round-2 format modules, in sniffing order: each has NAME and sniff(path, head_bytes) -> Path | None.
_ROUND2 = ("dcp", "orbax", "sharded_safetensors", "keras_sharded", "gguf", "pytorch")


def _round2_modules() -> list[Any]:
    from varstore.convert import dcp, gguf, keras_sharded, orbax, pytorch, sharded_safetensors

    return [dcp, orbax, sharded_safetensors, keras_sharded, gguf, pytorch]


def _sniff_round2(path: Path, head: bytes) -> Sniffed | None:
    for module in _round2_modules():
        found = module.sniff(path, head)
        if found is not None:
            return Sniffed(module.NAME, Path(found))
    return None


@dataclasses.dataclass(frozen=True)
class Sniffed:
    """What `sniff` found.

    Attributes:
      kind: "varstore", "tf", "hdf5" (any HDF5 file: Keras or plain),
        "keras-archive", "safetensors", "npz", "zarr", or a round-2 module's
        NAME ("pytorch", "safetensors-sharded", "dcp", "orbax", "keras3-sharded", "gguf").
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
        raise UnsafeFormatError(f"refusing '{path}': it holds a data.pkl but not where torch.save puts it "
                                f"('<archive>/data.pkl'). {TORCH_ADVICE}")
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
    found = _sniff_round2(path, b"")
    if found is not None:
        return found
    if any((path / marker).is_file() for marker in ("zarr.json", ".zgroup", ".zarray", ".zmetadata")):
        return Sniffed("zarr", path)
    from varstore.convert.tf_checkpoint import resolve_prefix

    prefix = resolve_prefix(path)
    if prefix is not None:
        return Sniffed("tf", Path(prefix))
    raise NotACheckpointError(
        f"directory '{path}' holds no checkpoint: not a varstore or Zarr checkpoint "
        f"(no zarr.json / .zgroup), no TensorFlow 'checkpoint' state file, no PyTorch DCP .metadata, "
        f"no Orbax _METADATA and no *.safetensors.index.json")


def sniff(path: os.PathLike[str] | str) -> Sniffed:
    """Finds the format family of `path` from magic bytes, then from its suffix.

    Raises:
      CheckpointNotFoundError: nothing at `path` (and it is no TF prefix).
      UnsafeFormatError: a pickle that is not a torch.save file.
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
    if not is_hdf5:
        found = _sniff_round2(path, head)
        if found is not None:
            return found
    if is_hdf5:
        return Sniffed("hdf5", path)
    if head[:4] in _ZIP_MAGICS:
        found = _sniff_zip(path)
        if found is not None:
            return found
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise UnsafeFormatError(f"refusing '{path}': it is a Python pickle but not a torch.save file "
                                f"(no torch magic number). {TORCH_ADVICE}")
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
        raise NotACheckpointError(
            f"'{path}' has the PyTorch suffix {path.suffix!r} but is neither a torch.save zip (with "
            f"<archive>/data.pkl) nor a legacy torch.save file, nor any other format varstore reads")
    raise NotACheckpointError(
        f"'{path}' is not a checkpoint varstore reads: its first bytes match none of varstore HDF5/Zarr, "
        f"TensorFlow bundle, Keras, safetensors, npz or Zarr, and its suffix {path.suffix!r} names none")


def detect_format(path: os.PathLike[str] | str) -> str:
    """The reader format name for `path`: "varstore-hdf5", "varstore-zarr", "tf", "keras3",
    "keras2", "safetensors", "npz", "hdf5", "zarr", "pytorch", "safetensors-sharded", "dcp",
    "orbax", "keras3-sharded" or "gguf".

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
