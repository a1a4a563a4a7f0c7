"""Zip members read with a bound: stored or deflated only, never more bytes than declared or allowed.

The one rule for every zip varstore reads (torch.save zips, `.npz`,
`.keras`): a member compressed with any method but ZIP_STORED or
ZIP_DEFLATED is refused before a byte of it is decompressed (zipfile
inflates a BZIP2 or LZMA chunk whole, so one 2 KB chunk can become
gigabytes), a member's declared size is checked against the caller's limit
before it is opened, and its bytes are read in a loop that stops one byte
past the declared size (more means the directory lies). A stored member's
data can be located by its local header, to be read in place. Opens no
files itself and knows no format.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO, Any

from varstore.errors import CorruptCheckpointError, UnsafeCheckpointError

__all__ = ["ZIP_ERRORS", "check_method", "read_member", "bounded_chunks", "stored_data_start", "method_name"]

#: What zipfile raises on damaged archives and members.
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError,
              RuntimeError, zlib.error, OverflowError, struct.error)
_ALLOWED_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_METHOD_NAMES = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated", zipfile.ZIP_BZIP2: "bzip2",
                 zipfile.ZIP_LZMA: "lzma", 9: "deflate64", 93: "zstandard"}
_CHUNK = 1 << 20  # bytes per read of a member


def method_name(info: zipfile.ZipInfo) -> str:
    """A compression method's name ("bzip2"), or "method <n>" for one zipfile does not name."""
    return _METHOD_NAMES.get(info.compress_type, f"method {info.compress_type}")


def check_method(info: zipfile.ZipInfo, label: str) -> None:
    """Refuses a member compressed with anything but ZIP_STORED or ZIP_DEFLATED (what torch, numpy and Keras write).

    Raises:
      UnsafeCheckpointError: naming `label`, the member and its method.
    """
    if info.compress_type not in _ALLOWED_METHODS:
        raise UnsafeCheckpointError(
            f"{label}: zip member '{info.filename}' is compressed with {method_name(info)}; varstore reads only "
            f"stored or deflated members (what torch.save, np.savez and Keras write), so it is not decompressed")


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, label: str) -> bytes:
    """The bytes of one member: method checked, declared size within `limit`, read in a bounded loop.

    Args:
      archive: the open zip.
      info: the member's directory entry.
      limit: the most bytes this member may hold (bytes); its job decides it
        (16 for a torch `byteorder`, a few MB for `metadata.json`).
      label: how to name the archive in errors ("PyTorch file 'x.pt'").

    Returns:
      Exactly `info.file_size` bytes.

    Raises:
      UnsafeCheckpointError: a method other than stored/deflated, a declared
        size above `limit`, or more bytes than declared.
      CorruptCheckpointError: the member is damaged, shorter than declared, or its CRC-32 does not match.
    """
    check_method(info, label)
    declared = info.file_size
    if declared > limit:
        raise UnsafeCheckpointError(f"{label}: zip member '{info.filename}' declares {declared} bytes, more than "
                                    f"the {limit} such a member may hold")
    parts: list[bytes] = []
    got = 0
    try:
        with archive.open(info) as member:
            for chunk in bounded_chunks(member, declared):
                parts.append(chunk)
                got += len(chunk)
    except ZIP_ERRORS as err:
        raise CorruptCheckpointError(f"{label}: cannot read zip member '{info.filename}': {err}") from err
    if got > declared:
        raise UnsafeCheckpointError(f"{label}: zip member '{info.filename}' inflates past the {declared} bytes "
                                    f"its directory entry declares")
    if got < declared:
        raise CorruptCheckpointError(f"{label}: zip member '{info.filename}' holds {got} of its {declared} declared "
                                     f"bytes (truncated)")
    return b"".join(parts)


def bounded_chunks(member: IO[bytes], declared: int) -> Iterator[bytes]:
    """The bytes of an open zip member in chunks of at most 1 MiB, stopping after `declared` + 1 bytes:
    one byte past its declared size is enough to prove it lies, and no more is ever inflated."""
    got = 0
    while got <= declared:
        chunk = member.read(min(_CHUNK, declared + 1 - got))
        if not chunk:
            return
        got += len(chunk)
        yield chunk


def stored_data_start(handle: IO[bytes] | Any, info: zipfile.ZipInfo, base: int, size: int, label: str) -> int:
    """Where a stored member's bytes begin, relative to `base`, read from its local header.

    Args:
      handle: the file holding the zip, at bytes [base, base + size).
      info: the member (must be ZIP_STORED).
      base, size: the zip's place in `handle` (bytes).
      label: names the archive in errors.

    Raises:
      CorruptCheckpointError: a damaged local header, or data running past the zip's end.
    """
    handle.seek(base + info.header_offset)
    local = handle.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise CorruptCheckpointError(f"{label}: the local header of zip member '{info.filename}' is damaged")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.file_size > size:
        raise CorruptCheckpointError(f"{label}: zip member '{info.filename}' runs past the end of the file "
                                     f"(truncated)")
    return int(start)
