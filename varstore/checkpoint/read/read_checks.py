"""ReadChecks: the checks of one planned bulk read, in one place; `checksum_error` names the variable and file.

A ReadPlan (read_plan.py) carries one ReadChecks; its values (planned_values.py)
call `check` after each read and the engine runs each phase of reads inside
`phase`: the packed variables checked on the blob first, the storage's
read-ahead started over the phase's extents, values of at least
THREADED_CHECK_BYTES checksummed in a helper thread while the next one is
read, and, when the phase ends, the read-ahead stopped, every deferred
check waited for (the first failure, in read order, raised) and the helper
thread ended, whatever happened. Owns that thread; reads no bytes itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from varstore.checkpoint.format.checksum import crc32c_of
from varstore.checkpoint.format.packed import packed_checksum_failure
from varstore.errors import ChecksumError, CorruptCheckpointError

if TYPE_CHECKING:  # concurrent.futures starts threading: imported when a phase runs (a plain read needs neither)
    from concurrent.futures import Future, ThreadPoolExecutor

    import numpy.typing as npt
    from varstore.checkpoint.format.manifest import ManifestColumns, Record
    from varstore.storage import ReadAhead

__all__ = ["ReadChecks", "checksum_error", "check_packed_blob", "THREADED_CHECK_BYTES"]

#: In bulk restores, values of at least this many bytes are checksummed in a helper thread.
THREADED_CHECK_BYTES = 1 << 20

#: Starts the storage's read-ahead over a phase's extents with a window of this many bytes (or None).
StartReadAhead = Callable[[int], "ReadAhead | None"]


def checksum_error(path: object, record: Record, found: int) -> NoReturn:
    """Raises the ChecksumError of `record` in checkpoint `path` whose bytes have crc32c `found`; for `found`
    -1 (a packed variable outside the blob, as packed.packed_checksum_failure reports it) CorruptCheckpointError."""
    if found < 0:
        raise CorruptCheckpointError(f"variable '{record.name}' in '{path}' lies outside the packed blob")
    raise ChecksumError(
        f"variable '{record.name}' in '{path}' is corrupt: its bytes have crc32c {found:08x}, "
        f"the checkpoint recorded {record.checksum:08x}; restore from another checkpoint")


def check_packed_blob(path: object, blob: bytearray, manifest: ManifestColumns, indices: Sequence[int]) -> None:
    """Checks the crc32c of packed variables (manifest indices) on the blob, before any is used.

    Raises:
      ChecksumError: naming the first damaged variable and the file.
      CorruptCheckpointError: a variable lies outside the blob.
    """
    failure = packed_checksum_failure(blob, manifest.columns, list(indices))
    if failure is not None:
        checksum_error(path, manifest.record(failure[0]), failure[1])


class ReadChecks:
    """The checks and the read-ahead of one planned bulk read (see the module docstring).

    Attributes:
      packed: the packed blob read once for this read, or None.
      packed_checked: True once every packed variable to be read was checked on `packed`.
      read_ahead: the storage's read-ahead of the running phase, or None.
    """

    def __init__(self, path: object, verify: bool, packed: bytearray | None) -> None:
        self._path = path
        self._verify = verify
        self.packed = packed
        self.packed_checked = False
        self.read_ahead: ReadAhead | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Record, Future[int]]] = []

    @contextlib.contextmanager
    def phase(self, start_read_ahead: StartReadAhead | None, window: int,
              packed: tuple[ManifestColumns, Sequence[int]] | None = None,
              settle: Callable[[], None] | None = None) -> Iterator[None]:
        """Runs one phase of reads: `packed` ((manifest, indices)) checked on the blob first, then the
        read-ahead started with `window` bytes; at its end the read-ahead stops, `settle` waits for
        reads still running in other threads (device_transfers.settle: a GPU restore's reader threads)
        and the deferred checks are waited for. On an error, the thread and the read-ahead are stopped
        all the same.

        Raises:
          ChecksumError / CorruptCheckpointError: a packed value (before the phase) or a deferred one
            (at its end) is damaged, naming the first such variable and the file; or what `settle` raises.
        """
        try:
            if packed is not None and self.packed is not None:
                check_packed_blob(self._path, self.packed, packed[0], packed[1])
                self.packed_checked = True
            if self._verify and self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="varstore-crc")
            self.read_ahead = None if start_read_ahead is None else start_read_ahead(window)
            yield
            self._stop()
            if settle is not None:
                settle()
            pending, self._pending = self._pending, []
            for record, future in pending:
                found = future.result()
                if found != record.checksum:
                    checksum_error(self._path, record, found)
        finally:
            self._stop()
            self._pending = []
            if self._pool is not None:  # the phase's helper thread ends with it
                self._pool.shutdown(wait=True)
                self._pool = None

    def check(self, record: Record, out: npt.NDArray[Any]) -> None:
        """Checks the crc32c of `record` on `out` just filled: in the helper thread when it is large
        (waited for when the phase ends), else now (also in a GPU restore's reader thread).

        Raises:
          ChecksumError: naming the variable and the file (inline checks).
        """
        if not self._verify or record.checksum is None:
            return
        if record.nbytes >= THREADED_CHECK_BYTES and self._pool is not None:
            from varstore.store import device_transfers  # with the thread: a plain read imports neither

            if device_transfers.in_reader_thread():  # a GPU restore's reader thread: check there, before its copy
                self._check_now(record, out)
                return
            future = self._pool.submit(crc32c_of, out)
            device_transfers.guard(out, future)  # pinned staging (a GPU target) is kept until the check read it
            self._pending.append((record, future))
            return
        self._check_now(record, out)

    def _check_now(self, record: Record, out: npt.NDArray[Any]) -> None:
        found = crc32c_of(out) if record.nbytes else 0
        if found != record.checksum:
            checksum_error(self._path, record, found)

    def _stop(self) -> None:
        if self.read_ahead is not None:
            self.read_ahead.stop()
            self.read_ahead = None
