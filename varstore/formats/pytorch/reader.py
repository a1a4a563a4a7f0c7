"""Reads PyTorch `torch.save` files (zip and legacy formats) without torch and without running their pickle.

The pickle goes through the restricted unpickler (`_restricted_pickle`), so
tensors come back as inert records (storage key, dtype, offset, shape,
strides); their bytes are then read by position: a zip member's data offset
comes from its local header, a legacy file's storages from the length-prefixed
records after its pickles. Views are exact (strides and offset applied),
storages shared by several tensors are read per view, and nested containers
are flattened to dotted names as torch's state dicts spell them. Non-tensor
leaves (epoch, lr, optimizer param_groups) become JSON metadata under
`metadata["non_tensor"]`. Writes nothing; never imports torch.
"""

from __future__ import annotations

import io
import os
import re
import struct
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import ENV_MAX_BYTES, read_limit
from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo, checked_out
from varstore.formats.pytorch._pickle_tree import flatten
from varstore.formats._restricted_pickle import StorageRef, TensorRef, scan_pickle, unpickle
from varstore.formats._zip_members import ZIP_ERRORS, check_method, read_member, stored_data_start
from varstore.errors import (CorruptCheckpointError, NotACheckpointError, UnknownVariableError,
                             UnsafeCheckpointError, UnsupportedFormatError, ValueTooLargeError)

if TYPE_CHECKING:
    from varstore.formats.probe import Probe

__all__ = ["TorchReader", "TorchBlob", "sniff", "open_reader", "is_torch_zip", "is_legacy_torch"]


_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
#: The first bytes of a legacy torch.save file: PROTO 2, LONG1 of 10 bytes holding the magic number.
LEGACY_HEAD = b"\x80\x02\x8a\x0a" + _LEGACY_MAGIC.to_bytes(10, "little")
_MAX_PICKLE = 1 << 30  # a data.pkl beyond this is not a state dict's metadata
_MAX_EXPANSION = 64  # a stride-0 (expanded) view may be at most this many times its storage
#: All views of one storage together may hold at most this many times its bytes (plus _VIEW_SLACK): tied
#: weights view a storage twice, q/k/v slices once; thousands of whole-storage views are an attack.
_MAX_VIEWS_RATIO = 64
_VIEW_SLACK = 1 << 20  # bytes
_MAX_SPAN = 1 << 59  # product of a shape's non-zero extents NumPy can still make (elements)
_MAX_DIMS = 64  # NumPy's limit on dimensions
_MAX_BYTEORDER = 16  # bytes of the "byteorder" record ("little" / "big")


def _raised_to(nbytes: int) -> bool:
    """True when the user raised the read limit (VARSTORE_MAX_BYTES) to at least `nbytes`."""
    limit, how = read_limit(None)
    return how == ENV_MAX_BYTES and nbytes <= limit


class _Window(io.RawIOBase):
    """A read-only, seekable view of bytes [base, base + size) of a file (an embedded zip)."""

    def __init__(self, handle: Any, base: int, size: int) -> None:
        super().__init__()
        self._handle, self._base, self._size, self._pos = handle, base, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = max(0, offset if whence == 0 else self._pos + offset if whence == 1 else self._size + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self._size - self._pos))
        if n == 0:
            return 0
        self._handle.seek(self._base + self._pos)
        got = self._handle.readinto(view[:n])
        self._pos += got
        return int(got)


