"""The read-only checkpoint interface every format's reader implements (VariableInfo, CheckpointReader).

`VariableInfo` describes one stored variable without reading its bytes;
`CheckpointReader` is the lazy, read-only mapping of names to arrays that
`open_checkpoint` returns for varstore's own HDF5/Zarr checkpoints and for
every foreign format (TF bundle, Keras, safetensors, npz, plain HDF5/Zarr).
No file I/O here: subclasses do it.
"""

from __future__ import annotations

import abc
import contextlib
import fnmatch
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from varstore.errors import ValueTooLargeError
from varstore.storage import url_from_path
from varstore.store.host_arrays import host_empty

if TYPE_CHECKING:  # annotations only: numpy.typing costs ~1 ms at import; VariableInfo see __getattr__
    import numpy.typing as npt

    from varstore.checkpoint.format.variable_info import SkippedEntry, VariableInfo

__all__ = ["VariableInfo", "SkippedEntry", "CheckpointReader", "ReaderHold", "cast_into", "read_through_cast", "checked_out",
           "select_names"]


def select_names(names: Iterable[str], pattern: str | Iterable[str] | None = None,
                 exclude: str | Iterable[str] = ()) -> list[str]:
    """The names (in their order) matching `pattern`, or any of several patterns (their union), and no
    `exclude` pattern: the one selection rule of convert's filter and the CLI's --filter / --exclude.

    Args:
      names: the names to select from.
      pattern: a shell glob ("encoder/*"; fnmatch, case-sensitive), or several; None (or none given) keeps all.
      exclude: a shell glob, or several; a name matching any of them is dropped (after `pattern`).
    """
    keep = [pattern] if isinstance(pattern, str) else list(pattern or ())
    drop = [exclude] if isinstance(exclude, str) else list(exclude)
    return [n for n in names
            if (not keep or any(fnmatch.fnmatchcase(n, p) for p in keep))
            and not any(fnmatch.fnmatchcase(n, p) for p in drop)]


