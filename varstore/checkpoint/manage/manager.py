"""CheckpointManager: numbered checkpoints in one directory, a "latest" pointer, retention, a lock.

Checkpoints are "<checkpoint_name>-<step>.h5" files or ".zarr" directories;
"latest" is a JSON pointer rewritten atomically after each save; retention
follows tf.train.CheckpointManager (max_to_keep newest, plus one every
keep_every_n_hours among the ones that fall off). Saves hold an exclusive
fcntl.flock on "<directory>/.lock", so two processes saving into one
directory take turns (or get CheckpointLockedError after `lock_timeout_s`).
Temporaries ("*.tmp-<pid>-<hex>") are never listed and are swept when their
writer is gone. A directory that is an object-store URL ("s3://bucket/runs/a7")
has no lock and no rename: the pointer moves by conditional writes and only
forward (remote_manager.py), each checkpoint commits as remote.py says.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from varstore._limits import load_json
from varstore.backends import FORMATS, format_for_path
from varstore.checkpoint.publish import atomic
from varstore.checkpoint.format.manifest import DEFAULT_PACK_THRESHOLD_BYTES
from varstore.checkpoint.read.detection import is_varstore_checkpoint
from varstore.checkpoint.manage.remote_manager import remote_directory
from varstore.checkpoint.write.plan import entries_from
from varstore.checkpoint.read.reader import open_varstore
from varstore.checkpoint.read.restoration import RestoreResult, restore_and_release
from varstore.checkpoint.write.snapshot import SaveHandle, save_async
from varstore.checkpoint.write.writer import save
from varstore.errors import (CheckpointError, CheckpointLockedError, CorruptCheckpointError, NotACheckpointError,
                             PathOutsideCheckpointError)
from varstore.storage._local_errors import naming_permission_errors
from varstore.storage.links import open_unlinked
from varstore.storage.special_files import is_special

__all__ = ["CheckpointManager", "checked_state"]

_POINTER = "latest"
_LOCK = ".lock"
#: A "latest" pointer is a few hundred bytes per managed checkpoint; more than this is not ours.
_MAX_POINTER_BYTES = 16 << 20
_REBUILD = "call CheckpointManager.rebuild_state() to rebuild it from the checkpoints in the directory"


def _checked_name(value: object, field: str, where: str) -> str:
    """A checkpoint name from the pointer: one entry of the manager's directory, never a path."""
    if not isinstance(value, str):
        raise CorruptCheckpointError(
            f"the manager's \"latest\" pointer '{where}': {field} is {value!r}, expected a checkpoint name; "
            f"{_REBUILD}")
    if value in ("", ".", "..") or "/" in value or "\\" in value or "\0" in value:
        raise PathOutsideCheckpointError(
            f"the manager's \"latest\" pointer '{where}': {field} names {value!r}, which is not an entry of "
            f"the manager's directory; refusing to read, write or delete it. Remove the pointer or {_REBUILD}")
    return value


def checked_state(state: object, where: str) -> dict[str, Any]:
    """The "latest" pointer's JSON state after checking every name in it stays inside the directory.

    Args:
      state: the decoded JSON.
      where: the pointer file (for messages).

    Raises:
      PathOutsideCheckpointError: "latest", a "checkpoints" entry's name or a "preserved" name is a
        path ("../victim/ckpt-1.h5", absolute, with a separator) instead of an entry of the directory.
      CorruptCheckpointError: the state is not an object, or a field has the wrong type.
    """
    if not isinstance(state, dict):
        raise CorruptCheckpointError(
            f"the manager's \"latest\" pointer '{where}' holds {type(state).__name__}, expected a JSON object; "
            f"{_REBUILD}")
    if "latest" in state:
        _checked_name(state["latest"], "\"latest\"", where)
    entries = state.get("checkpoints", [])
    preserved = state.get("preserved", [])
    if not isinstance(entries, list) or not isinstance(preserved, list):
        raise CorruptCheckpointError(
            f"the manager's \"latest\" pointer '{where}': \"checkpoints\" and \"preserved\" must be lists; "
            f"{_REBUILD}")
    for i, entry in enumerate(entries):  # every key retention reads, of its type (no KeyError later)
        if (not isinstance(entry, dict) or type(entry.get("step")) is not int
                or type(entry.get("time")) not in (int, float)):
            raise CorruptCheckpointError(
                f"the manager's \"latest\" pointer '{where}': checkpoints[{i}] is {entry!r}, expected "
                f"{{\"name\": str, \"step\": int, \"time\": float}}; {_REBUILD}")
        _checked_name(entry.get("name"), f"checkpoints[{i}].name", where)
    for i, name in enumerate(preserved):
        _checked_name(name, f"preserved[{i}]", where)
    for field, kinds in (("latest_step", (int,)), ("last_preserved_time", (int, float))):
        if field in state and (not isinstance(state[field], kinds) or isinstance(state[field], bool)):
            raise CorruptCheckpointError(
                f"the manager's \"latest\" pointer '{where}': {field} is {state[field]!r}; {_REBUILD}")
    return state


