"""Reads and writes HuggingFace sharded safetensors: `model.safetensors.index.json` + its shards.

The index ({"metadata": {"total_size": N, ...}, "weight_map": {name: shard}})
says which shard holds each tensor; each shard is read by
`safetensors.SafetensorsReader` (header parsed and bounds-checked, tensors by
positional reads). Open the index, its directory, or any one shard and the
whole model is seen. The writer splits variables greedily in order into
shards of at most `max_shard_size` bytes (a larger tensor gets a shard of its
own), names them `model-00001-of-0000N.safetensors` and writes the index as
`transformers` does (indent 2, sorted keys); the directory appears only when
complete. Parses no tensor bytes itself.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import load_json
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo
from varstore.formats.safetensors.single import SafetensorsReader, write_safetensors
from varstore.formats._confine import inside
from varstore.storage.links import check_inside
from varstore.errors import ConversionError, CorruptCheckpointError, NotACheckpointError, UnknownVariableError

if TYPE_CHECKING:
    from varstore.formats.format_entry import WriteRequest
    from varstore.formats.probe import Probe

__all__ = ["ShardedSafetensorsReader", "write_sharded_safetensors", "parse_size", "find_index",
           "sniff", "open_reader", "INDEX_NAME"]

#: The file-name ending of the index this format opens (its registry entry's suffix).
_INDEX_SUFFIXES = (".safetensors.index.json",)
INDEX_NAME = "model.safetensors.index.json"
_MAX_INDEX = 64 << 20
_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str | int) -> int:
    """Bytes of a size as HuggingFace spells it: 5000000, "500MB" (10**6), "2GiB" (2**30).

    Raises:
      ConversionError: not a positive size.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B?)\s*", str(text).upper())
        if match is None:
            raise ConversionError(f"cannot read the shard size {text!r}: write it as 500MB, 5GB, 2GiB or a "
                                  f"number of bytes")
        value = int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
    if value <= 0:
        raise ConversionError(f"the shard size must be positive, got {text!r}")
    return value


def find_index(path: Path) -> Path | None:
    """The index for `path`: itself, the one in a directory, or the sibling index naming this shard."""
    if path.is_file() and path.name.endswith(_INDEX_SUFFIXES):
        return path
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.name.endswith(_INDEX_SUFFIXES) and p.is_file())
        # an index found in the directory given is the checkpoint's: a link never leads out of it
        return check_inside(path, found[0], "safetensors index") if found else None
    if path.is_file() and path.name.endswith(".safetensors"):
        for candidate in sorted(path.parent.glob("*.safetensors.index.json")):
            try:
                check_inside(path.parent, candidate, "safetensors index")  # a linked sibling leading out: none
                if candidate.stat().st_size > _MAX_INDEX:
                    continue
                index = load_json(candidate.read_text("utf-8"), f"safetensors index '{candidate}'")
            except (OSError, ValueError):  # PathOutsideCheckpointError, CorruptCheckpointError (JSON too deep): OSErrors
                continue
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if isinstance(weight_map, dict) and path.name in set(weight_map.values()):
                return candidate
    return None


