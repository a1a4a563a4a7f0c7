"""IncrementalCheckpointManager: CheckpointManager(directory, format="icechunk"), a run's checkpoints as the
tagged snapshots of one Icechunk repository, retention by tag expiry and garbage collection.

`vs.CheckpointManager(..., format="icechunk")` returns one of these. Each
save is incremental.save_snapshot (only changed chunks are written) tagged
ckpt-<step>; the manager keeps what it wrote of its last snapshot (a ParentCache), so
the next save reads nothing of the parent while the branch tip is still that snapshot; checkpoints are the locations `<directory>@ckpt-<step>`, which
vs.restore, vs.load, vs.open_checkpoint and the CLI open. Retention keeps the
newest `max_to_keep` steps plus one per `keep_every_n_hours` among the older
ones (as tf.train.CheckpointManager), deletes the other tags, expires every
snapshot no tag or branch points to and garbage-collects the chunks no kept
snapshot references, so the repository shrinks. No lock: Icechunk's commit
detects a concurrent writer (CheckpointConflictError). Knows nothing about
how a snapshot is laid out (incremental.py) or read (read/snapshot_reader.py).
"""

from __future__ import annotations

import datetime
import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from varstore.checkpoint.manage import step_durability
from varstore.checkpoint.manage.incremental import ParentCache, SavedSnapshot, save_snapshot, tag_of
from varstore.checkpoint.read.restoration import RestoreResult, restore_and_release
from varstore.checkpoint.read.snapshot_reader import SnapshotReader, steps_of
from varstore.errors import CheckpointError, CheckpointNotFoundError, CorruptCheckpointError, NotACheckpointError
from varstore.storage.icechunk_repo import IcechunkRepository

__all__ = ["IncrementalCheckpointManager", "StepInfo", "incremental_steps"]


@dataclass(frozen=True)
class StepInfo:
    """One kept step of an incremental repository.

    Attributes:
      step: the global step; tag: "ckpt-<step>"; location: "<directory>@ckpt-<step>".
      snapshot_id: Icechunk's snapshot id.
      time: when it was saved (seconds since the epoch, the manager's clock).
      added_bytes: stored bytes of the chunks this step wrote (0: nothing changed).
      total_bytes: decoded bytes of every variable of the step.
    """

    step: int
    tag: str
    location: str
    snapshot_id: str
    time: float
    added_bytes: int
    total_bytes: int


