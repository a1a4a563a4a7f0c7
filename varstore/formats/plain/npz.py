"""Reads and writes NumPy `.npz` archives without ever unpickling.

Opening reads each `.npy` member's header only (dtype, shape, order);
reading a variable decompresses that one member with
`np.lib.format.read_array(..., allow_pickle=False)`. Object arrays need
pickle and are refused with UnsafeFormatError naming the member. The writer
produces what `np.savez` / `np.savez_compressed` produce (a zip of `.npy`
members written by `np.lib.format.write_array`), streaming one array at a time.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, IO, Any

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.read.reader_api import CheckpointReader, SkippedEntry, VariableInfo, checked_out
from varstore.formats._zip_members import check_method
from varstore.errors import ConversionError, CorruptCheckpointError, UnknownVariableError, UnsafeFormatError

if TYPE_CHECKING:
    from varstore.formats.probe import Probe
    from varstore.formats.format_entry import WriteRequest

__all__ = ["NpzReader", "write_npz", "open_reader", "write_checkpoint"]

_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
               NotImplementedError, RuntimeError, zlib.error, OverflowError)
#: Deflate cannot expand data more than about 1032:1; a member claiming more is damaged or a zip bomb.
_MAX_DEFLATE_RATIO = 1032


def _read_header(f: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


class NpzReader(CheckpointReader):
    """Lazy reader of one `.npz`; names are the array keys ("weights" for member "weights.npy").

    Fortran-ordered members are returned C-ordered (same values).
    """

    format = "npz"

    def __init__(self, path: os.PathLike[str] | str, *, skip_object_arrays: bool = False) -> None:
        """Reads the zip directory and every member's `.npy` header.

        Args:
          path: the `.npz` file.
          skip_object_arrays: list object-array members in `skipped` instead of
            refusing the whole file.

        Raises:
          UnsafeFormatError: a member holds an object array (pickled Python
            objects) and skip_object_arrays is False.
          UnsafeCheckpointError: a `.npy` member compressed with a method other
            than stored or deflated (np.savez writes only those).
          CorruptCheckpointError: not a readable zip, or a member's header is damaged.
        """
        super().__init__(Path(path))
        try:
            self._zip = zipfile.ZipFile(self.path)
        except _ZIP_ERRORS as err:
            raise CorruptCheckpointError(f"cannot open npz file '{self.path}': {err}") from err
        self._members: dict[str, tuple[str, tuple[int, ...], np.dtype, bool]] = {}
        pickles = [n for n in self._zip.namelist() if n.endswith(".pkl")]
        if pickles:
            from varstore.formats.pickles import TORCH_ADVICE

            self._zip.close()
            raise UnsafeFormatError(
                f"refusing '{self.path}': it holds pickle members ({', '.join(pickles)}), so it is a PyTorch "
                f"file, not an npz. {TORCH_ADVICE}")
        try:
            for info in self._zip.infolist():
                self._add(info, skip_object_arrays)
        except BaseException:
            self._zip.close()
            raise

    def _add(self, info: zipfile.ZipInfo, skip_object_arrays: bool) -> None:
        member = info.filename
        if info.is_dir():
            return
        if not member.endswith(".npy"):
            self.skipped.append(SkippedEntry(member, "not a .npy member"))
            return
        name = member[: -len(".npy")]
        check_method(info, f"npz file '{self.path}'")  # before a byte is decompressed: zipfile inflates bzip2 whole
        try:
            with self._zip.open(info) as f:
                shape, fortran, dtype = _read_header(f)
                header_end = f.tell()
        except _ZIP_ERRORS as err:
            raise CorruptCheckpointError(
                f"npz file '{self.path}': member '{member}' has a damaged .npy header: {err}") from err
        if not dtype.hasobject:
            # Bound every size before anything is allocated: header + values must be the member's size,
            # and the member cannot be larger than its compressed bytes allow.
            nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
            span = int(np.prod([max(int(d), 1) for d in shape], dtype=object))  # numpy refuses > 2**63, even empty
            limit = info.compress_size * (_MAX_DEFLATE_RATIO if info.compress_type else 1) + 1024
            if (header_end + nbytes != info.file_size or info.file_size > limit or span > 1 << 59
                    or len(shape) > 64):
                raise CorruptCheckpointError(
                    f"npz file '{self.path}': member '{member}' has a header saying shape {tuple(shape)} of "
                    f"{dtype} ({nbytes} bytes after a {header_end}-byte header), but the zip directory says "
                    f"{info.file_size} bytes ({info.compress_size} stored); the file is damaged")
        if dtype.hasobject:
            reason = (f"member '{member}' holds an object array ({dtype}): loading it would unpickle "
                      f"Python objects, which varstore never does")
            if not skip_object_arrays:
                raise UnsafeFormatError(
                    f"refusing npz file '{self.path}': {reason}. Re-save it from a trusted environment "
                    f"with numeric arrays only (np.savez(path, **{{k: np.asarray(v, dtype=float)}})), or "
                    f"open it with skip_object_arrays=True to read the other members")
            self.skipped.append(SkippedEntry(name, reason))
            return
        try:
            _dtypes.as_dtype(dtype)
        except Exception as err:  # UnsupportedDtypeError: structured / void
            self.skipped.append(SkippedEntry(name, f"dtype {dtype} is not supported: {err}"))
            return
        self._members[name] = (member, tuple(int(d) for d in shape), dtype, bool(fortran))

    def keys(self) -> list[str]:
        return list(self._members)

    def _lookup(self, name: str) -> tuple[str, tuple[int, ...], np.dtype, bool]:
        member = self._members.get(name)
        if member is None:
            raise UnknownVariableError(f"no array '{name}' in npz file '{self.path}'")
        return member

    def info(self, name: str) -> VariableInfo:
        member, shape, dtype, fortran = self._lookup(name)
        native = dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype
        return VariableInfo(name=name, shape=shape, dtype=_dtypes.dtype_name(native),
                            nbytes=int(np.prod(shape, dtype=object)) * dtype.itemsize,
                            attributes={"member": member, "fortran_order": fortran})

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one member (allow_pickle=False), C-ordered, native byte order.

        Raises:
          UnknownVariableError: unknown name.
          CorruptCheckpointError: the member cannot be decompressed or is truncated.
        """
        member, shape, dtype, _ = self._lookup(name)
        native = dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype
        try:
            with self._zip.open(member) as f:
                value = np.lib.format.read_array(f, allow_pickle=False)
                if f.read(1):  # reading to the end also makes zipfile check the member's CRC-32
                    raise CorruptCheckpointError(
                        f"array '{name}' in npz file '{self.path}' has bytes after its values")
        except _ZIP_ERRORS as err:
            raise CorruptCheckpointError(
                f"cannot read array '{name}' from npz file '{self.path}': {err}") from err
        if tuple(value.shape) != shape:
            raise CorruptCheckpointError(
                f"array '{name}' in npz file '{self.path}' has shape {value.shape}, its header says {shape}")
        if out is None:
            return np.asarray(value, dtype=native, order="C")
        result = checked_out(name, shape, native, out)
        result[...] = value
        return result

    def close(self) -> None:
        self._zip.close()


