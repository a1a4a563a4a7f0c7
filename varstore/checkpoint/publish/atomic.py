"""Nothing half-written is visible: temporary siblings, fsync, atomic rename, stale sweep.

The only module that creates temporary names or renames checkpoints into
place. A checkpoint is written to "<final>.tmp-<pid>-<random>" next to its
final path, every file and directory of it is fsynced, then it is renamed
over the final path (files: os.replace; directories: an atomic exchange with
renameat2(RENAME_EXCHANGE) where the kernel has it) and the parent directory
is fsynced. A writer killed at any point leaves the old or the new checkpoint
under the final name. Each temporary gets an owner marker, a sidecar file
".<temporary name>.varstore-temporary" created before the temporary and
removed after it: a temporary whose writer process is gone is removed by the
next save next to it only when its marker is there, so a user's
"notes.tmp-99999-cafe" (no marker) is never touched. Also hosts the fault-injection hook used by the
crash tests (VARSTORE_FAULT=<point>). Writes no checkpoint content itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import signal
import stat
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from varstore.errors import CheckpointError, CheckpointWriteError, DiskFullError, VarstoreError
from varstore.storage._local_errors import is_permission_error, permission_denied
from varstore.storage.local import remove_path  # one definition; atomic re-exports it for the manager

__all__ = [
    "FAULT_POINTS",
    "syncfs",
    "fault_point",
    "temporary_name",
    "is_temporary",
    "atomic_path",
    "sweep_stale",
    "fsync_paths",
    "fsync_directory",
    "remove_path",
    "retire",
    "write_failure",
]

#: Named points where VARSTORE_FAULT=<point> makes the writer SIGKILL itself (crash tests).
FAULT_POINTS = ("after_data", "before_checksums", "before_rename", "after_rename_before_latest")

_TMP_RE = re.compile(r"^(?P<final>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]+$")
_MARKER_SUFFIX = ".varstore-temporary"
_MARKER_RE = re.compile(r"^\.(?P<temporary>.+\.tmp-\d+-[0-9a-f]+)" + re.escape(_MARKER_SUFFIX) + "$")
#: What a marker holds (then the writer's pid): a file of that name with other bytes is not ours.
_MARKER_TEXT = b"varstore temporary of pid "


def fault_point(name: str) -> None:
    """Kills this process with SIGKILL when the environment variable VARSTORE_FAULT equals `name`."""
    if os.environ.get("VARSTORE_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def temporary_name(final: Path) -> Path:
    """A fresh temporary sibling of `final`: "<final>.tmp-<pid>-<8 hex digits>"."""
    return final.with_name(f"{final.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")


def is_temporary(path: Path | str) -> bool:
    """True for names made by `temporary_name` (never listed as checkpoints)."""
    return _TMP_RE.match(Path(path).name) is not None


def _marker(temporary: Path) -> Path:
    return temporary.with_name(f".{temporary.name}{_MARKER_SUFFIX}")


def _mark(temporary: Path) -> None:
    """Creates the owner marker of `temporary` (before the temporary itself exists)."""
    fd = os.open(_marker(temporary), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, _MARKER_TEXT + str(os.getpid()).encode())
    finally:
        os.close(fd)


def _unmark(temporary: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_marker(temporary))


def _is_marked(temporary: Path) -> bool:
    """True when `temporary`'s owner marker is there: a small regular file (never followed) holding our text."""
    try:
        fd = os.open(_marker(temporary), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        return os.read(fd, 64).startswith(_MARKER_TEXT)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(final: Path) -> list[Path]:
    """Removes the temporaries of `final` that varstore made (their owner marker is there) and whose
    writer process no longer exists. Returns what was removed."""
    return _sweep(final.parent, final.name)


def sweep_directory(directory: Path) -> list[Path]:
    """Removes every temporary in `directory` that varstore made and whose writer process no longer
    exists; anything without an owner marker (whatever its name) is left alone."""
    return _sweep(directory, None)


def _sweep(directory: Path, final_name: str | None) -> list[Path]:
    removed: list[Path] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    present = set(names)
    for name in names:
        match = _TMP_RE.match(name)
        if match is not None:
            if final_name is not None and match.group("final") != final_name:
                continue
            if _pid_alive(int(match.group("pid"))) or not _is_marked(directory / name):
                continue
            remove_path(directory / name)
            _unmark(directory / name)
            removed.append(directory / name)
            continue
        orphan = _MARKER_RE.match(name)  # a marker whose temporary is gone (killed between the two unlinks)
        if orphan is None or orphan.group("temporary") in present:
            continue
        pid = _TMP_RE.match(orphan.group("temporary"))
        if (pid is not None and (final_name is None or pid.group("final") == final_name)
                and not _pid_alive(int(pid.group("pid"))) and _is_marked(directory / orphan.group("temporary"))):
            _unmark(directory / orphan.group("temporary"))
    return removed


def retire(path: Path) -> bool:
    """Deletes the checkpoint `path` by renaming it to a marked temporary first, so a writer killed
    mid-delete leaves a temporary the next sweep removes, never a partial checkpoint. False when
    nothing was there."""
    aside = temporary_name(path)
    _mark(aside)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        _unmark(aside)
        return False
    remove_path(aside)
    _unmark(aside)
    return True


def _fsync_one(path: Path) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: A save that wrote at least this many files and directories (a Zarr checkpoint) makes them durable
#: with one syncfs of their file system instead of one fsync each (Linux; fsyncs elsewhere).
SYNCFS_MIN_PATHS = 32
_syncfs_function: Any = None
_syncfs_missing = False


def syncfs(path: Path) -> bool:
    """syncfs(2) of the file system holding `path`: every dirty page and inode there reaches the disk.

    Returns False where the C library has no syncfs (the caller fsyncs one by one).

    Raises:
      OSError: the file system reported a write-back error (Linux >= 5.8 reports them here).
    """
    global _syncfs_function, _syncfs_missing
    if _syncfs_function is None and not _syncfs_missing:
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # the C library the interpreter runs on
            function = libc.syncfs
            function.argtypes = [ctypes.c_int]
            function.restype = ctypes.c_int
            _syncfs_function = function
        except (OSError, AttributeError):
            _syncfs_missing = True
    if _syncfs_function is None:
        return False
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        if _syncfs_function(fd) != 0:
            err = ctypes.get_errno()
            if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
                return False
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)
    return True