class TorchBlob:
    """One torch.save payload (a zip, or a legacy file) inside `path` at [base, base + size).

    Parses the pickle and locates every storage's bytes; `read_tensor` then
    reads one view with one positional read. Used for whole files and for
    the zips PyTorch DCP embeds in its data files.

    Raises (from the constructor):
      UnsafeFormatError: a global outside the allow-list / a whole nn.Module.
      UnsafeCheckpointError: a zip member compressed with a method torch never
        writes, a memo index beyond the entries stored, a container that
        contains itself, more names than the pickle's size allows, or views
        adding up to more than 64 times their storage.
      ValueTooLargeError: an expanded (stride-0) view beyond 64 times its storage, or all views
        together beyond 64 times all storages (plus 1 MiB), unless VARSTORE_MAX_BYTES is raised to
        what they declare; names the tensor, the claimed and the stored bytes.
      CorruptCheckpointError: a malformed zip or pickle, or a storage record
        shorter than its storage (naming the record).
      NotACheckpointError: neither a torch zip nor a legacy torch file.
    """

    def __init__(self, path: Path, base: int = 0, size: int | None = None, label: str | None = None) -> None:
        self.path = path
        self.label = label or f"PyTorch file '{path}'"
        self._handle: Any = open(path, "rb")  # noqa: SIM115 (closed in close())
        try:
            total = os.fstat(self._handle.fileno()).st_size
            self._base = base
            self._size = total - base if size is None else size
            if base < 0 or self._size < 0 or base + self._size > total:
                raise CorruptCheckpointError(f"{self.label}: bytes [{base}, {base + self._size}) lie outside "
                                             f"the {total}-byte file")
            self.byteorder = "little"
            self._storage_at: dict[str, tuple[int, int]] = {}  # key -> (absolute offset, bytes)
            self._handle.seek(base)
            head = self._handle.read(4)
            if head[:4] == b"PK\x03\x04":
                self.kind = "zip"
                obj, pickle_bytes = self._load_zip()
            elif head[:2] == b"\x80\x02":
                self.kind = "legacy"
                obj, pickle_bytes = self._load_legacy()
            else:
                raise NotACheckpointError(
                    f"{self.label} (suffix {path.suffix!r}) is neither a torch.save zip (with <archive>/data.pkl) "
                    f"nor a legacy torch.save file, nor any other format varstore reads")
            self.tensors, self.leaves = flatten(obj, self.label, pickle_bytes)
            viewed: dict[str, int] = {}
            for name, tensor in self.tensors.items():
                self._check_view(name, tensor, viewed)
            self._check_expansion(viewed)
        except BaseException:
            self.close()
            raise

    # -- zip format
    def _load_zip(self) -> tuple[Any, int]:
        window = _Window(self._handle, self._base, self._size)
        try:
            archive = zipfile.ZipFile(window)  # noqa: SIM115 (read once here)
            infos = {info.filename: info for info in archive.infolist()}
        except ZIP_ERRORS as err:
            raise CorruptCheckpointError(f"{self.label} is not a readable zip archive: {err}") from err
        pickles = [n for n in infos if n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1)]
        if len(pickles) != 1:
            raise NotACheckpointError(f"{self.label}: a torch zip holds one '<archive>/data.pkl'; found "
                                      f"{len(pickles)}")
        prefix = pickles[0][: -len("data.pkl")]
        order = infos.get(prefix + "byteorder")
        if order is not None:
            raw_order = read_member(archive, order, _MAX_BYTEORDER, self.label)
            self.byteorder = raw_order.decode("ascii", "replace").strip()
        # torch stores data.pkl uncompressed, so it cannot be larger than the archive holding it
        data = read_member(archive, infos[pickles[0]], min(_MAX_PICKLE, self._size), self.label)
        if self.byteorder not in ("little", "big"):
            raise CorruptCheckpointError(f"{self.label}: byteorder record says {self.byteorder!r:.20}")
        storages: dict[str, StorageRef] = {}
        obj = unpickle(data, f"{self.label} ({pickles[0]})", storages)
        for key, ref in storages.items():
            member = f"{prefix}data/{key}"
            info = infos.get(member)
            if info is None:
                raise CorruptCheckpointError(f"{self.label}: storage record '{member}' is missing")
            check_method(info, self.label)
            need = ref.numel * _dtypes.as_dtype(ref.dtype).itemsize
            if info.file_size < need:
                raise CorruptCheckpointError(
                    f"{self.label}: storage record '{member}' holds {info.file_size} bytes, its storage of "
                    f"{ref.numel} {ref.dtype} elements needs {need}")
            if info.compress_type != zipfile.ZIP_STORED:
                raise CorruptCheckpointError(f"{self.label}: storage record '{member}' is compressed; torch "
                                             f"stores records uncompressed")
            start = stored_data_start(self._handle, info, self._base, self._size, self.label)
            self._storage_at[key] = (self._base + start, need)
        return obj, len(data)

    # -- legacy format
    def _next_pickle(self, what: str, storages: dict[str, StorageRef]) -> Any:
        start = self._handle.tell()
        left = self._base + self._size - start
        length = scan_pickle(self._handle, left, f"{self.label} ({what})")
        self._handle.seek(start)
        data = self._handle.read(length)
        self._last_pickle_bytes = len(data)
        return unpickle(data, f"{self.label} ({what})", storages)

    def _load_legacy(self) -> tuple[Any, int]:
        self._handle.seek(self._base)
        storages: dict[str, StorageRef] = {}
        magic = self._next_pickle("magic number", storages)
        if magic != _LEGACY_MAGIC:
            raise NotACheckpointError(f"{self.label} is a pickle but not a torch.save file (no torch magic number)")
        self._next_pickle("protocol version", storages)
        sys_info = self._next_pickle("system info", storages)
        if isinstance(sys_info, dict) and sys_info.get("little_endian") is False:
            self.byteorder = "big"
        obj = self._next_pickle("data", storages)
        pickle_bytes = self._last_pickle_bytes
        keys = self._next_pickle("storage keys", storages)
        if not isinstance(keys, list) or not all(isinstance(k, (str, int)) for k in keys):
            raise CorruptCheckpointError(f"{self.label}: the storage key list is malformed")
        end = self._base + self._size
        position = self._handle.tell()
        for key in (str(k) for k in keys):
            ref = storages.get(key)
            if ref is None:
                raise CorruptCheckpointError(f"{self.label}: storage key '{key}' names no storage of the pickle")
            self._handle.seek(position)
            head = self._handle.read(8)
            if len(head) < 8:
                raise CorruptCheckpointError(f"{self.label}: storage record '{key}' is cut off (truncated file)")
            (count,) = struct.unpack("<q", head) if self.byteorder == "little" else struct.unpack(">q", head)
            need = ref.numel * _dtypes.as_dtype(ref.dtype).itemsize
            if count != ref.numel or position + 8 + need > end:
                raise CorruptCheckpointError(
                    f"{self.label}: storage record '{key}' holds {count} elements and "
                    f"{max(0, end - position - 8)} bytes remain; its storage of {ref.numel} {ref.dtype} "
                    f"elements needs {need} bytes")
            self._storage_at[key] = (position + 8, need)
            position += 8 + need
        missing = sorted(set(storages) - set(self._storage_at))
        if missing:
            raise CorruptCheckpointError(f"{self.label}: storages {', '.join(missing)} have no data record")
        return obj, pickle_bytes

    def _check_view(self, name: str, tensor: TensorRef, viewed: dict[str, int]) -> None:
        """A view must lie inside its storage, and may not expand it without bound (stride-0 bombs).

        `viewed` sums, per storage key, the bytes of the views checked so far:
        all views of one storage together may hold at most _MAX_VIEWS_RATIO
        times its bytes (plus _VIEW_SLACK), or UnsafeCheckpointError.
        """
        dtype = _dtypes.as_dtype(tensor.dtype)
        nbytes = int(np.prod(tensor.shape, dtype=object)) * dtype.itemsize
        span_elements = int(np.prod([max(d, 1) for d in tensor.shape], dtype=object))
        if span_elements > _MAX_SPAN or len(tensor.shape) > _MAX_DIMS:
            raise CorruptCheckpointError(f"tensor '{name}' in {self.label}: shape {tensor.shape} is larger than "
                                         f"any array can be")
        if nbytes == 0:
            return
        _, stored = self._storage_at[tensor.storage.key]
        span = 1 + sum((d - 1) * s for d, s in zip(tensor.shape, tensor.stride))
        if (tensor.offset + span) * dtype.itemsize > stored:
            raise CorruptCheckpointError(
                f"tensor '{name}' in {self.label}: its view (offset {tensor.offset}, shape {tensor.shape}, "
                f"stride {tensor.stride}) reaches past its {stored}-byte storage '{tensor.storage.key}'")
        if nbytes > max(_MAX_EXPANSION * stored, 1 << 20) and not _raised_to(nbytes):
            raise ValueTooLargeError(
                f"tensor '{name}' in {self.label}: a {nbytes:,}-byte view of a {stored:,}-byte storage (an expanded "
                f"view beyond {_MAX_EXPANSION}x: stride 0); set {ENV_MAX_BYTES} to at least {nbytes} to read it, "
                f"or save it with .contiguous()")
        total = viewed.get(tensor.storage.key, 0) + nbytes
        viewed[tensor.storage.key] = total
        if total > _MAX_VIEWS_RATIO * stored + _VIEW_SLACK and not _raised_to(total):
            raise UnsafeCheckpointError(
                f"tensor '{name}' in {self.label}: the tensors viewing storage '{tensor.storage.key}' "
                f"({stored} bytes) add up to {total} bytes, more than {_MAX_VIEWS_RATIO} times the storage; "
                f"a state dict's views alias a storage a few times at most")

    def _check_expansion(self, viewed: dict[str, int]) -> None:
        """All views together may hold at most _MAX_EXPANSION times the bytes of all storages (plus
        _VIEW_SLACK): thousands of small stride-0 views would otherwise make GBs from a few KB.

        Raises:
          ValueTooLargeError: naming the tensor expanding most, the claimed and stored sizes and the switch.
        """
        claimed, stored = sum(viewed.values()), sum(size for _, size in self._storage_at.values())
        if claimed <= _MAX_EXPANSION * stored + _VIEW_SLACK or _raised_to(claimed):
            return
        worst = max(self.tensors, key=lambda n: self._view_bytes(self.tensors[n]) - self._storage_at.get(
            self.tensors[n].storage.key, (0, 0))[1])
        raise ValueTooLargeError(
            f"{self.label}: its tensors declare {claimed:,} bytes but its storages hold {stored:,} bytes (more than "
            f"{_MAX_EXPANSION}x: expanded, stride-0 views, the largest '{worst}'); set {ENV_MAX_BYTES} to at "
            f"least {claimed} to read it")

    @staticmethod
    def _view_bytes(tensor: TensorRef) -> int:
        return int(np.prod(tensor.shape, dtype=object)) * _dtypes.as_dtype(tensor.dtype).itemsize

    # -- values
    def read_tensor(self, name: str, tensor: TensorRef, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads the view `tensor` (named `name` in errors) into a C-ordered array (into `out` when given)."""
        dtype = _dtypes.as_dtype(tensor.dtype)
        result = checked_out(name, tensor.shape, dtype, out)
        if result.size == 0:
            return result
        start, nbytes = self._storage_at[tensor.storage.key]
        item = dtype.itemsize
        span = 1 + sum((d - 1) * s for d, s in zip(tensor.shape, tensor.stride))
        if (tensor.offset + span) * item > nbytes:
            raise CorruptCheckpointError(
                f"tensor '{name}' in {self.label}: its view (offset {tensor.offset}, shape {tensor.shape}, "
                f"stride {tensor.stride}) reaches past its {nbytes}-byte storage '{tensor.storage.key}'")
        contiguous = tensor.stride == tuple(int(np.prod(tensor.shape[i + 1:], dtype=np.int64))
                                            for i in range(len(tensor.shape)))
        buffer = result if contiguous else np.empty(span, dtype=dtype)
        flat = buffer.reshape(-1).view(np.uint8)
        self._handle.seek(start + tensor.offset * item)
        got = self._handle.readinto(flat.data)
        if got != flat.size:
            raise CorruptCheckpointError(f"tensor '{name}' in {self.label}: read {got} of {flat.size} bytes; "
                                         f"the file is truncated")
        if not contiguous:
            view = np.lib.stride_tricks.as_strided(buffer, shape=tensor.shape,
                                                   strides=tuple(s * item for s in tensor.stride))
            result[...] = view
        if self.byteorder == "big" and item > 1:
            result.byteswap(inplace=True)
        return result

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class TorchReader(CheckpointReader):
    """Lazy reader of a `torch.save` file; names are dotted key paths ("encoder.layer.0.weight").

    `metadata["non_tensor"]` holds the non-tensor leaves by dotted name
    ({"epoch": 3, "optimizer.param_groups.0.lr": 0.001, ...}).
    Trainable is True for tensors saved as parameters with requires_grad,
    None otherwise (a state dict does not record it).
    """

    format = "pytorch"

    def __init__(self, path: os.PathLike[str] | str) -> None:
        """Parses the pickle (restricted) and locates every storage; reads no tensor bytes.

        Raises:
          UnsafeFormatError, CorruptCheckpointError, NotACheckpointError: as TorchBlob.
        """
        super().__init__(Path(path))
        self._blob = TorchBlob(self.path)
        self.format_version = self._blob.kind
        if self._blob.leaves:
            self.metadata = {"non_tensor": dict(self._blob.leaves)}

    def keys(self) -> list[str]:
        return list(self._blob.tensors)

    def _lookup(self, name: str) -> TensorRef:
        tensor = self._blob.tensors.get(name)
        if tensor is None:
            raise UnknownVariableError(f"no tensor '{name}' in PyTorch file '{self.path}'")
        return tensor

    def info(self, name: str) -> VariableInfo:
        tensor = self._lookup(name)
        dtype = _dtypes.as_dtype(tensor.dtype)
        return VariableInfo(name=name, shape=tensor.shape, dtype=_dtypes.dtype_name(dtype),
                            nbytes=int(np.prod(tensor.shape, dtype=object)) * dtype.itemsize,
                            trainable=True if tensor.requires_grad else None,
                            device=_device_name(tensor.storage.location),
                            attributes={"storage": tensor.storage.key, "storage_offset": tensor.offset,
                                        "stride": list(tensor.stride)})

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one tensor (its view applied) as a C-ordered array.

        Raises:
          UnknownVariableError: unknown name.
          CorruptCheckpointError: the file is truncated or the view leaves its storage.
        """
        return self._blob.read_tensor(name, self._lookup(name), out)

    def close(self) -> None:
        self._blob.close()


def is_torch_zip_names(names: list[str]) -> bool:
    """True when a zip's member names hold one '<archive>/data.pkl' where torch.save puts it."""
    return any(n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1) for n in names)


