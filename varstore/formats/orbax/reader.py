"""Reads Orbax (JAX) checkpoints: the OCDBT layout through tensorstore, the per-array Zarr layout without it.

`_METADATA` lists the pytree's leaves (their key paths); each array leaf is
a Zarr v2 array stored under its dotted param name ("weights.mlp.fc.kernel"),
either inside an OCDBT key-value database (`manifest.ocdbt` + `d/`: read
with tensorstore, the `[orbax]` extra, imported only here and only for that
layout) or as one directory per array (read chunk by chunk with
varstore.backends.zarr3.v2_array, no extra). Nested pytree paths become
scopes: the leaf ('weights', 'mlp', 'fc', 'kernel') is the variable
"weights/mlp/fc/kernel". Writes nothing; never imports jax or orbax.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import check_value_size, load_json
from varstore.checkpoint.read.reader_api import CheckpointReader, SkippedEntry, VariableInfo, checked_out
from varstore.formats._confine import inside
from varstore.storage.links import refuse_links_leading_out
from varstore.errors import (
    CorruptCheckpointError,
    MissingDependencyError,
    NotACheckpointError,
    UnknownVariableError,
    UnsupportedFormatError,
)

if TYPE_CHECKING:
    from varstore.formats.probe import Probe

__all__ = ["OrbaxReader", "sniff", "open_reader"]

_ARRAY_TYPES = ("jax.Array", "np.ndarray", "scalar")
_MAX_METADATA = 64 << 20


def _leaves(directory: Path, label: str) -> list[tuple[tuple[str, ...], str | None]]:
    """[(key path, value type)] from `_METADATA`, in its order."""
    try:
        if (directory / "_METADATA").stat().st_size > _MAX_METADATA:
            raise CorruptCheckpointError(f"{label}: _METADATA is larger than {_MAX_METADATA} bytes")
        meta = load_json((directory / "_METADATA").read_text("utf-8"), f"{label}/_METADATA")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CorruptCheckpointError(f"cannot read {label}/_METADATA: {err}") from err
    tree = meta.get("tree_metadata") if isinstance(meta, dict) else None
    if not isinstance(tree, dict):
        raise CorruptCheckpointError(f"{label}: _METADATA has no tree_metadata")
    leaves = []
    for text, leaf in tree.items():
        keys = leaf.get("key_metadata") if isinstance(leaf, dict) else None
        if not isinstance(keys, list) or not all(isinstance(k, dict) and "key" in k for k in keys):
            raise CorruptCheckpointError(f"{label}: leaf {text!r:.60} has no key_metadata")
        value = leaf.get("value_metadata") if isinstance(leaf.get("value_metadata"), dict) else {}
        leaves.append((tuple(str(k["key"]) for k in keys), value.get("value_type")))
    return leaves


class OrbaxReader(CheckpointReader):
    """Lazy reader of one Orbax checkpoint directory; names are "/"-joined pytree paths.

    `format_version` is "ocdbt" or "zarr"; `attributes["param"]` is Orbax's
    dotted param name; leaves that are not arrays are listed in `skipped`.
    """

    format = "orbax"

    def __init__(self, path: os.PathLike[str] | str) -> None:
        """Reads `_METADATA` and each array's `.zarray` (no array bytes).

        Raises:
          NotACheckpointError: no `_METADATA` in the directory.
          MissingDependencyError: an OCDBT checkpoint without tensorstore (`pip install varstore[orbax]`).
          CorruptCheckpointError: malformed metadata or a leaf whose array is missing (naming it).
        """
        super().__init__(Path(path))
        label = f"Orbax checkpoint '{self.path}'"
        self._label = label
        if not (self.path / "_METADATA").is_file():
            raise NotACheckpointError(f"'{self.path}' is not an Orbax checkpoint: no _METADATA file")
        # zarr chunks and tensorstore's OCDBT files are opened by path below: no symlink may lead out first
        refuse_links_leading_out(self.path, "Orbax checkpoint")
        self._ocdbt = (self.path / "manifest.ocdbt").is_file()
        self.format_version = "ocdbt" if self._ocdbt else "zarr"
        self._arrays: dict[str, tuple[str, tuple[int, ...], np.dtype, Any]] = {}
        kvstore = self._open_ocdbt() if self._ocdbt else None
        for keys, value_type in _leaves(self.path, label):
            name, param = "/".join(keys), ".".join(keys)
            if value_type not in _ARRAY_TYPES:
                self.skipped.append(SkippedEntry(name, f"Orbax leaf of type {value_type!r} is not an array"))
                continue
            if kvstore is not None:
                self._arrays[name] = self._ocdbt_array(kvstore, param, name)
            else:
                from varstore.backends.zarr3.v2_array import open_v2_array

                folder = inside(self.path, param, file=self.path / "_METADATA", field=f"the key path of leaf {keys!r}")
                if not (folder / ".zarray").is_file():
                    raise CorruptCheckpointError(f"{label}: array '{param}' of leaf '{name}' is missing")
                array = open_v2_array(folder, name)
                self._arrays[name] = (param, array.shape, array.native_dtype, array)

    def _open_ocdbt(self) -> Any:
        try:
            import tensorstore
        except ImportError as err:
            raise MissingDependencyError(
                f"{self._label} uses the OCDBT layout, which needs tensorstore: pip install 'varstore[orbax]'"
            ) from err
        self._ts = tensorstore
        return {"driver": "ocdbt", "base": self.path.resolve().as_uri() + "/"}

    def _ocdbt_array(self, kvstore: Any, param: str, name: str) -> tuple[str, tuple[int, ...], np.dtype, Any]:
        try:
            store = self._ts.open({"driver": "zarr", "kvstore": kvstore, "path": param}, open=True, read=True).result()
        except ValueError as err:  # tensorstore reports missing keys and bad metadata as ValueError
            raise CorruptCheckpointError(f"{self._label}: array '{param}' of leaf '{name}' cannot be opened: "
                                         f"{err}") from err
        dtype = _dtypes.as_dtype(str(store.dtype.name))
        return param, tuple(int(d) for d in store.shape), dtype, store

    def _stored_bytes(self, param: str) -> int:
        """Bytes stored for one array: its folder's files (Zarr layout), or the whole checkpoint's (OCDBT)."""
        folder = self.path if self._ocdbt else self.path / param
        total = 0
        for root, _, files in os.walk(folder):  # symlinks are not followed into other trees
            for file in files:
                try:
                    total += os.lstat(os.path.join(root, file)).st_size
                except OSError:
                    continue
        return total

    def keys(self) -> list[str]:
        return list(self._arrays)

    def _lookup(self, name: str) -> tuple[str, tuple[int, ...], np.dtype, Any]:
        found = self._arrays.get(name)
        if found is None:
            raise UnknownVariableError(f"no array '{name}' in {self._label}")
        return found

    def info(self, name: str) -> VariableInfo:
        param, shape, dtype, _ = self._lookup(name)
        return VariableInfo(name=name, shape=shape, dtype=_dtypes.dtype_name(dtype),
                            nbytes=int(np.prod(shape, dtype=object)) * dtype.itemsize, attributes={"param": param})

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one array (one chunk at a time for the Zarr layout).

        Without `out`, a Zarr-layout array is bounded by the bytes of its chunk files present times the
        expansion factor (missing chunks are fills; varstore._limits.check_value_size) before allocating.

        Raises:
          UnknownVariableError: unknown name.
          CorruptCheckpointError: a damaged chunk, or one decoding past its size, naming the array.
          ValueTooLargeError: the declared size exceeds what its chunk files can back, or max_bytes.
        """
        param, shape, dtype, source = self._lookup(name)
        if out is None and self._ocdbt:  # bounded by the (compressed) bytes stored for it, before allocating
            check_value_size(name, self._label, int(np.prod(shape, dtype=object)) * dtype.itemsize, self.max_bytes,
                             stored=self._stored_bytes(param), filtered=True, expansion=self.max_expansion)
        elif out is None:
            from varstore.backends.zarr3.v2_array import stored_nbytes

            declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
            check_value_size(name, self.location, declared, self.max_bytes, stored=stored_nbytes(source),
                             filtered=True, expansion=self.max_expansion)
        result = checked_out(name, shape, dtype, out, self._label)
        if self._ocdbt:
            try:
                result[...] = source.read().result()
            except ValueError as err:
                raise CorruptCheckpointError(f"{self._label}: array '{param}' cannot be read: {err}") from err
            return result
        from varstore.backends.zarr3.v2_array import read_v2_array

        return read_v2_array(source, result, name)


def sniff(probe: Probe) -> Path | None:
    """The directory when it (or the directory of the metadata file given) holds Orbax's `_METADATA`
    and `_CHECKPOINT_METADATA` (or `manifest.ocdbt`)."""
    path = probe.path
    if not probe.is_dir and not (probe.is_file and path.name in ("_METADATA", "_CHECKPOINT_METADATA",
                                                                 "manifest.ocdbt")):
        return None
    directory = path if probe.is_dir else path.parent
    if (directory / "_METADATA").is_file() and ((directory / "_CHECKPOINT_METADATA").is_file()
                                                or (directory / "manifest.ocdbt").is_file()):
        return directory
    return None


def open_reader(path: os.PathLike[str] | str, *, probe: Probe | None = None, **options: Any) -> OrbaxReader:
    """Opens an Orbax checkpoint directory (no options)."""
    if options:
        raise UnsupportedFormatError(f"the orbax reader takes no options, got {', '.join(options)}")
    return OrbaxReader(path)
