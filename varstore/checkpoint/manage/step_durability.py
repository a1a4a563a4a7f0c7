"""Durable incremental steps: what makes a committed snapshot and its tag survive a power loss.

Icechunk writes a local repository's objects (chunks, manifests, the
snapshot, the transaction log, the branch ref) without fsync. A durable step
(IncrementalCheckpointManager.save(durable=True), the default, as varstore.save)
therefore runs, in order: Icechunk's commit -> `commit_durable` (one
syncfs(2) of the repository's file system) -> the tag ckpt-<step> ->
`tag_durable` (fsync of the tag's ref file, its directory and refs/) ->
return. A tag never names a snapshot whose objects may be lost.

syncfs, not an fsync per file written: a step's snapshot also references
chunks that earlier saves wrote (a durable=False save, or another process),
which only a sync of the whole file system, or an fsync of every object in
the repository, covers; and it is one call (docs/benchmarks/README.md,
"durable steps", has the measurement). Where the C library has no syncfs
(not Linux) every file and directory of the repository is fsynced instead.
Object storage (s3://, gs://, az://) needs nothing: a PUT that returned is
durable. Knows nothing about snapshots' contents (incremental.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from varstore.checkpoint.publish import atomic
from varstore.errors import CheckpointWriteError
from varstore.storage.icechunk_repo import IcechunkRepository

__all__ = ["commit_durable", "tag_durable", "retention_durable"]


def commit_durable(repo: IcechunkRepository, tag: str) -> None:
    """Makes every object of `repo` durable after the commit of the snapshot to be tagged `tag` (local
    repositories; nothing for a URL): one syncfs of its file system, else an fsync of every file and
    directory in it.

    Raises:
      CheckpointWriteError: the file system reported a write-back error (naming the repository and tag).
    """
    _sync_repository(repo, lambda err: _failure(err, repo, tag, "syncing its objects after the commit; it is not tagged"))


def tag_durable(repo: IcechunkRepository, tag: str) -> None:
    """Makes the tag `tag` of a local repository durable (nothing for a URL): an fsync of its ref file, its
    directory and refs/; a syncfs when the tag is not where Icechunk 1.x keeps it.

    Raises:
      CheckpointWriteError: the file system reported a write error (naming the repository and tag).
    """
    root = repo.local_root
    if root is None:
        return
    paths = repo.tag_paths(tag)
    try:
        if len(paths) == 3:
            atomic.fsync_paths(paths)
        else:
            _sync_all(root)
    except OSError as err:
        raise _failure(err, repo, tag, "fsyncing its tag") from err


def retention_durable(repo: IcechunkRepository) -> None:
    """Makes retention's first half durable before its second (local repositories; nothing for a URL): the
    tags it deleted and the snapshots Icechunk's expiry rewrote in place (each history's oldest kept
    snapshot, its parent now the root) reach the disk before garbage collection deletes what they no
    longer reference; one syncfs, else an fsync of every file and directory. Without it a power loss
    could bring back a deleted tag, or an old parent pointer, naming a collected snapshot.

    Raises:
      CheckpointWriteError: the file system reported a write-back error (nothing was collected).
    """
    def failure(err: OSError) -> CheckpointWriteError:
        typed = CheckpointWriteError(
            f"cannot make retention durable in the Icechunk repository '{repo.location}' (syncing the "
            f"deleted tags and expired history before collecting garbage): {err}; nothing was collected "
            f"and the new step is kept: check the disk, then save again")
        typed.errno = err.errno
        return typed

    _sync_repository(repo, failure)


def _sync_repository(repo: IcechunkRepository, failure: Callable[[OSError], CheckpointWriteError]) -> None:
    """`_sync_all` of a local repository's directory (nothing for a URL); an OSError raised as `failure(err)`."""
    root = repo.local_root
    if root is None:
        return
    try:
        _sync_all(root)
    except OSError as err:
        raise failure(err) from err


def _sync_all(root: Path) -> None:
    """Every object under `root` made durable: one syncfs of its file system, else an fsync of every file and
    directory (raises OSError)."""
    if not atomic.syncfs(root):
        atomic.fsync_paths(_every_path(root))


def _every_path(root: Path) -> list[Path]:
    """Every file and directory under `root`, and `root` itself (symlinks are not followed)."""
    paths = [root]
    for folder, dirs, files in os.walk(root):
        paths.extend(Path(folder, name) for name in dirs + files)
    return paths


def _failure(err: OSError, repo: IcechunkRepository, tag: str, what: str) -> CheckpointWriteError:
    failure = CheckpointWriteError(
        f"cannot make step '{tag}' durable in the Icechunk repository '{repo.location}' ({what}): {err}; "
        f"a power loss may lose the step: check the disk, then save again")
    failure.errno = err.errno
    return failure
