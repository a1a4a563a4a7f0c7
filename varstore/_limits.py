"""The limits on what a file's claims may cost: the read limit (max_bytes), the expansion factor over stored bytes, JSON depth.

Every declared size read from a file (a variable's shape and dtype, a
manifest's length) is compared here with the read limit and with what the
file really stores before anything is allocated: a value may decode or fill
to at most its stored bytes times the expansion factor (max_expansion,
DEFAULT_MAX_EXPANSION) plus UNBACKED_BYTES. The one place that knows the
defaults, the environment variables VARSTORE_MAX_BYTES and
VARSTORE_MAX_EXPANSION and the messages. Reads /proc/meminfo and os.sysconf
only; never opens a checkpoint.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from varstore.errors import CorruptCheckpointError, ValueTooLargeError, VarstoreError

__all__ = ["ENV_MAX_BYTES", "ENV_MAX_EXPANSION", "UNBACKED_BYTES", "DEFAULT_MAX_EXPANSION", "MAX_FILTER_EXPANSION",
           "MANIFEST_FLOOR_BYTES", "MANIFEST_EXPANSION", "available_memory", "max_bytes", "max_expansion",
           "expansion_limit", "check_expansion", "GRID_FLOOR_CHUNKS", "check_grid", "read_limit", "check_value_size",
           "backed_bytes",
           "manifest_limit", "check_manifest_size", "load_json"]

#: Environment variable holding the read limit in bytes (an int; overrides the default).
ENV_MAX_BYTES = "VARSTORE_MAX_BYTES"
#: Environment variable holding the expansion factor (a number >= 1, or "inf"; overrides the default).
ENV_MAX_EXPANSION = "VARSTORE_MAX_EXPANSION"
#: Every value may declare this many bytes beyond its stored bytes times the expansion factor (unwritten
#: chunks read as fill values, all-zero tensors compressed 1000:1): small values always load (bytes).
UNBACKED_BYTES = 64 << 20
#: The default expansion factor: a value may decode or fill to at most this many times the bytes the file
#: stores for it, plus UNBACKED_BYTES. Real weights compress 1-2x (float noise), quantized or pruned ones
#: rarely past 10x; 64 leaves 6x headroom over that. Large all-zero tensors (fresh optimizer slots, chunks a
#: writer skipped) exceed it: raise it per call (max_expansion=) or with VARSTORE_MAX_EXPANSION.
DEFAULT_MAX_EXPANSION = 64
#: The most bytes one stored byte of a filtered (compressed) array can decode to: deflate's 1032:1, rounded up.
MAX_FILTER_EXPANSION = 1100
#: A manifest may always declare this many bytes (bytes) ...
MANIFEST_FLOOR_BYTES = 16 << 20
#: ... and, stored compressed, this many times its stored bytes (a JSON manifest compresses ~10:1).
MANIFEST_EXPANSION = 64
#: A chunk grid may always have this many chunks, and beyond that the expansion factor times the chunk
#: files present: a reader visits (or fills) each chunk of the grid.
GRID_FLOOR_CHUNKS = 1 << 16
#: Used when the available memory cannot be found (bytes).
_FALLBACK_BYTES = 4 << 30


def available_memory() -> int | None:
    """Bytes of memory available now: MemAvailable of /proc/meminfo, else free pages from os.sysconf; None if unknown."""
    try:
        with open("/proc/meminfo", "rb") as handle:
            for line in handle:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES")
        if pages <= 0:
            pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None
    return int(pages) * int(size) if pages > 0 and size > 0 else None


def _environment_count(name: str, unit: str) -> int | None:
    """The non-negative int in environment variable `name` ("1_000" allowed), or None when it is unset or empty.

    Raises:
      VarstoreError: the value is not a non-negative int (the message names the variable and the `unit`).
    """
    text = os.environ.get(name, "").strip().replace("_", "")
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise VarstoreError(f"{name}={os.environ[name]!r} is not a non-negative number of {unit}")
    return value


def _explicit(value: int | None) -> int | None:
    """`value` when given, else VARSTORE_MAX_BYTES when set, else None.

    Raises:
      VarstoreError: a negative limit, or an environment value that is not an int.
    """
    if value is None:
        return _environment_count(ENV_MAX_BYTES, "bytes")
    if type(value) is not int or value < 0:
        raise VarstoreError(f"max_bytes must be a non-negative int (bytes), got {value!r}")
    return value


def max_expansion(value: float | None = None) -> tuple[float, str]:
    """(the expansion factor, how it was set): `value`, else VARSTORE_MAX_EXPANSION, else DEFAULT_MAX_EXPANSION.

    The factor is a number >= 1 (int or float; math.inf, or "inf" in the environment, switches the
    bound off).

    Raises:
      VarstoreError: a factor below 1 or not a number, naming where it came from.
    """
    how = "max_expansion"
    if value is None:
        text = os.environ.get(ENV_MAX_EXPANSION, "").strip().replace("_", "")
        if not text:
            return float(DEFAULT_MAX_EXPANSION), "the default"
        how = ENV_MAX_EXPANSION
        try:
            value = float(text)
        except ValueError:
            raise VarstoreError(f"{ENV_MAX_EXPANSION}={os.environ[ENV_MAX_EXPANSION]!r} is not a number "
                                f"(an expansion factor >= 1, or inf)") from None
    if type(value) not in (int, float) or math.isnan(value) or value < 1:
        raise VarstoreError(f"{how} must be a number >= 1 (an expansion factor, or inf), got {value!r}")
    return float(value), how


def expansion_limit(stored: int, value: float | None = None) -> int | None:
    """The most bytes a value the file stores in `stored` bytes may decode or fill to: stored x the factor
    (`value`, else VARSTORE_MAX_EXPANSION, else DEFAULT_MAX_EXPANSION) + UNBACKED_BYTES; None when unbounded.

    Raises:
      VarstoreError: a bad factor (see max_expansion).
    """
    factor, _ = max_expansion(value)
    if math.isinf(factor):
        return None
    return int(stored * factor) + UNBACKED_BYTES


def check_expansion(name: str, where: str, declared: int, stored: int, value: float | None = None) -> None:
    """Refuses a value declaring more bytes than `expansion_limit(stored, value)`, before anything is allocated.

    Args:
      name: the variable, for the message.
      where: the checkpoint, for the message.
      declared: bytes its shape and dtype make (what decoding and filling would produce).
      stored: bytes the file stores for it (compressed chunks; 0 when no chunk was written).
      value: the caller's max_expansion (None: VARSTORE_MAX_EXPANSION or the default).

    Raises:
      ValueTooLargeError: naming the variable, the file, the declared and stored sizes, the factor and
        the switches (max_expansion=, VARSTORE_MAX_EXPANSION).
      VarstoreError: a bad factor.
    """
    if declared <= UNBACKED_BYTES and value is None and ENV_MAX_EXPANSION not in os.environ:
        return  # under every limit: stored x factor >= 0 (a hot path)
    limit = expansion_limit(stored, value)
    if limit is None or declared <= limit:
        return
    factor, how = max_expansion(value)
    rule = ("the default: what the file stores for it plus 64 MiB" if stored == 0 and how == "the default"
            else f"what the file stores for it x {factor:g} ({how}) plus 64 MiB")
    raise ValueTooLargeError(
        f"variable '{name}' in '{where}' declares {declared:,} bytes; the file stores {stored:,} bytes for it; "
        f"the read limit is {limit:,} bytes ({rule}): a "
        f"decompression or fill bomb, or a legit sparse or all-zero value; to read it raise the expansion "
        f"factor (now {factor:g}): pass max_expansion= to open_checkpoint/load/convert or set {ENV_MAX_EXPANSION}")


def check_grid(name: str, where: str, grid: int, present: int, value: float | None = None) -> None:
    """Refuses to read an array whose chunk grid has more chunks than GRID_FLOOR_CHUNKS + the chunk files
    present x the expansion factor (`value`, else VARSTORE_MAX_EXPANSION, else the default): missing
    chunks are fills, and a reader would visit millions of them for a few KB of file.

    Raises:
      ValueTooLargeError: naming the variable, the file, the grid and the chunks present, and the switch.
      VarstoreError: a bad factor.
    """
    if grid <= GRID_FLOOR_CHUNKS:
        return
    factor, how = max_expansion(value)
    if math.isinf(factor) or grid <= present * factor + GRID_FLOOR_CHUNKS:
        return
    raise ValueTooLargeError(
        f"variable '{name}' in '{where}' has a grid of {grid:,} chunks but the file stores {present:,} chunk "
        f"files; more than {GRID_FLOOR_CHUNKS:,} + {factor:g} ({how}) x those would be visited as fills: a "
        f"fill bomb, or a legit sparse array; to read it raise the expansion factor: pass max_expansion= to "
        f"open_checkpoint/load/convert or set {ENV_MAX_EXPANSION}")


def max_bytes(value: int | None = None) -> int:
    """The read limit in bytes: `value`, else VARSTORE_MAX_BYTES, else the available memory (4 GiB if unknown)."""
    explicit = _explicit(value)
    if explicit is not None:
        return explicit
    available = available_memory()
    return available or _FALLBACK_BYTES


def backed_bytes(stored: int | None, filtered: bool) -> int | None:
    """The most bytes `stored` bytes can decode to (x MAX_FILTER_EXPANSION when filtered); None when unknown."""
    if stored is None:
        return None
    return stored * MAX_FILTER_EXPANSION if filtered else stored


def read_limit(value: int | None, backed: int | None = None) -> tuple[int, str]:
    """(limit in bytes, how it was set) for reading one value whose stored bytes can back `backed` bytes.

    A limit given (`value`, or VARSTORE_MAX_BYTES) is used as it is. The
    default is the available memory, and at most `backed` +
    UNBACKED_BYTES when the storage is known: a 447-byte file declaring a
    2.7 GiB dataset of unwritten chunks is not read by default.
    """
    explicit = _explicit(value)
    if explicit is not None:
        return explicit, "max_bytes" if value is not None else ENV_MAX_BYTES
    limit = max_bytes()
    if backed is not None and backed + UNBACKED_BYTES < limit:
        return backed + UNBACKED_BYTES, "the default: what the file stores for it plus 64 MiB"
    return limit, "the default: the available memory"


def check_value_size(name: str, where: str, declared: int, value: int | None, *,
                     stored: int | None = None, filtered: bool = False, expansion: float | None = None) -> None:
    """Refuses to read a value declaring more bytes than the read limit, before anything is allocated.

    Two bounds: the expansion bound when `stored` is known (check_expansion: stored x the factor + 64 MiB,
    whatever max_bytes says), then the read limit (max_bytes, else by default the available memory).

    Args:
      name: the variable, for the message.
      where: the checkpoint, for the message.
      declared: bytes its shape and dtype make.
      value: the caller's max_bytes (None: VARSTORE_MAX_BYTES or the default).
      stored: bytes the file stores for it (None: unknown).
      filtered: whether those bytes are compressed (kept for callers; the expansion factor bounds both).
      expansion: the caller's max_expansion (None: VARSTORE_MAX_EXPANSION or DEFAULT_MAX_EXPANSION).

    Raises:
      ValueTooLargeError: naming the variable, the declared size, the stored size and the limit (or factor).
      VarstoreError: a bad max_bytes, VARSTORE_MAX_BYTES, max_expansion or VARSTORE_MAX_EXPANSION.
    """
    if stored is not None:
        check_expansion(name, where, declared, stored, expansion)
    if value is None and declared <= UNBACKED_BYTES and ENV_MAX_BYTES not in os.environ:
        return  # under every default limit: no need to ask for the available memory (a hot path)
    limit, how = read_limit(value)
    if declared <= limit:
        return
    holds = "" if stored is None else f"; the file stores {stored:,} bytes for it"
    raise ValueTooLargeError(
        f"variable '{name}' in '{where}' declares {declared:,} bytes{holds}; the read limit is {limit:,} "
        f"bytes ({how}); pass max_bytes= to open_checkpoint/load or set {ENV_MAX_BYTES} to read it")


def manifest_limit(stored: int) -> int:
    """The most bytes a manifest stored in `stored` bytes may declare (MANIFEST_FLOOR_BYTES, or x MANIFEST_EXPANSION)."""
    return max(MANIFEST_FLOOR_BYTES, stored * MANIFEST_EXPANSION)


def check_manifest_size(what: str, declared: int, stored: int) -> None:
    """Refuses a manifest (or index) declaring more bytes than `manifest_limit(stored)`, before allocating.

    Raises:
      CorruptCheckpointError: naming `what`, the declared and stored sizes and the limit.
    """
    limit = manifest_limit(stored)
    if declared > limit:
        raise CorruptCheckpointError(
            f"{what} declares {declared:,} bytes but the file stores {stored:,} bytes for it (limit "
            f"{limit:,}: a manifest never expands more than {MANIFEST_EXPANSION}x); damaged or hostile "
            f"metadata, restore from another checkpoint")


def load_json(data: bytes | str, what: str) -> Any:
    """json.loads of metadata from a file; nesting too deep for Python (RecursionError) is a damaged file.

    Raises:
      CorruptCheckpointError: naming `what` (the file), for RecursionError.
      ValueError: as json.loads for malformed JSON (callers name the file).
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise CorruptCheckpointError(
            f"{what} is damaged or hostile: its JSON nests deeper than Python can parse") from None


