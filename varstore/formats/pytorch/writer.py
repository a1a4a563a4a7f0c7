"""PyTorch torch.save files written without torch: the zip layout torch.load(weights_only=True) opens.

Writes what torch.serialization._save writes for a flat state dict (torch 2.x, checked against
torch 2.13's own files): an uncompressed zip whose members sit under one folder (`archive/`):
`data.pkl` (pickle protocol 2: a dict of name -> `torch._utils._rebuild_tensor_v2(...)`, storages as
persistent ids), `.format_version`, `.storage_alignment` ("64"), `byteorder` ("little"), one `data/N`
record per tensor whose bytes start on a 64-byte boundary (so `torch.load(..., mmap=True)` maps them),
and `version` ("3"). dtypes with a legacy storage class (float32 -> FloatStorage, bool -> BoolStorage,
...) use it, as torch does; the others (uint16/32/64, float8) use `_rebuild_tensor_v3` with an
UntypedStorage and the dtype, as torch does. The pickle is emitted opcode by opcode from names, never
by pickling Python objects. Streams one tensor at a time; the file appears only when complete.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from varstore.errors import ConversionError, UnsupportedDtypeError

if TYPE_CHECKING:
    from varstore.checkpoint.format.entry import SaveEntry
    from varstore.formats.format_entry import WriteRequest

__all__ = ["write_pytorch", "write_checkpoint"]

#: numpy dtype name -> (legacy storage class or None, torch dtype name)
_DTYPES: dict[str, tuple[str | None, str]] = {
    "float32": ("FloatStorage", "float32"), "float64": ("DoubleStorage", "float64"),
    "float16": ("HalfStorage", "float16"), "bfloat16": ("BFloat16Storage", "bfloat16"),
    "int8": ("CharStorage", "int8"), "uint8": ("ByteStorage", "uint8"), "int16": ("ShortStorage", "int16"),
    "int32": ("IntStorage", "int32"), "int64": ("LongStorage", "int64"), "bool": ("BoolStorage", "bool"),
    "complex64": ("ComplexFloatStorage", "complex64"), "complex128": ("ComplexDoubleStorage", "complex128"),
    "uint16": (None, "uint16"), "uint32": (None, "uint32"), "uint64": (None, "uint64"),
    "float8_e4m3fn": (None, "float8_e4m3fn"), "float8_e5m2": (None, "float8_e5m2"),
    "float8_e4m3fnuz": (None, "float8_e4m3fnuz"), "float8_e5m2fnuz": (None, "float8_e5m2fnuz"),
}
_ALIGNMENT = 64
_ARCHIVE = "archive"


class _Pickle:
    """Protocol-2 opcodes for the one shape torch's data.pkl has (dict, tuples, ints, strings, globals)."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.out.write(b"\x80\x02")

    def op(self, code: bytes) -> None:
        self.out.write(code)

    def string(self, text: str) -> None:
        raw = text.encode("utf-8")
        self.out.write(b"X" + struct.pack("<I", len(raw)) + raw)

    def integer(self, value: int) -> None:
        if 0 <= value < 256:
            self.out.write(b"K" + bytes([value]))
        elif 0 <= value < 65536:
            self.out.write(b"M" + struct.pack("<H", value))
        elif -(1 << 31) <= value < (1 << 31):
            self.out.write(b"J" + struct.pack("<i", value))
        else:
            raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            self.out.write(b"\x8a" + bytes([len(raw)]) + raw)

    def global_(self, module: str, name: str) -> None:
        self.out.write(b"c" + module.encode() + b"\n" + name.encode() + b"\n")

    def int_tuple(self, values: Sequence[int]) -> None:
        self.op(b"(")
        for v in values:
            self.integer(int(v))
        self.op(b"t")

    def tensor(self, key: int, dtype: str, shape: tuple[int, ...], nbytes: int, itemsize: int) -> None:
        storage, torch_dtype = _DTYPES[dtype]
        strides = _contiguous_strides(shape)
        self.global_("torch._utils", "_rebuild_tensor_v2" if storage else "_rebuild_tensor_v3")
        self.op(b"(")
        self.op(b"(")  # the persistent id: ('storage', class, key, location, numel)
        self.string("storage")
        self.global_("torch", storage) if storage else self.global_("torch.storage", "UntypedStorage")
        self.string(str(key))
        self.string("cpu")
        self.integer(nbytes // itemsize if storage else nbytes)
        self.op(b"t")
        self.op(b"Q")  # BINPERSID
        self.integer(0)  # storage offset
        self.int_tuple(shape)
        self.int_tuple(strides)
        self.op(b"\x89")  # requires_grad False
        self.global_("collections", "OrderedDict")
        self.op(b")R")  # backward hooks: OrderedDict()
        if not storage:
            self.global_("torch", torch_dtype)
        self.op(b"t")
        self.op(b"R")

    def finish(self) -> bytes:
        self.out.write(b".")
        return self.out.getvalue()


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides: list[int] = []
    step = 1
    for dim in reversed(shape):
        strides.append(step)
        step *= max(int(dim), 1)
    return tuple(reversed(strides))


def _data_pkl(entries: Sequence[SaveEntry]) -> bytes:
    emitter = _Pickle()
    emitter.op(b"}")  # EMPTY_DICT
    if entries:
        emitter.op(b"(")
        for key, entry in enumerate(entries):
            emitter.string(entry.name)
            nbytes = int(np.prod(entry.shape, dtype=np.int64)) * entry.dtype.itemsize
            emitter.tensor(key, _dtype_name(entry), tuple(int(d) for d in entry.shape), nbytes, entry.dtype.itemsize)
        emitter.op(b"u")  # SETITEMS
    return emitter.finish()


def holds(dtype: np.dtype) -> str | None:
    """None when a PyTorch tensor holds `dtype`, else why not (convert skips such a variable with it)."""
    from varstore.dtypes import dtype_name

    name = dtype_name(dtype)
    return None if name in _DTYPES else f"dtype {name}, which a PyTorch tensor cannot hold"


def _dtype_name(entry: SaveEntry) -> str:
    from varstore.dtypes import dtype_name

    name = dtype_name(entry.dtype)
    if name not in _DTYPES:
        raise UnsupportedDtypeError(
            f"variable '{entry.name}' has dtype {name}, which a PyTorch tensor cannot hold; "
            f"leave it out (--filter) or write a format that holds it (h5, zarr, tf, npz)")
    return name


def _member(archive: zipfile.ZipFile, name: str, payload: bytes | None, size: int) -> zipfile.ZipInfo:
    """A STORED ZipInfo for `name` whose data will start on a 64-byte boundary (torch's 'FB' padding)."""
    info = zipfile.ZipInfo(f"{_ARCHIVE}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = size
    assert archive.fp is not None
    offset = archive.fp.tell()
    zip64 = size * 1.05 > zipfile.ZIP64_LIMIT
    start = offset + 30 + len(info.filename.encode()) + 4 + (20 if zip64 else 0)
    pad = (-start) % _ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    return info


def write_pytorch(path: Path, entries: Sequence[SaveEntry]) -> int:
    """Writes `entries` as a torch.save file that `torch.load(path, weights_only=True)` returns as a dict.

    Args:
      path: destination (`.pt`, `.pth`, `.bin`); replaced atomically (a temporary sibling, then rename).
      entries: the variables in order; each becomes one key of the flat state dict, named exactly as
        the variable ("encoder/dense/kernel" stays that; rename with convert's --rename / --separator).

    Returns:
      Bytes of tensor data written.

    Raises:
      UnsupportedDtypeError: a dtype no torch tensor holds (strings, float8 variants torch lacks);
        nothing is written.
      ConversionError: two entries with one name, or a value that differs from its entry.
    """
    import os

    from varstore.checkpoint.publish.atomic import atomic_path

    entries = list(entries)
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise ConversionError(f"two variables are named '{entry.name}'; a state dict holds each name once")
        seen.add(entry.name)
        _dtype_name(entry)
    pickled = _data_pkl(entries)
    written = 0
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            _write_small(archive, "data.pkl", pickled)
            _write_small(archive, ".format_version", b"1")
            _write_small(archive, ".storage_alignment", str(_ALIGNMENT).encode())
            _write_small(archive, "byteorder", b"little")
            for key, entry in enumerate(entries):
                value = entry.fetch()
                if value.dtype.byteorder == ">":
                    value = value.astype(value.dtype.newbyteorder("<"))
                data = value.reshape(-1).view(np.uint8)
                info = _member(archive, f"data/{key}", None, data.nbytes)
                with archive.open(info, "w", force_zip64=data.nbytes * 1.05 > zipfile.ZIP64_LIMIT) as out:
                    for start in range(0, data.nbytes, 64 << 20):
                        out.write(data[start:start + (64 << 20)].data)
                written += data.nbytes
                del value, data
            _write_small(archive, "version", b"3\n")
            raw.flush()
            os.fsync(raw.fileno())
    return written


def _write_small(archive: zipfile.ZipFile, name: str, payload: bytes) -> None:
    info = _member(archive, name, payload, len(payload))
    with archive.open(info, "w") as out:
        out.write(payload)


def write_checkpoint(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """The registry's write for "pytorch": write_pytorch; takes no options."""
    if request.options:
        raise ConversionError(f"the PyTorch writer takes no options, got {', '.join(sorted(request.options))}")
    write_pytorch(path, entries)
    return ()
