"""Reads GGUF files (llama.cpp / ggml, versions 2 and 3) by their spec, with positional reads.

Layout: "GGUF", uint32 version, uint64 tensor count, uint64 key-value count;
the key-values (typed, arrays nested); per tensor its name, dims (innermost
first, `ne`), ggml type and offset; then, aligned to `general.alignment`
(32; at most MAX_ALIGNMENT), the data section. Every length and count is
checked against the bytes left before it is used, and the items of key-value
arrays against a count of Python objects (VARSTORE_MAX_OBJECTS, see
varstore/_limits.py). Float and integer tensors (F32, F16, BF16, F64,
I8..I64) are read bit-exactly with llama.cpp's names and the row-major shape
(ne reversed). Quantized tensors are carried as their raw blocks (uint8, shape
[rows..., bytes per row]) with `attributes["ggml_type"]` recorded, so nothing
is lost; `dequantize=True` turns every type the gguf package's reference
code dequantizes into float32 (_gguf_quants.py; Q8_0, Q4_0 and Q4_1 also
without it, as ggml does: d * q), and names the tensors it leaves raw in
`notes`. The key-values become `metadata["gguf"]`. The `gguf` package's
reader is not used: it maps the whole file and its errors on damaged input
are untyped. Writes nothing.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import check_object_count
from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo, checked_out
from varstore.formats.gguf import _quants as _gguf_quants
from varstore.errors import (ConversionError, CorruptCheckpointError, NotACheckpointError, UnknownVariableError,
                             VarstoreError)

if TYPE_CHECKING:
    from varstore.formats.probe import Probe

__all__ = ["GGUFReader", "GGML_TYPES", "MAX_ALIGNMENT", "sniff", "open_reader"]


#: ggml type id -> (name, elements per block, bytes per block, numpy dtype name or None when quantized).
GGML_TYPES: dict[int, tuple[str, int, int, str | None]] = {
    0: ("F32", 1, 4, "float32"), 1: ("F16", 1, 2, "float16"), 2: ("Q4_0", 32, 18, None),
    3: ("Q4_1", 32, 20, None), 6: ("Q5_0", 32, 22, None), 7: ("Q5_1", 32, 24, None),
    8: ("Q8_0", 32, 34, None), 9: ("Q8_1", 32, 40, None), 10: ("Q2_K", 256, 84, None),
    11: ("Q3_K", 256, 110, None), 12: ("Q4_K", 256, 144, None), 13: ("Q5_K", 256, 176, None),
    14: ("Q6_K", 256, 210, None), 15: ("Q8_K", 256, 292, None), 16: ("IQ2_XXS", 256, 66, None),
    17: ("IQ2_XS", 256, 74, None), 18: ("IQ3_XXS", 256, 98, None), 19: ("IQ1_S", 256, 50, None),
    20: ("IQ4_NL", 32, 18, None), 21: ("IQ3_S", 256, 110, None), 22: ("IQ2_S", 256, 82, None),
    23: ("IQ4_XS", 256, 136, None), 24: ("I8", 1, 1, "int8"), 25: ("I16", 1, 2, "int16"),
    26: ("I32", 1, 4, "int32"), 27: ("I64", 1, 8, "int64"), 28: ("F64", 1, 8, "float64"),
    29: ("IQ1_M", 256, 56, None), 30: ("BF16", 1, 2, "bfloat16"), 34: ("TQ1_0", 256, 54, None),
    35: ("TQ2_0", 256, 66, None), 39: ("MXFP4", 32, 17, None),
}
_DEQUANTIZABLE = {"Q8_0", "Q4_0", "Q4_1"}
# GGUF value types: id -> struct format (scalars), 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAX_DIMS = 8
_MAX_DEPTH = 4
_BLOCK = 1 << 20  # bytes read at a time for an array of strings
#: The largest general.alignment read or written (bytes): a power of two; llama.cpp writes 32, and a
#: larger one pads every tensor of a converted file with that many bytes.
MAX_ALIGNMENT = 1 << 16
_MAX_SPAN = 1 << 59  # product of a shape's non-zero extents NumPy can still make (elements)


class _Cursor:
    """Sequential, bounds-checked reads of the header region of one file."""

    def __init__(self, handle: Any, size: int, label: str) -> None:
        self.handle, self.size, self.label, self.pos = handle, size, label, 0
        self.objects = 0  # Python objects the key-value arrays built so far (bounded by max_objects())

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or n > self.size - self.pos:
            raise CorruptCheckpointError(f"{self.label}: {what} needs {n} bytes at offset {self.pos}, only "
                                         f"{self.size - self.pos} remain (truncated or damaged header)")
        data = self.handle.read(n)
        if len(data) != n:
            raise CorruptCheckpointError(f"{self.label}: short read of {what} at offset {self.pos}")
        self.pos += n
        return bytes(data)

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        length = self.unpack("<Q", f"the length of {what}")
        raw = self.take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CorruptCheckpointError(f"{self.label}: {what} is not UTF-8") from err

    def strings(self, count: int, what: str) -> list[str]:
        """`count` length-prefixed UTF-8 strings (an array's items), read in blocks of at least 1 MiB.

        One buffered pass, no per-item file reads: a tokenizer's 10**6-entry
        vocabulary reads in about half a second. Every length is checked
        against the bytes left, as `take` does.
        """
        items: list[str] = []
        buf, at = b"", 0
        length_of = struct.Struct("<Q").unpack_from
        while len(items) < count:
            if len(buf) - at < 8:
                buf, at = buf[at:] + self._block(8 - (len(buf) - at), f"the length of {what}"), 0
            (length,) = length_of(buf, at)
            need = 8 + length
            if len(buf) - at < need:
                buf, at = buf[at:] + self._block(need - (len(buf) - at), what), 0
            try:
                items.append(buf[at + 8:at + need].decode("utf-8"))
            except UnicodeDecodeError as err:
                raise CorruptCheckpointError(f"{self.label}: {what} is not UTF-8") from err
            at += need
        unread = len(buf) - at
        if unread:
            self.handle.seek(-unread, 1)
            self.pos -= unread
        return items

    def _block(self, least: int, what: str) -> bytes:
        """At least `least` more bytes (up to 1 MiB more when the file has them), via `take`."""
        if least > self.size - self.pos:
            return self.take(least, what)  # raises, naming `what`
        return self.take(max(least, min(_BLOCK, self.size - self.pos)), what)

    def value(self, kind: int, what: str, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind], what)
        if kind == 8:
            return self.string(what)
        if kind == 9 and depth < _MAX_DEPTH:
            item_kind = self.unpack("<I", f"the item type of {what}")
            count = self.unpack("<Q", f"the length of {what}")
            # bytes each item takes at least: a scalar's size, a string's 8-byte length, an array's type and length
            smallest = struct.calcsize(_SCALARS[item_kind]) if item_kind in _SCALARS else 12 if item_kind == 9 else 8
            if item_kind not in _SCALARS and item_kind not in (8, 9) or count * smallest > self.size - self.pos:
                raise CorruptCheckpointError(f"{self.label}: {what} claims {count} items of type {item_kind}, "
                                             f"more than the {self.size - self.pos} bytes left")
            check_object_count(what, self.label, count, count * smallest, before=self.objects)
            self.objects += count
            if item_kind in _SCALARS:
                fmt = _SCALARS[item_kind]
                data = self.take(count * struct.calcsize(fmt), what)
                return list(np.frombuffer(data, dtype=np.dtype(fmt)).tolist())
            if item_kind == 8:
                return self.strings(count, what)
            return [self.value(item_kind, what, depth + 1) for _ in range(count)]
        raise CorruptCheckpointError(f"{self.label}: {what} has unknown value type {kind}")


class _Tensor:
    __slots__ = ("ggml", "ne", "shape", "dtype", "offset", "nbytes", "raw_shape")

    def __init__(self, ggml: str, ne: tuple[int, ...], shape: tuple[int, ...], dtype: np.dtype, offset: int,
                 nbytes: int, raw_shape: tuple[int, ...]) -> None:
        self.ggml, self.ne, self.shape, self.dtype = ggml, ne, shape, dtype
        self.offset, self.nbytes, self.raw_shape = offset, nbytes, raw_shape


class GGUFReader(CheckpointReader):
    """Lazy reader of a `.gguf` file; names are llama.cpp's ("blk.0.attn_q.weight").

    `metadata["gguf"]` holds the key-values; `info(name).attributes` has
    "ggml_type" and "ggml_ne" (for quantized types "raw_blocks" and the logical "shape").
    """

    format = "gguf"

    def __init__(self, path: os.PathLike[str] | str, dequantize: bool = False) -> None:
        """Parses the header (key-values and tensor table); reads no tensor bytes.

        Args:
          path: the .gguf file.
          dequantize: read quantized tensors as float32 instead of raw blocks: every type gguf's
            reference code dequantizes (Q8_0/Q4_0/Q4_1 also without gguf); `notes` names the rest.

        Raises:
          NotACheckpointError: no GGUF magic.
          CorruptCheckpointError: a length, count, dim or offset that does not
            fit the file (naming the key or tensor), or tensors overlapping.
        """
        super().__init__(Path(path))
        self.dequantize = bool(dequantize)
        self._left_raw: list[str] = []  # tensors dequantize=True could not turn into float32
        label = f"GGUF file '{self.path}'"
        self._label = label
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as handle:
                cursor = _Cursor(handle, size, label)
                if cursor.take(4, "the magic") != b"GGUF":
                    raise NotACheckpointError(f"{label} does not start with the GGUF magic")
                version = cursor.unpack("<I", "the version")
                if version not in (2, 3):
                    raise CorruptCheckpointError(f"{label}: GGUF version {version} (varstore reads 2 and 3)")
                tensor_count = cursor.unpack("<Q", "the tensor count")
                kv_count = cursor.unpack("<Q", "the key-value count")
                if tensor_count > size // 24 or kv_count > size // 12:
                    raise CorruptCheckpointError(f"{label}: {tensor_count} tensors and {kv_count} key-values "
                                                 f"cannot fit in {size} bytes")
                kvs: dict[str, Any] = {}
                kinds: dict[str, int] = {}
                for i in range(kv_count):
                    key = cursor.string(f"key-value #{i}'s key")
                    kind = cursor.unpack("<I", f"the type of key '{key}'")
                    kvs[key] = cursor.value(kind, f"the value of key '{key}'")
                    kinds[key] = kind
                alignment = kvs.get("general.alignment", 32)
                if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
                    raise CorruptCheckpointError(f"{label}: general.alignment {alignment!r} is not a power of 2")
                if alignment > MAX_ALIGNMENT:
                    raise CorruptCheckpointError(
                        f"{label}: general.alignment {alignment:,} is larger than any GGUF writer uses (llama.cpp "
                        f"writes 32; varstore reads up to {MAX_ALIGNMENT:,}); damaged or hostile header")
                table = [self._tensor_entry(cursor, i) for i in range(tensor_count)]
                data_start = -(-cursor.pos // alignment) * alignment
        except VarstoreError:
            raise  # typed already (CheckpointError is an OSError)
        except OSError as err:
            raise CorruptCheckpointError(f"cannot read {label}: {err}") from err
        self.format_version = str(version)
        self.metadata = {"gguf": kvs, "gguf_types": kinds}
        if self._left_raw:
            self.notes = (f"--dequantize left {len(self._left_raw)} tensor(s) as raw blocks (uint8; no "
                          f"dequantizer for their type here or in the installed gguf package): "
                          f"{', '.join(self._left_raw)}",)
        self._data_start = data_start
        self._tensors: dict[str, _Tensor] = {}
        spans = []
        for name, tensor in table:
            if name in self._tensors:
                raise CorruptCheckpointError(f"{label}: tensor '{name}' is listed twice")
            end = data_start + tensor.offset + tensor.nbytes
            if end > size:
                raise CorruptCheckpointError(
                    f"{label}: tensor '{name}' ({tensor.ggml}, {tensor.nbytes} bytes at data offset "
                    f"{tensor.offset}) ends at byte {end}, past the end of the {size}-byte file (truncated)")
            self._tensors[name] = tensor
            spans.append((tensor.offset, tensor.offset + tensor.nbytes, name))
        spans.sort()
        for (_, end_a, a), (begin_b, _, b) in zip(spans, spans[1:]):
            if begin_b < end_a:
                raise CorruptCheckpointError(f"{label}: tensors '{a}' and '{b}' overlap in the data section")
        self._file: Any = None

    def _tensor_entry(self, cursor: _Cursor, i: int) -> tuple[str, _Tensor]:
        name = cursor.string(f"tensor #{i}'s name")
        n_dims = cursor.unpack("<I", f"the rank of tensor '{name}'")
        if n_dims > _MAX_DIMS:
            raise CorruptCheckpointError(f"{self._label}: tensor '{name}' claims {n_dims} dims (at most {_MAX_DIMS})")
        ne = tuple(cursor.unpack("<Q", f"a dim of tensor '{name}'") for _ in range(n_dims))
        type_id = cursor.unpack("<I", f"the type of tensor '{name}'")
        offset = cursor.unpack("<Q", f"the offset of tensor '{name}'")
        spec = GGML_TYPES.get(type_id)
        if spec is None:
            raise CorruptCheckpointError(f"{self._label}: tensor '{name}' has unknown ggml type {type_id}")
        ggml, block, block_bytes, dtype_name = spec
        if any(d > cursor.size for d in ne) or int(np.prod(ne, dtype=object)) > cursor.size * 256:
            raise CorruptCheckpointError(f"{self._label}: tensor '{name}' dims {list(ne)} cannot fit in the file")
        if int(np.prod([max(d, 1) for d in ne], dtype=object)) > _MAX_SPAN:
            raise CorruptCheckpointError(f"{self._label}: tensor '{name}' dims {list(ne)} are larger than any "
                                         f"array can be")
        if block > 1 and not ne:
            raise CorruptCheckpointError(f"{self._label}: tensor '{name}' is 0-d but of quantized type {ggml}, "
                                         f"whose values come in rows of blocks of {block}")
        shape = tuple(reversed(ne))
        elements = int(np.prod(ne, dtype=object))
        if ne and ne[0] % block:
            raise CorruptCheckpointError(f"{self._label}: tensor '{name}' row of {ne[0]} elements is not a "
                                         f"whole number of {ggml} blocks of {block}")
        nbytes = elements // block * block_bytes
        raw_shape = shape[:-1] + ((shape[-1] // block * block_bytes,) if shape else ())
        if dtype_name is not None:
            dtype = _dtypes.as_dtype(dtype_name)
        elif self.dequantize and (ggml in _DEQUANTIZABLE or _gguf_quants.supports(ggml, block_bytes)):
            dtype = np.dtype(np.float32)
        else:
            dtype = np.dtype(np.uint8)
            if self.dequantize:  # asked for float32, but no code here or in gguf dequantizes this type
                self._left_raw.append(f"{name} ({ggml})")
        return name, _Tensor(ggml, ne, shape, dtype, offset, nbytes, raw_shape)

    def keys(self) -> list[str]:
        return list(self._tensors)

    def _lookup(self, name: str) -> _Tensor:
        tensor = self._tensors.get(name)
        if tensor is None:
            raise UnknownVariableError(f"no tensor '{name}' in GGUF file '{self.path}'")
        return tensor

    def _shape(self, tensor: _Tensor) -> tuple[int, ...]:
        return tensor.raw_shape if tensor.dtype == np.uint8 and tensor.ggml != "I8" else tensor.shape

    def info(self, name: str) -> VariableInfo:
        tensor = self._lookup(name)
        shape = self._shape(tensor)
        attributes: dict[str, Any] = {"ggml_type": tensor.ggml, "ggml_ne": list(tensor.ne)}
        if GGML_TYPES_BY_NAME[tensor.ggml][3] is None:
            attributes["raw_blocks"] = tensor.dtype == np.uint8
            attributes["shape"] = list(tensor.shape)
        return VariableInfo(name=name, shape=shape, dtype=_dtypes.dtype_name(tensor.dtype),
                            nbytes=int(np.prod(shape, dtype=object)) * tensor.dtype.itemsize, attributes=attributes)

    def _raw(self, name: str, tensor: _Tensor, flat: npt.NDArray[np.uint8]) -> None:
        if self._file is None:
            try:
                self._file = open(self.path, "rb")  # noqa: SIM115 (closed in close())
            except OSError as err:
                raise CorruptCheckpointError(f"cannot reopen GGUF file '{self.path}': {err}") from err
        self._file.seek(self._data_start + tensor.offset)
        got = self._file.readinto(flat.data) if flat.size else 0
        if got != flat.size:
            raise CorruptCheckpointError(f"tensor '{name}' in GGUF file '{self.path}': read {got} of {flat.size} "
                                         f"bytes; the file is cut off mid-tensor")

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one tensor: its values, its raw blocks, or (dequantize=True) float32 values.

        Raises:
          UnknownVariableError: unknown name.
          CorruptCheckpointError: the file is truncated under the reader.
        """
        tensor = self._lookup(name)
        result = checked_out(name, self._shape(tensor), tensor.dtype, out)
        if tensor.dtype == np.float32 and GGML_TYPES_BY_NAME[tensor.ggml][3] is None:  # dequantize=True
            raw = np.empty(tensor.nbytes, dtype=np.uint8)
            self._raw(name, tensor, raw)
            block_bytes = GGML_TYPES_BY_NAME[tensor.ggml][2]
            values = (_gguf_quants.dequantize(tensor.ggml, raw) if _gguf_quants.supports(tensor.ggml, block_bytes)
                      else _dequantize(tensor.ggml, raw))  # gguf's reference code first, ours without it
            result[...] = values.reshape(tensor.shape)
        else:
            self._raw(name, tensor, result.reshape(-1).view(np.uint8))
        return result

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


GGML_TYPES_BY_NAME = {spec[0]: spec for spec in GGML_TYPES.values()}


def _dequantize(ggml: str, raw: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """float32 values of Q8_0 / Q4_0 / Q4_1 blocks, as ggml's dequantize_row_* (d * q [+ m])."""
    _, block, block_bytes, _ = GGML_TYPES_BY_NAME[ggml]
    blocks = raw.reshape(-1, block_bytes)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    if ggml == "Q8_0":
        return (d * blocks[:, 2:].copy().view(np.int8).astype(np.float32)).reshape(-1)
    start = 4 if ggml == "Q4_1" else 2
    packed = blocks[:, start:]
    q = np.concatenate([packed & 0x0F, packed >> 4], axis=1).astype(np.float32)
    if ggml == "Q4_0":
        return (d * (q - 8.0)).reshape(-1)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    return (d * q + m).reshape(-1)


def sniff(probe: Probe) -> Path | None:
    """The path when the probed file starts with the GGUF magic."""
    return probe.path if probe.is_file and probe.head[:4] == b"GGUF" else None


def open_reader(path: os.PathLike[str] | str, *, probe: Probe | None = None, **options: Any) -> GGUFReader:
    """Opens a GGUF file; option `dequantize=True` reads quantized tensors as float32 (see GGUFReader)."""
    unknown = set(options) - {"dequantize"}
    if unknown:
        raise ConversionError(f"the gguf reader takes only dequantize=, got {', '.join(sorted(unknown))}")
    return GGUFReader(path, dequantize=bool(options.get("dequantize", False)))
