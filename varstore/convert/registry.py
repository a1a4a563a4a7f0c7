"""The one registry of checkpoint formats: names, aliases, suffixes, sniff, open, write; and detection.

Everything that needs to know which formats exist reads this module:
`open_checkpoint`, `convert`, `detect_format` and the CLI's `--format`,
`--from` and `--to` help. It holds no format knowledge itself: each format
is one `FormatEntry` in `_BUILTIN` below, pointing (lazily) at the module
that reads it.

Adding a format (one module plus one entry):

1. Write `varstore/convert/<format>.py` with two module-level functions:
   `sniff(probe: Probe) -> Path | None` (look only at what the Probe holds:
   `head`, `tail`, `size`, `is_dir`, `zip_names`, `is_hdf5`/`hdf5()`, `read_at`;
   return the path to open, or None; raise UnsafeFormatError for a file it
   recognises and refuses) and `open_reader(path: Path, *, probe: Probe | None = None,
   **options) -> CheckpointReader` (`probe` is the detection's probe, None when
   the user named the format; use it only to reuse what it already opened).
   Optionally `write_checkpoint(path, entries, request) -> Sequence[str]`
   (returns notes) for a destination format. Keep the module's top-level
   imports light (stdlib, numpy, varstore.errors, varstore.checkpoint.info):
   sniffing imports it; heavy or optional dependencies go inside functions.
2. Add one `FormatEntry(name=..., description=..., suffixes=(...),
   sniff=lazy("varstore.convert.<format>:sniff"),
   open=lazy("varstore.convert.<format>:open_reader"), order=...)` to
   `_BUILTIN`. `lazy` imports the module on first call, so `import varstore`
   never imports a reader.

A user can also add a format at run time with `register_format(entry)` and
remove it with `unregister_format(name)`. Registration is explicit: there are
no import-time side effects and no entry points.

Detection (`detect`) asks every entry's `sniff` in `order` (lowest first)
with one Probe; the first that returns a path wins. When none does, the
first entry whose `suffixes` end the file name claims it, and its reader
reports what is wrong with the file. Nothing here does I/O beyond the Probe.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from varstore.convert.probe import Probe
from varstore.errors import CheckpointNotFoundError, NotACheckpointError, UnsupportedFormatError

if TYPE_CHECKING:
    from varstore.checkpoint.entry import SaveEntry
    from varstore.checkpoint.info import CheckpointReader

__all__ = [
    "FormatEntry",
    "WriteRequest",
    "Probe",
    "lazy",
    "register_format",
    "unregister_format",
    "formats",
    "reader_format",
    "writer_format",
    "writer_for_path",
    "detect",
    "read_names",
    "write_names",
    "open_detected",
    "detected_name",
]


@dataclasses.dataclass(frozen=True)
class WriteRequest:
    """What a format's writer is told about the conversion besides the variables.

    Attributes:
      source: the source checkpoint's path.
      source_format: the source reader's format name ("tf", "keras3", ...).
      step: the source's training step, or None.
      metadata: the source reader's metadata (JSON-compatible or not; the writer decides what it keeps).
    """

    source: Path
    source_format: str
    step: int | None
    metadata: Mapping[str, Any]


class SniffFunction(Protocol):
    def __call__(self, probe: Probe) -> Path | None: ...


class OpenFunction(Protocol):
    def __call__(self, path: Path, *, probe: Probe | None = None, **options: Any) -> CheckpointReader: ...


class WriteFunction(Protocol):
    def __call__(self, path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]: ...


@dataclasses.dataclass(frozen=True)
class FormatEntry:
    """One checkpoint format.

    Attributes:
      name: the canonical name ("safetensors"); what `detect_format` returns
        and what `format=` / `--from` accept.
      description: one line for help texts ("safetensors file (HuggingFace)").
      aliases: other names `format=` / `--from` accept ("tensorflow" for "tf").
      suffixes: lower-case file-name endings that claim a file no sniff
        recognised (".safetensors"); the entry's reader then says what is wrong.
      sniff: `sniff(probe) -> Path | None`, see the module docstring; None
        for a format that is opened only by name (never detected).
      open: `open(path, *, probe=None, **options) -> CheckpointReader`; None
        for a write-only format.
      write: `write(path, entries, request) -> notes`; None for a read-only format.
      write_names: names `to_format=` / `--to` accept for `write`, the first
        being the one reports use ("h5"); default: (name, *aliases).
      write_suffixes: destination endings that pick `write` (".h5"); default: `suffixes`.
      order: detection order, lowest first (varstore's own formats 10, HDF5
        family 20-30, directories 40, magic-byte file formats 50-69, refusals 90).
      refuses: True for a format varstore recognises only to refuse (pickles): its
        sniff and open raise UnsafeFormatError; it is not offered in help, and
        when its suffix claims a file, detection itself refuses it.
    """

    name: str
    description: str
    aliases: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    sniff: SniffFunction | None = None
    open: OpenFunction | None = None
    write: WriteFunction | None = None
    write_names: tuple[str, ...] = ()
    write_suffixes: tuple[str, ...] | None = None
    order: int = 50
    refuses: bool = False

    @property
    def reads(self) -> bool:
        """True when the format can be opened (`open` is set)."""
        return self.open is not None

    @property
    def writes(self) -> bool:
        """True when the format can be a conversion destination (`write` is set)."""
        return self.write is not None

    def names_for_writing(self) -> tuple[str, ...]:
        """The names `to_format` accepts for this entry (empty when it does not write)."""
        if not self.writes:
            return ()
        return self.write_names or (self.name, *self.aliases)

    def suffixes_for_writing(self) -> tuple[str, ...]:
        """The destination endings that pick this entry's writer (empty when it does not write)."""
        if not self.writes:
            return ()
        return self.suffixes if self.write_suffixes is None else self.write_suffixes


