"""The built-in formats' sniff functions: does a Probe hold this format, from its magic bytes?

One function per built-in format of varstore.formats.registry, each
`sniff(probe) -> Path | None`: the path to open (a TF bundle's prefix, else
the probed path) or None. Varstore's own HDF5 files are told by their index
header (one read, the probe's head), foreign HDF5 files by one walk shared by
the Keras 3, Keras 2 and plain-HDF5 checks. Pickles that are no torch.save file
(the PyTorch reader, varstore.formats.pytorch, claims those) are refused with
UnsafeFormatError without unpickling anything. Reads only what the probe holds; opens no reader; the registry
decides the order and the suffix fallback.
"""

from __future__ import annotations

import struct
from pathlib import Path

from varstore.formats.probe import HDF5_SIGNATURE, Probe
from varstore.errors import CorruptCheckpointError, NotACheckpointError, UnsafeFormatError

__all__ = [
    "HDF5_SIGNATURE",
    "TORCH_ADVICE",
    "PICKLE_SUFFIXES",
    "sniff_varstore_hdf5",
    "sniff_varstore_zarr",
    "sniff_keras3",
    "sniff_keras2",
    "sniff_hdf5",
    "sniff_zarr",
    "sniff_tf",
    "sniff_safetensors",
    "sniff_npz",
    "sniff_pickle",
]

_TABLE_MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)
#: Suffixes of pickle-based checkpoints (PyTorch and plain Python pickles).
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt")
#: Root attribute and manifest dataset every varstore HDF5 file has (docs/checkpoint-format.md).
_VARSTORE_HDF5_FORMAT = "varstore-hdf5"
_VARSTORE_MANIFEST = "_varstore/manifest"
_ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray", ".zmetadata")

#: What to do with a pickle that is not a torch.save state dict (part of UnsafeFormatError messages).
TORCH_ADVICE = (
    "Arbitrary Python pickles can run code when loaded, so varstore never unpickles them; it reads only "
    "torch.save files (zip or legacy) through a restricted unpickler that accepts tensors and containers. "
    "If this holds weights, re-save them in a trusted environment with torch installed: "
    "`sd = torch.load(path, map_location='cpu', weights_only=True)` then `torch.save(sd, 'weights.pt')` or "
    "`safetensors.torch.save_file({k: v.contiguous().clone() for k, v in sd.items()}, 'model.safetensors')`")


def sniff_varstore_hdf5(probe: Probe) -> Path | None:
    """A varstore HDF5 file: its 512-byte index header (no HDF5 parsing), else the root attributes.

    The header alone decides for files varstore wrote (time to first array
    matters); a file whose header is damaged is recognised from the shared
    HDF5 walk (root attribute varstore_format, or the manifest dataset).
    """
    if not probe.is_file:
        return None
    from varstore.checkpoint.manifest import INDEX_HEADER_BYTES, decode_index_header

    if decode_index_header(probe.head[:INDEX_HEADER_BYTES]) is not None:
        return probe.path
    if not probe.is_hdf5:
        return None
    try:
        walker = probe.hdf5()
    except CorruptCheckpointError:
        # h5py cannot walk it: ask the checkpoint layer, whose reader then says what is damaged
        from varstore.checkpoint import is_varstore_checkpoint

        return probe.path if is_varstore_checkpoint(probe.path) else None
    if walker.root_attrs.get("varstore_format") == _VARSTORE_HDF5_FORMAT or any(
            d.path == _VARSTORE_MANIFEST for d in walker.datasets):
        return probe.path
    return None


def sniff_varstore_zarr(probe: Probe) -> Path | None:
    """A varstore Zarr v3 directory (asked of varstore.checkpoint.is_varstore_checkpoint)."""
    if not probe.is_dir or not (probe.path / "zarr.json").is_file():
        return None
    from varstore.checkpoint import is_varstore_checkpoint

    return probe.path if is_varstore_checkpoint(probe.path) else None


def _keras_layout(probe: Probe) -> str | None:
    if not probe.is_file or not probe.is_hdf5:
        return None
    from varstore.formats.keras import keras_layout

    return keras_layout(probe.hdf5())


def sniff_keras3(probe: Probe) -> Path | None:
    """A Keras 3 `.weights.h5` (layers/.../vars/<i> layout) or a `.keras` zip (holds model.weights.h5).

    Raises:
      CorruptCheckpointError: an HDF5 signature, but h5py cannot walk the file.
    """
    names = probe.zip_names
    if names is not None:
        from varstore.formats.keras import KERAS_WEIGHTS_MEMBER

        return probe.path if KERAS_WEIGHTS_MEMBER in names else None
    return probe.path if _keras_layout(probe) == "keras3" else None


