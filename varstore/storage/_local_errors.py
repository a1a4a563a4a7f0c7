"""The local file system's refusals as typed errors naming the path: permission denied, special files.

One wording for every layer that opens local paths (format sniffing, the
storage's reads and writes, backends creating a container, the manager's
directory): "cannot read 'secret.h5': permission denied". Opens nothing for
reading beyond what `check_readable` needs; knows no checkpoint format.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from varstore.errors import CheckpointPermissionError
from varstore.storage.special_files import check_regular_file, open_for_reading

__all__ = ["permission_denied", "is_permission_error", "naming_permission_errors", "check_readable"]

_DENIED = (errno.EACCES, errno.EPERM)


def is_permission_error(err: BaseException) -> bool:
    """True for an OSError the operating system raised because access was refused (EACCES, EPERM).

    Also true for errors raised by libraries that keep the errno but not the class (h5py's OSError).
    """
    return isinstance(err, OSError) and (isinstance(err, PermissionError) or err.errno in _DENIED)


def permission_denied(path: os.PathLike[str] | str, action: str = "read") -> CheckpointPermissionError:
    """The error for `path` the operating system would not let us `action` ("read", "write", "create").

    The message is "cannot <action> '<path>': permission denied", the path as
    the caller spelled it; raise it `from` the OSError.
    """
    return CheckpointPermissionError(f"cannot {action} '{os.fspath(path)}': permission denied")


@contextlib.contextmanager
def naming_permission_errors(path: os.PathLike[str] | str, action: str = "read") -> Iterator[None]:
    """Turns a refused access inside the block into CheckpointPermissionError for `path`.

    Raises:
      CheckpointPermissionError: the block raised PermissionError (or an OSError with EACCES/EPERM).
    """
    try:
        yield
    except CheckpointPermissionError:
        raise
    except OSError as err:
        if is_permission_error(err):
            raise permission_denied(path, action) from err
        raise


def check_readable(path: os.PathLike[str] | str) -> bool:
    """Checks that the file or directory at `path` may be read, without reading it; False when nothing is there.

    A regular file is opened and closed; a directory is opened for listing
    (nothing is listed). A FIFO, socket or device is refused after a stat,
    never opened.

    Raises:
      CheckpointPermissionError: the operating system refuses to read `path` (or to look inside its folder).
      SpecialFileError: `path` is a FIFO, socket, device or symlink loop (special_files' rule).
    """
    with naming_permission_errors(path):
        try:
            info = check_regular_file(path)  # the one special-file rule (a symlink loop included)
        except NotADirectoryError:
            return False
        if info is None:
            return False
        if stat.S_ISDIR(info.st_mode):
            with os.scandir(path):
                return True
        os.close(open_for_reading(path))
    return True