class _Lazy:
    """A callable that imports "module:attribute" on its first call and forwards to it."""

    def __init__(self, target: str) -> None:
        module, sep, attribute = target.partition(":")
        if not sep or not module or not attribute:
            raise UnsupportedFormatError(f"lazy target {target!r} must look like 'package.module:function'")
        self._module, self._attribute = module, attribute
        self._function: Callable[..., Any] | None = None
        self.target = target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._function is None:
            self._function = getattr(importlib.import_module(self._module), self._attribute)
        return self._function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy({self.target!r})"


def lazy(target: str) -> Any:
    """A function that imports `target` ("varstore.convert.gguf:open_reader") when first called.

    Entries use it so that registering a format imports nothing. Typed Any so
    it fits the sniff, open and write slots alike.

    Raises:
      UnsupportedFormatError: `target` is not "package.module:function".
    """
    return _Lazy(target)


_C = "varstore.convert"
_BUILTIN: tuple[FormatEntry, ...] = (
    FormatEntry("varstore-hdf5", "varstore HDF5 checkpoint (.h5)", aliases=("varstore",),
                sniff=lazy(f"{_C}.detect:sniff_varstore_hdf5"), open=lazy(f"{_C}._varstore_format:open_reader"),
                write=lazy(f"{_C}._varstore_format:write_hdf5"), write_names=("h5", "hdf5", "varstore-hdf5"),
                write_suffixes=(".h5", ".hdf5"), order=10),
    FormatEntry("varstore-zarr", "varstore Zarr v3 checkpoint directory (.zarr)",
                sniff=lazy(f"{_C}.detect:sniff_varstore_zarr"), open=lazy(f"{_C}._varstore_format:open_reader"),
                write=lazy(f"{_C}._varstore_format:write_zarr"), write_names=("zarr", "varstore-zarr"),
                write_suffixes=(".zarr",), order=11),
    FormatEntry("keras3", "Keras 3 .weights.h5 or .keras archive", suffixes=(".keras",),
                sniff=lazy(f"{_C}.detect:sniff_keras3"), open=lazy(f"{_C}.keras:open_keras3"), order=20),
    FormatEntry("keras2", "Keras 2 .h5 (save_weights or whole-model save)",
                sniff=lazy(f"{_C}.detect:sniff_keras2"), open=lazy(f"{_C}.keras:open_keras2"), order=21),
    FormatEntry("keras", "Keras weights in either layout (by name only; detection says keras3 or keras2)",
                open=lazy(f"{_C}.keras:open_reader"), order=22),
    FormatEntry("hdf5", "any HDF5 file: datasets are variables", aliases=("h5",),
                suffixes=(".h5", ".hdf5", ".he5"), sniff=lazy(f"{_C}.detect:sniff_hdf5"),
                open=lazy(f"{_C}.generic:open_hdf5"), order=30),
    FormatEntry("zarr", "any Zarr v2/v3 group: arrays are variables",
                sniff=lazy(f"{_C}.detect:sniff_zarr"), open=lazy(f"{_C}.generic:open_zarr"), order=40),
    FormatEntry("tf", "TensorFlow checkpoint (bundle prefix, .index, or directory)", aliases=("tensorflow",),
                sniff=lazy(f"{_C}.detect:sniff_tf"), open=lazy(f"{_C}.tf_checkpoint:open_reader"), order=50),
    FormatEntry("safetensors", "safetensors file", suffixes=(".safetensors",),
                sniff=lazy(f"{_C}.detect:sniff_safetensors"), open=lazy(f"{_C}.safetensors:open_reader"),
                write=lazy(f"{_C}.safetensors:write_checkpoint"), order=60),
    FormatEntry("npz", "NumPy .npz archive (no object arrays)", suffixes=(".npz",),
                sniff=lazy(f"{_C}.detect:sniff_npz"), open=lazy(f"{_C}.npz:open_reader"),
                write=lazy(f"{_C}.npz:write_checkpoint"), order=61),
    FormatEntry("pytorch", "PyTorch .pt/.pth/.bin and other pickles: refused, never unpickled",
                suffixes=(".pt", ".pth", ".pkl", ".pickle", ".bin", ".ckpt"),
                sniff=lazy(f"{_C}.detect:sniff_pickle"), open=lazy(f"{_C}.detect:refuse_pickle"),
                order=90, refuses=True),
)

