"""The one registry of checkpoint formats: names, aliases, suffixes, sniff, open, write; and detection.

Everything that needs to know which formats exist reads this module:
`open_checkpoint`, `convert`, `detect_format` and the CLI's `--format`,
`--from` and `--to` help. It holds no format knowledge itself: each format
is one `FormatEntry` in `_BUILTIN` below, pointing (lazily) at the module
that reads it.

Adding a format (one folder plus one entry):

1. Write `varstore/formats/<family>/reader.py` with two module-level functions:
   `sniff(probe: Probe) -> Path | None` (look only at what the Probe holds:
   `head`, `tail`, `size`, `is_dir`, `zip_names`, `is_hdf5`/`hdf5()`, `read_at`;
   return the path to open, or None; raise UnsafeFormatError for a file it
   recognises and refuses) and `open_reader(path: Path, *, probe: Probe | None = None,
   **options) -> CheckpointReader` (`probe` is the detection's probe, None when
   the user named the format; use it only to reuse what it already opened).
   Optionally `write_checkpoint(path, entries, request) -> Sequence[str]`
   (returns notes) for a destination format. Import FormatEntry/WriteRequest
   from varstore.formats.format_entry and Probe from varstore.formats.probe,
   never this module (that would be an import cycle). Keep the module's
   top-level imports light (stdlib, numpy, varstore.errors,
   varstore.checkpoint.read.reader_api): sniffing imports it; heavy or optional
   dependencies go inside functions.
2. Here, add a loader `def _<format>() -> ModuleType: from varstore.formats.<family>
   import reader as <format>; return <format>` and one `FormatEntry(name=...,
   description=..., suffixes=(...), sniff=lazy(_<format>, "sniff"),
   open=lazy(_<format>, "open_reader"), order=...)` in `_BUILTIN`. `lazy`
   imports the module on first call, so `import varstore` never imports a
   reader, and the literal import keeps the layering test's graph complete.

A user can also add a format at run time with `register_format(entry)` and
remove it with `unregister_format(name)`. Registration is explicit: there are
no import-time side effects and no entry points.

Detection (`detect`) asks every entry's `sniff` in `order` (lowest first)
with one Probe; the first that returns a path wins. When none does, the
first entry whose `suffixes` end the file name claims it, and its reader
reports what is wrong with the file. Nothing here does I/O beyond the Probe.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from varstore.backends import FORMATS, container_names
from varstore.formats._folder_contents import folder_contents
from varstore.formats.format_entry import FormatEntry, WriteRequest
from varstore.formats.probe import Probe
from varstore.errors import CheckpointNotFoundError, NotACheckpointError, UnsupportedFormatError, VarstoreError

if TYPE_CHECKING:
    from varstore.checkpoint.read.reader_api import CheckpointReader

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
    "url_format",
    "format_entry",
    "detect",
    "read_format_names",
    "write_format_names",
    "open_detected",
    "detected_name",
]


class _Lazy:
    """A callable that imports its module (through `load`) on its first call and forwards to one attribute."""

    def __init__(self, load: Callable[[], ModuleType], attribute: str) -> None:
        self._load, self._attribute = load, attribute
        self._function: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._function is None:
            self._function = getattr(self._load(), self._attribute)
        return self._function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"lazy({getattr(self._load, '__name__', self._load)!r}, {self._attribute!r})"


def lazy(load: Callable[[], ModuleType], attribute: str) -> Any:
    """A function that calls `load()` on first use and forwards to its `attribute`.

    `load` is a function holding one literal import (`from varstore.formats.keras
    import reader as keras; return keras`), so nothing is imported when the table is
    built and tests/test_layering.py still sees the import. Typed Any so it
    fits the sniff, open and write slots alike.
    """
    return _Lazy(load, attribute)


# One loader per format module: the literal imports the layering test reads.
def _pickles() -> ModuleType:
    from varstore.formats import pickles
    return pickles


def _varstore_format() -> ModuleType:
    from varstore.formats import _varstore_format as module
    return module


def _keras() -> ModuleType:
    from varstore.formats.keras import reader as keras
    return keras


def _generic() -> ModuleType:
    from varstore.formats.plain import generic
    return generic


def _tf_checkpoint() -> ModuleType:
    from varstore.formats.tensorflow import reader as tf_checkpoint
    return tf_checkpoint


def _safetensors() -> ModuleType:
    from varstore.formats.safetensors import single as safetensors
    return safetensors


def _npz() -> ModuleType:
    from varstore.formats.plain import npz
    return npz


def _pytorch() -> ModuleType:
    from varstore.formats.pytorch import reader as pytorch
    return pytorch


def _sharded_safetensors() -> ModuleType:
    from varstore.formats.safetensors import sharded as sharded_safetensors
    return sharded_safetensors


def _dcp() -> ModuleType:
    from varstore.formats.dcp import reader as dcp
    return dcp


def _orbax() -> ModuleType:
    from varstore.formats.orbax import reader as orbax
    return orbax


def _keras_sharded() -> ModuleType:
    from varstore.formats.keras import sharded as keras_sharded
    return keras_sharded


def _gguf() -> ModuleType:
    from varstore.formats.gguf import reader as gguf
    return gguf


def _gguf_writer() -> ModuleType:
    from varstore.formats.gguf import writer as gguf_writer
    return gguf_writer


def _orbax_writer() -> ModuleType:
    from varstore.formats.orbax import writer as orbax_writer
    return orbax_writer


def _dcp_writer() -> ModuleType:
    from varstore.formats.dcp import writer as dcp_writer
    return dcp_writer


def _tf_writer() -> ModuleType:
    from varstore.formats.tensorflow import writer as tf_writer
    return tf_writer


def _pytorch_writer() -> ModuleType:
    from varstore.formats.pytorch import writer as pytorch_writer
    return pytorch_writer


_BUILTIN: tuple[FormatEntry, ...] = (
    FormatEntry("varstore-hdf5", "varstore HDF5 checkpoint (.h5)", aliases=("varstore",),
                sniff=lazy(_varstore_format, "sniff_hdf5"), open=lazy(_varstore_format, "open_reader"),
                write=lazy(_varstore_format, "write_hdf5"), open_url=lazy(_varstore_format, "open_url"),
                write_names=container_names("h5"), write_suffixes=FORMATS["h5"], order=10),
    FormatEntry("varstore-zarr", "varstore Zarr v3 checkpoint directory (.zarr)",
                sniff=lazy(_varstore_format, "sniff_zarr"), open=lazy(_varstore_format, "open_reader"),
                write=lazy(_varstore_format, "write_zarr"), open_url=lazy(_varstore_format, "open_url"),
                write_names=container_names("zarr"), write_suffixes=FORMATS["zarr"], order=11,
                holds=lazy(_varstore_format, "holds_zarr")),
    FormatEntry("keras3", "Keras 3 .weights.h5 or .keras archive", suffixes=(".keras",),
                sniff=lazy(_keras, "sniff_keras3"), open=lazy(_keras, "open_keras3"), order=20),
    FormatEntry("keras2", "Keras 2 .h5 (save_weights or whole-model save)",
                sniff=lazy(_keras, "sniff_keras2"), open=lazy(_keras, "open_keras2"), order=21),
    FormatEntry("keras", "Keras weights in either layout (by name only; detection says keras3 or keras2)",
                open=lazy(_keras, "open_reader"), order=22),
    FormatEntry("hdf5", "any HDF5 file: datasets are variables", aliases=("h5",),
                suffixes=(".h5", ".hdf5", ".he5"), sniff=lazy(_generic, "sniff_hdf5"),
                open=lazy(_generic, "open_hdf5"), order=30),
    FormatEntry("zarr", "any Zarr v2/v3 group: arrays are variables",
                sniff=lazy(_generic, "sniff_zarr"), open=lazy(_generic, "open_zarr"), order=40),
    FormatEntry("tf", "TensorFlow checkpoint (bundle prefix, .index, or directory)", aliases=("tensorflow",),
                sniff=lazy(_tf_checkpoint, "sniff"), open=lazy(_tf_checkpoint, "open_reader"),
                write=lazy(_tf_writer, "write_checkpoint"), write_suffixes=(".ckpt", ".index"),
                write_options=("partitions",), read_options=("strip_attributes",), order=50,
                holds=lazy(_tf_writer, "holds")),
    FormatEntry("safetensors", "safetensors file", suffixes=(".safetensors",),
                sniff=lazy(_safetensors, "sniff"), open=lazy(_safetensors, "open_reader"),
                write=lazy(_safetensors, "write_checkpoint"), open_url=lazy(_safetensors, "open_url"), order=60,
                holds=lazy(_safetensors, "holds")),
    FormatEntry("npz", "NumPy .npz archive (no object arrays)", suffixes=(".npz",),
                sniff=lazy(_npz, "sniff"), open=lazy(_npz, "open_reader"),
                write=lazy(_npz, "write_checkpoint"), read_options=("skip_object_arrays",), order=61),
    FormatEntry("orbax", "Orbax checkpoint directory (OCDBT via tensorstore, or per-array Zarr)",
                aliases=("jax-orbax",), sniff=lazy(_orbax, "sniff"), open=lazy(_orbax, "open_reader"),
                write=lazy(_orbax_writer, "write_checkpoint"), write_suffixes=(), order=42,
                holds=lazy(_orbax_writer, "holds")),
    FormatEntry("dcp", "PyTorch Distributed Checkpoint directory (.metadata + .distcp files)",
                aliases=("torch-dcp", "distcp"), suffixes=(".distcp",), sniff=lazy(_dcp, "sniff"),
                open=lazy(_dcp, "open_reader"), write=lazy(_dcp_writer, "write_checkpoint"),
                write_suffixes=(".distcp",), order=44, holds=lazy(_dcp_writer, "holds")),
    FormatEntry("safetensors-sharded", "HuggingFace sharded safetensors (index.json + shards; index, directory "
                "or any shard)", aliases=("hf-sharded", "sharded-safetensors"), suffixes=(".safetensors.index.json",),
                sniff=lazy(_sharded_safetensors, "sniff"), open=lazy(_sharded_safetensors, "open_reader"),
                write=lazy(_sharded_safetensors, "write_checkpoint"), write_suffixes=(),
                write_options=("max_shard_size",), order=46, holds=lazy(_safetensors, "holds")),
    FormatEntry("gguf", "GGUF file (llama.cpp); quantized tensors as raw blocks, or float32 with dequantize",
                aliases=("ggml",), suffixes=(".gguf",), sniff=lazy(_gguf, "sniff"), open=lazy(_gguf, "open_reader"),
                write=lazy(_gguf_writer, "write_checkpoint"), write_options=("gguf_type",),
                read_options=("dequantize",), order=65, holds=lazy(_gguf_writer, "holds")),
    FormatEntry("keras3-sharded", "Keras 3 sharded weights (.weights.json index + .weights.h5 shards)",
                aliases=("keras-sharded",), suffixes=(".weights.json",), sniff=lazy(_keras_sharded, "sniff"),
                open=lazy(_keras_sharded, "open_reader"), order=66),
    FormatEntry("pytorch", "PyTorch torch.save file (.pt/.pth/.bin, zip or legacy), through a restricted unpickler",
                aliases=("torch", "pt", "pth"), suffixes=(".pt", ".pth", ".bin", ".ckpt"),
                sniff=lazy(_pytorch, "sniff"), open=lazy(_pytorch, "open_reader"),
                write=lazy(_pytorch_writer, "write_checkpoint"), write_names=("pt", "pytorch", "torch", "pth"),
                write_suffixes=(".pt", ".pth"), order=69, holds=lazy(_pytorch_writer, "holds")),
    FormatEntry("pickle", "other Python pickles (.pkl/.pickle): refused, never unpickled",
                suffixes=(".pkl", ".pickle"), open=lazy(_pickles, "refuse"), order=90, refuses=True),
)

_registry: list[FormatEntry] = list(_BUILTIN)


def _key(name: str) -> str:
    return str(name).strip().lower()


def formats() -> tuple[FormatEntry, ...]:
    """Every registered format, in detection order."""
    return tuple(sorted(_registry, key=lambda e: e.order))


def own_formats_first() -> bool:
    """True while detection asks the built-in varstore-hdf5 and varstore-zarr entries before any other
    (none registered ahead of them, neither replaced): `varstore.open_checkpoint` may then open
    varstore's own checkpoints without running detection (varstore/_open.py)."""
    first = formats()[:2]
    return len(first) == 2 and first[0] is _BUILTIN[0] and first[1] is _BUILTIN[1]


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