class ShardedSafetensorsReader(CheckpointReader):
    """The union of a sharded safetensors set, by the index's weight_map.

    `metadata` is the index's "metadata" (total_size and anything else the
    writer put there, e.g. a tied weight's dropped alias); each variable's
    `attributes["shard"]` names its file.
    """

    format = "safetensors-sharded"

    def __init__(self, path: os.PathLike[str] | str) -> None:
        """Reads the index and every shard's header (no tensor bytes).

        Raises:
          NotACheckpointError: no index found for `path`.
          CorruptCheckpointError: a malformed index, a missing or truncated
            shard, or a name the index maps to a shard that lacks it (each
            naming the shard).
        """
        given = Path(path)
        index_path = find_index(given)
        if index_path is None:
            raise NotACheckpointError(f"'{given}' is not part of a sharded safetensors set: no "
                                      f"*.safetensors.index.json names it")
        super().__init__(index_path)
        label = f"safetensors index '{index_path}'"
        try:
            if index_path.stat().st_size > _MAX_INDEX:
                raise CorruptCheckpointError(f"{label} is larger than {_MAX_INDEX} bytes")
            index = load_json(index_path.read_text("utf-8"), label)
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise CorruptCheckpointError(f"cannot read {label}: {err}") from err
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in weight_map.items()):
            raise CorruptCheckpointError(f"{label} has no weight_map of tensor name -> shard file name")
        metadata = index.get("metadata") or {}
        self.metadata = dict(metadata) if isinstance(metadata, dict) else {}
        self._shards: dict[str, SafetensorsReader] = {}
        self._where: dict[str, str] = {}
        try:
            for shard in sorted(set(weight_map.values())):
                shard_path = inside(index_path.parent, shard, file=index_path, field="weight_map")
                if not shard_path.is_file():
                    raise CorruptCheckpointError(f"{label} maps tensors to shard '{shard}', which is missing "
                                                 f"from '{index_path.parent}'")
                self._shards[shard] = SafetensorsReader(shard_path)
            for shard, reader in self._shards.items():
                self.skipped.extend(reader.skipped)
                for name in reader.keys():
                    if weight_map.get(name) == shard:
                        self._where[name] = shard
            absent = [n for n in weight_map if n not in self._where
                      and not any(s.name == n for s in self.skipped)]
            if absent:
                raise CorruptCheckpointError(
                    f"{label} maps '{absent[0]}' to shard '{weight_map[absent[0]]}', which does not hold it"
                    + (f" ({len(absent) - 1} more missing)" if len(absent) > 1 else ""))
        except BaseException:
            self.close()
            raise

    def keys(self) -> list[str]:
        return list(self._where)

    def _shard(self, name: str) -> SafetensorsReader:
        shard = self._where.get(name)
        if shard is None:
            raise UnknownVariableError(f"no tensor '{name}' in sharded safetensors '{self.path}'")
        return self._shards[shard]

    def info(self, name: str) -> VariableInfo:
        inner = self._shard(name).info(name)
        return VariableInfo(name=name, shape=inner.shape, dtype=inner.dtype, nbytes=inner.nbytes,
                            attributes={**inner.attributes, "shard": self._where[name]})

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one tensor from its shard (CorruptCheckpointError naming the shard if it is truncated)."""
        return self._shard(name).read(name, out)

    def close(self) -> None:
        for reader in self._shards.values():
            reader.close()


def _plan_shards(entries: Sequence[SaveEntry], max_shard_size: int) -> list[list[SaveEntry]]:
    shards: list[list[SaveEntry]] = [[]]
    size = 0
    for entry in entries:
        nbytes = int(np.prod(entry.shape, dtype=object)) * _dtypes.as_dtype(entry.dtype).itemsize
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += nbytes
    return shards


def write_sharded_safetensors(directory: os.PathLike[str] | str, entries: Sequence[SaveEntry],
                              max_shard_size: int | str = "5GB", metadata: dict[str, str] | None = None) -> int:
    """Writes `entries` as a HuggingFace sharded set into a new `directory`, one tensor in memory at a time.

    Layout as `transformers.save_pretrained` writes it: shards
    `model-00001-of-0000N.safetensors` (each header's __metadata__ holds
    {"format": "pt"} plus `metadata`), and `model.safetensors.index.json`
    with {"metadata": {"total_size": bytes}, "weight_map": {name: shard}}.

    Args:
      directory: destination directory; replaced as a whole when complete.
      entries: the variables, in order; dtypes as write_safetensors accepts.
      max_shard_size: bytes per shard (int or "500MB", "5GB", "2GiB"); a
        tensor larger than this gets a shard of its own.
      metadata: extra str -> str for each shard's header.

    Returns:
      Bytes of tensor data written.

    Raises:
      ConversionError: a bad size, or duplicate names.
      UnsupportedDtypeError: a dtype safetensors cannot hold (nothing is written).
    """
    from varstore.checkpoint.publish.atomic import atomic_path, fsync_directory

    limit = parse_size(max_shard_size)
    entries = list(entries)
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConversionError("cannot write sharded safetensors: duplicate tensor names")
    shards = _plan_shards(entries, limit)
    count = len(shards)
    header_meta = {"format": "pt", **{str(k): str(v) for k, v in (metadata or {}).items()}}
    weight_map: dict[str, str] = {}
    written = 0
    with atomic_path(Path(directory)) as tmp:
        tmp.mkdir()
        for number, shard in enumerate(shards, start=1):
            filename = f"model-{number:05d}-of-{count:05d}.safetensors"
            written += write_safetensors(tmp / filename, shard, metadata=header_meta)
            weight_map.update({e.name: filename for e in shard})
        index = {"metadata": {"total_size": written}, "weight_map": dict(sorted(weight_map.items()))}
        with open(tmp / INDEX_NAME, "w", encoding="utf-8") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_directory(tmp)
    return written


def write_checkpoint(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """The registry's write for "safetensors-sharded": write_sharded_safetensors into directory `path`.

    `request.options["max_shard_size"]` sets the shard size (default 5GB);
    each shard's __metadata__ holds format "pt" and
    varstore.formats.safetensors.single.source_metadata(request).

    Raises:
      ConversionError: an unknown option or a bad size (before any tensor is read).
    """
    from varstore.formats.safetensors.single import source_metadata

    unknown = sorted(set(request.options) - {"max_shard_size"})
    if unknown:
        raise ConversionError(f"the sharded safetensors writer takes only max_shard_size, got {', '.join(unknown)}")
    size = request.options.get("max_shard_size") or "5GB"
    write_sharded_safetensors(path, entries, max_shard_size=size, metadata=source_metadata(request))
    return ()


def sniff(probe: Probe) -> Path | None:
    """The index path when the probed path is an index, a directory holding one, or a shard an index names."""
    path = probe.path
    if probe.is_dir or probe.name.endswith(_INDEX_SUFFIXES):
        return find_index(path)
    if probe.is_file and path.name.endswith(".safetensors") and re.search(r"-\d{5}-of-\d{5}\.safetensors$", path.name):
        return find_index(path)
    return None


def open_reader(path: os.PathLike[str] | str, *, probe: Probe | None = None,
                **options: Any) -> ShardedSafetensorsReader:
    """Opens a sharded safetensors set from its index, directory or any shard (no options)."""
    if options:
        raise ConversionError(f"the sharded safetensors reader takes no options, got {', '.join(options)}")
    return ShardedSafetensorsReader(path)