class IncrementalCheckpointManager:
    """Numbered checkpoints of a training run as the snapshots of one Icechunk repository.

    A save is durable by default, as CheckpointManager.save (save(durable=False) skips the syncs).

    Args:
      directory: the repository: a local directory (created if needed) or an s3://, gs://, az:// URL.
      max_to_keep: newest steps to keep; None keeps all.
      keep_every_n_hours: also keep one step per this many hours among those max_to_keep drops (hours).
      format: "icechunk".
      checkpoint_name: must be "ckpt" (the tags are ckpt-<step>).
      compression: None (raw chunks, default: any reader gets byte ranges) or "zstd" (bytes + blosc zstd
        with bit shuffle, a codec chain plain zarr decodes).
      clock: the current time in seconds since the epoch (tests pass a fake one).
      storage_options: object-store settings for a URL directory (as varstore.save).
      lock_timeout_s: accepted for CheckpointManager's signature; unused (commits detect conflicts).
    """

    format = "icechunk"

    def __init__(self, directory: os.PathLike[str] | str, max_to_keep: int | None = 5,
                 keep_every_n_hours: float | None = None, format: str = "icechunk", checkpoint_name: str = "ckpt",
                 lock_timeout_s: float | None = 60.0, clock: Callable[[], float] = time.time,
                 storage_options: Mapping[str, object] | None = None, *, compression: str | None = None,
                 comm: Any = None) -> None:
        if format != "icechunk":
            raise ValueError(f"IncrementalCheckpointManager writes format 'icechunk', not {format!r}")
        if checkpoint_name != "ckpt":
            raise ValueError("an incremental repository tags its steps ckpt-<step>; checkpoint_name must be 'ckpt'")
        if comm is not None:
            raise TypeError("format='icechunk' saves from one process; comm= is not supported")
        self.directory = os.fspath(directory).rstrip("/") if "://" in os.fspath(directory) else os.fspath(directory)
        self.max_to_keep = max_to_keep
        self.keep_every_n_hours = keep_every_n_hours
        self.compression = compression
        self.checkpoint_name = checkpoint_name
        self.lock_timeout_s = lock_timeout_s
        self._clock = clock
        self._storage_options = storage_options
        self._created = clock()
        self.repository = IcechunkRepository(self.directory, storage_options, create=True)
        self.last_save: SavedSnapshot | None = None
        self.last_gc_bytes = 0
        self._parent = ParentCache()  # the snapshot this manager committed last, as it wrote it

    # -- listing
    def _location(self, step: int) -> str:
        return f"{self.directory}@{tag_of(step)}"

    def steps(self) -> list[StepInfo]:
        """Every kept step, oldest first, with the bytes each added (`varstore ls DIR` prints these)."""
        return [self._step_info(step, snapshot) for step, snapshot in steps_of(self.repository)]

    def _step_info(self, step: int, snapshot: str) -> StepInfo:
        written, meta, _ = self.repository.snapshot_info(snapshot)
        return StepInfo(step, tag_of(step), self._location(step), snapshot, float(meta.get("varstore_time", written)),
                        int(meta.get("varstore_added_bytes", 0)), int(meta.get("varstore_total_bytes", 0)))

    @property
    def checkpoints(self) -> list[str]:
        """The location "<directory>@ckpt-<step>" of every kept step, oldest step first."""
        return [self._location(step) for step, _ in steps_of(self.repository)]

    @property
    def latest(self) -> str | None:
        """The newest step's location, or None before the first save."""
        steps = steps_of(self.repository)
        return self._location(steps[-1][0]) if steps else None

    # -- saving
    def save(self, target: Any, step: int, *, metadata: dict[str, Any] | None = None,
             compression: str | None = None, blocking: bool = True, durable: bool = True, **_: Any) -> str:
        """Commits `target` as the snapshot tagged ckpt-<step> (only changed chunks written), then retention.

        Args:
          target: as varstore.save (a store, mapping or list of Variables).
          step: global step (int).
          metadata: JSON-compatible dict recorded in the checkpoint.
          compression: overrides the manager's compression for this save (None: the manager's).
          blocking: must be True (an incremental save compares values as it writes them).
          durable: True (default, as varstore.save and CheckpointManager.save) returns only once the
            step survives a power loss: on a local repository Icechunk's commit is made durable (one
            syncfs of its file system), then the tag ckpt-<step> is set and fsynced. False skips both
            (a crash of the process still keeps every earlier step whole; a power loss may lose this
            one). Object storage: nothing to do either way (a PUT that returned is durable). When the
            save runs retention, durable also syncs the deleted tags and expired history before any
            garbage is collected.

        Returns:
          The location "<directory>@ckpt-<step>".

        Raises:
          CheckpointConflictError: another manager committed to the repository first; nothing of this
            save is visible (save again).
          CheckpointWriteError: the file system reported a write-back error while making the step durable
            (or retention's first half: then the step is saved and tagged and nothing was collected).
          As varstore.save; CheckpointError when the repository fails.
        """
        if not blocking:
            raise TypeError("format='icechunk' saves are blocking (blocking=False is not supported)")
        started = datetime.datetime.now(datetime.timezone.utc)
        now = self._clock()
        created = self._repository_created()
        saved = save_snapshot(self.repository, target, int(step), metadata=metadata,
                              compression=compression if compression is not None else self.compression,
                              commit_metadata={"varstore_time": now, "varstore_created": created},
                              cache=self._parent, durable=durable)
        self.last_save = saved
        self._retain(started, durable)
        return self._location(int(step))

    def _repository_created(self) -> float:
        """When this run's retention clock started: recorded with the newest commit (every save carries it on;
        one look-up, not one per tag) or else the newest step, else this manager's start."""
        snapshots = [self.repository.tip()]
        steps = None
        while snapshots:
            value = self.repository.snapshot_info(snapshots.pop())[1].get("varstore_created")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if steps is None:  # the tip is no save of varstore's: the newest step then
                steps = steps_of(self.repository)
                snapshots = [steps[-1][1]] if steps else []
        return self._created

    def _retain(self, started: datetime.datetime, durable: bool = True) -> None:
        """Deletes the tags retention drops, expires untagged snapshots and collects their chunks (durable: the
        deleted tags and rewritten history synced before anything is collected, step_durability.py)."""
        if self.max_to_keep is None:
            return
        tagged = steps_of(self.repository)
        keep = max(self.max_to_keep, 1)
        if len(tagged) <= keep:  # nothing to drop: no snapshot looked up
            return
        older, doomed = [self._step_info(step, snapshot) for step, snapshot in tagged[:-keep]], []
        last_preserved = self._repository_created()
        for info in older:
            if self.keep_every_n_hours is not None and info.time - self.keep_every_n_hours * 3600.0 >= last_preserved:
                last_preserved = info.time
                continue
            doomed.append(info)
        if not doomed:
            return
        for info in doomed:
            self.repository.delete_tag(info.tag)
        between = (lambda: step_durability.retention_durable(self.repository)) if durable else None
        self.last_gc_bytes = self.repository.expire_and_collect(started, between)

    # -- restoring
    def open(self, step: int | None = None) -> SnapshotReader:
        """A reader of step `step` (None: the newest).

        Raises:
          CheckpointNotFoundError: no such step (or none yet).
        """
        if step is None:
            steps = steps_of(self.repository)
            if not steps:
                raise CheckpointNotFoundError(f"'{self.directory}' has no checkpoint yet")
            step = steps[-1][0]
        return SnapshotReader(self.repository.readonly(tag_of(step)), self._location(step))

    def restore_candidates(self) -> list[str]:
        """The locations restore_latest tries, newest step first."""
        return list(reversed(self.checkpoints))

    def restore_latest(self, target: Any, *, assignment_map: Mapping[str, str] | None = None, strict: bool = True,
                       lazy: bool = False, verify: bool = True) -> RestoreResult | None:
        """Restores the newest step that opens cleanly (as CheckpointManager.restore_latest); None when none.

        Warns:
          RuntimeWarning: a newer step was skipped (naming it and why).
        """
        skipped: list[str] = []
        for step, _ in reversed(steps_of(self.repository)):
            try:
                reader = self.open(step)
            except (NotACheckpointError, CorruptCheckpointError, CheckpointError) as err:
                skipped.append(f"'{self._location(step)}' ({type(err).__name__}: {err})")
                continue
            if skipped:
                warnings.warn(f"restore_latest skipped {'; '.join(skipped)}; restoring '{reader.location}'",
                              RuntimeWarning, stacklevel=2)
            # closed on failure, and after success unless lazy or deferred variables still read from it
            return restore_and_release(reader, target, assignment_map=assignment_map, strict=strict, lazy=lazy,
                                       verify=verify)
        return None

    def __repr__(self) -> str:
        return f"<CheckpointManager '{self.directory}' icechunk {len(self.checkpoints)} checkpoints>"


def incremental_steps(location: os.PathLike[str] | str,
                      storage_options: Mapping[str, object] | None = None) -> list[StepInfo] | None:
    """The kept steps of the incremental checkpoint repository at `location`, oldest first, with the bytes
    each added (what `varstore ls DIR` prints); None when `location` is not a local Icechunk repository
    (a URL is opened as one).

    Raises:
      CheckpointError: the repository could not be read.
    """
    from varstore.storage.icechunk_repo import is_repository

    text = os.fspath(location)
    if "://" not in text and not is_repository(text):
        return None
    return IncrementalCheckpointManager(text, max_to_keep=None, storage_options=storage_options).steps()