def __getattr__(name: str) -> Any:
    """VariableInfo and SkippedEntry, imported on first use: opening a checkpoint and reading one value
    needs neither (nor `dataclasses`), `from varstore.checkpoint.read.reader_api import VariableInfo` works as before."""
    if name in ("VariableInfo", "SkippedEntry"):
        from varstore.checkpoint.format import variable_info

        value = getattr(variable_info, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ReaderHold:
    """What a restore owning a reader holds (CheckpointReader.held): `names`, the reader's keys in storage
    order, and `keep`: True leaves the reader open after the restore (its values are still read from it)."""

    __slots__ = ("names", "keep")

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.keep = False


class CheckpointReader(abc.ABC):
    """A read-only, lazy view of one checkpoint: names -> arrays.

    Opening reads metadata only; `reader[name]` reads that variable's bytes
    and nothing else. Use as a context manager or call close().

    Attributes:
      path: the checkpoint's path as opened.
      format: short format name: "varstore-hdf5", "varstore-zarr", "tf",
        "keras3", "keras2", "safetensors", "npz", "hdf5", "zarr".
      step: the global step recorded with the checkpoint, or None.
      metadata: user metadata (JSON-compatible dict), {} where none.
      format_version: the format's version string, or None.
      skipped: objects present in the file that are not variables, with reasons.
      notes: remarks on how values are read (e.g. tensors a GGUF --dequantize left raw); convert reports them.
      max_bytes: the read limit in bytes a value may declare (None: VARSTORE_MAX_BYTES, else the
        default of varstore/_limits.py); set by open_checkpoint(..., max_bytes=).
      max_expansion: the expansion factor: a value may decode or fill to at most its stored bytes times
        this plus 64 MiB (None: VARSTORE_MAX_EXPANSION, else 64; varstore/_limits.py); set by
        open_checkpoint(..., max_expansion=).
    """

    format: str = "unknown"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        #: Where the checkpoint is, for people: the path, or the object-store URL it was opened from.
        self.location: str = url_from_path(path) or str(self.path)
        self.step: int | None = None
        self.metadata: dict[str, Any] = {}
        self.format_version: str | None = None
        self.skipped: list[SkippedEntry] = []
        self.notes: tuple[str, ...] = ()
        self.max_bytes: int | None = None
        self.max_expansion: float | None = None

    # -- subclasses implement these three
    @abc.abstractmethod
    def keys(self) -> list[str]:
        """Variable names in storage order."""

    @abc.abstractmethod
    def info(self, name: str) -> VariableInfo:
        """Metadata of one variable; raises UnknownVariableError (a KeyError) naming it and the file if absent."""

    @abc.abstractmethod
    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one variable's value as a host NumPy array of its logical dtype.

        Args:
          name: a key of this checkpoint.
          out: optional C-contiguous array of the variable's shape and dtype to
            read into (no extra copy); returned when given.

        Raises:
          UnknownVariableError (a KeyError): unknown name.
          CorruptCheckpointError / ChecksumError: damaged bytes (checksums are
            checked where the format records them).
          ValueTooLargeError: without `out`, the value declares more bytes than the read limit
            (`max_bytes`; see docs/reliability.md); nothing was allocated.
        """

    # -- shared behaviour
    def verify(self, progress: Callable[[int, int, str], None] | None = None,
               names: Iterable[str] | None = None) -> None:
        """Reads every variable and checks every checksum the format records.

        Args:
          progress: called as progress(done_bytes, total_bytes, name) after each variable is checked, and
            once with (0, total_bytes, "") before the first (the CLI draws its bar from it).
          names: check only these keys (e.g. `self.filter(...)`), in this order; None checks all.

        Raises:
          ChecksumError / CorruptCheckpointError naming the first bad variable and the file.
          UnknownVariableError: a name in `names` that is not a key.
        """
        names = self.keys() if names is None else list(names)
        sizes = [self.info(name).nbytes for name in names] if progress is not None else []
        total, done = sum(sizes), 0
        if progress is not None:
            progress(0, total, "")
        for k, name in enumerate(names):
            self.read(name)
            if progress is not None:
                done += sizes[k]
                progress(done, total, name)

    def infos(self) -> list[VariableInfo]:
        """`info(name)` for every key, in order."""
        return [self.info(name) for name in self.keys()]

    def filter(self, pattern: str | Iterable[str] | None = None, exclude: str | Iterable[str] = ()) -> list[str]:
        """Keys (in order) matching a shell glob ("encoder/*") or any of several, minus those matching an
        `exclude` glob; see select_names."""
        return select_names(self.keys(), pattern, exclude)

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        return self.read(name)

    def __contains__(self, name: object) -> bool:
        return name in set(self.keys())

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def close(self) -> None:
        """Releases file handles; further reads raise."""

    @contextlib.contextmanager
    def held(self) -> Iterator[ReaderHold]:
        """Lends the reader to one restore that owns it: its names, asked once on entry; on exit closed,
        unless the restore set `hold.keep` (lazy or deferred values still read from it); always closed
        when the block raises."""
        hold = ReaderHold(self.keys())
        try:
            yield hold
        except BaseException:
            self.close()
            raise
        if not hold.keep:
            self.close()

    def __enter__(self) -> "CheckpointReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.format} '{self.path}' {len(self)} variables>"


def checked_out(name: str, shape: tuple[int, ...], dtype: np.dtype,
                out: npt.NDArray[Any] | None, where: str | None = None) -> npt.NDArray[Any]:
    """Returns `out` after checking it fits (C-contiguous, same shape and dtype), or a new empty array.

    Raises:
      ValueTooLargeError: NumPy cannot make the array (MemoryError, or a ValueError for a dimension or
        size beyond what it indexes), naming the variable and `where` (the file), never the bare error.
      ValueError: `out` does not fit.
    """
    if out is None:
        try:
            return host_empty(shape, dtype)
        except (MemoryError, ValueError, OverflowError) as err:
            place = f" in {where}" if where else ""
            declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
            raise ValueTooLargeError(
                f"variable '{name}'{place} declares shape {list(shape)} of {dtype} ({declared:,} bytes), which "
                f"cannot be allocated ({type(err).__name__}: {err}); a damaged or hostile size") from None
    if tuple(out.shape) != tuple(shape) or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(
            f"cannot read variable '{name}' into an array of shape {tuple(out.shape)} and dtype "
            f"{out.dtype}: need a C-contiguous array of shape {tuple(shape)} and dtype {dtype}")
    return out


def cast_into(out: npt.NDArray[Any], value: npt.NDArray[Any], origin: str) -> None:
    """Copies stored `value` into `out` of another dtype, refusing a value the cast would change (values.check_fits).

    Raises:
      ValueOutOfRangeError: naming `origin` ("'step' in 'ckpt.h5'"), both dtypes and the first offending value.
    """
    from varstore.store.values import check_fits  # the rare cast path only: a plain read never needs the core

    check_fits(value, out.dtype, f"restore {origin} into {out.dtype.name}")
    np.copyto(out, value, casting="unsafe")


def read_through_cast(out: npt.NDArray[Any], shape: tuple[int, ...], dtype: np.dtype, origin: str,
                      fill: Callable[[npt.NDArray[Any]], None], before_allocating: Callable[[], None]) -> None:
    """Fills `out` with a stored value of `shape` and `dtype`: straight through `fill` when `out` is a
    writeable C-contiguous array of that dtype, else into a new array of the stored dtype (after
    `before_allocating`, which refuses a value its storage cannot back) then cast_into `out`.

    Raises:
      Whatever `fill` and `before_allocating` raise; ValueOutOfRangeError from the cast (cast_into).
    """
    if out.dtype == dtype and out.flags.c_contiguous and out.flags.writeable:
        fill(out)
        return
    before_allocating()
    value = np.empty(shape, dtype=dtype)
    fill(value)
    cast_into(out, value, origin)
