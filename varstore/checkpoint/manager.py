"""CheckpointManager: numbered checkpoints in one directory, a "latest" pointer, retention, a lock.

Checkpoints are "<checkpoint_name>-<step>.h5" files or ".zarr" directories;
"latest" is a JSON pointer rewritten atomically after each save; retention
follows tf.train.CheckpointManager (max_to_keep newest, plus one every
keep_every_n_hours among the ones that fall off). Saves hold an exclusive
fcntl.flock on "<directory>/.lock", so two processes saving into one
directory take turns (or get CheckpointLockedError after `lock_timeout_s`).
Temporaries ("*.tmp-<pid>-<hex>") are never listed and are swept when their
writer is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from varstore.backends import FORMATS, format_for_path
from varstore.checkpoint import atomic
from varstore.checkpoint.detection import is_varstore_checkpoint
from varstore.checkpoint.plan import entries_from
from varstore.checkpoint.reader import open_varstore
from varstore.checkpoint.restore import RestoreResult, restore, targets_of
from varstore.checkpoint.snapshot import SaveHandle, save_async
from varstore.checkpoint.writer import save
from varstore.errors import CheckpointError, CheckpointLockedError, CorruptCheckpointError, NotACheckpointError

__all__ = ["CheckpointManager"]

_POINTER = "latest"
_LOCK = ".lock"


class CheckpointManager:
    """Keeps numbered checkpoints of a training run in one directory.

    Args:
      directory: where checkpoints live (created if needed).
      max_to_keep: newest checkpoints to keep (checkpoints); None keeps all.
      keep_every_n_hours: also keep one checkpoint per this many hours among
        those max_to_keep drops (hours), as tf.train.CheckpointManager.
      format: "h5" or "zarr".
      checkpoint_name: file name prefix ("ckpt" -> "ckpt-1300.h5").
      lock_timeout_s: how long a save waits for another process's lock
        (seconds); 0 fails at once with CheckpointLockedError; None waits forever.
      clock: returns the current time in seconds since the epoch (tests pass a fake one).
    """

    def __init__(self, directory: os.PathLike[str] | str, max_to_keep: int | None = 5,
                 keep_every_n_hours: float | None = None, format: str = "h5",
                 checkpoint_name: str = "ckpt", lock_timeout_s: float | None = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
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
    def _scan(self) -> list[tuple[int, Path]]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            match = self._pattern.match(name)
            if match:
                found.append((int(match.group(1)), self.directory / name))
        return sorted(found)

    @property
    def checkpoints(self) -> list[Path]:
        """Every checkpoint of this manager's name and format in the directory, oldest step first."""
        return [path for _, path in self._scan()]

    def _state(self) -> dict[str, Any]:
        try:
            with open(self.directory / _POINTER, encoding="utf-8") as handle:
                state = json.load(handle)
            if isinstance(state, dict):
                return state
        except (OSError, ValueError):
            pass
        return {}

    @property
    def latest(self) -> Path | None:
        """The newest checkpoint: the "latest" pointer's target when it exists, else the highest step."""
        state = self._state()
        name = state.get("latest")
        if isinstance(name, str) and self._pattern.match(name) and (self.directory / name).exists():
            return self.directory / name
        scanned = self._scan()
        return scanned[-1][1] if scanned else None

    # -- locking
    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
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
    def save(self, target: Any, step: int, *, metadata: dict[str, Any] | None = None,
             blocking: bool = True, max_snapshot_bytes: int | None = None,
             **save_options: Any) -> Path | SaveHandle:
        """Saves `target` as "<checkpoint_name>-<step>", updates "latest", applies retention.

        Args:
          target: as varstore.checkpoint.save (a store, mapping or list of Variables).
          step: global step (int), part of the file name.
          metadata: JSON-compatible dict recorded in the checkpoint.
          blocking: False snapshots the values and returns a SaveHandle at once
            (see varstore.checkpoint.save); the write, the "latest" pointer and
            retention then run in a background thread, which holds the lock, so
            the next save waits for this one.
          max_snapshot_bytes: with blocking=False, bound on snapshot copies (bytes).
          **save_options: checksum, pack_threshold_bytes (see save).

        Returns:
          The checkpoint's path, or a SaveHandle when `blocking` is False.

        Raises:
          CheckpointLockedError: another process held the lock longer than lock_timeout_s.
          As varstore.checkpoint.save.
        """
        step = int(step)
        final = self.directory / f"{self.checkpoint_name}-{step}{self._suffix}"
        if not blocking:
            lock = self._lock()
            lock.__enter__()
            released = threading.Lock()

            def unlock() -> None:
                if released.acquire(blocking=False):  # once, whoever comes first
                    lock.__exit__(None, None, None)

            try:
                atomic.sweep_directory(self.directory)

                def after(path: Path) -> None:
                    self._after_save(path, step)

                handle = save_async(final, entries_from(target), step=step, metadata=metadata,
                                    format=self.format, max_snapshot_bytes=max_snapshot_bytes,
                                    after=after, **save_options)
            except BaseException:
                unlock()
                raise
            handle._future.add_done_callback(lambda _: unlock())
            return handle
        with self._lock():
            atomic.sweep_directory(self.directory)
            save(final, target, step=step, metadata=metadata, format=self.format, **save_options)
            self._after_save(final, step)
        return final

    def _after_save(self, final: Path, step: int) -> None:
        """Updates "latest" and applies retention after `final` was saved (lock held)."""
        atomic.fault_point("after_rename_before_latest")
        now = self._clock()
        state = self._state()
        managed = [entry for entry in state.get("checkpoints", [])
                   if isinstance(entry, dict) and entry.get("name") != final.name
                   and (self.directory / str(entry.get("name"))).exists()]
        managed.append({"name": final.name, "step": step, "time": now})
        preserved = [p for p in state.get("preserved", []) if (self.directory / str(p)).exists()]
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
        self._write_state({"format_version": "1.0", "latest": final.name, "latest_step": step,
                           "checkpoints": managed, "preserved": preserved,
                           "last_preserved_time": last_preserved})
        for name in doomed:
            if not is_varstore_checkpoint(self.directory / name):
                continue  # something else took the name since this manager wrote it: never delete that
            # Rename before deleting: a writer killed mid-delete leaves a temporary, never a partial checkpoint.
            aside = atomic.temporary_name(self.directory / name)
            try:
                os.rename(self.directory / name, aside)
            except FileNotFoundError:
                continue
            atomic.remove_path(aside)
        if doomed:
            atomic.fsync_directory(self.directory)

    def _write_state(self, state: dict[str, Any]) -> None:
        with atomic.atomic_path(self.directory / _POINTER) as tmp:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(state, handle, indent=1)
                handle.flush()
                os.fsync(handle.fileno())

    # -- restoring
    def restore_candidates(self) -> list[Path]:
        """The checkpoints restore_latest tries, in order: the "latest" pointer's, then newest step first."""
        candidates: list[Path] = []
        latest = self.latest
        if latest is not None:
            candidates.append(latest)
        candidates += [path for _, path in reversed(self._scan()) if path not in candidates]
        return candidates

    def restore_latest(self, target: Any, **restore_options: Any) -> RestoreResult | None:
        """Restores the newest checkpoint that opens cleanly, skipping damaged or incomplete ones.

        Args:
          target: as varstore.checkpoint.restore.
          **restore_options: assignment_map, strict, lazy, verify.

        Returns:
          The RestoreResult, or None when the directory has no usable checkpoint.
        """
        for path in self.restore_candidates():
            try:
                reader = open_varstore(path, self.format)
            except (NotACheckpointError, CorruptCheckpointError, CheckpointError):
                continue
            try:
                result = restore(reader, target, **restore_options)
            except BaseException:
                reader.close()
                raise
            # Lazy, deferred and not-yet-allocated variables keep reading from it; else close it now.
            if not result.deferred and not isinstance(target, Iterator) and not any(
                    getattr(obj, "is_restore_pending", False) for obj in targets_of(target)[0].values()):
                reader.close()
            return result
        return None

    def __repr__(self) -> str:
        return f"<CheckpointManager '{self.directory}' {self.format} {len(self.checkpoints)} checkpoints>"
