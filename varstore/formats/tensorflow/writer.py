"""TensorFlow checkpoints written without TensorFlow: a V2 tensor bundle and its `checkpoint` state file.

Writes what tensorflow/core/util/tensor_bundle/tensor_bundle.cc's BundleWriter writes: the data shard
`<prefix>.data-00000-of-00001` (each tensor's bytes back to back, little-endian; string tensors as
varint64 lengths, their masked crc32c, then the bytes), and `<prefix>.index`, a LevelDB table
(uncompressed blocks of prefix-compressed keys with restart points every 16 entries, each block with its
type byte and masked crc32c, an index block, the 48-byte footer with the table magic) holding the
BundleHeaderProto under the empty key and one BundleEntryProto (dtype, shape, shard, offset, size,
masked crc32c) per tensor in byte order of the keys. A partitioned variable gets a full entry listing
its TensorSliceProtos and one stored entry per slice under its OrderedCode key, as TF's Saver writes
it, so a TF partitioned variable restores from it. Both files are written under temporary sibling names
first; only then is the data shard renamed into place and the `.index` after it, so an `.index` never names
data that is not there and a failed write (ENOSPC included) leaves an old checkpoint at the prefix whole.
An existing `.index` or data shard is replaced only with `overwrite`, and only when it is a TF checkpoint's.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from varstore import dtypes as _dtypes
from varstore.formats.tensorflow._bundle_format import TABLE_MAGIC, crc32c, encode_tensor_name_slice, mask_crc
from varstore.errors import CheckpointExistsError, ConversionError, UnsupportedDtypeError

if TYPE_CHECKING:
    from varstore.checkpoint.format.entry import SaveEntry
    from varstore.formats.format_entry import WriteRequest

__all__ = ["write_tf_checkpoint", "write_checkpoint", "fixed_size_slices", "TF_DTYPE_ENUMS"]

#: logical dtype name -> TF DataType enum (tensorflow/core/framework/types.proto).
TF_DTYPE_ENUMS = {
    "float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "complex64": 8, "int64": 9,
    "bool": 10, "bfloat16": 14, "uint16": 17, "complex128": 18, "float16": 19, "uint32": 22, "uint64": 23,
    "float8_e5m2": 24, "float8_e4m3fn": 25,
}
_DT_STRING = 7
_BLOCK_SIZE = 256 << 10  # table::Options().block_size
_RESTART_INTERVAL = 16  # table::Options().block_restart_interval
Extents = tuple[tuple[int, int], ...]


# ------------------------------------------------------------------ protobuf wire format
def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field_varint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _field_bytes(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _shape_proto(shape: Sequence[int]) -> bytes:
    return b"".join(_field_bytes(2, _field_varint(1, int(d)) if d else b"") for d in shape)


def _slice_proto(extents: Extents) -> bytes:
    out = b""
    for start, length in extents:
        extent = (_field_varint(1, start) if start else b"") + (_field_varint(2, length) if length >= 0 else b"")
        out += _field_bytes(1, extent)
    return out


def _entry_proto(dtype: int, shape: Sequence[int], offset: int = 0, size: int = 0, crc: int | None = None,
                 slices: Sequence[Extents] = ()) -> bytes:
    out = _field_varint(1, dtype) + _field_bytes(2, _shape_proto(shape))
    if offset:
        out += _field_varint(4, offset)
    if size:
        out += _field_varint(5, size)
    if crc is not None:
        out += _varint(6 << 3 | 5) + struct.pack("<I", mask_crc(crc))
    for extents in slices:
        out += _field_bytes(7, _slice_proto(extents))
    return out


def _header_proto() -> bytes:
    return _field_varint(1, 1) + _field_bytes(3, _field_varint(1, 1))  # one shard, little-endian, producer 1


# ------------------------------------------------------------------ the LevelDB table
def _block(pairs: Sequence[tuple[bytes, bytes]], restart_interval: int) -> bytes:
    out = bytearray()
    restarts = []
    previous = b""
    for i, (key, value) in enumerate(pairs):
        shared = 0
        if i % restart_interval == 0:
            restarts.append(len(out))
        else:
            limit = min(len(key), len(previous))
            while shared < limit and key[shared] == previous[shared]:
                shared += 1
        out += _varint(shared) + _varint(len(key) - shared) + _varint(len(value)) + key[shared:] + value
        previous = key
    restarts = restarts or [0]
    out += b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))
    return bytes(out)


def _emit(buf: bytearray, contents: bytes) -> bytes:
    """Appends a block and its trailer (type 0 = uncompressed, masked crc32c); returns its BlockHandle."""
    handle = _varint(len(buf)) + _varint(len(contents))
    trailer = b"\x00"
    buf += contents + trailer + struct.pack("<I", mask_crc(crc32c(contents + trailer)))
    return handle


def _table(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """A LevelDB table of (key, value) pairs sorted bytewise, data blocks of about 256 KiB."""
    pairs.sort(key=lambda kv: kv[0])
    buf = bytearray()
    index: list[tuple[bytes, bytes]] = []
    chunk: list[tuple[bytes, bytes]] = []
    size = 0
    for key, value in pairs:
        chunk.append((key, value))
        size += len(key) + len(value) + 8
        if size >= _BLOCK_SIZE:
            index.append((chunk[-1][0], _emit(buf, _block(chunk, _RESTART_INTERVAL))))
            chunk, size = [], 0
    if chunk:
        index.append((chunk[-1][0], _emit(buf, _block(chunk, _RESTART_INTERVAL))))
    meta = _emit(buf, _block([], _RESTART_INTERVAL))
    index_handle = _emit(buf, _block(index, 1))
    footer = meta + index_handle
    buf += footer + b"\x00" * (40 - len(footer)) + struct.pack("<Q", TABLE_MAGIC)
    return bytes(buf)


# ------------------------------------------------------------------ tensors
def _string_bytes(value: np.ndarray) -> tuple[bytes, int]:
    """TF's string tensor layout (WriteStringTensor) and its crc32c (unmasked)."""
    flat = value.reshape(-1)
    elements = [e.encode("utf-8") if isinstance(e, str) else bytes(e) for e in flat.tolist()]
    lengths = b"".join(_varint(len(e)) for e in elements)
    crc = 0
    for e in elements:
        crc = crc32c(struct.pack("<I" if len(e) <= 0xFFFFFFFF else "<Q", len(e)), crc)
    length_crc = struct.pack("<I", mask_crc(crc))
    crc = crc32c(length_crc, crc)
    payload = b"".join(elements)
    return lengths + length_crc + payload, crc32c(payload, crc)


