"""Reads PyTorch Distributed Checkpoint (DCP) directories: `.metadata` + `__<rank>_<n>.distcp` files.

`.metadata` is a pickle of DCP's dataclasses; it goes through the restricted
unpickler, whose allow-list maps exactly those classes (Metadata,
TensorStorageMetadata, BytesStorageMetadata, ChunkStorageMetadata,
TensorProperties, MetadataIndex, StorageMeta, _StorageInfo) to inert
records. Each tensor is the union of its chunks; a chunk is either a
torch.save zip embedded at (offset, length) of a data file (read by
`pytorch.TorchBlob`: restricted unpickler, positional reads) or, with DCP's
safetensors writer, an entry of the safetensors blob that starts at that
offset. Chunks may live in different files; each is placed at its offsets.
Non-tensor values (BytesStorageMetadata) become `metadata["non_tensor"]`.
Writes nothing; never imports torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import check_value_size
from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo, checked_out
from varstore.formats._restricted_pickle import DType, Record, unpickle
from varstore.formats.pytorch.reader import TorchBlob
from varstore.formats._confine import inside
from varstore.storage.links import refuse_links_leading_out
from varstore.formats._coverage import check_coverage
from varstore.storage.special_files import open_for_reading
from varstore.errors import (
    CorruptCheckpointError,
    NotACheckpointError,
    UnknownVariableError,
    UnsupportedFormatError,
)

if TYPE_CHECKING:
    from varstore.formats.probe import Probe

__all__ = ["DCPReader", "sniff", "open_reader"]

_MAX_METADATA = 256 << 20


class _Chunk:
    __slots__ = ("offsets", "sizes", "file", "offset", "length")

    def __init__(self, offsets: tuple[int, ...], sizes: tuple[int, ...], file: str, offset: int, length: int) -> None:
        self.offsets, self.sizes, self.file, self.offset, self.length = offsets, sizes, file, offset, length


class _Tensor:
    __slots__ = ("dtype", "shape", "chunks")

    def __init__(self, dtype: np.dtype, shape: tuple[int, ...], chunks: list[_Chunk]) -> None:
        self.dtype, self.shape, self.chunks = dtype, shape, chunks


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                       for v in value):
        raise CorruptCheckpointError(f"{what} is not a tuple of non-negative ints: {value!r:.80}")
    return tuple(value)


class DCPReader(CheckpointReader):
    """Lazy reader of a DCP checkpoint directory; names are DCP's fully qualified names ("net.fc.weight").

    Each variable's attributes list its chunks ("file", "offsets", "sizes").
    """

    format = "dcp"

    def __init__(self, path: os.PathLike[str] | str) -> None:
        """Unpickles `.metadata` (restricted) and checks every chunk's file and bounds; reads no tensor bytes.

        Raises:
          NotACheckpointError: no `.metadata` in the directory.
          UnsafeFormatError: `.metadata` names a global outside the allow-list.
          CorruptCheckpointError: malformed metadata, a missing data file, a
            chunk outside its file or chunks that do not tile the tensor.
        """
        given = Path(path)
        directory = given if given.is_dir() else given.parent
        super().__init__(directory)
        meta_path = directory / ".metadata"
        self._label = f"DCP checkpoint '{directory}'"
        if not meta_path.is_file():
            raise NotACheckpointError(f"'{directory}' is not a PyTorch DCP checkpoint: no .metadata file")
        refuse_links_leading_out(directory, "PyTorch DCP checkpoint")  # .metadata and data files stay inside
        try:
            if meta_path.stat().st_size > _MAX_METADATA:
                raise CorruptCheckpointError(f"{self._label}: .metadata is larger than {_MAX_METADATA} bytes")
            data = meta_path.read_bytes()
        except OSError as err:
            raise CorruptCheckpointError(f"cannot read {self._label}/.metadata: {err}") from err
        meta = unpickle(data, f"{self._label} (.metadata)")
        if not isinstance(meta, Record) or not meta.qualname.endswith(".Metadata"):
            raise CorruptCheckpointError(f"{self._label}: .metadata holds {type(meta).__name__}, not DCP Metadata")
        state_dict_metadata = meta.get("state_dict_metadata")
        storage_data = meta.get("storage_data")
        if not isinstance(state_dict_metadata, dict) or not isinstance(storage_data, dict):
            raise CorruptCheckpointError(f"{self._label}: .metadata lacks state_dict_metadata or storage_data")
        where: dict[tuple[str, tuple[int, ...]], Record] = {}
        for index, info in storage_data.items():
            if not isinstance(index, Record) or not isinstance(info, Record):
                raise CorruptCheckpointError(f"{self._label}: storage_data holds {type(index).__name__} keys")
            offset = index.get("offset")
            where[(str(index.get("fqn")), _ints(offset, "a chunk index offset") if offset is not None else ())] = info
        self._tensors: dict[str, _Tensor] = {}
        self._bytes: dict[str, _Chunk] = {}
        sizes: dict[str, int] = {}
        for fqn, item in state_dict_metadata.items():
            fqn = str(fqn)
            if not isinstance(item, Record):
                raise CorruptCheckpointError(f"{self._label}: entry '{fqn}' is {type(item).__name__}")
            if item.qualname.endswith(".BytesStorageMetadata"):
                self._bytes[fqn] = self._locate(fqn, (), (), where, sizes)
                continue
            if not item.qualname.endswith(".TensorStorageMetadata"):
                raise CorruptCheckpointError(f"{self._label}: entry '{fqn}' is a {item.qualname}")
            self._tensors[fqn] = self._tensor(fqn, item, where, sizes)
        self.metadata = {"non_tensor": {fqn: self._value(fqn, chunk) for fqn, chunk in self._bytes.items()}} \
            if self._bytes else {}

    def _locate(self, fqn: str, offsets: tuple[int, ...], sizes: tuple[int, ...],
                where: dict[tuple[str, tuple[int, ...]], Record], file_sizes: dict[str, int]) -> _Chunk:
        info = where.get((fqn, offsets)) or (where.get((fqn, ())) if not offsets else None)
        if info is None:
            raise CorruptCheckpointError(f"{self._label}: no storage record for '{fqn}' chunk at {list(offsets)}")
        relative, offset, length = info.get("relative_path"), info.get("offset"), info.get("length")
        if not isinstance(relative, str) or not isinstance(offset, int) \
                or not isinstance(length, int) or offset < 0 or length < 0:
            raise CorruptCheckpointError(f"{self._label}: storage record of '{fqn}' is malformed")
        if info.get("transform_descriptors"):
            raise UnsupportedFormatError(f"{self._label}: '{fqn}' is stored with transforms "
                                         f"{info.get('transform_descriptors')!r:.60} (compression); varstore reads "
                                         f"only untransformed DCP data")
        if relative not in file_sizes:
            file_path = inside(self.path, relative, file=self.path / ".metadata",
                               field=f"the relative_path of '{fqn}'")
            if not file_path.is_file():
                raise CorruptCheckpointError(f"{self._label}: data file '{relative}' (holding '{fqn}') is missing")
            file_sizes[relative] = file_path.stat().st_size
        if offset + length > file_sizes[relative]:
            raise CorruptCheckpointError(
                f"{self._label}: '{fqn}' lies at bytes [{offset}, {offset + length}) of data file '{relative}', "
                f"which has {file_sizes[relative]} bytes (truncated)")
        return _Chunk(offsets, sizes, relative, offset, length)

    def _tensor(self, fqn: str, item: Record, where: dict[tuple[str, tuple[int, ...]], Record],
                file_sizes: dict[str, int]) -> _Tensor:
        properties = item.get("properties")
        state = properties.get("_tuple") if isinstance(properties, Record) else None
        dtype_ref = state[0] if isinstance(state, tuple) and state else (
            properties.get("dtype") if isinstance(properties, Record) else None)
        if not isinstance(dtype_ref, DType):
            raise CorruptCheckpointError(f"{self._label}: tensor '{fqn}' has no torch dtype in its properties")
        dtype = _dtypes.as_dtype(dtype_ref.name)
        shape = _ints(item.get("size"), f"the size of '{fqn}'")
        chunks = []
        for chunk in item.get("chunks") or []:
            if not isinstance(chunk, Record):
                raise CorruptCheckpointError(f"{self._label}: a chunk of '{fqn}' is malformed")
            offsets = _ints(chunk.get("offsets"), f"a chunk offset of '{fqn}'")
            sizes = _ints(chunk.get("sizes"), f"a chunk size of '{fqn}'")
            if len(offsets) != len(shape) or len(sizes) != len(shape) or any(
                    o + s > d for o, s, d in zip(offsets, sizes, shape)):
                raise CorruptCheckpointError(f"{self._label}: chunk {list(offsets)}+{list(sizes)} of '{fqn}' "
                                             f"does not fit its shape {list(shape)}")
            located = self._locate(fqn, offsets, sizes, where, file_sizes)
            if int(np.prod(sizes, dtype=object)) * dtype.itemsize > located.length:
                raise CorruptCheckpointError(
                    f"{self._label}: chunk {list(offsets)} of '{fqn}' needs {list(sizes)} {dtype} elements but "
                    f"its record in '{located.file}' has only {located.length} bytes")
            chunks.append(located)
        check_coverage(shape, [(c.offsets, c.sizes) for c in chunks], f"{self._label}: tensor '{fqn}'")
        return _Tensor(dtype, shape, chunks)

    def _value(self, fqn: str, chunk: _Chunk) -> Any:
        blob = TorchBlob(self.path / chunk.file, chunk.offset, chunk.length,
                         label=f"{self._label}: value '{fqn}' in '{chunk.file}'")
        try:
            if blob.tensors:
                raise CorruptCheckpointError(f"{self._label}: non-tensor value '{fqn}' holds tensors")
            return blob.leaves.get("value", blob.leaves)
        finally:
            blob.close()

    def keys(self) -> list[str]:
        return list(self._tensors)

    def _lookup(self, name: str) -> _Tensor:
        tensor = self._tensors.get(name)
        if tensor is None:
            raise UnknownVariableError(f"no tensor '{name}' in {self._label}")
        return tensor

    def info(self, name: str) -> VariableInfo:
        tensor = self._lookup(name)
        return VariableInfo(name=name, shape=tensor.shape, dtype=_dtypes.dtype_name(tensor.dtype),
                            nbytes=int(np.prod(tensor.shape, dtype=object)) * tensor.dtype.itemsize,
                            attributes={"chunks": [{"file": c.file, "offsets": list(c.offsets),
                                                    "sizes": list(c.sizes)} for c in tensor.chunks]})

    def _read_chunk(self, name: str, tensor: _Tensor, chunk: _Chunk) -> npt.NDArray[Any]:
        path = self.path / chunk.file
        label = f"{self._label}: tensor '{name}' in '{chunk.file}'"
        with os.fdopen(open_for_reading(path, f"data file of '{name}'"), "rb") as handle:  # never blocks
            handle.seek(chunk.offset)
            head = handle.read(4)
        if head == b"PK\x03\x04":
            blob = TorchBlob(path, chunk.offset, chunk.length, label=label)
            try:
                if len(blob.tensors) != 1:
                    raise CorruptCheckpointError(f"{label}: the embedded torch file holds {len(blob.tensors)} "
                                                 f"tensors, not one chunk")
                (ref,) = blob.tensors.values()
                value = blob.read_tensor(name, ref)
            finally:
                blob.close()
        else:
            from varstore.formats.safetensors.single import SafetensorsReader

            embedded = SafetensorsReader(path, base=chunk.offset)
            try:
                if name not in embedded.keys():
                    raise CorruptCheckpointError(f"{label}: the embedded safetensors blob has no '{name}'")
                value = embedded.read(name)
            finally:
                embedded.close()
        if value.shape != chunk.sizes or value.dtype != tensor.dtype:
            raise CorruptCheckpointError(f"{label}: the chunk holds {value.dtype}{list(value.shape)}, the metadata "
                                         f"says {_dtypes.dtype_name(tensor.dtype)}{list(chunk.sizes)}")
        return value

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Assembles one tensor from its chunks (one chunk in memory besides the result).

        Raises:
          UnknownVariableError: unknown name.
          ValueTooLargeError: the tensor declares more bytes than its chunk records store (plus the
            default allowance) or than `max_bytes`, before anything is allocated.
          CorruptCheckpointError: a chunk that is truncated or contradicts the metadata (naming its file).
        """
        tensor = self._lookup(name)
        if out is None:  # bounded by the distinct bytes its chunk records store (records may alias)
            stored = sum(length for _, _, length in {(c.file, c.offset, c.length) for c in tensor.chunks})
            check_value_size(name, self._label, int(np.prod(tensor.shape, dtype=object)) * tensor.dtype.itemsize,
                             self.max_bytes, stored=stored)
        result = checked_out(name, tensor.shape, tensor.dtype, out, self._label)
        for chunk in tensor.chunks:
            value = self._read_chunk(name, tensor, chunk)
            result[tuple(slice(o, o + s) for o, s in zip(chunk.offsets, chunk.sizes))] = value
        return result


def sniff(probe: Probe) -> Path | None:
    """The directory when the probed path is a DCP directory (holds .metadata and .distcp files) or one of its files."""
    path = probe.path
    if not probe.exists:
        return None
    directory = path if probe.is_dir else path.parent
    if (directory / ".metadata").is_file() and (probe.is_dir or path.suffix == ".distcp" or path.name == ".metadata") \
            and any(p.suffix == ".distcp" for p in directory.iterdir()):
        return directory
    return None


def open_reader(path: os.PathLike[str] | str, *, probe: Probe | None = None, **options: Any) -> DCPReader:
    """Opens a DCP checkpoint directory (no options)."""
    if options:
        raise UnsupportedFormatError(f"the dcp reader takes no options, got {', '.join(options)}")
    return DCPReader(path)
