"""FormatEntry and WriteRequest: what one checkpoint format declares to the registry, and what its writer is told.

Plain frozen dataclasses and the call signatures of a format's sniff, open
and write functions. Imports no format and no reader; the table of formats
and detection live in varstore.formats.registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from varstore.checkpoint.format.entry import SaveEntry
    from varstore.checkpoint.read.reader_api import CheckpointReader
    from varstore.formats.probe import Probe
    from varstore.storage import ObjectStore

__all__ = ["FormatEntry", "WriteRequest", "SniffFunction", "OpenFunction", "OpenURLFunction", "WriteFunction", "HoldsFunction",
           "parse_write_options"]


@dataclasses.dataclass(frozen=True)
class WriteRequest:
    """What a format's writer is told about the conversion besides the variables.

    Attributes:
      source: the source checkpoint's path.
      source_format: the source reader's format name ("tf", "keras3", ...).
      step: the source's training step, or None.
      metadata: the source reader's metadata (JSON-compatible or not; the writer decides what it keeps).
      overwrite: the caller allowed replacing an existing destination (convert's `force`); a
        writer that refuses existing paths itself (varstore's save_entries) is told so.
      storage_options: object-store client settings for a URL destination (varstore's writers).
      options: writer options the caller passed (`max_shard_size` for sharded
        safetensors); a writer rejects options it does not know.
    """

    source: Path
    source_format: str
    step: int | None
    metadata: Mapping[str, Any]
    overwrite: bool = False
    storage_options: Mapping[str, object] | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def parse_write_options(items: Sequence[str]) -> dict[str, Any]:
    """Writer options given as "KEY=VALUE" text (the command line's --option): VALUE is read as JSON when it
    parses ("3" -> 3, '{"emb": 3}' -> a dict), else kept as the string ("q8_0").

    Raises:
      ConversionError: an item without "=" or with an empty KEY.
    """
    import json

    from varstore.errors import ConversionError

    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise ConversionError(f"writer option {item!r} needs the form KEY=VALUE (e.g. gguf_type=q8_0)")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


class SniffFunction(Protocol):
    """sniff(probe) -> the path to open, or None (see varstore.formats.registry)."""

    def __call__(self, probe: Probe) -> Path | None: ...


class OpenFunction(Protocol):
    """open(path, *, probe=None, **options) -> a CheckpointReader."""

    def __call__(self, path: Path, *, probe: Probe | None = None, **options: Any) -> CheckpointReader: ...


class OpenURLFunction(Protocol):
    """open_url(key, storage, storage_options) -> a CheckpointReader over an object on a bucket (ranged GETs)."""

    def __call__(self, key: str, storage: ObjectStore, storage_options: Mapping[str, object] | None
                 ) -> CheckpointReader: ...


class WriteFunction(Protocol):
    """write(path, entries, request) -> notes about how values were stored."""

    def __call__(self, path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]: ...


class HoldsFunction(Protocol):
    """`holds(dtype) -> None` when a writer stores that logical dtype, else the reason it cannot."""

    def __call__(self, dtype: np.dtype) -> str | None: ...


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
      open_url: `open_url(key, storage, storage_options) -> CheckpointReader` for a checkpoint
        on an object store (URL support); None: the format is read from local paths only.
        A URL without `format=` goes to the entry whose `suffixes` or write suffixes end it
        (no suffix: varstore's own).
      write_names: names `to_format=` / `--to` accept for `write`, the first
        being the one reports use ("h5"); default: (name, *aliases).
      write_suffixes: destination endings that pick `write` (".h5"); default: `suffixes`.
      write_options: the option names `write` understands in `request.options`
        ("max_shard_size"); `convert` refuses others, and when the caller
        names no destination format, the one writer taking all given options is used.
      read_options: the reader options `open` understands besides max_bytes ("skip_object_arrays"
        for npz): what a caller such as the CLI may pass for this format and no other.
      order: detection order, lowest first (varstore's own formats 10, HDF5
        family 20-30, directories 40, magic-byte file formats 50-69, refusals 90).
      holds: `holds(dtype) -> reason | None` for a writer that cannot store some dtypes: `convert`
        skips a variable of such a dtype with that reason (in its report) instead of refusing the
        whole source; None: the writer itself refuses what it cannot hold.
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
    open_url: OpenURLFunction | None = None
    write_names: tuple[str, ...] = ()
    write_suffixes: tuple[str, ...] | None = None
    write_options: tuple[str, ...] = ()
    read_options: tuple[str, ...] = ()
    order: int = 50
    refuses: bool = False
    holds: HoldsFunction | None = None

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