# ---------------------------------------------------------------------------------------------------
# Counts (issue 36, part D): Python objects built from a file are bounded by count as well as bytes.
# A file's metadata (GGUF key-value arrays, TF string tensors) becomes lists of Python objects that cost
# 8 to 60 bytes each whatever the file stores for them (an empty string stores 1 to 8 bytes), so the
# number of items one file may claim is capped too; HDF5 attributes above a small size are listed, never
# turned into Python lists. (Not in __all__ above, to keep merges of that line easy; import them by name.)

#: Environment variable holding the most items (strings, numbers of a list) one file's metadata or one
#: string tensor may build as Python objects (an int; overrides MAX_OBJECTS).
ENV_MAX_OBJECTS = "VARSTORE_MAX_OBJECTS"
#: Default of VARSTORE_MAX_OBJECTS (items): 8 Mi. A 262,144-token GGUF vocabulary with its scores, token
#: types and merges is under 1.5 Mi items; 8 Mi items cost at most ~0.5 GiB of Python objects.
MAX_OBJECTS = 1 << 23
#: An HDF5 attribute holding more than this many bytes (its values in memory, or its stored bytes) is
#: listed as "<attribute NAME: DTYPE SHAPE not loaded, over the cap>" instead of read (bytes). HDF5's
#: compact attribute storage, which Keras 2 and h5py's defaults use, holds at most 64 KiB.
ATTRIBUTE_CAP_BYTES = 64 << 10