def read_format_names(*, include_refusals: bool = False) -> list[str]:
    """Canonical names of the formats that can be opened, in detection order ("varstore-hdf5", ...)."""
    return [e.name for e in formats() if e.reads and (include_refusals or not e.refuses)]


def write_format_names() -> list[str]:
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


def format_entry(name: str) -> FormatEntry:
    """The registered format called `name` (canonical name or alias of a reader, else a write name).

    Raises:
      UnsupportedFormatError: no format has that name.
    """
    try:
        return reader_format(name)
    except UnsupportedFormatError:
        return writer_format(name)


def url_format(key: str, name: str | None = None) -> FormatEntry:
    """The format that opens object-store key `key`: the one named `name` (format=), else the entry with
    `open_url` whose suffixes (reading or writing) end the key; a key without a suffix is varstore's own.

    Raises:
      UnsupportedFormatError: that format cannot be read from an object store (naming the key and
        the formats that can).
    """
    lowered = key.lower().rstrip("/")
    found: FormatEntry | None
    if name is not None:
        found = reader_format(name)
    elif "." not in lowered.rsplit("/", 1)[-1]:
        found = formats()[0] if own_formats_first() else next((e for e in formats() if e.open_url), None)
    else:
        found = next((e for e in formats() if e.open_url is not None
                      and lowered.endswith(tuple(e.suffixes) + e.suffixes_for_writing())), None)
    if found is None or found.open_url is None:
        able = sorted({s for e in formats() if e.open_url is not None for s in (*e.suffixes, *e.suffixes_for_writing())})
        raise UnsupportedFormatError(
            f"cannot open {key} as {found.name if found else 'this format'}: on an object store varstore reads "
            f"{', '.join(able)} ({', '.join(e.name for e in formats() if e.open_url)}); copy the file to a local "
            f"disk to open it")
    return found


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


