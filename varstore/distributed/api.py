"""The public save, restore and CheckpointManager with `comm=`: one process or every rank of a job.

Without `comm` and without partitioned variables these are exactly
varstore.checkpoint's save / restore / CheckpointManager. With `comm` (an
mpi4py communicator or a varstore.distributed.Communicator), or a store
holding partitioned variables, they run the collective save (save.py: each
partitioned variable as ONE global array) and restore (restore.py: each
rank reads the regions it holds). The manager's rank 0 owns numbering, the
lock, retention and the "latest" pointer and broadcasts what it chose.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from varstore.checkpoint import atomic
from varstore.checkpoint import manager as _manager
from varstore.checkpoint.restore import RestoreResult
from varstore.checkpoint.restore import restore as _restore_one
from varstore.checkpoint.snapshot import SaveHandle
from varstore.checkpoint.writer import save as _save_one
from varstore.distributed.agree import agree
from varstore.distributed.communicator import Communicator, as_communicator
from varstore.distributed.restore import restore_collective
from varstore.distributed.save import save_collective

__all__ = ["save", "restore", "CheckpointManager"]


def _partitioned(target: Any) -> bool:
    variables = getattr(target, "variables", None)
    if not callable(variables) or isinstance(target, Mapping):
        return False
    return any(getattr(v, "save_slice_info", None) is not None for v in variables())


def save(path: os.PathLike[str] | str, target: Any, *, comm: Any = None, check_replicas: bool = False,
         **options: Any) -> Path | str | SaveHandle:
    """Saves variables to an HDF5 file or Zarr v3 directory, atomically and checksummed; collectively with `comm`.

    Args:
      path, target, **options: as varstore.checkpoint.save (step, metadata,
        format, checksum, pack_threshold_bytes, blocking, max_snapshot_bytes,
        overwrite, layout).
      comm: None (one process), an mpi4py communicator (MPI.COMM_WORLD or a
        sub-communicator) or a varstore.distributed.Communicator. Collective:
        every rank calls save with its own store; each writes the variables
        it owns and its share of the replicated ones into ONE checkpoint.
        A partitioned variable is stored as one global array under its full
        name (TF save_slice_info), also without `comm`.
      check_replicas: with `comm`, first compare the crc32c of every
        replicated variable across ranks (ReplicaDivergenceError names the diverged ones).

    Returns:
      The final path (the same on every rank; the URL, a str, for an object store), or a SaveHandle
      (blocking=False, one process only).

    Raises:
      As varstore.checkpoint.save; with `comm` every rank raises the same error
      (DistributedMismatchError when the ranks' stores differ).
    """
    if comm is None and not check_replicas and not _partitioned(target):
        return _save_one(path, target, **options)
    unsupported = sorted(set(options) - {"step", "metadata", "format", "overwrite", "checksum"})
    if unsupported or options.get("checksum") is False:
        raise TypeError(f"a collective save (comm=, or partitioned variables) does not take {unsupported or ['checksum=False']}")
    options.pop("checksum", None)
    return save_collective(path, target, comm, check_replicas=check_replicas, **options)


def restore(path: Any, target: Any, *, comm: Any = None, **options: Any) -> RestoreResult:
    """Restores variables from a varstore checkpoint; collectively with `comm`, any number of ranks.

    Args:
      path, target, **options: as varstore.checkpoint.restore (assignment_map,
        strict, lazy, verify, format).
      comm: None, or a communicator (see save). Collective: each rank reads
        only the regions of the variables it holds, whatever number of ranks
        and partitioning wrote the checkpoint. Without `comm`, a store with
        partitioned variables reads each part's region of the global array.

    Raises:
      As varstore.checkpoint.restore; with `comm` the same error on every rank.
    """
    if comm is None and not _partitioned(target):
        return _restore_one(path, target, **options)
    if not isinstance(path, (str, os.PathLike)):
        path = path.path
    return restore_collective(path, target, comm, **options)


class CheckpointManager(_manager.CheckpointManager):
    """varstore.checkpoint.CheckpointManager, for one process or, with `comm`, every rank of a job.

    With `comm` every rank constructs it and calls save / restore_latest
    collectively; rank 0 alone takes the lock, sweeps temporaries, applies
    retention and writes the "latest" pointer, and broadcasts the checkpoint
    path it chose (so all ranks write and read the same one).

    Args:
      directory, **options: as varstore.checkpoint.CheckpointManager.
      comm: None, or a communicator (see varstore.save).
    """

    def __init__(self, directory: os.PathLike[str] | str, max_to_keep: int | None = 5, *, comm: Any = None,
                 **options: Any) -> None:
        super().__init__(directory, max_to_keep, **options)
        self.comm: Communicator | None = None if comm is None else as_communicator(comm)

    def save(self, target: Any, step: int, **options: Any) -> Any:
        """As varstore.checkpoint.CheckpointManager.save; collective with `comm` (blocking only)."""
        comm = self.comm
        if comm is None and not _partitioned(target):
            return super().save(target, step, **options)
        comm = comm or as_communicator(None)
        step = int(cast(int, comm.bcast(int(step))))  # rank 0 owns numbering
        final = Path(cast(str, comm.bcast(str(self.directory / f"{self.checkpoint_name}-{step}{self._suffix}"))))
        lock = self._lock() if comm.rank == 0 else None

        def prepare() -> None:
            if lock is not None:
                lock.__enter__()
                atomic.sweep_directory(self.directory)

        try:
            agree(comm, prepare)
            save_collective(final, target, comm, step=step, format=self.format, **options)
            agree(comm, lambda: self._after_save(final, step) if comm.rank == 0 else None)
        finally:
            if lock is not None:
                try:
                    lock.__exit__(None, None, None)
                except RuntimeError:  # never entered (prepare failed before the lock)
                    pass
        return final

    def restore_latest(self, target: Any, **options: Any) -> RestoreResult | None:
        """As varstore.checkpoint.CheckpointManager.restore_latest; with `comm` rank 0 picks the checkpoint."""
        comm = self.comm
        if comm is None and not _partitioned(target):
            return super().restore_latest(target, **options)
        comm = comm or as_communicator(None)
        chosen = comm.bcast(self._first_usable() if comm.rank == 0 else None)
        if chosen is None:
            return None
        return restore_collective(cast(str, chosen), target, comm, format=self.format, **options)

    def _first_usable(self) -> str | None:
        from varstore.checkpoint.reader import open_varstore
        from varstore.errors import CheckpointError

        for path in self.restore_candidates():
            try:
                open_varstore(path, self.format).close()
            except CheckpointError:
                continue
            return str(path)
        return None