def fsync_paths(paths: Iterable[Path], threads: int = 8) -> None:
    """fsyncs every file and directory in `paths` (several at once, so the disk queue stays full).

    Many paths of one file system (a Zarr checkpoint: a directory, zarr.json and
    a chunk file per array, all under one temporary directory) are made durable
    by one syncfs instead: W1's ~1,500 fsyncs took 3.2 s, one syncfs a fraction.
    """
    paths = list(dict.fromkeys(paths))
    if len(paths) >= SYNCFS_MIN_PATHS and _same_file_system(paths) and syncfs(paths[0]):
        return
    if len(paths) <= 2:
        for path in paths:
            _fsync_one(path)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(_fsync_one, paths))


def _same_file_system(paths: list[Path]) -> bool:
    """True when every path lies on the file system of the first (they are under one temporary directory,
    unless a path crosses a mount point there: then each is fsynced)."""
    try:
        device = os.stat(paths[0]).st_dev
        return all(os.lstat(path).st_dev == device for path in paths[1:])
    except OSError:
        return False


def fsync_directory(directory: Path) -> None:
    """fsyncs a directory so renames and unlinks in it are durable."""
    _fsync_one(directory)


_RENAME_EXCHANGE = 2
_libc: ctypes.CDLL | None = None
_libc_missing = False  # renameat2 is not in this C library


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swaps two paths with renameat2(RENAME_EXCHANGE); False where unsupported."""
    global _libc, _libc_missing
    if _libc is None and not _libc_missing:
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # the C library the interpreter runs on
            libc.renameat2  # noqa: B018 - raises AttributeError on old C libraries
            _libc = libc
        except (OSError, AttributeError):
            _libc_missing = True
    if _libc is None:
        return False
    at_fdcwd = -100
    result = _libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _rename_into_place(tmp: Path, final: Path) -> None:
    """Puts `tmp` under the name `final`, whatever is there: one rename where both are files (or nothing is
    there); otherwise (a directory on either side, also a Zarr checkpoint replacing a file that
    overwrite=True allowed, or a file replacing a directory) an atomic swap, then the old one is deleted."""
    if not os.path.lexists(final) or (not tmp.is_dir() and not final.is_dir()):
        os.replace(tmp, final)  # a symlink at `final` is replaced itself, never its target
        return
    if _exchange(tmp, final):
        remove_path(tmp)  # the old file, tree or symlink, now at the temporary name (still marked)
        return
    # Fallback without renameat2: a short window where neither is under the final name.
    aside = temporary_name(final)
    _mark(aside)
    os.rename(final, aside)
    os.rename(tmp, final)
    remove_path(aside)
    _unmark(aside)


@contextlib.contextmanager
def atomic_path(final: Path, durable: bool = True) -> Iterator[Path]:
    """Yields a temporary sibling path to write; renames it over `final` on success.

    The caller creates the file or directory at the yielded path and fsyncs
    its contents; this fsyncs the parent directory after the rename (unless
    not `durable`: a save(..., durable=False)). On any
    exception the temporary is removed and `final` is untouched. Stale
    temporaries of `final` from dead writers are swept first.

    Raises:
      CheckpointError: the parent directory cannot be created or written.
      CheckpointPermissionError: the operating system refused to create the parent directory or the
        temporary in it ("cannot write into '<parent>': permission denied").
      DiskFullError: the writer ran out of space (ENOSPC, EDQUOT, EFBIG); `final` is as it was.
      CheckpointWriteError: the writer got an I/O error (EIO); `final` is as it was.
    """
    final = Path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        if is_permission_error(err):
            raise permission_denied(final.parent, "create") from err
        raise CheckpointError(f"cannot create directory '{final.parent}' for '{final}': {err}") from err
    sweep_stale(final)
    tmp = temporary_name(final)
    try:
        _mark(tmp)
    except OSError as err:  # the first file a save creates in the parent directory
        if is_permission_error(err):
            raise permission_denied(final.parent, "write into") from err
        raise CheckpointError(f"cannot write into directory '{final.parent}' for '{final}': {err}") from err
    try:
        yield tmp
        fault_point("before_rename")
        _rename_into_place(tmp, final)
        _unmark(tmp)
        if durable:
            fsync_directory(final.parent)
    except BaseException as err:
        remove_path(tmp)
        _unmark(tmp)
        if is_permission_error(err) and _names_temporary(err, tmp):  # a writer that opened the temporary itself
            raise permission_denied(final.parent, "write into") from err
        full = write_failure(err, final)
        if full is not None:
            raise full from err
        raise


#: OS error numbers of a write that ran out of room: the file system, the user's quota, the file size limit.
_FULL = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded",
         errno.EFBIG: "the file size limit is reached"}
#: The same failures as h5py and other C libraries word them (their OSError carries no errno).
_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "File too large")
#: NumPy's ndarray.tofile after a short write (no errno): "524288 requested and 65504 written".
_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def write_failure(err: BaseException, final: Path) -> CheckpointWriteError | None:
    """The typed error for an OSError a write of `final` failed with (None for anything else).

    ENOSPC, EDQUOT and EFBIG (also as h5py words them) and a short write NumPy reports without an errno
    become DiskFullError, EIO a CheckpointWriteError; both say the old `final` is left whole (atomic_path
    removed the temporary) and keep `.errno` (None for the short write).
    """
    if not isinstance(err, OSError) or isinstance(err, VarstoreError):
        return None
    number = err.errno if isinstance(err.errno, int) else None
    if number is None:
        text = str(err)
        number = next((n for n, words in zip(_FULL, _FULL_WORDS) if words in text), None)
    kept = (f"'{final}' is left as it was (no partial output; the temporary was removed)")
    if number is None and _SHORT_WRITE.search(str(err)):  # NumPy's tofile: the OS took fewer bytes, no errno
        return DiskFullError(f"cannot write '{final}': the file system accepted only part of a write ({err}: "
                             f"its space or the file size limit ran out); {kept}. Free space (or raise the "
                             f"limit) and write again")
    if number in _FULL:
        failure: CheckpointWriteError = DiskFullError(
            f"cannot write '{final}': {_FULL[number]} ({err}); {kept}. Free space (or raise the limit) "
            f"and write again")
    elif number == errno.EIO:
        failure = CheckpointWriteError(f"cannot write '{final}': an I/O error ({err}); {kept}")
    else:
        return None
    failure.errno = number
    return failure


def _names_temporary(err: BaseException, tmp: Path) -> bool:
    """True when an OSError's filename is the temporary `tmp` or a path inside it."""
    name = getattr(err, "filename", None)
    if not isinstance(name, (str, bytes, os.PathLike)):
        return False
    text = os.fsdecode(name)
    return text == str(tmp) or text.startswith(f"{tmp}{os.sep}")
