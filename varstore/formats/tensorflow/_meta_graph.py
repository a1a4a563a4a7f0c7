"""The graph collections of a TF1 `<prefix>.meta` file, read by hand: which checkpoint keys TF made trainable.

`tf.compat.v1.train.Saver.save` writes `<prefix>.meta` beside the bundle: a
serialized MetaGraphDef (tensorflow/core/protobuf/meta_graph.proto). Its
field 4, `map<string, CollectionDef> collection_def`, lists each graph
collection's members (map entries: key 1, value 2). The variable collections
("variables", "trainable_variables", "global_step", ...) hold
CollectionDef.bytes_list (field 2) of serialized VariableDef protos
(tensorflow/core/framework/variable.proto): `variable_name` (1, "scope/w:0")
and, for one part of a partitioned variable, `save_slice_info_def` (4) whose
`full_name` (1) is the checkpoint key. Other collections hold node_list
(field 1) of tensor names ("scope/w:0").

Only field 4 is read: every other top-level field (the GraphDef, often most
of the file) is skipped by seeking, so a `.meta` of any size costs at most
MAX_COLLECTION_BYTES of reading, and MAX_MEMBERS collection members; past
either the file is not used. Every length
is checked against the bytes the file holds. Any damage raises
CorruptCheckpointError (tf_checkpoint.py then notes it and reports the flags
unknown). Never imports TensorFlow or protobuf.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from typing import BinaryIO

from varstore.errors import CorruptCheckpointError
from varstore.formats.tensorflow._leveldb_table import varint
from varstore.formats.tensorflow._bundle_format import parse_message

__all__ = ["MAX_COLLECTION_BYTES", "MAX_MEMBERS", "VARIABLE_COLLECTIONS", "MetaGraphVariables", "read_meta_graph"]

#: Most bytes of collection_def entries read from one `.meta` file (TF writes a few KiB per hundred variables).
MAX_COLLECTION_BYTES = 64 << 20
#: Most collection members (VariableDefs and tensor names, all collections together) one `.meta` may list.
MAX_MEMBERS = 1 << 18  # TF lists each variable in 2 or 3 collections: ~100,000 variables; the most read in ~3 s
#: Most top-level fields of a MetaGraphDef (TF writes one per collection, and a handful more).
_MAX_FIELDS = 1 << 16
#: The collections TF serializes as VariableDef protos (GraphKeys._VARIABLE_COLLECTIONS and GLOBAL_STEP).
VARIABLE_COLLECTIONS = frozenset({
    "variables", "trainable_variables", "local_variables", "model_variables", "moving_average_variables",
    "metric_variables", "global_step", "concatenated_variables", "trainable_resource_variables"})
_TRAINABLE = "trainable_variables"
_COLLECTION_DEF = 4
_OUTPUT = re.compile(r"^(?P<op>.+):\d+$")  # a tensor name: the op's name and an output index


@dataclasses.dataclass(frozen=True)
class MetaGraphVariables:
    """What a `.meta` file says about the variables of its checkpoint.

    Attributes:
      collections: checkpoint key -> names of the collections listing it (sorted).
      described: the keys some variable collection lists as a VariableDef (the ones TF's own collections
        decide the trainable flag of).
    """

    collections: dict[str, tuple[str, ...]]
    described: frozenset[str]

    def trainable(self, key: str) -> bool | None:
        """True: in "trainable_variables"; False: in another variable collection only; None: not listed."""
        if key not in self.described:
            return None
        return _TRAINABLE in self.collections[key]


def read_meta_graph(path: str, handle: BinaryIO) -> MetaGraphVariables:
    """Reads the variable collections of the MetaGraphDef in `handle` (the open `path`, for messages).

    Raises:
      CorruptCheckpointError: a truncated or malformed message, a name that is not UTF-8, or collection
        entries of more than MAX_COLLECTION_BYTES.
    """
    what = f"TF meta graph '{path}'"
    members: dict[str, set[str]] = {}
    described: set[str] = set()
    count = 0
    for entry in _collection_entries(handle, os.fstat(handle.fileno()).st_size, what):
        fields = parse_message(entry, what)
        name = _text(_last_bytes(fields, 1, what), what)
        value = parse_message(_last_bytes(fields, 2, what), f"{what}: collection '{name}'")
        where = f"{what}: collection '{name}'"
        kind = 2 if name in VARIABLE_COLLECTIONS and 2 in value else 1  # bytes_list of VariableDef, node_list
        for item in _items(_last_bytes(value, kind, where) if kind in value else b"", where):
            count += 1
            if count > MAX_MEMBERS:
                raise CorruptCheckpointError(f"{what}: its collections list more than {MAX_MEMBERS} members; not read")
            if kind == 2:
                key = _variable_key(item, where)
                members.setdefault(key, set()).add(name)
                described.add(key)
                continue
            tensor = _text(item, where)  # node_list: tensor names; output 0 of a variable's op is the variable
            if tensor.endswith(":0") and len(tensor) > 2:
                members.setdefault(tensor[:-2], set()).add(name)
    return MetaGraphVariables({k: tuple(sorted(v)) for k, v in members.items()}, frozenset(described))


def _collection_entries(handle: BinaryIO, size: int, what: str) -> list[bytes]:
    """The bytes of every top-level field 4 (collection_def map entry); other fields are seeked past."""
    entries: list[bytes] = []
    pos = total = fields = 0
    while pos < size:
        fields += 1
        if fields > _MAX_FIELDS:
            raise CorruptCheckpointError(f"{what}: more than {_MAX_FIELDS} top-level fields; not read")
        handle.seek(pos)
        head = handle.read(20)  # a tag and a length: two varints of at most 10 bytes
        tag, used = varint(head, 0, len(head), what)
        number, wire = tag >> 3, tag & 7
        if wire == 2:
            length, used = varint(head, used, len(head), what)
        elif wire in (0, 1, 5):
            length = {1: 8, 5: 4}.get(wire, 0)
            if wire == 0:
                _, used = varint(head, used, len(head), what)
        else:
            raise CorruptCheckpointError(f"{what}: unsupported protobuf wire type {wire} (field {number})")
        start = pos + used
        if number == 0 or length > size - start:
            raise CorruptCheckpointError(
                f"{what}: field {number} at byte {pos} claims {length} bytes, the file has {size - start} left")
        if number == _COLLECTION_DEF and wire == 2:
            total += length
            if total > MAX_COLLECTION_BYTES:
                raise CorruptCheckpointError(
                    f"{what}: its collections take more than {MAX_COLLECTION_BYTES} bytes; not read")
            handle.seek(start)
            data = handle.read(length)
            if len(data) != length:
                raise CorruptCheckpointError(f"{what}: read {len(data)} of {length} bytes at byte {start}")
            entries.append(data)
        pos = start + length
    return entries


def _items(buf: bytes, what: str) -> Iterator[bytes]:
    """The values of field 1 (a repeated string or bytes: BytesList, NodeList) of `buf`, one at a time."""
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = varint(buf, pos, end, what)
        if tag != 1 << 3 | 2:
            raise CorruptCheckpointError(f"{what}: a list holds field {tag >> 3} of wire type {tag & 7}, "
                                         f"expected field 1 (bytes)")
        length, pos = varint(buf, pos, end, what)
        if length > end - pos:
            raise CorruptCheckpointError(f"{what}: a list item claims {length} bytes, only {end - pos} left")
        yield buf[pos:pos + length]
        pos += length


def _variable_key(item: bytes, what: str) -> str:
    """The checkpoint key of a serialized VariableDef: its save_slice_info_def's full_name (a partitioned
    variable's part), else its variable_name without the output index (":0")."""
    fields = parse_message(item, what)
    slices = fields.get(4, [])
    if slices:
        full = parse_message(_last_bytes(fields, 4, what), what).get(1, [])
        if full and isinstance(full[-1], bytes) and full[-1]:
            return _text(full[-1], what)
    name = _text(_last_bytes(fields, 1, what), what)
    match = _OUTPUT.match(name)
    key = match.group("op") if match else name
    if not key:
        raise CorruptCheckpointError(f"{what}: a VariableDef has no variable_name")
    return key


def _last_bytes(fields: dict[int, list[object]], number: int, what: str) -> bytes:
    values = fields.get(number)
    value = values[-1] if values else b""
    if not isinstance(value, bytes):
        raise CorruptCheckpointError(f"{what}: field {number} should be length-delimited")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, bytes):
        raise CorruptCheckpointError(f"{what}: a name should be a string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorruptCheckpointError(f"{what}: a name is not valid UTF-8: {value[:40]!r}") from err