def is_torch_zip(path: Path) -> bool:
    """True when `path` is a zip whose root holds one '<archive>/data.pkl' (reads the zip directory only)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError,
            RuntimeError):
        return False
    return is_torch_zip_names(names)


def is_legacy_torch(head_bytes: bytes) -> bool:
    """True when the first bytes are a legacy torch.save file's (PROTO 2 + its magic number)."""
    return head_bytes.startswith(LEGACY_HEAD)


def sniff(probe: Probe) -> Path | None:
    """The path when the probed file is a torch.save file (zip with data.pkl, or legacy magic).

    Runs after every other magic-byte format (registry order), so a zip or
    pickle no format claimed is judged here: refused, or named not a checkpoint.

    Raises:
      UnsafeFormatError: a pickle that is no torch.save file, or a zip of pickles (varstore.formats.pickles.sniff).
      NotACheckpointError: a zip archive that is neither Keras, npz nor PyTorch.
      UnsupportedFormatError: a TorchScript archive (a program, not a state dict).
    """
    if not probe.is_file:
        return None
    if is_legacy_torch(probe.head):
        return probe.path
    names = probe.zip_names
    if names is not None and _is_torchscript(names):
        raise UnsupportedFormatError(
            f"'{probe.path}' is a TorchScript program, not a state dict (torch.jit.save wrote it: code/ and "
            f"constants.pkl); varstore reads tensors, never programs. Save the weights with "
            f"torch.save(torch.jit.load(path).state_dict(), 'model.pt') and read that")
    if names is not None and is_torch_zip_names(names):
        return probe.path
    from varstore.formats.pickles import sniff as sniff_pickle

    return sniff_pickle(probe)


_DEVICE_NAME = re.compile(r"[a-z][a-z0-9_]{0,15}(?::[0-9]{1,5})?")


def _device_name(location: str) -> str | None:
    """The device a storage was saved from ("cuda:0", "cpu", "mps") as its persistent id names it; None for
    anything that does not look like a torch device name (the text comes from the file)."""
    return location if _DEVICE_NAME.fullmatch(location) else None


def _is_torchscript(names: list[str]) -> bool:
    """True for a torch.jit.save archive: "<archive>/constants.pkl" beside "<archive>/code/..." members."""
    roots = {n.split("/", 1)[0] for n in names if n.count("/") == 1 and n.endswith("/constants.pkl")}
    return any(n.split("/", 1)[0] in roots and n.split("/", 2)[1:2] == ["code"] for n in names if n.count("/") >= 2)


def open_reader(path: os.PathLike[str] | str, *, probe: Probe | None = None, **options: Any) -> TorchReader:
    """Opens a torch.save file (no options; `probe` is unused: the reader opens its own handle)."""
    if options:
        raise UnsupportedFormatError(f"the pytorch reader takes no options, got {', '.join(options)}")
    return TorchReader(path)

