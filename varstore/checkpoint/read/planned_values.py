"""PlannedValue: one value of a ReadPlan, read with what the plan bound to it, never calling back into the reader.

The reader hands plan_read one `BoundReads` (its byte locations' bound methods,
the pin's check, its read limits); each PlannedValue holds that, its manifest
record and the plan's ReadChecks. Reading one fills the caller's buffer with one
positional read at the extent the manifest or the backend records
(locations.py), tells the storage's read-ahead, checks the crc32c through
ReadChecks and, for a Zarr directory, that the path was not replaced
meanwhile (storage/path_pin.py). A packed variable is copied out of the blob
the plan read once. Two kinds of value go through the reader's `fill` (a
documented exception): those only the backend can read (a chunked Zarr array,
an HDF5 scalar) and packed ones when the plan holds no blob. Implements the
core's ValueSource protocol, so Variables restore from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from varstore._limits import check_value_size
from varstore.checkpoint.read.read_checks import checksum_error
from varstore.checkpoint.read.reader_api import read_through_cast
from varstore.errors import CorruptCheckpointError

if TYPE_CHECKING:
    import numpy.typing as npt
    from varstore.backends import RawExtent
    from varstore.checkpoint.format.manifest import Record
    from varstore.checkpoint.read.read_checks import ReadChecks

__all__ = ["BoundReads", "PlannedValue"]


class BoundReads:
    """What a reader lends the values of one plan: bound methods of its byte locations, no reader method
    but `fill` (the exception named in the module docstring).

    Attributes:
      path: the checkpoint, for messages.
      locate: a record -> its extent, or None when only the backend can read it (VariableBytes.record_extent).
      read_extent: fills a buffer from an extent, its crc32c taken on the way where the storage can
        (VariableBytes.read_extent).
      check_stored: refuses a record claiming more than its storage holds (VariableBytes.check_stored).
      limits: (location, max_bytes, max_expansion) of the read limit (_limits.check_value_size).
      pin_check: raises CheckpointReplacedError when a directory was replaced, chained to its argument;
        None when reads go through a held descriptor (a file) or an object store.
      fill: the reader's fill(record, out, verify), for the exceptions.
    """

    __slots__ = ("path", "locate", "read_extent", "check_stored", "limits", "pin_check", "fill")

    def __init__(self, path: object, locate: Callable[[Record], RawExtent | None],
                 read_extent: Callable[..., int | None], check_stored: Callable[[Record], None],
                 limits: tuple[str, int | None, float | None],
                 pin_check: Callable[[BaseException | None], None] | None,
                 fill: Callable[[Record, Any, bool], None]) -> None:
        self.path = path
        self.locate = locate
        self.read_extent = read_extent
        self.check_stored = check_stored
        self.limits = limits
        self.pin_check = pin_check
        self.fill = fill


class PlannedValue:
    """One value of a ReadPlan as a ValueSource (see varstore.store.value_sources).

    Attributes:
      name: the variable's checkpoint name.
      shape: stored shape.
      dtype: stored logical dtype.
      origin: "'<name>' in '<file>'" for error messages.
    """

    __slots__ = ("_record", "_reads", "_checks", "_verify", "name", "shape", "dtype")

    def __init__(self, record: Record, reads: BoundReads, checks: ReadChecks, verify: bool) -> None:
        self._record = record
        self._reads = reads
        self._checks = checks
        self._verify = verify
        self.name = record.name
        self.shape = record.shape
        self.dtype = record.numpy_dtype

    @property
    def origin(self) -> str:
        """"'<name>' in '<file>'", for error messages."""
        return f"'{self.name}' in '{self._reads.path}'"

    def read_into(self, out: npt.NDArray[Any]) -> None:
        """Fills `out` (the variable's shape; its dtype, cast from the stored one when they differ).

        Raises:
          CorruptCheckpointError, ChecksumError: damaged or truncated bytes, naming the variable and file.
          ValueTooLargeError: the value claims more than the read limit (before allocating for a cast).
          CheckpointReplacedError: a save replaced a Zarr directory meanwhile (storage/path_pin.py).
        """
        read_through_cast(out, self.shape, self.dtype, self.origin, self._fill, self._check_size)

    def _check_size(self) -> None:
        """Refuses, before allocating for a cast, a value the manifest claims but its storage cannot back."""
        record, reads = self._record, self._reads
        reads.check_stored(record)
        location, max_bytes, expansion = reads.limits
        check_value_size(record.name, location, record.nbytes, max_bytes, stored=record.nbytes, expansion=expansion)

    def _fill(self, out: npt.NDArray[Any]) -> None:
        record, reads = self._record, self._reads
        if not record.nbytes:
            self._checks.check(record, out)
            return
        pin_check = reads.pin_check
        try:
            if record.path is None:
                blob = self._checks.packed
                if blob is None:
                    reads.fill(record, out, self._verify)  # no blob in memory: the reader reads and checks it
                    return
                start = int(record.offset or 0)
                if start + record.nbytes > len(blob):
                    raise CorruptCheckpointError(
                        f"variable '{record.name}' in '{reads.path}' lies outside the packed blob")
                out.reshape(-1).view(np.uint8)[:] = np.frombuffer(blob, np.uint8, record.nbytes, start)
                if not self._checks.packed_checked:
                    self._checks.check(record, out)
            else:
                extent = reads.locate(record)
                if extent is None:
                    reads.fill(record, out, self._verify)  # only the backend can read it
                    return
                found = reads.read_extent(extent, 0, out, f"variable '{record.name}' in '{reads.path}'",
                                          check_size=True, checksum=self._verify and record.checksum is not None)
                ahead = self._checks.read_ahead
                if ahead is not None:
                    ahead.done(extent.offset)
                if found is None:
                    self._checks.check(record, out)
                elif found != record.checksum:
                    checksum_error(reads.path, record, found)
        except Exception as err:
            if pin_check is not None:
                pin_check(err)  # a replaced directory: CheckpointReplacedError instead of the read's own error
            raise
        if pin_check is not None:
            pin_check(None)

    def __repr__(self) -> str:
        return f"<PlannedValue {self.origin} {self.shape} {self.dtype}>"
