"""The public save, restore and CheckpointManager with `comm=`: one process or every rank of a job.

Without `comm` and without partitioned variables these are
varstore.checkpoint's save / restore / CheckpointManager, and restore also
reads every other registered format (`open_for_restore`: varstore's own
containers directly, the rest through varstore.formats' registry). With `comm` (an
mpi4py communicator or a varstore.distributed.Communicator), or a store
holding partitioned variables, they run the collective save (save.py: each
partitioned variable as ONE global array) and restore (restore.py: each
rank reads the regions it holds). The manager's rank 0 owns numbering, the
lock, retention and the "latest" pointer and broadcasts what it chose.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from varstore.checkpoint.publish import atomic
from varstore.checkpoint.manage import manager as _manager
from varstore.checkpoint.read.reader import VarstoreReader
from varstore.checkpoint.read.reader_api import CheckpointReader
from varstore.checkpoint.read.restoration import RestoreResult, restore_and_release
from varstore.checkpoint.read.restoration import restore as _restore_one
from varstore.checkpoint.write.snapshot import SaveHandle
from varstore.checkpoint.format.manifest import DEFAULT_PACK_THRESHOLD_BYTES
from varstore.checkpoint.write.writer import save as _save_one
from varstore.distributed.agree import agree
from varstore.distributed.communicator import Communicator, as_communicator
from varstore.distributed.restore import restore_collective
from varstore.distributed.save import save_collective
from varstore.errors import CheckpointNotFoundError, NotACheckpointError, PartitionError, UnsupportedFormatError
from varstore.store.partitioning import PartitionedVariable

__all__ = ["save", "restore", "open_for_restore", "CheckpointManager"]


class _PartitionedTargets:
    """A list, mapping or PartitionedVariable that holds partitioned variables, seen as a store (`variables()`).

    The collective engine then saves each partitioned variable as ONE global
    array under its full name and restores each part's region of it, as
    TF's Saver does for any var_list (saveable_object_util groups parts by
    their save_slice_info.full_name): {"emb": pv}, [pv], list(pv) and pv
    all give "emb" of the whole shape.
    """

    def __init__(self, variables: list[Any]) -> None:
        self._variables = variables

    def variables(self) -> list[Any]:
        return list(self._variables)


def _is_part_holder(item: Any) -> bool:
    return isinstance(item, PartitionedVariable) or getattr(item, "save_slice_info", None) is not None


def _partitioned(target: Any) -> Any:
    """What the collective path saves or restores when `target` holds partitioned variables, else None.

    Raises:
      PartitionError: a mapping names a partitioned variable (or a part) under another key than its
        full name, or mixes arrays with partitioned variables (each needs the name it is stored under).
    """
    variables = getattr(target, "variables", None)
    if callable(variables) and not isinstance(target, Mapping):  # a store
        return target if any(getattr(v, "save_slice_info", None) is not None for v in variables()) else None
    if isinstance(target, PartitionedVariable):
        return _PartitionedTargets(target.variables)
    if isinstance(target, Mapping):
        pairs = list(target.items())
    elif isinstance(target, (list, tuple)):
        pairs = [(None, item) for item in target]
    else:
        return None
    if not any(_is_part_holder(item) for _, item in pairs):
        return None
    flat: list[Any] = []
    for key, item in pairs:
        if isinstance(item, PartitionedVariable):
            name, parts = item.name, item.variables
        elif hasattr(item, "save_slice_info"):
            info = item.save_slice_info
            name, parts = (item.name if info is None else info.full_name), [item]
        else:
            raise PartitionError(
                f"cannot save or restore {type(item).__name__} {key!r} together with partitioned variables: "
                f"pass Variables and PartitionedVariables only (or a VariableStore), or two separate calls")
        if key is not None and key != name:
            raise PartitionError(
                f"partitioned variable '{name}' is given under the key {key!r}: a partitioned variable is "
                f"stored under its full name; use the key {name!r} (restore another name with assignment_map)")
        flat.extend(parts)
    return _PartitionedTargets(flat)


def save(path: os.PathLike[str] | str, target: Any, *, step: int | None = None,
         metadata: Mapping[str, Any] | None = None, format: str | None = None, checksum: bool = True,
         pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES, blocking: bool = True,
         max_snapshot_bytes: int | None = None, overwrite: bool = False, layout: str | None = None,
         storage_options: Mapping[str, object] | None = None, durable: bool = True,
         comm: Any = None, check_replicas: bool = False, compression: str | None = None) -> Path | str | SaveHandle:
    """Saves variables to an HDF5 file or Zarr v3 directory, atomically and checksummed; collectively with `comm`.

    Args:
      path, target, step, metadata, format, checksum, pack_threshold_bytes, blocking,
        max_snapshot_bytes, overwrite, layout, storage_options, durable, compression: as the
        one-process engine (varstore/checkpoint/write/writer.py, save: every argument documented there).
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
      As varstore.save; with `comm` every rank raises the same error
      (DistributedMismatchError when the ranks' stores differ).
    """
    partitioned = _partitioned(target)
    if comm is None and not check_replicas and partitioned is None:
        return _save_one(path, target, step=step, metadata=metadata, format=format, checksum=checksum,
                         pack_threshold_bytes=pack_threshold_bytes, blocking=blocking,
                         max_snapshot_bytes=max_snapshot_bytes, overwrite=overwrite, layout=layout,
                         storage_options=storage_options, durable=durable, compression=compression)
    given = {"compression": compression is not None, "checksum": checksum is not True, "pack_threshold_bytes": pack_threshold_bytes != DEFAULT_PACK_THRESHOLD_BYTES,
             "blocking": blocking is not True, "max_snapshot_bytes": max_snapshot_bytes is not None,
             "layout": layout is not None, "storage_options": storage_options is not None, "durable": durable is not True}
    unsupported = sorted(name for name, set_ in given.items() if set_)
    if unsupported:
        raise TypeError(f"a collective save (comm=, or partitioned variables) does not take {unsupported}")
    return save_collective(path, target if partitioned is None else partitioned, comm, check_replicas=check_replicas,
                           step=step,
                           metadata=None if metadata is None else dict(metadata), format=format, overwrite=overwrite)


def _own_format(format: str | None) -> bool:
    """True when `format` names varstore's own container ("h5", "zarr" and their aliases), or is None."""
    if format is None:
        return True
    from varstore.backends import get_backend

    try:
        get_backend(format)
    except UnsupportedFormatError:
        return False
    return True


def open_for_restore(path: os.PathLike[str] | str, format: str | None = None,
                     storage_options: Mapping[str, object] | None = None) -> CheckpointReader:
    """Opens what `restore` reads: a varstore checkpoint, else any format the registry reads.

    A varstore HDF5 file or Zarr v3 directory opens directly (the converter
    registry is not imported); anything else that is not one (a TF prefix,
    its `.index`, a directory with a TF `checkpoint` file, .safetensors, a
    PyTorch .pt, .npz, Keras, ...) goes to the registry (varstore.formats.open_any),
    as tf.compat.v1.train.Saver.restore reads a TF checkpoint into the graph.

    Args:
      format: None (detect), "h5"/"zarr" (varstore's own only), or any
        registry name ("tf", "safetensors", "pytorch", ...).

    Raises:
      CheckpointNotFoundError, NotACheckpointError: no format claims `path` (the registry's message).
      CorruptCheckpointError, ChecksumError, UnsafeFormatError, UnsupportedFormatError: as open_checkpoint.
    """
    from varstore.checkpoint.read.reader import open_varstore

    if _own_format(format):
        try:
            return open_varstore(path, format, storage_options=storage_options)
        except (NotACheckpointError, CheckpointNotFoundError):
            if format is not None:
                raise
    from varstore.formats import open_any

    return open_any(path, format, storage_options=storage_options)


def restore(path: os.PathLike[str] | str | CheckpointReader, target: Any, *, comm: Any = None,
            assignment_map: Mapping[str, str] | None = None, strict: bool = True, lazy: bool = False,
            verify: bool = True, format: str | None = None,
            storage_options: Mapping[str, object] | None = None) -> RestoreResult:
    """Restores variables from a checkpoint of any format varstore reads; strict by default; collectively with `comm`.

    Missing and unexpected names, as tf.compat.v1.train.Saver.restore: a
    target variable the checkpoint has no value for is *missing* and raises
    RestoreError (listing them all, with did-you-mean hints: close names, the
    same last component, '.' for '/'); `strict=False` restores what both have.
    A checkpoint value no target takes is *unexpected*: reported in the
    result, never an error here (a VariableStore keeps it for variables
    created later), an error only in `result.assert_consumed()` (TF2's
    checkpoint status; `expect_partial()` says a partial restore is meant).
    Deferred restores: a variable created after restore returns takes its
    value and never runs its initializer; one whose name the checkpoint
    lacks gets its initializer, and assert_consumed() then names it missing.

    Args:
      path: a varstore checkpoint (HDF5 file, Zarr v3 directory, object-store
        URL), a checkpoint of any registered format (a TF prefix, its .index,
        a directory with a TF `checkpoint` file, .safetensors, PyTorch .pt/.bin,
        .npz, Keras, ...), or an open CheckpointReader (varstore.open_checkpoint;
        the caller closes it).
      target: a VariableStore (its variables now and, for values left over,
        variables created in it later), a list of Variables, or a mapping of
        names to Variables or writeable NumPy arrays (filled in place).
      comm: None, or a communicator (see save). Collective: each rank reads
        only the regions of the variables it holds, whatever number of ranks
        and partitioning wrote the checkpoint. Without `comm`, a store with
        partitioned variables reads each part's region of the global array
        (from other formats too: a TF bundle's partitioned variable is one
        stored array). With `comm`, varstore checkpoints only.
      assignment_map: {checkpoint scope or name: target scope or name}, as
        tf.compat.v1.train.init_from_checkpoint; only the names it covers are
        restored (and only those count as missing).
      strict: True (default): missing names raise RestoreError before
        anything changes. False: partial restores are fine.
      lazy: leave values in the checkpoint until each variable's first use
        (the reader stays open). False: every value is read and checked now.
      verify: check varstore's crc32c of each value as it is read (other
        formats check what they record, always).
      format: None (detect), "h5"/"zarr", or any registry name ("tf", "safetensors", ...).
      storage_options: for object-store URLs: endpoint, region, credentials.

    Returns:
      RestoreResult: restored, missing, unexpected, deferred names; assert_consumed(), expect_partial().

    Raises:
      RestoreError: strict and some target has no value (`.missing`, `.unexpected`).
      ShapeMismatchError, DtypeMismatchError: naming the variable, the file and both
        shapes or dtypes; raised before anything is written (a failed restore changes nothing).
      CheckpointNotFoundError, NotACheckpointError, CorruptCheckpointError, ChecksumError,
      UnsafeFormatError: as varstore.open_checkpoint. With `comm` the same error on every rank.
    """
    partitioned = _partitioned(target)
    if partitioned is not None:
        target = partitioned
    if comm is None:
        reader = path if isinstance(path, CheckpointReader) else open_for_restore(path, format, storage_options)
        if partitioned is None or not isinstance(reader, VarstoreReader):  # parts of other formats: regions
            release = _restore_one if reader is path else restore_and_release
            return release(reader, target, assignment_map=assignment_map, strict=strict, lazy=lazy, verify=verify)
        if reader is not path:
            reader.close()  # a partitioned store reads varstore's global arrays through the collective path
    elif isinstance(path, CheckpointReader) and not isinstance(path, VarstoreReader):
        raise UnsupportedFormatError(
            f"a collective restore (comm=) reads varstore checkpoints only, not {path.format} "
            f"('{path.location}'); convert it first: varstore convert {path.location} model.h5")
    if storage_options is not None:
        raise TypeError("a collective restore (comm=, or partitioned variables) does not take storage_options")
    if isinstance(path, CheckpointReader):
        path = path.path
    try:
        return restore_collective(path, target, comm, assignment_map=assignment_map, strict=strict, lazy=lazy,
                                  verify=verify, format=format)
    except (NotACheckpointError, CheckpointNotFoundError) as err:  # every rank alike (agree)
        _raise_if_foreign(path, err)
        raise


def _raise_if_foreign(path: os.PathLike[str] | str, err: Exception) -> None:
    """Raises UnsupportedFormatError when `path`, not a varstore checkpoint, is one the registry reads."""
    from varstore.formats import detect_format
    from varstore.errors import VarstoreError

    try:
        found = detect_format(path)
    except VarstoreError:
        return
    raise UnsupportedFormatError(
        f"a collective restore (comm=) reads varstore checkpoints only, and '{path}' is a {found} checkpoint; "
        f"convert it first (varstore convert '{path}' model.h5) or restore it without comm") from err


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

    def __init__(self, directory: os.PathLike[str] | str, max_to_keep: int | None = 5,
                 keep_every_n_hours: float | None = None, format: str = "h5", checkpoint_name: str = "ckpt",
                 lock_timeout_s: float | None = 60.0, clock: Callable[[], float] = time.time,
                 storage_options: Mapping[str, object] | None = None, *, comm: Any = None) -> None:
        super().__init__(directory, max_to_keep, keep_every_n_hours, format, checkpoint_name, lock_timeout_s, clock,
                         storage_options)
        self.comm: Communicator | None = None if comm is None else as_communicator(comm)

    def save(self, target: Any, step: int | None = None, *, metadata: dict[str, Any] | None = None, blocking: bool = True,
             max_snapshot_bytes: int | None = None, checksum: bool = True,
             pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES, layout: str | None = None,
             durable: bool = True) -> Path | str | SaveHandle:
        """As the one-process manager's save (varstore/checkpoint/manage/manager.py); collective with `comm`
        (blocking, checksummed, default layout only: TypeError names what else was given)."""
        comm = self.comm
        partitioned = _partitioned(target)
        target = target if partitioned is None else partitioned
        if comm is None and partitioned is None:
            return super().save(target, step, metadata=metadata, blocking=blocking,
                                max_snapshot_bytes=max_snapshot_bytes, checksum=checksum,
                                pack_threshold_bytes=pack_threshold_bytes, layout=layout, durable=durable)
        given = {"blocking": blocking is not True, "max_snapshot_bytes": max_snapshot_bytes is not None,
                 "checksum": checksum is not True, "layout": layout is not None, "durable": durable is not True,
                 "pack_threshold_bytes": pack_threshold_bytes != DEFAULT_PACK_THRESHOLD_BYTES}
        unsupported = sorted(name for name, set_ in given.items() if set_)
        if unsupported:
            raise TypeError(f"a collective save (comm=, or partitioned variables) does not take {unsupported}")
        comm = comm or as_communicator(None)
        step = int(cast(int, comm.bcast(int(self.next_step() if step is None else step))))  # rank 0 owns numbering
        final = Path(cast(str, comm.bcast(str(self.directory / f"{self.checkpoint_name}-{step}{self._suffix}"))))
        lock = self._lock() if comm.rank == 0 else None

        def prepare() -> None:
            if lock is not None:
                lock.__enter__()
                atomic.sweep_directory(self.directory)

        try:
            agree(comm, prepare)
            save_collective(final, target, comm, step=step, format=self.format, metadata=metadata)
            agree(comm, lambda: self._after_save(final, step) if comm.rank == 0 else None)
        finally:
            if lock is not None:
                try:
                    lock.__exit__(None, None, None)
                except RuntimeError:  # never entered (prepare failed before the lock)
                    pass
        return final

    def restore_latest(self, target: Any, *, assignment_map: Mapping[str, str] | None = None, strict: bool = True,
                       lazy: bool = False, verify: bool = True) -> RestoreResult | None:
        """As varstore.checkpoint.CheckpointManager.restore_latest (strict by default, as varstore.restore);
        with `comm` rank 0 picks the checkpoint."""
        comm = self.comm
        partitioned = _partitioned(target)
        target = target if partitioned is None else partitioned
        if comm is None and partitioned is None:
            return super().restore_latest(target, assignment_map=assignment_map, strict=strict, lazy=lazy,
                                          verify=verify)
        comm = comm or as_communicator(None)
        chosen = comm.bcast(self._first_usable() if comm.rank == 0 else None)
        if chosen is None:
            return None
        return restore_collective(cast(str, chosen), target, comm, format=self.format, assignment_map=assignment_map,
                                  strict=strict, lazy=lazy, verify=verify)

    def _first_usable(self) -> str | None:
        from varstore.checkpoint.read.reader import open_varstore
        from varstore.errors import CheckpointError

        for path in self.restore_candidates():
            try:
                open_varstore(path, self.format).close()
            except CheckpointError:
                continue
            return str(path)
        return None