def holds(dtype: np.dtype) -> str | None:
    """None when a TensorFlow checkpoint holds `dtype` (strings included), else why not (convert skips it)."""
    name = _dtypes.dtype_name(dtype)
    if dtype.kind in "SU" or name in TF_DTYPE_ENUMS:
        return None
    return f"dtype {name}, which a TensorFlow checkpoint cannot hold"


def _dtype_enum(entry: SaveEntry) -> int:
    if entry.dtype.kind in "SU":
        return _DT_STRING
    name = _dtypes.dtype_name(entry.dtype)
    if name not in TF_DTYPE_ENUMS:
        raise UnsupportedDtypeError(f"variable '{entry.name}' has dtype {name}, which a TensorFlow checkpoint "
                                    f"cannot hold; leave it out or cast it")
    return TF_DTYPE_ENUMS[name]


def fixed_size_slices(shape: Sequence[int], parts: int, axis: int = 0) -> list[Extents]:
    """The slices of tf.compat.v1.fixed_size_partitioner(parts, axis): the first `shape[axis] % parts`
    slices get one extra row; other axes whole (length -1).

    Raises:
      ConversionError: fewer rows than parts, a bad axis.
    """
    if not 0 <= axis < len(shape) or parts < 1 or parts > shape[axis]:
        raise ConversionError(f"cannot cut shape {tuple(shape)} into {parts} parts along axis {axis}")
    base, extra = divmod(int(shape[axis]), parts)
    out, start = [], 0
    for i in range(parts):
        length = base + (1 if i < extra else 0)
        out.append(tuple((start, length) if d == axis else (0, -1) for d in range(len(shape))))
        start += length
    return out


def _region(extents: Extents, shape: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(0, dim) if length < 0 else slice(start, start + length)
                 for (start, length), dim in zip(extents, shape))


def _check_slices(name: str, shape: Sequence[int], slices: Sequence[Extents]) -> None:
    covered = np.zeros(tuple(int(d) for d in shape), dtype=np.int8) if np.prod(shape) <= (1 << 24) else None
    for extents in slices:
        if len(extents) != len(shape) or any(length >= 0 and (start < 0 or start + length > dim)
                                             for (start, length), dim in zip(extents, shape)):
            raise ConversionError(f"slice {extents} does not fit variable '{name}' of shape {tuple(shape)}")
        if covered is not None:
            covered[_region(extents, shape)] += 1
    if covered is not None and covered.size and not (covered == 1).all():
        raise ConversionError(f"the slices of variable '{name}' do not cover its shape {tuple(shape)} exactly once")