def max_objects() -> int:
    """The most Python objects one file's metadata may build: VARSTORE_MAX_OBJECTS, else MAX_OBJECTS.

    Raises:
      VarstoreError: VARSTORE_MAX_OBJECTS is not a non-negative int.
    """
    value = _environment_count(ENV_MAX_OBJECTS, "items")
    return MAX_OBJECTS if value is None else value


def check_object_count(what: str, where: str, claimed: int, stored: int, *, before: int = 0) -> None:
    """Refuses `claimed` more Python objects (after `before` already built) over max_objects(), before building.

    Args:
      what: the value ("the value of key 'tokenizer.ggml.tokens'", "variable 'vocab'"), for the message.
      where: the file as messages name it ("GGUF file 'm.gguf'").
      claimed: items the file claims for it.
      stored: bytes the file stores for them.
      before: items this file's metadata already built (a per-file budget).

    Raises:
      ValueTooLargeError: naming the file, the value, the claimed count, the stored bytes, the cap and
        VARSTORE_MAX_OBJECTS.
      VarstoreError: a bad VARSTORE_MAX_OBJECTS.
    """
    limit = max_objects()
    if before + claimed <= limit:
        return
    earlier = f" after {before:,} built for earlier values" if before else ""
    raise ValueTooLargeError(
        f"{where}: {what} claims {claimed:,} items{earlier} ({stored:,} bytes stored for them); at most "
        f"{limit:,} Python objects are built from one file's metadata or string tensor; set "
        f"{ENV_MAX_OBJECTS} to a larger count to read it")
