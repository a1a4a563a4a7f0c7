"""Which file system holds a file: the mount's type from /proc/self/mountinfo by device number, cached.

Two questions, asked before reserving blocks (posix_fallocate): is the file in memory (tmpfs, ramfs),
where reserving zero-fills every page that the write then fills again (W1, 318 MiB on /dev/shm: ~70 ms
of CPU for nothing)? And does its file system have room for the reservation at all (a source declaring
4 TiB must not fill the disk for every other process before its value is refused)? Readers ask the
first for their hints too (read-ahead threads gain nothing where the pages are memory). Reads nothing
but mountinfo; an unknown device (btrfs subvolumes report anonymous numbers, no /proc) counts as a
disk, so reserving and reading ahead stay the default.
"""

from __future__ import annotations

import os

__all__ = ["in_memory", "path_in_memory", "mount_types", "has_room"]

#: File system types whose pages are memory: reserving blocks there only zero-fills them.
_MEMORY_TYPES = frozenset({"tmpfs", "ramfs"})

#: st_dev -> file system type ("" where unknown); filled on first use, refreshed for a new device.
_types: dict[int, str] = {}


def mount_types(mountinfo: str = "/proc/self/mountinfo") -> dict[int, str]:
    """st_dev -> file system type of every mount in `mountinfo` (proc(5)'s format; empty without it)."""
    found: dict[int, str] = {}
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                try:  # "36 35 98:0 /root /mnt rw,noatime shared:1 - ext4 /dev/root rw"
                    major, minor = fields[2].split(":")
                    fs_type = fields[fields.index("-", 6) + 1]
                    found[os.makedev(int(major), int(minor))] = fs_type
                except (ValueError, IndexError):
                    continue
    except OSError:
        pass
    return found


def in_memory(fd: int) -> bool:
    """True when the open file `fd` lies on a tmpfs or ramfs (its st_dev's mount type); False if unknown."""
    try:
        dev = os.fstat(fd).st_dev
    except OSError:
        return False
    return _memory_device(dev)


def path_in_memory(path: str) -> bool:
    """True when `path` (symlinks followed) lies on a tmpfs or ramfs; False if unknown or missing.

    For hints only (whether reading ahead or several metadata threads can gain anything): its pages
    are memory already, and each thread costs CPU for nothing."""
    try:
        dev = os.stat(path).st_dev
    except (OSError, ValueError):
        return False
    return _memory_device(dev)


def _memory_device(dev: int) -> bool:
    fs_type = _types.get(dev)
    if fs_type is None:  # a device not seen yet: read the mount table again (a mount may be new)
        _types.update(mount_types())
        fs_type = _types.setdefault(dev, "")
    return fs_type in _MEMORY_TYPES


def has_room(fd: int, nbytes: int) -> bool:
    """True when the file system holding `fd` has at least `nbytes` free for this user (statvfs f_bavail);
    True when that cannot be told (the write then reports ENOSPC itself)."""
    try:
        info = os.fstatvfs(fd)
    except OSError:
        return True
    return nbytes <= info.f_bavail * info.f_frsize
