"""Reads Keras 3 sharded weights: a `.weights.json` index + `.weights.h5` shards, as one set of variables.

`save_weights(path, max_shard_size=...)` writes {"metadata": {"total_size"},
"weight_map": {"/layers/dense/vars": ["model_00000.weights.h5", ...]}}: each
h5 group maps to the shards holding some of its datasets. Every listed shard
is walked (metadata only) with the HDF5 walker; variables get the names the
unsharded `.weights.h5` would give ("layers/dense/vars/0"). Reads through
h5py only via varstore.backends.hdf5; writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import load_json
from varstore.checkpoint.read.reader_api import CheckpointReader, SkippedEntry, VariableInfo, checked_out
from varstore.formats._confine import inside
from varstore.formats.keras._config import not_trainable
from varstore.errors import CorruptCheckpointError, NotACheckpointError, UnknownVariableError, UnsupportedFormatError

if TYPE_CHECKING:
    from varstore.formats.probe import Probe

__all__ = ["KerasShardedReader", "sniff", "open_reader"]

#: The file-name ending of the index this format opens (its registry entry's suffix).
_INDEX_SUFFIXES = (".weights.json",)
_MAX_INDEX = 64 << 20


class KerasShardedReader(CheckpointReader):
    """The union of a Keras 3 sharded weights set; `attributes["shard"]` names each variable's file.

    `metadata` holds the index's metadata and "layer_names" (vars group ->
    the user's layer name, from the groups' `name` attributes).
    """

    format = "keras3-sharded"

    def __init__(self, path: os.PathLike[str] | str) -> None:
        """Reads the index and walks every shard (no variable bytes).

        Raises:
          NotACheckpointError: `path` is not a `.weights.json` index.
          CorruptCheckpointError: a malformed index, a missing or unreadable
            shard, or a group the index maps to shards that do not hold it
            (naming the shard).
        """
        from varstore.backends.hdf5.walker import HDF5Walker

        super().__init__(Path(path))
        label = f"Keras sharded weights index '{self.path}'"
        if not self.path.name.endswith(_INDEX_SUFFIXES):
            raise NotACheckpointError(f"'{self.path}' is not a Keras .weights.json index")
        try:
            if self.path.stat().st_size > _MAX_INDEX:
                raise CorruptCheckpointError(f"{label} is larger than {_MAX_INDEX} bytes")
            index = load_json(self.path.read_text("utf-8"), label)
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise CorruptCheckpointError(f"cannot read {label}: {err}") from err
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(g, str) and isinstance(s, list) and all(isinstance(x, str) for x in s)
                for g, s in weight_map.items()):
            raise CorruptCheckpointError(f"{label} has no weight_map of h5 group -> list of shard files")
        self.metadata = dict(index.get("metadata") or {}) if isinstance(index.get("metadata"), dict) else {}
        self._walkers: dict[str, Any] = {}
        self._where: dict[str, str] = {}
        layer_names: dict[str, str] = {}
        try:
            for shard in sorted({s for shards in weight_map.values() for s in shards}):
                shard_path = inside(self.path.parent, shard, file=self.path, field="weight_map")
                if not shard_path.is_file():
                    raise CorruptCheckpointError(f"{label} lists shard '{shard}', which is missing from "
                                                 f"'{self.path.parent}'")
                walker = HDF5Walker(shard_path)
                self._walkers[shard] = walker
                for dataset in walker.datasets:
                    self._where.setdefault(dataset.path, shard)
                for group in walker.groups:
                    if group.path.endswith("vars") and isinstance(group.attrs.get("name"), str):
                        layer_names.setdefault(group.path, group.attrs["name"])
                self.skipped.extend(SkippedEntry(f"{shard}:{s.path}", s.reason) for s in walker.skipped)
            for group, shards in weight_map.items():
                prefix = group.strip("/") + "/"
                if shards and not any(n.startswith(prefix) for n in self._where):
                    raise CorruptCheckpointError(f"{label} maps group '{group}' to {', '.join(shards)}, "
                                                 f"which hold none of its variables")
        except BaseException:
            self.close()
            raise
        if layer_names:
            self.metadata["layer_names"] = layer_names
        self.format_version = "keras3"

    def keys(self) -> list[str]:
        return list(self._where)

    def _shard(self, name: str) -> str:
        shard = self._where.get(name)
        if shard is None:
            raise UnknownVariableError(f"no variable '{name}' in Keras sharded weights '{self.path}'")
        return shard

    def info(self, name: str) -> VariableInfo:
        shard = self._shard(name)
        entry = self._walkers[shard].dataset(name)
        dtype = _dtypes.as_dtype(entry.dtype)
        return VariableInfo(name=name, shape=entry.shape, dtype=_dtypes.dtype_name(dtype),
                            nbytes=int(np.prod(entry.shape, dtype=object)) * dtype.itemsize,
                            trainable=not_trainable([name], {}, None).get(name), attributes={"shard": shard})

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one variable from its shard (CorruptCheckpointError naming the shard when damaged)."""
        shard = self._shard(name)
        walker = self._walkers[shard]
        entry = walker.dataset(name)
        result = checked_out(name, entry.shape, _dtypes.as_dtype(entry.dtype), out)
        return walker.read(name, result)

    def close(self) -> None:
        for walker in self._walkers.values():
            walker.close()
        self._walkers = {}


def sniff(probe: Probe) -> Path | None:
    """The path when the probed file is a `.weights.json` index."""
    return probe.path if probe.is_file and probe.name.endswith(_INDEX_SUFFIXES) else None


def open_reader(path: os.PathLike[str] | str, *, probe: Probe | None = None,
                **options: Any) -> KerasShardedReader:
    """Opens a Keras 3 sharded weights index (no options)."""
    if options:
        raise UnsupportedFormatError(f"the keras3-sharded reader takes no options, got {', '.join(options)}")
    return KerasShardedReader(path)
