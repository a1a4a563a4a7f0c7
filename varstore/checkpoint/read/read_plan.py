"""ReadPlan: one bulk read of an open checkpoint, planned once: what is read, where it goes, which checks.

`plan_read` consults the reader once (its manifest's columns, the packed blob,
one source per value read one by one) and returns what read_engine.py
executes: the packed variables as views of the blob, the values read one by
one, the packed checks. While the read runs the plan is the engine's only
door to the reader: the ReadSession it lends, the storage's read-ahead, the
checksum error naming a variable. Reads no value bytes itself except the
packed blob (one read); owns no threads (the engine does).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from varstore.store import devices
from varstore.checkpoint.format.packed import packed_checksum_failure, packed_views
from varstore.checkpoint.read.reader import CheckpointValue, ReadSession, VarstoreReader

if TYPE_CHECKING:
    from varstore.checkpoint.format.manifest import Record
    from varstore.storage import ReadAhead

__all__ = ["ReadPlan", "PackedBatch", "plan_read", "check_packed", "PACKED_CACHE_BYTES"]

#: The packed blob is read whole for bulk restores when at most this many bytes.
PACKED_CACHE_BYTES = 256 << 20


class PackedBatch:
    """Packed Variables restored from views of the blob, with their manifest indices (one list each, aligned)."""

    __slots__ = ("variables", "indices", "values")

    def __init__(self) -> None:
        self.variables: list[Any] = []
        self.indices: list[int] = []
        self.values: list[npt.NDArray[Any]] = []


class ReadPlan:
    """What one bulk read does, decided before any target changes (see plan_read).

    Attributes:
      batch: packed Variables that hold memory: copied from the blob in one batch.
      fresh_batch: packed CPU Variables without memory: given copies of their views, last.
      reads: (target, target name, source) of every other value, read one by one.
      packed: the packed blob (read once), or None (lazy reads, or a blob over PACKED_CACHE_BYTES).
      packed_checks: manifest indices of every packed value to be read, checked on the blob
        before any is used; None unless verifying an eager read with a blob.
    """

    def __init__(self, reader: VarstoreReader, packed: bytearray | None, batch: PackedBatch,
                 fresh_batch: PackedBatch, reads: list[tuple[Any, str, CheckpointValue]],
                 packed_checks: list[int] | None, verify: bool) -> None:
        self._reader = reader
        self._verify = verify
        self.packed = packed
        self.batch = batch
        self.fresh_batch = fresh_batch
        self.reads = reads
        self.packed_checks = packed_checks

    def mismatched_packed(self) -> Iterator[tuple[Any, CheckpointValue]]:
        """(Variable, its source) for each packed Variable whose stored shape or dtype differs from its own."""
        names = self._reader.manifest.names
        for group in (self.batch, self.fresh_batch):
            for variable, value, index in zip(group.variables, group.values, group.indices):
                if value.shape != variable.shape or value.dtype != variable.dtype:
                    yield variable, self._reader.source(names[index], verify=self._verify)

    def check_packed(self) -> None:
        """Checks `packed_checks` on the blob (see check_packed)."""
        if self.packed is not None and self.packed_checks is not None:
            check_packed(self._reader, self.packed, self.packed_checks)

    def lend(self, session: ReadSession) -> AbstractContextManager[ReadSession]:
        """Lends the reader `session` for the read (the reader consults it on each fill)."""
        return self._reader.in_session(session)

    def start_read_ahead(self, names: list[str], window: int) -> ReadAhead | None:
        """The storage's read-ahead over the bytes of `names`, read in this order (or None)."""
        return self._reader.start_read_ahead(names, window)

    def checksum_error(self, record: Record, found: int) -> None:
        """Raises the ChecksumError of `record` (crc32c `found`), naming the variable and the file."""
        self._reader.checksum_error(record, found)


def plan_read(reader: VarstoreReader, items: Sequence[tuple[str, str, Any]], *, verify: bool,
              lazy: bool) -> ReadPlan:
    """Plans filling `items` ((checkpoint name, target name, target) triples) from `reader`.

    An eager read takes the packed blob (one read, at most PACKED_CACHE_BYTES)
    and restores packed Variables from views of it: those holding memory in one
    batch, CPU ones without memory last; a packed Variable on a GPU without
    memory, every non-Variable target and every value stored at its own path
    is read one by one through its source.

    Raises:
      UnknownVariableError / CorruptCheckpointError: as reader.source and reader.packed_blob raise them.
    """
    from varstore.store.variables import Variable

    blob = None if lazy else reader.packed_blob(PACKED_CACHE_BYTES)
    batch, fresh_batch = PackedBatch(), PackedBatch()
    rest: list[tuple[str, str, Any]] = []
    if blob is None:
        rest = list(items)
    else:
        index_of, paths = reader.manifest.index, reader.manifest.columns["path"]
        for item in items:
            obj = item[2]
            index = index_of.get(item[0]) if isinstance(obj, Variable) else None
            if index is None or paths[index] is not None:
                rest.append(item)
            elif obj.is_initialized:
                batch.variables.append(obj)
                batch.indices.append(index)
            elif not devices.is_gpu(obj.device):
                fresh_batch.variables.append(obj)
                fresh_batch.indices.append(index)
            else:
                rest.append(item)
    reads = [(obj, name, reader.source(ckpt, verify=verify)) for ckpt, name, obj in rest]
    for group in (batch, fresh_batch):
        if group.indices and blob is not None:
            group.values = packed_views(blob, reader.manifest.columns, reader.manifest.names, group.indices,
                                        str(reader.path))
    checks: list[int] | None = None
    if not lazy and verify and blob is not None:
        checks = batch.indices + fresh_batch.indices + _packed_indices(reader, [ckpt for ckpt, _, _ in rest])
    return ReadPlan(reader, blob, batch, fresh_batch, reads, checks, verify)


def _packed_indices(reader: VarstoreReader, names: list[str]) -> list[int]:
    index_of, paths = reader.manifest.index, reader.manifest.columns["path"]
    found = []
    for name in names:
        index = index_of.get(name)
        if index is not None and paths[index] is None:
            found.append(index)
    return found


def check_packed(reader: VarstoreReader, blob: bytearray, indices: list[int]) -> None:
    """Checks the crc32c of packed variables (manifest indices) on the blob, before any is used.

    Raises:
      ChecksumError: naming the first damaged variable and the file.
      CorruptCheckpointError: a variable lies outside the blob.
    """
    failure = packed_checksum_failure(blob, reader.manifest.columns, indices)
    if failure is None:
        return
    index, found = failure
    reader.checksum_error(reader.record(reader.manifest.names[index]), found)