_registry: list[FormatEntry] = list(_BUILTIN)


def _key(name: str) -> str:
    return str(name).strip().lower()


def formats() -> tuple[FormatEntry, ...]:
    """Every registered format, in detection order."""
    return tuple(sorted(_registry, key=lambda e: e.order))


def register_format(entry: FormatEntry, *, replace: bool = False) -> None:
    """Adds a format to the registry (for this process).

    Args:
      entry: the format. Its name and aliases must not name another format's
        reader, nor its write names another format's writer.
      replace: replace the registered format of the same name instead of failing.

    Raises:
      UnsupportedFormatError: a name or alias is taken (the message names the owner).
    """
    if not isinstance(entry, FormatEntry):
        raise UnsupportedFormatError(f"register_format needs a FormatEntry, got {type(entry).__name__}")
    others = [e for e in _registry if not (replace and _key(e.name) == _key(entry.name))]
    for other in others:
        if other.reads and entry.reads:
            clash = {_key(n) for n in (entry.name, *entry.aliases)} & {_key(n) for n in (other.name, *other.aliases)}
        else:
            clash = {_key(entry.name)} & {_key(other.name)}
        clash |= {_key(n) for n in entry.names_for_writing()} & {_key(n) for n in other.names_for_writing()}
        if clash:
            raise UnsupportedFormatError(
                f"cannot register format {entry.name!r}: {', '.join(sorted(clash))} already names format "
                f"{other.name!r}; pick another name or pass replace=True to replace {entry.name!r}")
    _registry[:] = [*others, entry]


def unregister_format(name: str) -> FormatEntry:
    """Removes the format called `name` (its canonical name) and returns its entry.

    Raises:
      UnsupportedFormatError: no format has that name.
    """
    for i, entry in enumerate(_registry):
        if _key(entry.name) == _key(name):
            return _registry.pop(i)
    raise UnsupportedFormatError(f"no format named {name!r} is registered: the formats are "
                                 f"{', '.join(e.name for e in formats())}")


def read_names(*, include_refusals: bool = False) -> list[str]:
    """Canonical names of the formats that can be opened, in detection order ("varstore-hdf5", ...)."""
    return [e.name for e in formats() if e.reads and (include_refusals or not e.refuses)]