def sniff_keras2(probe: Probe) -> Path | None:
    """A legacy Keras 2 `.h5` (a layer_names attribute on the root or on "model_weights")."""
    return probe.path if _keras_layout(probe) == "keras2" else None


def sniff_hdf5(probe: Probe) -> Path | None:
    """Any other HDF5 file (signature at byte 0, 512, 1024, ...)."""
    return probe.path if probe.is_file and probe.is_hdf5 else None


def sniff_zarr(probe: Probe) -> Path | None:
    """A Zarr v2 or v3 hierarchy: a directory with zarr.json, .zgroup, .zarray or .zmetadata."""
    if probe.is_dir and any((probe.path / marker).is_file() for marker in _ZARR_MARKERS):
        return probe.path
    return None


def sniff_tf(probe: Probe) -> Path | None:
    """A TF tensor bundle: its prefix (need not exist), .index, a .data shard, a directory with a
    `checkpoint` state file (its latest), or a SavedModel directory (saved_model.pb +
    variables/variables.index) or its variables/ folder (its variables bundle). Returns the bundle prefix.

    Raises:
      CheckpointNotFoundError / CorruptCheckpointError: a state file names a missing bundle / none.
    """
    from varstore.formats.tf_checkpoint import resolve_prefix

    if probe.is_dir:  # a TF SavedModel directory, or its variables/ folder: the variables bundle in it
        if (probe.path / "saved_model.pb").is_file() and (probe.path / "variables" / "variables.index").is_file():
            return probe.path / "variables" / "variables"
        if (probe.path / "variables.index").is_file():
            return probe.path / "variables"
    if probe.is_file and not (probe.tail[-8:] == _TABLE_MAGIC or probe.suffix == ".index"
                              or ".data-" in probe.name):
        return None
    prefix = resolve_prefix(probe.path)
    return Path(prefix) if prefix is not None else None


def sniff_safetensors(probe: Probe) -> Path | None:
    """A safetensors file: an 8-byte little-endian header length, then a JSON object."""
    if probe.is_file and probe.size >= 9 and len(probe.head) >= 9:  # a short read is no safetensors file
        (length,) = struct.unpack("<Q", probe.head[:8])
        if 2 <= length <= probe.size - 8 and probe.head[8:9] == b"{":
            return probe.path
    return None


def sniff_npz(probe: Probe) -> Path | None:
    """An .npz: a zip with .npy members (or an empty zip named .npz)."""
    names = probe.zip_names
    if names is None:
        return None
    if any(n.endswith(".npy") for n in names) or not names and probe.suffix == ".npz":
        return probe.path
    return None


def sniff_pickle(probe: Probe) -> Path | None:
    """Refuses pickle-based files no reader claims; runs (from varstore.formats.pytorch.sniff) after every
    other format's magic bytes were tried and the file is no torch.save file.

    Raises:
      UnsafeFormatError: a zip with a misplaced data.pkl, a zip of pickles, or a raw pickle.
      NotACheckpointError: a zip archive no format claimed.
    """
    names = probe.zip_names
    if names is not None:
        if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            raise UnsafeFormatError(f"refusing '{probe.path}': it holds a data.pkl but not where torch.save puts "
                                    f"it ('<archive>/data.pkl'). {TORCH_ADVICE}")
        if any(n.endswith(".pkl") for n in names):
            raise UnsafeFormatError(f"refusing '{probe.path}': the zip holds pickle members "
                                    f"({', '.join(n for n in names if n.endswith('.pkl'))}). {TORCH_ADVICE}")
        raise NotACheckpointError(
            f"'{probe.path}' is a zip archive but neither a Keras .keras archive (model.weights.h5), "
            f"an .npz (.npy members) nor a PyTorch file")
    if probe.head[:1] == b"\x80" and probe.head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise UnsafeFormatError(f"refusing '{probe.path}': it is a Python pickle but not a torch.save file "
                                f"(no torch magic number). {TORCH_ADVICE}")
    return None


def refuse_pickle(path: Path, **_options: object) -> None:
    """The pickle refusal's `open`: reached by a .pkl/.pickle suffix alone (or format="pickle"); always refuses.

    Raises:
      UnsafeFormatError: always, naming the file and its suffix.
    """
    raise UnsafeFormatError(
        f"refusing '{path}': its suffix {path.suffix!r} marks a pickle-based (PyTorch) checkpoint and "
        f"its bytes match no safe format. {TORCH_ADVICE}")