def write_tf_checkpoint(prefix: os.PathLike[str] | str, entries: Sequence[SaveEntry], *,
                        slices: Mapping[str, Sequence[Extents]] | None = None, overwrite: bool = False,
                        state_file: bool = True) -> list[str]:
    """Writes a TensorFlow V2 checkpoint that tf.train.load_checkpoint and tf.compat.v1.train.Saver read.

    Args:
      prefix: the checkpoint prefix ("run/model.ckpt"): `<prefix>.index` and
        `<prefix>.data-00000-of-00001` are written; a trailing ".index" is dropped.
      entries: the variables; each name becomes the tensor key exactly ("dense/kernel", the name a TF1
        graph's variable has, without ":0").
      slices: variable name -> its slices as ((start, length), ...) per axis (length -1: the whole
        axis), written as a TF partitioned variable; `fixed_size_slices` gives TF's partitioner's cut.
      overwrite: replace an existing TF checkpoint at `prefix` (its `.index` is a LevelDB table); without it
        an existing `.index` or data shard raises CheckpointExistsError, and even with it a data shard or
        `.index` that is not a TF checkpoint's (a user's file, a symlink) does.
      state_file: write the directory's `checkpoint` file naming this prefix when there is none or it
        names only this prefix already; another run's state file is left as it is (named in the notes).

    Returns:
      Notes about what was left as it was.

    Raises:
      UnsupportedDtypeError: a dtype TF lacks (float8 variants other than e4m3fn/e5m2); nothing is written.
      ConversionError: duplicate names, slices that do not cover a variable exactly once.
      CheckpointExistsError: `<prefix>.index` or the data shard exists and not `overwrite`, or is not a TF
        checkpoint's; nothing is written or deleted.
      DiskFullError, CheckpointWriteError: the disk filled up or an I/O error; the old files are as they were.
    """
    from varstore.checkpoint.publish.atomic import atomic_path

    prefix = Path(re.sub(r"\.index$", "", str(prefix)))
    index_path = Path(f"{prefix}.index")
    data_path = Path(f"{prefix}.data-00000-of-00001")
    entries = list(entries)
    slices = dict(slices or {})
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConversionError(f"two variables share one name in '{prefix}'; a TF checkpoint holds each key once")
    unknown = set(slices) - set(names)
    if unknown:
        raise ConversionError(f"slices name variables that are not written: {', '.join(sorted(unknown))}")
    enums = [_dtype_enum(e) for e in entries]
    for entry in entries:
        if entry.name in slices:
            _check_slices(entry.name, entry.shape, slices[entry.name])
    _check_replaceable(prefix, index_path, data_path, overwrite)
    pairs: list[tuple[bytes, bytes]] = [(b"", _header_proto())]
    # Both files are written under temporary names; on success the data shard is renamed into place, then
    # the .index (atomic_path's exits run in reverse order); on any failure (ENOSPC included) both
    # temporaries are removed and an old checkpoint at `prefix` stays whole.
    with contextlib.ExitStack() as commit:
        index_tmp = commit.enter_context(atomic_path(index_path))
        data_tmp = commit.enter_context(atomic_path(data_path))
        _write_data(data_tmp, entries, enums, slices, pairs)
        with open(index_tmp, "wb") as index:
            index.write(_table(pairs))
            index.flush()
            os.fsync(index.fileno())
    return _state_file(prefix) if state_file else []