def write_npz(path: os.PathLike[str] | str, entries: Sequence[SaveEntry], *, compress: bool = False) -> tuple[
        int, list[str]]:
    """Writes `entries` as an `.npz` (as np.savez / np.savez_compressed), one array in memory at a time.

    Each value is written C-ordered with np.lib.format.write_array, so
    np.load(path) returns the same bytes. NumPy has no bfloat16/float8:
    those are stored bit-exactly as their unsigned storage dtype (uint16 /
    uint8) and named in the returned notes. The file appears at `path` only
    when complete.

    Returns:
      (bytes of array data written, notes about stored-as-bits variables).

    Raises:
      ConversionError: a value's shape or dtype differs from its entry, or a duplicate name.
      InvalidNameError: a name that is empty, absolute, has a "." or ".." part, NUL or a lone surrogate.
      DiskFullError: the disk filled up; an old file at `path` is as it was.
    """
    from varstore.checkpoint.publish.atomic import atomic_path
    from varstore.formats._confine import written_names

    entries = list(entries)
    written_names([entry.name for entry in entries], file=path)  # members never climb out ("../../evil.npy")
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise ConversionError(f"cannot write npz: duplicate array name '{entry.name}'")
        seen.add(entry.name)
    notes: list[str] = []
    written = 0
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with atomic_path(Path(path)) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=method, allowZip64=True) as archive:
            for entry in entries:
                dtype = _dtypes.as_dtype(entry.dtype)
                value = entry.fetch()
                if _dtypes.is_extension(dtype):
                    value = value.view(_dtypes.storage_dtype(dtype))
                    notes.append(f"'{entry.name}' ({_dtypes.dtype_name(dtype)}) stored as its raw bits, "
                                 f"dtype {value.dtype}: NumPy's .npy format has no {_dtypes.dtype_name(dtype)}")
                with archive.open(entry.name + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, value, allow_pickle=False)
                written += value.nbytes
                del value
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    return written, notes


# ------------------------------------------------------------------ the registry's entry points
def open_reader(path: Path, *, probe: Probe | None = None, **options: Any) -> NpzReader:
    """The registry's open for "npz": an NpzReader (options: skip_object_arrays)."""
    return NpzReader(path, **options)


def write_checkpoint(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """The registry's write for "npz": write_npz, uncompressed; returns its notes (arrays stored as bits)."""
    _, notes = write_npz(path, entries)
    return notes


def sniff(probe: Probe) -> Path | None:
    """An .npz: a zip with .npy members (or an empty zip named .npz)."""
    names = probe.zip_names
    if names is None:
        return None
    if any(n.endswith(".npy") for n in names) or not names and probe.suffix == ".npz":
        return probe.path
    return None