class CheckpointManager:
    """Keeps numbered checkpoints of a training run in one directory.

    Args:
      directory: where checkpoints live (created if needed).
      max_to_keep: newest checkpoints to keep (checkpoints); None keeps all.
      keep_every_n_hours: also keep one checkpoint per this many hours among
        those max_to_keep drops (hours), as tf.train.CheckpointManager.
      format: "h5" or "zarr"; "icechunk" makes this an IncrementalCheckpointManager
        (incremental checkpoints in one Icechunk repository, docs/guide/incremental.md).
      checkpoint_name: file name prefix ("ckpt" -> "ckpt-1300.h5").
      lock_timeout_s: how long a save waits for another process's lock
        (seconds); 0 fails at once with CheckpointLockedError; None waits forever.
      clock: returns the current time in seconds since the epoch (tests pass a fake one).
      storage_options: for a directory that is an object-store URL (s3://, gs://, az://):
        endpoint, region, credentials (see docs/guide/object-storage.md). There,
        checkpoints and `latest` are URLs (str), saves take no lock and the
        "latest" pointer is moved with conditional writes, only forward.
    """

    def __new__(cls, directory: os.PathLike[str] | str, *args: Any, **kwargs: Any) -> Any:
        """format="icechunk" (4th argument or keyword) returns an IncrementalCheckpointManager (incremental_manager.py):
        the run's checkpoints as snapshots of one Icechunk repository, only changed chunks written."""
        if kwargs.get("format", args[2] if len(args) > 2 else None) == "icechunk":
            from varstore.checkpoint.manage.incremental_manager import IncrementalCheckpointManager

            return IncrementalCheckpointManager(directory, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, directory: os.PathLike[str] | str, max_to_keep: int | None = 5,
                 keep_every_n_hours: float | None = None, format: str = "h5",
                 checkpoint_name: str = "ckpt", lock_timeout_s: float | None = 60.0,
                 clock: Callable[[], float] = time.time,
                 storage_options: Mapping[str, object] | None = None) -> None:
        self._remote = remote_directory(directory, storage_options)
        self._storage_options = storage_options
        self.directory = Path(directory)
        self.max_to_keep = max_to_keep
        self.keep_every_n_hours = keep_every_n_hours
        self.format = format_for_path(self.directory, format)
        self.checkpoint_name = checkpoint_name
        self.lock_timeout_s = lock_timeout_s
        self._clock = clock
        self._suffix = FORMATS[self.format][0]
        self._pattern = re.compile(rf"^{re.escape(checkpoint_name)}-(\d+){re.escape(self._suffix)}$")
        self._created = clock()

    # -- listing
    def _where(self, name: str) -> Path | str:
        """Where checkpoint `name` of this directory is: a Path, or a URL (str) on an object store."""
        return self._remote.location(name) if self._remote is not None else self.directory / name

    def _exists(self, name: str) -> bool:
        return self._remote.exists(name) if self._remote is not None else (self.directory / name).exists()

    def _scan(self) -> list[tuple[int, Path | str]]:
        try:
            with naming_permission_errors(self.directory):
                names = self._remote.names() if self._remote is not None else os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            match = self._pattern.match(name)
            if match and (self._remote is not None or not is_special(self.directory / name)):
                found.append((int(match.group(1)), self._where(name)))  # a FIFO or symlink loop is none
        return sorted(found, key=lambda item: item[0])

    @property
    def checkpoints(self) -> list[Path | str]:
        """Every checkpoint of this manager's name and format in the directory, oldest step first
        (a FIFO, socket, device or symlink loop under such a name is not one)."""
        return [path for _, path in self._scan()]

    def _state(self) -> dict[str, Any]:
        """The "latest" pointer's state, checked (see checked_state); {} when there is none.

        Raises:
          PathOutsideCheckpointError, CorruptCheckpointError: as checked_state.
        """
        where = str(self._where(_POINTER))
        if self._remote is not None:
            return checked_state(self._remote.read_state(_POINTER)[0], where)
        try:
            with os.fdopen(open_unlinked(self.directory / _POINTER, "the manager's \"latest\" pointer"),
                           "rb") as handle:  # never through a symlink: the manager writes it by rename only
                data = handle.read(_MAX_POINTER_BYTES + 1)
        except FileNotFoundError:
            return {}
        if len(data) > _MAX_POINTER_BYTES:
            raise CorruptCheckpointError(
                f"the manager's \"latest\" pointer '{where}' holds more than {_MAX_POINTER_BYTES} bytes; "
                f"{_REBUILD}")
        try:
            state = load_json(data, f"the manager's \"latest\" pointer '{where}'")
        except ValueError as err:
            raise CorruptCheckpointError(
                f"the manager's \"latest\" pointer '{where}' is not valid JSON ({err}); {_REBUILD}") from err
        return checked_state(state, where)

    def rebuild_state(self) -> Path | str | None:
        """Rewrites a damaged or hostile "latest" pointer from the directory listing and returns the new latest.

        Every "<checkpoint_name>-<step>" entry that is a varstore checkpoint becomes
        managed (retention applies to them from the next save); the highest step
        becomes "latest". Nothing is deleted. Takes the lock like save.

        Raises:
          CheckpointLockedError: another process held the lock longer than lock_timeout_s.
        """
        if self._remote is not None:
            raise CheckpointError(f"rebuild_state works on local directories; '{self.directory}' is a URL")
        with self._lock():
            now = self._clock()
            managed = [{"name": Path(path).name, "step": step, "time": now} for step, path in self._scan()
                       if is_varstore_checkpoint(path)]
            state: dict[str, Any] = {"format_version": "1.0", "checkpoints": managed, "preserved": [],
                                     "last_preserved_time": now}
            if managed:
                state.update(latest=managed[-1]["name"], latest_step=managed[-1]["step"])
            self._write_state(state)
        return self._where(str(managed[-1]["name"])) if managed else None

    @property
    def latest(self) -> Path | str | None:
        """The newest checkpoint: the "latest" pointer's target when it exists, else the highest step."""
        state = self._state()
        name = state.get("latest")
        if isinstance(name, str) and self._pattern.match(name) and self._exists(name):
            return self._where(name)
        scanned = self._scan()
        return scanned[-1][1] if scanned else None

    # -- locking
    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        if self._remote is not None:  # no lock on an object store: conditional writes instead
            yield
            return
        with naming_permission_errors(self.directory, "write into"):
            self.directory.mkdir(parents=True, exist_ok=True)
            # never through a symlink: a linked ".lock" must not create or lock a file outside the directory
            fd = open_unlinked(self.directory / _LOCK, "the manager's lock", os.O_RDWR | os.O_CREAT)
        try:
            deadline = None if self.lock_timeout_s is None else time.monotonic() + self.lock_timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise CheckpointLockedError(
                            f"another process is saving into '{self.directory}' (it holds "
                            f"'{self.directory / _LOCK}'); waited {self.lock_timeout_s} s. Wait for it "
                            f"or pass a larger lock_timeout_s") from None
                    time.sleep(0.02)
            yield
        finally:
            os.close(fd)  # releases the flock

    # -- saving
    def next_step(self) -> int:
        """The step a save without `step=` takes: one past the largest step in the directory, 1 when none."""
        return max((step for step, _ in self._scan()), default=0) + 1

    def save(self, target: Any, step: int | None = None, *, metadata: dict[str, Any] | None = None,
             blocking: bool = True, max_snapshot_bytes: int | None = None, checksum: bool = True,
             pack_threshold_bytes: int = DEFAULT_PACK_THRESHOLD_BYTES, layout: str | None = None,
             durable: bool = True) -> Path | str | SaveHandle:
        """Saves `target` as "<checkpoint_name>-<step>", updates "latest", applies retention.

        Args:
          target: as varstore.save (a store, mapping or list of Variables).
          step: global step (int), part of the file name; None numbers the checkpoints
            itself as tf.train.CheckpointManager.save(checkpoint_number=None) does
            (ckpt-1, ckpt-2, ...), continuing after the largest step in the directory
            (`next_step`; TF continues its restored save_counter, 0 for a fresh tf.train.Checkpoint).
          metadata: JSON-compatible dict recorded in the checkpoint.
          blocking: False snapshots the values and returns a SaveHandle at once
            (see varstore.save); the write, the "latest" pointer and
            retention then run in a background thread, which holds the lock, so
            the next save waits for this one.
          max_snapshot_bytes: with blocking=False, bound on snapshot copies (bytes).
          checksum, pack_threshold_bytes, layout, durable: as varstore.save.

        Returns:
          The checkpoint's path, or a SaveHandle when `blocking` is False.

        Raises:
          CheckpointLockedError: another process held the lock longer than lock_timeout_s.
          PathOutsideCheckpointError: the "latest" pointer names a path outside the directory (nothing
            is written or deleted; see rebuild_state).
          CorruptCheckpointError: the "latest" pointer is malformed (nothing is written; see rebuild_state).
          As varstore.save.
        """
        step = self.next_step() if step is None else int(step)
        final = self._where(f"{self.checkpoint_name}-{step}{self._suffix}")
        if not blocking:
            lock = self._lock()
            lock.__enter__()
            released = threading.Lock()

            def unlock() -> None:
                if released.acquire(blocking=False):  # once, whoever comes first
                    lock.__exit__(None, None, None)

            try:
                self._sweep()
                self._state()  # a damaged or hostile pointer fails the save before anything is written

                def after(path: Path) -> None:
                    self._after_save(path, step)

                handle = save_async(Path(final), entries_from(target), step=step, metadata=metadata,
                                    format=self.format, max_snapshot_bytes=max_snapshot_bytes,
                                    after=after, storage=None if self._remote is None else self._remote.storage,
                                    checksum=checksum, pack_threshold_bytes=pack_threshold_bytes, layout=layout,
                                    durable=durable)
            except BaseException:
                unlock()
                raise
            handle._future.add_done_callback(lambda _: unlock())
            return handle
        with self._lock():
            self._sweep()
            self._state()  # a damaged or hostile pointer fails the save before anything is written
            save(final, target, step=step, metadata=metadata, format=self.format,
                 storage_options=self._storage_options, checksum=checksum,
                 pack_threshold_bytes=pack_threshold_bytes, layout=layout, durable=durable)
            self._after_save(final, step)
        return final

    def _sweep(self) -> None:
        if self._remote is not None:
            self._remote.sweep()
        else:
            atomic.sweep_directory(self.directory)

    def _after_save(self, final: Path | str, step: int) -> None:
        """Updates "latest" and applies retention after `final` was saved (lock held, or a conditional write)."""
        atomic.fault_point("after_rename_before_latest")
        now = self._clock()
        name = str(final).rstrip("/").rsplit("/", 1)[-1]
        doomed: list[str] = []

        def change(state: dict[str, Any]) -> dict[str, Any]:
            new, dropped = self._next_state(checked_state(state, str(self._where(_POINTER))), name, step, now)
            doomed[:] = dropped
            return new

        if self._remote is not None:
            self._remote.update_state(_POINTER, change)
            for doomed_name in doomed:
                if self._owns(doomed_name) and is_varstore_checkpoint(self._remote.location(doomed_name), self._storage_options):
                    self._remote.delete(doomed_name)  # never what else took the name
            return
        self._write_state(change(self._state()))
        for name in doomed:
            if not self._owns(name) or not is_varstore_checkpoint(self.directory / name):
                continue  # something else took the name since this manager wrote it: never delete that
            atomic.retire(self.directory / name)  # a marked temporary first: a kill mid-delete leaves one
        if doomed:
            atomic.fsync_directory(self.directory)

    def _next_state(self, state: dict[str, Any], final_name: str, step: int,
                    now: float) -> tuple[dict[str, Any], list[str]]:
        """The pointer's state after saving `final_name` at `step`, and the checkpoints retention drops.

        Only names this manager makes ("<checkpoint_name>-<step><suffix>") stay managed: any other name the
        pointer lists ("best_model.h5") is dropped from it with a warning and never deleted.
        """
        listed = [entry for entry in state.get("checkpoints", [])
                  if isinstance(entry, dict) and entry.get("name") != final_name]
        foreign = [str(entry.get("name")) for entry in listed if not self._owns(entry.get("name"))]
        foreign += [str(p) for p in state.get("preserved", []) if not self._owns(p)]
        if foreign:
            warnings.warn(f"the manager's \"latest\" pointer in '{self.directory}' lists {', '.join(foreign)}, "
                          f"which {'is' if len(foreign) == 1 else 'are'} not named like this manager's checkpoints "
                          f"('{self.checkpoint_name}-<step>{self._suffix}'); left alone, never deleted, and no "
                          f"longer listed", RuntimeWarning, stacklevel=4)
        managed = [entry for entry in listed if self._owns(entry.get("name"))
                   and self._exists(str(entry.get("name")))]
        managed.append({"name": final_name, "step": step, "time": now})
        if self._remote is not None:  # several writers: the order of steps, not of arrival
            managed.sort(key=lambda entry: int(entry.get("step", 0)))
        preserved = [p for p in state.get("preserved", []) if self._owns(p) and self._exists(str(p))]
        last_preserved = float(state.get("last_preserved_time", self._created))
        doomed = []
        if self.max_to_keep is not None:
            while len(managed) > max(self.max_to_keep, 1):
                entry = managed.pop(0)
                if (self.keep_every_n_hours is not None
                        and entry["time"] - self.keep_every_n_hours * 3600.0 >= last_preserved):
                    last_preserved = entry["time"]
                    preserved.append(entry["name"])
                    continue
                doomed.append(entry["name"])
        latest, latest_step = final_name, step
        previous = state.get("latest_step")
        if (self._remote is not None and isinstance(previous, int) and previous > step
                and isinstance(state.get("latest"), str) and self._exists(state["latest"])):
            latest, latest_step = state["latest"], previous  # another writer is ahead: only forward
        return ({"format_version": "1.0", "latest": latest, "latest_step": latest_step,
                 "checkpoints": managed, "preserved": preserved,
                 "last_preserved_time": last_preserved}, doomed)

    def _owns(self, name: object) -> bool:
        """True for a name this manager makes: "<checkpoint_name>-<step><suffix>" (retention deletes no other)."""
        return isinstance(name, str) and self._pattern.match(name) is not None

    def _write_state(self, state: dict[str, Any]) -> None:
        with atomic.atomic_path(self.directory / _POINTER) as tmp:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(state, handle, indent=1)
                handle.flush()
                os.fsync(handle.fileno())

    # -- restoring
    def restore_candidates(self) -> list[Path | str]:
        """The checkpoints restore_latest tries, in order: the "latest" pointer's, then newest step first
        (URLs, as str, on an object store)."""
        candidates: list[Path | str] = []
        latest = self.latest
        if latest is not None:
            candidates.append(latest)
        candidates += [path for _, path in reversed(self._scan()) if path not in candidates]
        return candidates

    def restore_latest(self, target: Any, *, assignment_map: Mapping[str, str] | None = None, strict: bool = True,
                       lazy: bool = False, verify: bool = True) -> RestoreResult | None:
        """Restores the newest checkpoint that opens cleanly, skipping damaged or incomplete ones.

        Args:
          target: as varstore.restore.
          assignment_map, strict, lazy, verify: as varstore.restore; strict by
            default (a target variable the checkpoint lacks raises RestoreError).

        Returns:
          The RestoreResult, or None when the directory has no usable checkpoint.

        Warns:
          RuntimeWarning: a newer checkpoint was skipped; the message names it, why, and the one restored.

        Raises:
          RestoreError: strict and a target variable has no value in the chosen checkpoint.
          ShapeMismatchError, DtypeMismatchError, ChecksumError: as varstore.restore.
        """
        skipped: list[str] = []
        for path in self.restore_candidates():
            try:
                reader = open_varstore(path, self.format, storage_options=self._storage_options)
            except (NotACheckpointError, CorruptCheckpointError, CheckpointError) as err:
                skipped.append(f"'{path}' ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})")
                continue
            if skipped:
                warnings.warn(f"restore_latest skipped {len(skipped)} damaged checkpoint(s) in '{self.directory}': "
                              f"{'; '.join(skipped)}; restoring '{path}', the newest that opens cleanly",
                              RuntimeWarning, stacklevel=2)
            # closed on failure, and after success unless lazy or deferred variables still read from it
            return restore_and_release(reader, target, assignment_map=assignment_map, strict=strict, lazy=lazy,
                                       verify=verify)
        if skipped:
            warnings.warn(f"restore_latest found no checkpoint in '{self.directory}' that opens cleanly; skipped "
                          f"{'; '.join(skipped)}", RuntimeWarning, stacklevel=2)
        return None

    def __repr__(self) -> str:
        return f"<CheckpointManager '{self.directory}' {self.format} {len(self.checkpoints)} checkpoints>"
