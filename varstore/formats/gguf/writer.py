"""GGUF files written through the `gguf` package (llama.cpp's own Python writer), one tensor at a time.

Float and integer tensors keep their dtype (F32, F16, BF16, F64, I8..I64); `gguf_type` ("f32",
"f16", "bf16", "q8_0") casts every floating tensor to that type, Q8_0 by gguf's reference quantizer
(tensors whose last dimension is not a multiple of 32 stay as they are, named in the notes). The
key-values of a GGUF source are written again with their types where the reader recorded them.
What GGUF cannot hold (strings, bool, unsigned ints, complex) is refused before anything is written.
Imports `gguf` only here; without it, MissingDependencyError names the extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from varstore import dtypes as _dtypes
from varstore.errors import ConversionError, MissingDependencyError, UnsupportedDtypeError

if TYPE_CHECKING:
    from varstore.checkpoint.format.entry import SaveEntry
    from varstore.formats.format_entry import WriteRequest

__all__ = ["write_gguf", "write_checkpoint", "GGUF_TYPES"]

#: numpy dtype name -> ggml type name, for the dtypes GGUF holds as they are.
_NATIVE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int8": "I8",
           "int16": "I16", "int32": "I32", "int64": "I64"}
#: gguf_type option -> (ggml type name, numpy dtype name of the values before quantizing)
GGUF_TYPES = {"f32": ("F32", "float32"), "f16": ("F16", "float16"), "bf16": ("BF16", "bfloat16"),
              "q8_0": ("Q8_0", "float32")}
_FLOATS = {"float32", "float16", "bfloat16", "float64"}
# Keys the gguf writer sets itself.
_OWN_KEYS = {"general.architecture", "general.alignment"}


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as err:  # pragma: no cover - gguf is in [dev] and [convert]
        raise MissingDependencyError("writing GGUF needs the gguf package: pip install 'varstore[convert]'") from err
    return gguf


def holds(dtype: np.dtype) -> str | None:
    """None when GGUF has a tensor type for `dtype`, else why not (convert skips such a variable with it)."""
    name = _dtypes.dtype_name(dtype)
    return None if name in _NATIVE else f"dtype {name}, which GGUF cannot hold (it has F32, F16, BF16, F64, I8-I64)"


def _plan(entries: Sequence[SaveEntry], gguf_type: str | None) -> list[tuple[SaveEntry, str]]:
    """(entry, ggml type name) for every entry; refuses a dtype GGUF lacks, naming the variable."""
    plan = []
    for entry in entries:
        name = _dtypes.dtype_name(entry.dtype)
        if name not in _NATIVE:
            raise UnsupportedDtypeError(
                f"variable '{entry.name}' has dtype {name}, which GGUF cannot hold (it has F32, F16, BF16, F64 "
                f"and I8-I64 tensors); leave it out or cast it first")
        ggml = _NATIVE[name]
        if gguf_type is not None and name in _FLOATS:
            ggml = GGUF_TYPES[gguf_type][0]
            if ggml == "Q8_0" and (not entry.shape or entry.shape[-1] % 32):
                ggml = "F32" if name in ("float32", "float64") else _NATIVE[name]
        plan.append((entry, ggml))
    return plan


def _value_type(gguf: Any, value: Any, recorded: Any) -> tuple[Any, Any]:
    """(GGUFValueType, array item type or None) for one key-value: recorded by the reader, else inferred."""
    kinds = gguf.GGUFValueType
    if isinstance(recorded, int):
        if recorded == 9:
            items = value or [0]
            return kinds.ARRAY, _value_type(gguf, items[0], None)[0]
        return kinds(recorded), None
    if isinstance(value, bool):
        return kinds.BOOL, None
    if isinstance(value, int):
        return (kinds.INT32 if -(1 << 31) <= value < (1 << 31) else kinds.INT64), None
    if isinstance(value, float):
        return kinds.FLOAT32, None
    if isinstance(value, str):
        return kinds.STRING, None
    if isinstance(value, list):
        return kinds.ARRAY, _value_type(gguf, value[0] if value else 0, None)[0]
    raise ConversionError(f"GGUF key-value of type {type(value).__name__} cannot be written")


def _alignment(value: Any) -> int:
    """The general.alignment to write: a power of two of at most MAX_ALIGNMENT bytes (as the reader reads).

    Raises:
      ConversionError: any other value, naming it.
    """
    from varstore.formats.gguf.reader import MAX_ALIGNMENT

    if type(value) is not int or value <= 0 or value & (value - 1) or value > MAX_ALIGNMENT:
        raise ConversionError(f"GGUF key general.alignment {value!r} is not a power of two of at most "
                              f"{MAX_ALIGNMENT:,} bytes; drop the key (32 is written) or give one that is")
    return value


def _zero_padding(writer: Any) -> Any:
    """A write_padding for `writer` that writes zero bytes as one bytes object, never a Python list."""
    ggml_pad = type(writer).ggml_pad

    def write_padding(fp: Any, n: int, align: int | None = None) -> None:
        pad = ggml_pad(n, align if align is not None else writer.data_alignment) - n
        if pad > 0:
            fp.write(bytes(pad))

    return write_padding


def write_gguf(path: Path, entries: Sequence[SaveEntry], *, gguf_type: str | None = None,
               key_values: Mapping[str, Any] | None = None, value_types: Mapping[str, Any] | None = None) -> list[str]:
    """Writes `entries` as a GGUF v3 file that gguf.GGUFReader (and llama.cpp's loader) read back.

    Args:
      path: destination `.gguf`; replaced atomically (temporary sibling, then rename).
      entries: the variables, in order; names kept exactly (llama.cpp's names are a convention, not
        checked here); shapes row-major as NumPy (GGUF stores them innermost first: reversed on disk).
      gguf_type: None keeps each dtype; "f32", "f16", "bf16" cast floating tensors; "q8_0" quantizes
        floating tensors whose last dimension is a multiple of 32 (gguf.quants.quantize).
      key_values: GGUF key-values to write (a GGUF source's `metadata["gguf"]`);
        `general.architecture` becomes the writer's architecture ("varstore" when absent).
      value_types: GGUF value type ids of `key_values` as the reader recorded them.

    Returns:
      Notes: tensors that stayed unquantized under "q8_0".

    Raises:
      UnsupportedDtypeError: a dtype GGUF lacks (strings, bool, unsigned, complex); nothing written.
      ConversionError: an unknown gguf_type, a duplicate name, a general.alignment that is not a power
        of two of at most gguf.MAX_ALIGNMENT bytes.
    """
    import os

    from varstore.checkpoint.publish.atomic import atomic_path

    if gguf_type is not None and gguf_type not in GGUF_TYPES:
        raise ConversionError(f"gguf_type {gguf_type!r} is not one of {', '.join(GGUF_TYPES)}")
    gguf = _gguf()
    entries = list(entries)
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConversionError("two variables share one name; a GGUF file holds each name once")
    plan = _plan(entries, gguf_type)
    key_values = dict(key_values or {})
    value_types = dict(value_types or {})
    notes = [f"'{e.name}' stays {ggml}: its last dimension {e.shape[-1] if e.shape else '()'} is not a multiple "
             f"of 32" for e, ggml in plan if gguf_type == "q8_0" and ggml != "Q8_0" and _dtypes.dtype_name(e.dtype)
             in _FLOATS]
    with atomic_path(Path(path)) as tmp:
        writer = gguf.GGUFWriter(None, str(key_values.get("general.architecture", "varstore")))
        writer.write_padding = _zero_padding(writer)  # gguf pads with bytes([0] * n): a list of n ints
        try:
            if "general.alignment" in key_values:
                writer.add_custom_alignment(_alignment(key_values["general.alignment"]))
            for key, value in key_values.items():
                if key in _OWN_KEYS:
                    continue
                vtype, sub = _value_type(gguf, value, value_types.get(key))
                writer.add_key_value(key, value, vtype, sub_type=sub)
            quant = gguf.GGMLQuantizationType
            for entry, ggml in plan:
                shape = tuple(int(d) for d in entry.shape)
                if ggml == "Q8_0":
                    byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, quant.Q8_0)
                    writer.add_tensor_info(entry.name, byte_shape, np.dtype(np.uint8),
                                           int(np.prod(byte_shape, dtype=np.int64)), raw_dtype=quant.Q8_0)
                else:
                    dtype = _dtypes.as_dtype({v: k for k, v in _NATIVE.items()}[ggml])
                    writer.add_tensor_info(entry.name, shape, dtype,
                                           int(np.prod(shape, dtype=np.int64)) * dtype.itemsize,
                                           raw_dtype=quant[ggml])
            writer.write_header_to_file(path=tmp)
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            for entry, ggml in plan:
                value = entry.fetch()
                if ggml == "Q8_0":
                    value = gguf.quants.quantize(value.astype(np.float32), quant.Q8_0)
                else:
                    value = value.astype(_dtypes.as_dtype({v: k for k, v in _NATIVE.items()}[ggml]), copy=False)
                writer.write_tensor_data(np.ascontiguousarray(value))
                del value
            for handle in writer.fout or ():
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            writer.close()
    return notes


def write_checkpoint(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """The registry's write for "gguf": write_gguf with option `gguf_type`; a GGUF source's key-values kept."""
    unknown = set(request.options) - {"gguf_type"}
    if unknown:
        raise ConversionError(f"the GGUF writer takes only gguf_type, got {', '.join(sorted(unknown))}")
    key_values = request.metadata.get("gguf") if request.source_format == "gguf" else None
    value_types = request.metadata.get("gguf_types") if request.source_format == "gguf" else None
    return write_gguf(path, entries, gguf_type=request.options.get("gguf_type"),
                      key_values=key_values if isinstance(key_values, dict) else None,
                      value_types=value_types if isinstance(value_types, dict) else None)