def sniffed(probe: Probe) -> tuple[FormatEntry, Path] | None:
    """The first format whose sniff claims the probed path, and the path to open; None when no sniff does
    (a suffix alone claims nothing here).

    Raises:
      As the sniffs: UnsafeFormatError (pickles), CorruptCheckpointError, CheckpointNotFoundError.
    """
    for entry in formats():
        if entry.reads and entry.sniff is not None:
            try:
                target = entry.sniff(probe)
            except (struct.error, EOFError, IndexError):  # a sniff that read past a short file: not this format
                target = None
            if target is not None:
                return entry, Path(target)
    return None


def detect(probe: Probe, by_suffix: bool = True) -> tuple[FormatEntry, Path]:
    """The format of the probed path and the path to open (a TF prefix for a bundle's .index).

    Every entry's sniff is asked in order; then, for a file, the first
    entry whose suffixes end its name claims it (unless `by_suffix` is False: content only, as a
    folder listing asks, so that a text file 'notes.h5' is no checkpoint).

    Raises:
      CheckpointNotFoundError: nothing at the path and no format claims it.
      NotACheckpointError: an empty file, or no format claims it.
      UnsafeFormatError: a format recognised it and refuses it (pickles).
      CorruptCheckpointError: a sniff found the file damaged (an HDF5 file h5py cannot walk).
    """
    if probe.is_file and probe.size == 0:
        raise NotACheckpointError(f"'{probe.path}' is {'not a checkpoint: ' if not by_suffix else ''}"
                                  f"an empty file{', not a checkpoint' if by_suffix else ''}")
    entries = formats()
    found = sniffed(probe)
    if found is not None:
        return found
    if not probe.exists:
        raise CheckpointNotFoundError(f"no checkpoint at '{probe.path}': no such file or directory")
    described = ", ".join(e.name for e in entries if not e.refuses and e.sniff is not None)
    if not by_suffix:  # content only: one short reason (a folder listing shows it beside the name)
        named = next((e.name for e in entries if e.reads and any(probe.name.endswith(x) for x in e.suffixes)), None)
        why = ("a folder without zarr.json, .zgroup or a TensorFlow 'checkpoint' state file" if probe.is_dir
               else f"its content matches no format varstore reads (only its suffix {probe.path.suffix!r} names "
                    f"{named})" if named else "its content matches no format varstore reads")
        raise NotACheckpointError(f"'{probe.path}' is not a checkpoint: {why}")
    if probe.is_dir:
        raise NotACheckpointError(f"directory '{probe.path}' holds no checkpoint: it is none of {described} "
                                  f"(no zarr.json / .zgroup and no TensorFlow 'checkpoint' state file)"
                                  f"{folder_contents(probe.path, lambda entry: detected_name(entry, by_suffix=False))}")
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


def detected_name(path: os.PathLike[str] | str, by_suffix: bool = True) -> str:
    """The name of the format detected at `path` (no reader is opened); `by_suffix` as detect's."""
    with Probe(path) as probe:
        return detect(probe, by_suffix)[0].name