def write_names() -> list[str]:
    """The first write name of every destination format, in order ("h5", "zarr", "safetensors", "npz")."""
    return [e.names_for_writing()[0] for e in formats() if e.writes]


def reader_format(name: str) -> FormatEntry:
    """The format `format=` / `--from` `name` means (canonical name or alias, any case).

    Raises:
      UnsupportedFormatError: no readable format has that name.
    """
    key = _key(name)
    for entry in formats():
        if entry.reads and key in {_key(n) for n in (entry.name, *entry.aliases)}:
            return entry
    accepted = sorted({_key(n) for e in formats() if e.reads and not e.refuses for n in (e.name, *e.aliases)})
    raise UnsupportedFormatError(f"unknown checkpoint format {name!r}: use one of {', '.join(accepted)}")


def writer_format(name: str) -> FormatEntry:
    """The destination format `to_format` / `--to` `name` means.

    Raises:
      UnsupportedFormatError: no writable format has that name.
    """
    key = _key(name)
    for entry in formats():
        if key in {_key(n) for n in entry.names_for_writing()}:
            return entry
    accepted = sorted({_key(n) for e in formats() for n in e.names_for_writing()})
    raise UnsupportedFormatError(f"cannot convert to format {name!r}: use one of {', '.join(accepted)}")


def writer_for_path(path: Path) -> FormatEntry:
    """The destination format a path's suffix implies (".h5" -> varstore-hdf5).

    Raises:
      UnsupportedFormatError: no writable format uses that suffix.
    """
    name = path.name.lower()
    for entry in formats():
        if any(name.endswith(s) for s in entry.suffixes_for_writing()):
            return entry
    endings = [s for e in formats() for s in e.suffixes_for_writing()]
    raise UnsupportedFormatError(
        f"cannot tell the destination format of '{path}' from its suffix {path.suffix!r}: name it "
        f"{', '.join(endings[:-1])} or {endings[-1]}, or pass to_format")


def detect(probe: Probe) -> tuple[FormatEntry, Path]:
    """The format of the probed path and the path to open (a TF prefix for a bundle's .index).

    Every entry's sniff is asked in order; then, for a file, the first
    entry whose suffixes end its name claims it.

    Raises:
      CheckpointNotFoundError: nothing at the path and no format claims it.
      NotACheckpointError: an empty file, or no format claims it.
      UnsafeFormatError: a format recognised it and refuses it (pickles).
      CorruptCheckpointError: a sniff found the file damaged (an HDF5 file h5py cannot walk).
    """
    if probe.is_file and probe.size == 0:
        raise NotACheckpointError(f"'{probe.path}' is an empty file, not a checkpoint")
    entries = formats()
    for entry in entries:
        if entry.reads and entry.sniff is not None:
            target = entry.sniff(probe)
            if target is not None:
                return entry, Path(target)
    if not probe.exists:
        raise CheckpointNotFoundError(f"no checkpoint at '{probe.path}': no such file or directory")
    described = ", ".join(e.name for e in entries if not e.refuses and e.sniff is not None)
    if probe.is_dir:
        raise NotACheckpointError(f"directory '{probe.path}' holds no checkpoint: it is none of {described} "
                                  f"(no zarr.json / .zgroup and no TensorFlow 'checkpoint' state file)")
    for entry in entries:
        if entry.reads and any(probe.name.endswith(s) for s in entry.suffixes):
            if entry.refuses:
                assert entry.open is not None
                entry.open(probe.path)  # raises UnsafeFormatError naming the file and its suffix
            return entry, probe.path
    raise NotACheckpointError(
        f"'{probe.path}' is not a checkpoint varstore reads: its first bytes match none of {described}, "
        f"and its suffix {probe.path.suffix!r} names none")


def open_detected(path: os.PathLike[str] | str, **options: Any) -> CheckpointReader:
    """Detects the format of `path` with one Probe and opens it, handing the probe to the reader."""
    with Probe(path) as probe:
        entry, target = detect(probe)
        assert entry.open is not None  # detect returns readable entries only
        return entry.open(target, probe=probe, **options)


def detected_name(path: os.PathLike[str] | str) -> str:
    """The name of the format detected at `path` (no reader is opened)."""
    with Probe(path) as probe:
        return detect(probe)[0].name