def _is_tf_index(path: Path) -> bool:
    """True when `path` is a regular file ending in the LevelDB table magic a TF `.index` ends with."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size < 48:
            return False
        with open(path, "rb") as handle:
            handle.seek(-8, os.SEEK_END)
            return handle.read(8) == TABLE_MAGIC.to_bytes(8, "little")
    except OSError:
        return False


def _check_replaceable(prefix: Path, index_path: Path, data_path: Path, overwrite: bool) -> None:
    """Refuses to write over a user's file: an existing `.index` or data shard needs `overwrite`, and even
    then both must belong to a TensorFlow checkpoint (an `.index` that is a LevelDB table).

    Raises:
      CheckpointExistsError: naming the file and what is there; nothing is written or deleted.
    """
    present = [p for p in (index_path, data_path) if os.path.lexists(p)]
    if not present:
        return
    if not overwrite:
        raise CheckpointExistsError(
            f"'{present[0]}' exists: {'a TensorFlow checkpoint is' if _is_tf_index(index_path) else 'a file is'} "
            f"already at prefix '{prefix}'; pass overwrite=True (--force) to replace a TensorFlow checkpoint",
            str(present[0]))
    if not _is_tf_index(index_path):
        if os.path.islink(present[0]):
            what = "a symlink"
        elif present[0] == data_path:
            what = "not part of a TensorFlow checkpoint (no .index table next to it)"
        else:
            what = "not a TensorFlow .index file"
        raise CheckpointExistsError(
            f"'{present[0]}' exists and is {what}; overwrite (--force) replaces only a TensorFlow checkpoint "
            f"at prefix '{prefix}', never another file: nothing was written or deleted; choose another prefix",
            str(present[0]), found=what)
    if os.path.islink(data_path) or (data_path.exists() and not data_path.is_file()):
        raise CheckpointExistsError(
            f"'{data_path}' is not a regular file; overwrite (--force) replaces only a TensorFlow checkpoint's "
            f"own files: nothing was written or deleted", str(data_path))


def _write_data(path: Path, entries: Sequence[SaveEntry], enums: Sequence[int],
                slices: Mapping[str, Sequence[Extents]], pairs: list[tuple[bytes, bytes]]) -> None:
    """Writes the data shard at `path` (a temporary), appending each stored tensor's (key, entry) to `pairs`."""
    with open(path, "wb") as data:
        offset = 0
        for entry, enum in zip(entries, enums):
            value = entry.fetch()
            parts = slices.get(entry.name)
            pieces = [(None, value)] if parts is None else [(ext, value[_region(ext, value.shape)]) for ext in parts]
            for extents, piece in pieces:
                raw: bytes | memoryview
                if enum == _DT_STRING:
                    raw, crc = _string_bytes(piece)
                else:
                    array = np.asarray(piece, order="C")  # (ascontiguousarray would make a 0-d value 1-d)
                    if array.dtype.byteorder == ">":
                        array = array.astype(array.dtype.newbyteorder("<"))
                    raw = array.reshape(-1).view(np.uint8).data
                    crc = crc32c(raw)
                data.write(raw)
                size = len(raw) if isinstance(raw, bytes) else raw.nbytes
                key = entry.name.encode() if extents is None else encode_tensor_name_slice(entry.name.encode(),
                                                                                          extents)
                pairs.append((key, _entry_proto(enum, piece.shape, offset, size, crc)))
                offset += size
            if parts is not None:
                pairs.append((entry.name.encode(), _entry_proto(enum, entry.shape, slices=parts)))
            del value
        data.flush()
        os.fsync(data.fileno())


def _state_file(prefix: Path) -> list[str]:
    """Writes `<dir>/checkpoint` naming `prefix` (relative), as tf.train.update_checkpoint_state, unless
    another run's state file is there."""
    from varstore.checkpoint.publish.atomic import atomic_path

    state = prefix.parent / "checkpoint"
    text = f'model_checkpoint_path: "{prefix.name}"\nall_model_checkpoint_paths: "{prefix.name}"\n'
    if state.is_symlink() or (state.exists() and (not state.is_file() or state.read_text(errors="replace") != text)):
        return [f"left the existing state file '{state}' as it was; it does not name '{prefix.name}'"]
    with atomic_path(state) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    return []


def write_checkpoint(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """The registry's write for "tf": write_tf_checkpoint at prefix `path`; option `partitions`
    ({name: number of parts along axis 0}, cut as tf.compat.v1.fixed_size_partitioner)."""
    unknown = set(request.options) - {"partitions"}
    if unknown:
        raise ConversionError(f"the TensorFlow writer takes only partitions, got {', '.join(sorted(unknown))}")
    partitions: Mapping[str, Any] = request.options.get("partitions") or {}
    shapes = {e.name: e.shape for e in entries}
    missing = sorted(set(partitions) - set(shapes))
    if missing:
        raise ConversionError(f"partitions name variables that are not written: {', '.join(missing)}")
    slices = {name: fixed_size_slices(shapes[name], int(parts)) for name, parts in partitions.items()}
    return write_tf_checkpoint(path, entries, slices=slices, overwrite=request.overwrite)
