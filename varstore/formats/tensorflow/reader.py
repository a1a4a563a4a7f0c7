"""Reads TensorFlow checkpoints (tensor bundles: `<prefix>.index` + `<prefix>.data-*`) without TensorFlow.

A CheckpointReader over TF1 `tf.train.Saver` and TF2 `tf.train.Checkpoint`
bundles: every numeric DataType, bfloat16, float8, bool, complex, strings,
several data shards, partitioned variables (reassembled from their slices),
and each entry's crc32c checked on read. The byte formats live in
_bundle_format.py; this module maps them to variables. Never imports
TensorFlow or protobuf.

String tensors are returned as fixed-length NumPy bytes arrays "S<n>" with n
the longest element (at least 1). NumPy strips trailing NUL bytes from "S"
elements, so a TF string that ends in b"\\x00" reads back without it. A
string tensor of more elements than VARSTORE_MAX_OBJECTS (varstore/_limits.py)
is refused before its elements become Python objects; its info() reads only
the element lengths.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import numpy.typing as npt

from varstore import dtypes as _dtypes
from varstore._limits import check_object_count
from varstore.formats._confine import inside
from varstore.formats._coverage import check_coverage
from varstore.storage.links import check_inside
from varstore.storage.special_files import open_for_reading
from varstore.checkpoint.read.reader_api import CheckpointReader, SkippedEntry, VariableInfo, checked_out
from varstore.checkpoint.format.variable_info import can_be_trained
from varstore.formats.tensorflow import _bundle_format as fmt
from varstore.formats.tensorflow._meta_graph import MetaGraphVariables, read_meta_graph
from varstore.errors import (
    ChecksumError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    PathOutsideCheckpointError,
    SpecialFileError,
    UnknownVariableError,
    VarstoreError,
)
import struct

if TYPE_CHECKING:
    from varstore.formats.probe import Probe
    from varstore.formats.format_entry import WriteRequest

__all__ = ["TFCheckpointReader", "resolve_prefix", "ATTRIBUTES_SUFFIX", "OBJECT_GRAPH_KEY", "open_reader"]

#: Suffix of TF2 object-based checkpoint keys holding a variable's value.
ATTRIBUTES_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
#: The serialized TrackableObjectGraph of TF2 checkpoints (not a variable).
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_DATA_RE = re.compile(r"^(?P<prefix>.+)\.data-\d{5}-of-\d{5}$")
_STATE_RE = re.compile(r'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"', re.MULTILINE)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def resolve_prefix(path: os.PathLike[str] | str) -> str | None:
    """The bundle prefix PATH names, or None when PATH is not a TF checkpoint.

    PATH may be the prefix itself ("run/model.ckpt-300"), its ".index" file,
    one of its ".data-NNNNN-of-NNNNN" shards, or a directory holding a TF
    `checkpoint` state file (then its model_checkpoint_path, the latest).

    Raises:
      CheckpointNotFoundError: a `checkpoint` state file names a prefix whose
        .index file does not exist.
      CorruptCheckpointError: the state file has no model_checkpoint_path.
      PathOutsideCheckpointError: the state file names a prefix outside the directory (an absolute or
        "../" path) whose checkpoint is not in the directory itself either; TF would read it there.
    """
    text = os.fspath(path)
    p = Path(text)
    if p.is_dir():
        state = p / "checkpoint"
        if not state.is_file():
            return None
        try:
            content = state.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise CorruptCheckpointError(f"cannot read TF checkpoint state file '{state}': {err}") from err
        match = _STATE_RE.search(content)
        if not match:
            raise CorruptCheckpointError(
                f"TF checkpoint state file '{state}' has no model_checkpoint_path line")
        recorded = _unescape(match.group(1))
        latest = Path(recorded)
        # TF follows an absolute or "../" prefix; varstore reads only inside the directory it was given
        # (docs/reliability.md, hostile files). Checked on the .index file the prefix leads to.
        moved = p / latest.name  # TF also tries the state file's own directory when the recorded path moved
        try:
            index = inside(p, f"{recorded}.index", file=state, field="model_checkpoint_path")
        except PathOutsideCheckpointError:
            if latest.name and Path(f"{moved}.index").is_file():  # e.g. TF1's absolute path, directory copied
                return str(moved)
            raise
        prefix = Path(os.fspath(index)[: -len(".index")])
        if not index.is_file():
            if Path(f"{moved}.index").is_file():
                return str(moved)
            raise CheckpointNotFoundError(
                f"'{state}' names the latest checkpoint '{prefix}', but '{prefix}.index' does not exist")
        return str(prefix)
    if text.endswith(".index") and p.is_file():
        return text[: -len(".index")]
    match = _DATA_RE.match(text)
    if match and Path(match.group("prefix") + ".index").is_file():
        return match.group("prefix")
    if Path(text + ".index").is_file():
        return text
    return None


class _Variable:
    """What the reader knows about one listed variable."""

    __slots__ = ("key", "entry", "dtype_name", "string_itemsize")

    def __init__(self, key: bytes, entry: fmt.BundleEntry, dtype_name: str) -> None:
        self.key = key
        self.entry = entry
        self.dtype_name = dtype_name
        self.string_itemsize: int | None = None


class TFCheckpointReader(CheckpointReader):
    """Lazy reader of one TF tensor bundle.

    Names are the checkpoint keys ("encoder/layer_a/weights",
    "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE"). Opening reads the .index
    file only; `reader[name]` reads that tensor's bytes from its data shard and
    checks their crc32c.

    Attributes (besides CheckpointReader's):
      prefix: the bundle prefix.
      trainable, collections (of info()): as the TF1 graph beside the bundle (`<prefix>.meta`, written by
        tf.compat.v1.train.Saver) records them: trainable when in "trainable_variables" (a variable of a
        non-floating dtype never is: False, its collections still name "trainable_variables"), not when in
        another variable collection only; unknown (None, and no collections) without a readable .meta.
        A damaged, unreadable or oversized .meta leaves the checkpoint readable: it is listed in `skipped`.
      step: the value of a scalar integer "global_step" variable, else None.
      metadata: {"num_shards": int, "tf_keys": {name: checkpoint key} when
        strip_attributes renamed any}.
    """

    format = "tf"

    def __init__(self, path: os.PathLike[str] | str, *, strip_attributes: bool = False) -> None:
        """Opens a bundle and reads its index.

        Args:
          path: a prefix, .index file, .data shard or directory with a
            `checkpoint` state file (see resolve_prefix).
          strip_attributes: list TF2 keys without "/.ATTRIBUTES/VARIABLE_VALUE"
            ("model/dense/kernel" instead of
            "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE").

        Raises:
          CheckpointNotFoundError: no bundle at `path`.
          CorruptCheckpointError / ChecksumError: the index is damaged.
          UnsupportedFormatError: a snappy-compressed index.
        """
        prefix = resolve_prefix(path)
        if prefix is None:
            raise CheckpointNotFoundError(
                f"no TensorFlow checkpoint at '{path}': expected '<prefix>.index' and "
                f"'<prefix>.data-*' files, or a directory with a 'checkpoint' state file")
        super().__init__(Path(path))
        self.prefix = prefix
        self._index_path = prefix + ".index"
        self._label = f"'{self._index_path}'"
        if not os.fspath(path).endswith(".index"):  # unless the user named it: an index never links out
            check_inside(Path(prefix).parent, self._index_path, "TF checkpoint index")
        try:
            data = Path(self._index_path).read_bytes()
        except OSError as err:
            raise CheckpointNotFoundError(f"cannot read TF checkpoint index {self._label}: {err}") from err
        pairs = fmt.read_table(data, self._label)
        if not pairs or pairs[0][0] != b"":
            raise CorruptCheckpointError(f"{self._label}: the bundle header entry (key \"\") is missing")
        self._header = fmt.parse_header(pairs[0][1], self._label)
        self.format_version = f"tensor-bundle-{self._header.producer}"
        self._files: dict[int, BinaryIO] = {}
        self._closed = False
        self._slices: dict[bytes, fmt.BundleEntry] = {}
        self._variables: dict[str, _Variable] = {}
        tf_keys: dict[str, str] = {}
        for key, value in pairs[1:]:
            if fmt.is_slice_key(key):
                self._slices[key] = fmt.parse_entry(key, value, self._label)
                continue
            try:
                key_text = key.decode("utf-8")
            except UnicodeDecodeError as err:
                raise CorruptCheckpointError(f"{self._label}: a key is not valid UTF-8: {key!r}") from err
            entry = fmt.parse_entry(key, value, self._label)
            self._add(key_text, key, entry, strip_attributes, tf_keys)
        self.metadata = {"num_shards": self._header.num_shards}
        if tf_keys:
            self.metadata["tf_keys"] = tf_keys
        self.step = self._read_step()
        self._graph = self._read_graph()

    def _read_graph(self) -> MetaGraphVariables:
        """The variable collections of `<prefix>.meta` (_meta_graph.py); none when absent or damaged."""
        path = self.prefix + ".meta"
        none = MetaGraphVariables({}, frozenset())
        if not os.path.lexists(path):
            return none
        try:
            check_inside(Path(self.prefix).parent, path, "TF meta graph")
            with os.fdopen(open_for_reading(path, "TF meta graph"), "rb") as handle:
                return read_meta_graph(path, handle)
        except (VarstoreError, OSError) as err:
            self.skipped.append(SkippedEntry(Path(path).name, f"not used, trainable flags and collections "
                                             f"unknown: {err}"))
            return none

    # ----------------------------------------------------------- listing
    def _add(self, key_text: str, key: bytes, entry: fmt.BundleEntry, strip: bool,
             tf_keys: dict[str, str]) -> None:
        if key_text == OBJECT_GRAPH_KEY:
            self.skipped.append(SkippedEntry(key_text, "TF2 object graph (a serialized "
                                             "TrackableObjectGraph proto), not a variable"))
            return
        tf_name, logical = fmt.tf_dtype(entry.dtype)
        if logical is None:
            self.skipped.append(SkippedEntry(
                key_text, f"dtype {tf_name} is not a plain numeric or string tensor; varstore does not read it"))
            return
        what = f"variable '{key_text}' in {self._label}"
        if not entry.slices:
            if entry.shard_id >= self._header.num_shards:
                raise CorruptCheckpointError(
                    f"{what}: shard {entry.shard_id} does not exist (the bundle has {self._header.num_shards})")
            count = int(np.prod(entry.shape, dtype=object))
            if logical != "string":
                expected = count * _dtypes.as_dtype(logical).itemsize
                if entry.size != expected:
                    raise CorruptCheckpointError(
                        f"{what}: entry says {entry.size} bytes, shape {entry.shape} of {logical} needs {expected}")
            elif entry.size < (count + 4 if count else 0):
                raise CorruptCheckpointError(f"{what}: {entry.size} bytes cannot hold {count} strings")
        name = key_text
        if strip and key_text.endswith(ATTRIBUTES_SUFFIX):
            short = key_text[: -len(ATTRIBUTES_SUFFIX)]
            if short and short not in self._variables:
                name = short
                tf_keys[name] = key_text
        if name in self._variables:
            raise CorruptCheckpointError(f"{self._label}: variable name '{name}' appears twice")
        self._variables[name] = _Variable(key, entry, logical)

    def _read_step(self) -> int | None:
        var = self._variables.get("global_step")
        if var is None or var.entry.shape != () or var.dtype_name not in ("int32", "int64"):
            return None
        try:
            return int(self.read("global_step"))
        except CorruptCheckpointError:
            return None  # verify() / read() report the damage

    def keys(self) -> list[str]:
        return list(self._variables)

    def _lookup(self, name: str) -> _Variable:
        var = self._variables.get(name)
        if var is None:
            raise UnknownVariableError(f"no variable '{name}' in TF checkpoint {self._label}")
        return var

    def info(self, name: str) -> VariableInfo:
        """Metadata of one variable. For strings, reads only the element lengths to find "S<n>"."""
        var = self._lookup(name)
        entry = var.entry
        dtype = self._logical_dtype(name, var)
        nbytes = int(np.prod(entry.shape, dtype=object)) * dtype.itemsize
        checksum = None if entry.slices else f"tf-crc32c-masked:{entry.crc32c:08x}"
        attributes: dict[str, Any] = {"tf_dtype": fmt.tf_dtype(entry.dtype)[0],
                                      "tf_key": var.key.decode("utf-8")}
        if entry.slices:
            attributes["partitions"] = len(entry.slices)
        else:
            attributes["shard"] = entry.shard_id
        key, dtype_name = attributes["tf_key"], _dtypes.dtype_name(dtype)
        trainable = self._graph.trainable(key)  # TF lists int/bool/string variables as trainable too: never so here
        return VariableInfo(name=name, shape=entry.shape, dtype=dtype_name, nbytes=nbytes,
                            trainable=trainable and can_be_trained(dtype_name) if trainable is not None else None,
                            collections=self._graph.collections.get(key, ()), checksum=checksum, attributes=attributes)

    def _logical_dtype(self, name: str, var: _Variable) -> np.dtype:
        if var.dtype_name != "string":
            return _dtypes.as_dtype(var.dtype_name)
        if var.string_itemsize is None:
            longest = 0
            for entry in self._parts(name, var):
                longest = max(longest, self._longest_string(name, entry))
            var.string_itemsize = max(1, longest)
        return np.dtype(f"S{var.string_itemsize}")

    # ----------------------------------------------------------- reading
    def _parts(self, name: str, var: _Variable) -> list[fmt.BundleEntry]:
        if not var.entry.slices:
            return [var.entry]
        parts = []
        for extents in var.entry.slices:
            key = fmt.encode_tensor_name_slice(var.key, extents)
            part = self._slices.get(key)
            if part is None:
                raise CorruptCheckpointError(
                    f"partitioned variable '{name}' in {self._label}: the slice {list(extents)} is missing")
            parts.append(part)
        return parts

    def _shard(self, entry: fmt.BundleEntry, name: str) -> BinaryIO:
        if self._closed:
            raise CorruptCheckpointError(f"TF checkpoint {self._label} is closed")
        if entry.shard_id >= self._header.num_shards:
            raise CorruptCheckpointError(
                f"variable '{name}' in {self._label}: shard {entry.shard_id} does not exist")
        handle = self._files.get(entry.shard_id)
        if handle is None:
            path = fmt.data_filename(self.prefix, entry.shard_id, self._header.num_shards)
            check_inside(Path(self.prefix).parent, path, f"data shard of '{name}'")  # a link never leads out
            try:
                handle = os.fdopen(open_for_reading(path, f"data shard of '{name}'"), "rb")  # never blocks
            except SpecialFileError:
                raise
            except OSError as err:
                raise CorruptCheckpointError(
                    f"variable '{name}': data shard '{path}' of {self._label} cannot be opened: {err}") from err
            self._files[entry.shard_id] = handle
        size = os.fstat(handle.fileno()).st_size
        if entry.offset > size or entry.size > size - entry.offset:
            raise CorruptCheckpointError(
                f"variable '{name}': bytes {entry.offset}..{entry.offset + entry.size} lie outside data shard "
                f"'{fmt.data_filename(self.prefix, entry.shard_id, self._header.num_shards)}' ({size} bytes); "
                f"the checkpoint is truncated")
        return handle

    def _raw(self, entry: fmt.BundleEntry, name: str, into: memoryview | None = None) -> memoryview:
        handle = self._shard(entry, name)
        buf = into if into is not None else memoryview(bytearray(entry.size))
        handle.seek(entry.offset)
        got = handle.readinto(buf) if entry.size else 0
        if got != entry.size:
            raise CorruptCheckpointError(
                f"variable '{name}': read {got} of {entry.size} bytes from "
                f"'{fmt.data_filename(self.prefix, entry.shard_id, self._header.num_shards)}'")
        return buf

    def _check_crc(self, entry: fmt.BundleEntry, actual: int, name: str) -> None:
        if fmt.unmask_crc(entry.crc32c) != actual:
            path = fmt.data_filename(self.prefix, entry.shard_id, self._header.num_shards)
            raise ChecksumError(
                f"variable '{name}' in '{path}' fails its crc32c check (stored "
                f"{fmt.unmask_crc(entry.crc32c):08x}, computed {actual:08x}); the checkpoint is damaged")

    def _longest_string(self, name: str, entry: fmt.BundleEntry) -> int:
        count = int(np.prod(entry.shape, dtype=object))
        if count == 0 or entry.size == 0:
            return 0
        check_object_count(f"string variable '{name}'", f"TF checkpoint {self._label}", count, entry.size)
        handle = self._shard(entry, name)
        handle.seek(entry.offset)
        head = handle.read(min(entry.size, fmt.lengths_size(count)))  # the lengths, not the strings
        return fmt.longest_string(head, count, entry.size, f"variable '{name}' in {self._label}")

    def _read_strings(self, entry: fmt.BundleEntry, name: str) -> list[bytes]:
        count = int(np.prod(entry.shape, dtype=object))
        if count == 0:
            return []
        check_object_count(f"string variable '{name}'", f"TF checkpoint {self._label}", count, entry.size)
        raw = bytes(self._raw(entry, name))
        elements, crc = fmt.decode_string_tensor(raw, count, f"variable '{name}' in {self._label}")
        self._check_crc(entry, crc, name)
        return elements

    def _read_numeric(self, entry: fmt.BundleEntry, name: str, out: npt.NDArray[Any]) -> None:
        if entry.size != out.nbytes:
            raise CorruptCheckpointError(
                f"variable '{name}' in {self._label}: entry says {entry.size} bytes, shape "
                f"{tuple(out.shape)} of {out.dtype} needs {out.nbytes}")
        flat = out.reshape(-1).view(np.uint8)
        buf = self._raw(entry, name, memoryview(flat))
        self._check_crc(entry, fmt.crc32c(buf), name)
        if self._header.big_endian and out.dtype.itemsize > 1 and out.dtype.kind != "b":
            width = out.dtype.itemsize // 2 if out.dtype.kind == "c" else out.dtype.itemsize
            out.reshape(-1).view(f"u{width}").byteswap(inplace=True)

    def read(self, name: str, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads one variable (reassembling partitioned ones) and checks every crc32c.

        Raises:
          UnknownVariableError: unknown name.
          ChecksumError: the stored bytes do not match the entry's crc32c.
          CorruptCheckpointError: missing shard or slice, bytes outside the file.
        """
        var = self._lookup(name)
        dtype = self._logical_dtype(name, var)
        entry = var.entry
        regions = self._regions(name, var)  # validates every stored byte range before allocating
        result = checked_out(name, entry.shape, dtype, out)
        if not entry.slices:
            if var.dtype_name == "string":
                result[...] = np.array(self._read_strings(entry, name), dtype=dtype).reshape(entry.shape)
            else:
                self._read_numeric(entry, name, result)
            return result
        for region, part in regions:
            if var.dtype_name == "string":
                values = np.array(self._read_strings(part, name), dtype=result.dtype).reshape(part.shape)
            else:
                values = np.empty(part.shape, dtype=result.dtype)
                self._read_numeric(part, name, values)
            result[region] = values
        return result

    def _regions(self, name: str, var: _Variable) -> list[tuple[tuple[slice, ...], fmt.BundleEntry]]:
        """Where each stored part goes in the full tensor, after checking sizes, bounds and tiling."""
        shape = var.entry.shape
        what = f"variable '{name}' in {self._label}"
        itemsize = None if var.dtype_name == "string" else _dtypes.as_dtype(var.dtype_name).itemsize
        regions = []
        for extents, part in zip(var.entry.slices or [tuple((0, -1) for _ in shape)], self._parts(name, var)):
            region = tuple(slice(0, dim) if length < 0 else slice(start, start + length)
                           for (start, length), dim in zip(extents, shape))
            part_shape = tuple(r.stop - r.start for r in region)
            if part.shape != part_shape or fmt.tf_dtype(part.dtype) != fmt.tf_dtype(var.entry.dtype):
                raise CorruptCheckpointError(
                    f"{what}: slice {list(extents)} is stored with shape {part.shape} and dtype "
                    f"{fmt.tf_dtype(part.dtype)[0]}, expected {part_shape} and {fmt.tf_dtype(var.entry.dtype)[0]}")
            count = int(np.prod(part_shape, dtype=object))
            if itemsize is not None and part.size != count * itemsize:
                raise CorruptCheckpointError(
                    f"{what}: entry says {part.size} bytes, shape {part_shape} of {var.dtype_name} "
                    f"needs {count * itemsize}")
            self._shard(part, name)
            regions.append((region, part))
        if var.entry.slices:
            check_coverage(shape, [([r.start for r in region], [r.stop - r.start for r in region])
                                   for region, _ in regions], f"partitioned {what}")
        return regions

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()
        self._closed = True


def open_reader(path: Path, *, probe: Probe | None = None, **options: Any) -> TFCheckpointReader:
    """The registry's open for "tf": a TFCheckpointReader of the bundle prefix (options: strip_attributes)."""
    return TFCheckpointReader(path, **options)


_TABLE_MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)  # a LevelDB table's last 8 bytes (the .index)


def sniff(probe: Probe) -> Path | None:
    """A TF tensor bundle: its prefix (need not exist), .index, a .data shard, a directory with a
    `checkpoint` state file (its latest), or a SavedModel directory (saved_model.pb +
    variables/variables.index) or its variables/ folder (its variables bundle). Returns the bundle prefix.

    Raises:
      CheckpointNotFoundError / CorruptCheckpointError: a state file names a missing bundle / none.
    """
    if probe.is_dir:  # a TF SavedModel directory, or its variables/ folder: the variables bundle in it
        if (probe.path / "saved_model.pb").is_file() and (probe.path / "variables" / "variables.index").is_file():
            return probe.path / "variables" / "variables"
        if (probe.path / "variables.index").is_file():
            return probe.path / "variables"
    if probe.is_file and not (probe.tail[-8:] == _TABLE_MAGIC or probe.suffix == ".index"
                              or ".data-" in probe.name):
        return None
    prefix = resolve_prefix(probe.path)
    return Path(prefix) if prefix is not None else None
