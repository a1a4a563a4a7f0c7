"""LocalStorage (varstore/storage/local.py) keeps the Storage protocol's contract on a local file system."""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

from tests._page_cache import evict
from varstore.errors import CorruptCheckpointError
from varstore.storage import ConditionalStorage, LocalStorage, Storage, storage_for
from varstore.storage._fs_types import path_in_memory

ROOT = Path(__file__).resolve().parents[2]


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _on_tmpfs(directory: Path) -> bool:
    from varstore.storage._fs_types import in_memory

    fd = os.open(directory, os.O_RDONLY)
    try:
        return in_memory(fd)
    finally:
        os.close(fd)


def test_local_storage_is_a_storage() -> None:
    storage = LocalStorage()
    assert isinstance(storage, Storage)
    assert storage.renames is True
    assert storage.url == Path.cwd().as_uri()


def test_storage_for_a_local_path_is_local_storage_keyed_by_the_path(tmp_path: Path) -> None:
    storage, key = storage_for(tmp_path / "m.h5")
    assert isinstance(storage, LocalStorage) and key == str(tmp_path / "m.h5")
    assert not isinstance(storage, ConditionalStorage)  # the manager's file lock serves locally


def test_positional_writes_in_any_order_then_exact_reads(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    writer = storage.writer("a.bin")
    writer.write_at(8, b"world!!!")
    writer.write_at(0, np.arange(2, dtype="<i4"))  # an array's raw bytes
    writer.finish()
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x00\x00\x00\x01\x00\x00\x00world!!!"
    assert storage.exists("a.bin") and not storage.exists("b.bin")
    assert storage.size("a.bin") == 16
    assert bytes(storage.read_range("a.bin", 8, 5)) == b"world"
    out = np.empty(2, dtype="<i4")
    assert storage.read_range("a.bin", 0, 8, out) is out
    assert out.tolist() == [0, 1]
    assert storage.read_all("a.bin") == (tmp_path / "a.bin").read_bytes()


def test_absolute_keys_are_taken_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"abc")
    storage = LocalStorage(tmp_path / "elsewhere")
    assert bytes(storage.read_range(str(tmp_path / "x"), 1, 2)) == b"bc"


def test_short_read_is_corrupt_naming_the_file_and_missing_key_is_not_found(tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"12345")
    storage = LocalStorage(tmp_path)
    with pytest.raises(CorruptCheckpointError, match=r"short.*truncated: needed 4 bytes at offset 3.*ends after 2"):
        storage.read_range("short", 3, 4)
    with pytest.raises(FileNotFoundError):
        storage.read_range("absent", 0, 1)
    with pytest.raises(FileNotFoundError):
        storage.size("absent")
    with pytest.raises(FileNotFoundError):
        storage.read_all("absent")


def test_list_and_delete(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    for key in ("m.zarr/zarr.json", "m.zarr/w/c/0", "m.zarr/b/c/0", "other"):
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"x")
    assert storage.list("m.zarr") == ["m.zarr/b/c/0", "m.zarr/w/c/0", "m.zarr/zarr.json"]
    assert storage.list("") == ["m.zarr/b/c/0", "m.zarr/w/c/0", "m.zarr/zarr.json", "other"]
    assert storage.list("other") == ["other"]
    storage.delete("m.zarr")
    storage.delete("other")
    storage.delete("never-there")
    assert storage.list("") == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_kept_descriptors_are_shared_and_released_by_close(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    before = _descriptors()
    first = storage.writer("one.h5", keep_open=True)
    second = storage.writer("one.h5", keep_open=True)
    first.reserve(2 << 20)  # 2 MiB: blocks reserved at once
    first.write_at(0, b"head")
    second.write_at(1 << 20, b"tail")
    first.finish()
    second.finish()
    assert _descriptors() == before + 1  # one descriptor for both writers, still open
    reserved = not _on_tmpfs(tmp_path)  # a tmpfs reserves nothing (issue 39): the file ends at its last write
    assert (tmp_path / "one.h5").stat().st_size == (2 << 20 if reserved else (1 << 20) + 4)
    storage.keep_open("one.h5")
    assert bytes(storage.read_range("one.h5", 1 << 20, 4)) == b"tail"
    assert _descriptors() == before + 2
    storage.close()
    assert _descriptors() == before
    assert bytes(storage.read_range("one.h5", 0, 4)) == b"head"  # usable again; nothing left open
    assert _descriptors() == before


def test_large_writes_go_in_pieces_and_read_back_exactly(tmp_path: Path) -> None:
    data = np.random.default_rng(0).integers(0, 255, size=(20 << 20) + 3, dtype=np.uint8)  # > 2 pieces of 8 MiB
    storage = LocalStorage(tmp_path)
    writer = storage.writer("big")
    writer.write_at(100, data)
    writer.finish()
    out = np.empty_like(data)
    storage.read_range("big", 100, data.nbytes, out)
    np.testing.assert_array_equal(out, data)


def test_single_file_read_ahead_is_left_to_the_kernel(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(bytes(1 << 16))
    storage = LocalStorage(tmp_path)
    storage.keep_open("f")
    extents = [(0, 4096), (4096, 4096), (8192, 4096)]
    assert storage.read_ahead("f", extents, 1 << 20) is None  # POSIX_FADV_SEQUENTIAL does better (issue 11)
    storage.close()


def test_files_read_ahead_runs_a_window_ahead_and_stops_its_thread(tmp_path: Path) -> None:
    for name in "abc":
        (tmp_path / name).write_bytes(bytes(4096))
    storage = LocalStorage(tmp_path)
    files = [("a", 4096), ("missing", 4096), ("b", 4096), ("c", 4096)]  # a missing file is skipped
    assert storage.read_ahead_files(files[:1], 1 << 20) is None  # one file: nothing ahead
    read_ahead = storage.read_ahead_files(files, 4096)
    assert read_ahead is not None
    assert any(t.name == "varstore-readahead" for t in threading.enumerate())
    for _ in files:
        read_ahead.done(0)
    read_ahead.stop()
    assert not any(t.name == "varstore-readahead" for t in threading.enumerate())
    stopped_early = storage.read_ahead_files(files, 4096)  # waits on its window, then stops on request
    assert stopped_early is not None
    stopped_early.stop()
    assert not any(t.name == "varstore-readahead" for t in threading.enumerate())
    storage.close()


def test_storage_imports_nothing_above_it() -> None:
    """The seam sits below the checkpoint layer and the backends: it knows no format."""
    for path in sorted((ROOT / "varstore" / "storage").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(("varstore.checkpoint", "varstore.backends", "varstore.formats",
                                            "varstore.store.variables", "varstore.store.scopes")), f"{path.name} imports {name}"


# -- no block reservation on a tmpfs (issue 39): posix_fallocate there zero-fills pages the writes fill again


def test_mount_types_reads_each_mounts_device_and_type(tmp_path: Path) -> None:
    from varstore.storage._fs_types import mount_types

    table = tmp_path / "mountinfo"
    table.write_text("25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684084k\n"
                     "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:7 - ext4 /dev/root rw,errors=continue\n"
                     "garbage line\n"
                     "40 35 0:45 / /run/user rw - ramfs none rw\n")
    assert mount_types(str(table)) == {os.makedev(0, 23): "tmpfs", os.makedev(98, 0): "ext4",
                                       os.makedev(0, 45): "ramfs"}
    assert mount_types(str(tmp_path / "absent")) == {}


@pytest.fixture
def shm_dir():  # type: ignore[no-untyped-def]
    """A fresh directory on /dev/shm (a tmpfs), removed afterwards; skips where there is none."""
    import shutil
    import tempfile

    if not os.path.isdir("/dev/shm"):
        pytest.skip("needs /dev/shm")
    path = Path(tempfile.mkdtemp(prefix="varstore-test-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_writes_on_a_tmpfs_reserve_no_blocks_and_read_back(shm_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from varstore.storage import _fs_types, local

    fd = os.open(shm_dir / "probe", os.O_CREAT | os.O_WRONLY)
    try:
        if not _fs_types.in_memory(fd):
            pytest.skip("/dev/shm is not a tmpfs here")
    finally:
        os.close(fd)
    calls: list[tuple[int, int]] = []
    real = os.posix_fallocate
    monkeypatch.setattr(local.os, "posix_fallocate", lambda fd, off, n: (calls.append((off, n)), real(fd, off, n)))
    data = np.arange(1 << 20, dtype=np.uint32)  # 4 MiB: over the 1 MiB reservation threshold
    storage = LocalStorage(shm_dir)
    for key in ("reserved", "unreserved"):
        writer = storage.writer(key)
        if key == "reserved":
            writer.reserve(data.nbytes + 8)
        writer.write_at(8, data)
        writer.write_at(0, b"12345678")
        writer.finish()
        back = np.frombuffer(bytes(storage.read_range(key, 8, data.nbytes)), np.uint32)
        np.testing.assert_array_equal(back, data)
        assert bytes(storage.read_range(key, 0, 8)) == b"12345678"
    assert calls == []  # neither reserve() nor a large write_at reserved blocks on the tmpfs
    monkeypatch.setattr(local, "in_memory", lambda fd: False)  # the same writes on a disk: blocks reserved
    disk = LocalStorage(tmp_path).writer("on-disk")
    disk.write_at(8, data)
    disk.finish()
    assert calls == [(8, data.nbytes)]


def test_a_reservation_past_the_free_space_is_not_attempted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source declaring 4 TiB must not fill the disk for every other process before its value is refused:
    reserve() asks for blocks only when the file system has room for them (posix_fallocate past the free
    space allocates until the disk is full before it fails). Smaller reservations still happen."""
    from varstore.storage import local, local_read_ahead

    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(local.os, "posix_fallocate", lambda fd, off, n: calls.append((off, n)))
    monkeypatch.setattr(local, "in_memory", lambda fd: False)  # as on a disk, also where tmp_path is a tmpfs
    storage = LocalStorage(tmp_path)
    info = os.statvfs(tmp_path)
    free = info.f_bavail * info.f_frsize
    huge = storage.writer("huge")
    huge.reserve(free + (1 << 40))
    huge.write_at(0, b"x")
    huge.finish()
    assert calls == [] and os.stat(tmp_path / "huge").st_blocks <= 8
    small = storage.writer("small")
    small.reserve(2 << 20)
    small.finish()
    assert calls == [(0, 2 << 20)]


def test_files_on_a_tmpfs_get_no_read_ahead_threads(shm_dir: Path, tmp_path: Path) -> None:
    from varstore.storage._fs_types import path_in_memory

    if not path_in_memory(str(shm_dir)):
        pytest.skip("/dev/shm is not a tmpfs here")
    assert not path_in_memory(str(shm_dir / "missing"))  # unknown: counts as a disk
    for name in "ab":
        (shm_dir / name).write_bytes(bytes(4096))
    assert LocalStorage(shm_dir).read_ahead_files([("a", 4096), ("b", 4096)], 1 << 20) is None  # pages are memory
    if path_in_memory(str(tmp_path)):
        return
    if not _evictable(tmp_path):
        return
    for name in "ab":
        (tmp_path / name).write_bytes(bytes(4096))
    evict([str(tmp_path / "a"), str(tmp_path / "b")])
    read_ahead = LocalStorage(tmp_path).read_ahead_files([("a", 4096), ("b", 4096)], 1 << 20)
    assert read_ahead is not None  # on a disk, not in the page cache: the threads stay
    read_ahead.stop()


def test_read_regular_file_reads_a_whole_file_and_refuses_special_files(tmp_path: Path) -> None:
    from varstore.errors import SpecialFileError
    from varstore.storage.special_files import read_regular_file

    data = bytes(range(256)) * 300  # more than one 64 KiB read
    (tmp_path / "zarr.json").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    assert read_regular_file(tmp_path / "zarr.json") == data
    assert read_regular_file(str(tmp_path / "empty")) == b""
    os.mkfifo(tmp_path / "fifo")
    keeper = os.open(tmp_path / "fifo", os.O_RDWR | os.O_NONBLOCK)  # a broken guard fails, never hangs
    try:
        with pytest.raises(SpecialFileError, match=r"fifo.*\(Zarr metadata\) is a FIFO"):
            read_regular_file(tmp_path / "fifo", "Zarr metadata")
    finally:
        os.close(keeper)
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(SpecialFileError, match="symlink loop"):
        read_regular_file(tmp_path / "loop")
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        read_regular_file(tmp_path)


# ------------------------------------------------------------ read-ahead of many files: only when they are on the disk
def _written(tmp_path: Path, count: int) -> list[str]:
    paths = []
    for i in range(count):
        path = tmp_path / f"{i:03d}.bin"
        path.write_bytes(bytes([i]) * 5000)
        paths.append(str(path))
    return paths


def test_files_in_the_page_cache_get_no_read_ahead_threads(tmp_path: Path) -> None:
    from varstore.storage import local, local_read_ahead

    if path_in_memory(str(tmp_path)) or not hasattr(os, "RWF_NOWAIT"):
        pytest.skip("a tmpfs, or no RWF_NOWAIT: nothing to tell apart")
    paths = _written(tmp_path, 20)
    for path in paths:
        Path(path).read_bytes()
    assert local_read_ahead.cached_already(paths)
    storage = local.LocalStorage()
    assert storage.read_ahead_files([(path, 5000) for path in paths], 1 << 20) is None


def _evictable(tmp_path: Path) -> bool:
    """Whether POSIX_FADV_DONTNEED drops a clean file's pages here (tried on a file of its own: a probe that
    finds pages missing may start the kernel's read-ahead of them)."""
    from varstore.storage import local, local_read_ahead

    if path_in_memory(str(tmp_path)) or not hasattr(os, "RWF_NOWAIT"):
        return False
    canary = tmp_path / "canary"
    canary.mkdir()
    probe = _written(canary, 1)
    evict(probe)
    return not local_read_ahead.cached_already(probe)


def test_files_evicted_from_the_page_cache_get_the_read_ahead(tmp_path: Path) -> None:
    from varstore.storage import local, local_read_ahead

    if not _evictable(tmp_path):
        pytest.skip("a tmpfs, no RWF_NOWAIT, or pages kept despite POSIX_FADV_DONTNEED: nothing to tell apart")
    paths = _written(tmp_path, 20)
    evict(paths[len(paths) // 2:len(paths) // 2 + 1])  # one file of the sample
    ahead = local.LocalStorage().read_ahead_files([(path, 5000) for path in paths], 1 << 20)
    assert isinstance(ahead, local_read_ahead.LocalFilesReadAhead)
    ahead.stop()


def test_a_sample_file_that_is_a_fifo_or_missing_counts_as_not_cached(tmp_path: Path) -> None:
    from varstore.storage import local, local_read_ahead

    paths = _written(tmp_path, 3)
    os.mkfifo(tmp_path / "fifo")
    assert not local_read_ahead.cached_already([str(tmp_path / "fifo")] + paths)  # never opened for reading: no hang
    assert not local_read_ahead.cached_already([str(tmp_path / "missing")] + paths)
    assert not local_read_ahead.cached_already([])


def test_resident_tells_extents_in_the_page_cache_from_extents_on_the_disk(tmp_path: Path) -> None:
    from varstore.storage import local, local_read_ahead

    if not _evictable(tmp_path):
        pytest.skip("a tmpfs, no RWF_NOWAIT, or pages kept despite POSIX_FADV_DONTNEED: nothing to tell apart")
    path = tmp_path / "one.bin"
    path.write_bytes(os.urandom(1 << 20))
    extents = [(offset, 4096) for offset in range(0, 1 << 20, 8192)]  # 128 extents: 16 of them sampled
    storage = local.LocalStorage()
    assert storage.resident(str(path), extents)  # just written
    evict([str(path)])
    assert not storage.resident(str(path), extents)
    assert not local_read_ahead.extents_cached(str(path), [])  # nothing to tell: as not cached
    paths = _written(tmp_path, 12)
    assert storage.resident_files([(p, 5000) for p in paths])
    evict(paths[6:7])  # one file of the sample
    assert not storage.resident_files([(p, 5000) for p in paths])
    assert not storage.resident_files([])


def test_everything_on_a_tmpfs_is_resident(tmp_path: Path) -> None:
    from varstore.storage import local

    shm = Path("/dev/shm")
    if not shm.is_dir() or not path_in_memory(str(shm)):
        pytest.skip("no tmpfs at /dev/shm")
    folder = Path(tempfile.mkdtemp(dir=shm))
    try:
        paths = _written(folder, 3)
        storage = local.LocalStorage()
        assert storage.resident(paths[0], [(0, 5000)])
        assert storage.resident_files([(p, 5000) for p in paths])
    finally:
        shutil.rmtree(folder)


def _tells_cached_ranges(tmp_path: Path) -> bool:
    """Whether this kernel answers cachestat(2) (Linux 6.5+) for a file just written here, or it is a tmpfs."""
    from varstore.storage import local_read_ahead

    probe = tmp_path / "probe.bin"
    probe.write_bytes(b"x" * 10000)
    fd = os.open(probe, os.O_RDONLY)
    try:
        return path_in_memory(str(probe)) or local_read_ahead.range_cached(fd, 0, 10000)
    finally:
        os.close(fd)


def test_range_cached_tells_pages_in_memory_from_pages_on_the_disk(tmp_path: Path) -> None:
    from varstore.storage import local_read_ahead

    if not _evictable(tmp_path) or not _tells_cached_ranges(tmp_path):
        pytest.skip("a tmpfs, no cachestat(2) (Linux 6.5+), or pages kept despite POSIX_FADV_DONTNEED")
    path = tmp_path / "value.bin"
    path.write_bytes(os.urandom(3 << 20))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert local_read_ahead.range_cached(fd, 0, 3 << 20)  # just written
        assert local_read_ahead.range_cached(fd, 12345, 1000)  # any range inside
        assert not local_read_ahead.range_cached(fd, 0, (3 << 20) + 4096)  # past the end: no pages there
        assert not local_read_ahead.range_cached(fd, 0, 0)
        evict([str(path)])
        assert not local_read_ahead.range_cached(fd, 1 << 20, 4096)
        assert not local_read_ahead.range_cached(fd, 1 << 20, 4096)  # asking twice read nothing in (no read-ahead)
        os.pread(fd, 4096, 1 << 20)
        assert local_read_ahead.range_cached(fd, 1 << 20, 4096)
    finally:
        os.close(fd)


def test_a_digested_read_fills_the_buffer_and_returns_the_crc32c_of_every_piece(tmp_path: Path) -> None:
    from varstore.checkpoint.format.checksum import crc32c_raw
    from varstore.storage import local

    if not _tells_cached_ranges(tmp_path):
        pytest.skip("no cachestat(2) (Linux 6.5+): reads outside a tmpfs are never digested on the way")
    data = os.urandom(local.DIGEST_PIECE_BYTES * 2 + 12345)  # two whole pieces and a part
    path = tmp_path / "value.bin"
    path.write_bytes(b"head" + data)
    storage = local.LocalStorage()
    for length in (0, 1, local.DIGEST_PIECE_BYTES, len(data)):
        out = np.zeros(length, np.uint8)
        found = storage.read_range_digest(str(path), 4, length, out, crc32c_raw)
        assert out.tobytes() == data[:length]
        assert found == crc32c_raw(data[:length])
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        storage.read_range_digest(str(path), 4, len(data) + 1, np.zeros(len(data) + 1, np.uint8), crc32c_raw)


def test_a_digested_read_of_bytes_on_the_disk_reads_them_whole_and_leaves_the_check(tmp_path: Path) -> None:
    from varstore.checkpoint.format.checksum import crc32c_raw
    from varstore.storage import local

    if not _evictable(tmp_path) or not _tells_cached_ranges(tmp_path):
        pytest.skip("a tmpfs, no cachestat(2) (Linux 6.5+), or pages kept despite POSIX_FADV_DONTNEED")
    data = os.urandom(local.DIGEST_PIECE_BYTES * 3)
    path = tmp_path / "value.bin"
    path.write_bytes(data)
    evict([str(path)])
    out = np.zeros(len(data), np.uint8)
    assert local.LocalStorage().read_range_digest(str(path), 0, len(data), out, crc32c_raw) is None  # not digested
    assert out.tobytes() == data  # but read, whole
    out[:] = 0
    assert local.LocalStorage().read_range_digest(str(path), 0, len(data), out, crc32c_raw) == crc32c_raw(data)
    assert out.tobytes() == data  # in memory now: digested on the way


def test_bulk_restore_takes_the_checksum_of_large_local_values_on_the_way(tmp_path: Path, monkeypatch) -> None:
    import varstore as vs
    from varstore.storage import local

    values = {f"w{i}": np.full((1024, 512), i, np.float32) for i in range(3)}  # 2 MiB each
    path = tmp_path / "model.h5"
    vs.save(path, values)
    digested: list[int] = []
    real = local.LocalStorage.read_range_digest

    def counting(self, key, offset, length, out, digest):
        digested.append(length)
        return real(self, key, offset, length, out, digest)

    monkeypatch.setattr(local.LocalStorage, "read_range_digest", counting)
    targets = {name: np.zeros_like(value) for name, value in values.items()}
    vs.restore(path, targets)
    assert digested == [2 << 20] * 3
    for name, value in values.items():
        np.testing.assert_array_equal(targets[name], value)
    with vs.open_checkpoint(path) as ck:  # a lazy read too
        assert ck["w2"][5, 5] == 2
    assert digested == [2 << 20] * 4


def test_without_cachestat_extents_are_probed_with_rwf_nowait(tmp_path: Path, monkeypatch) -> None:
    from varstore.storage import local_read_ahead

    if not _evictable(tmp_path):
        pytest.skip("a tmpfs, no RWF_NOWAIT, or pages kept despite POSIX_FADV_DONTNEED: nothing to tell apart")
    monkeypatch.setattr(local_read_ahead, "_cachestat", False)  # as a kernel before 6.5
    path = tmp_path / "one.bin"
    path.write_bytes(os.urandom(1 << 20))
    extents = [(offset, 4096) for offset in range(0, 1 << 20, 65536)]
    assert local_read_ahead.extents_cached(str(path), extents)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert not local_read_ahead.range_cached(fd, 0, 4096)  # cannot tell: as not cached
    finally:
        os.close(fd)
    evict([str(path)])
    assert not local_read_ahead.extents_cached(str(path), extents)


@pytest.mark.parametrize("writeback", [True, False])
def test_write_at_digest_writes_the_bytes_and_returns_their_crc32c(tmp_path: Path, writeback: bool) -> None:
    """LocalWriter.write_at_digest: the bytes land at their offset; the digest runs over each piece once, in order."""
    from varstore.checkpoint.format.checksum import crc32c_raw
    from varstore.storage.local import DIGEST_PIECE_BYTES

    storage = LocalStorage(tmp_path)
    storage.writeback = writeback
    data = np.random.default_rng(3).integers(0, 256, 2 * DIGEST_PIECE_BYTES + 999, dtype=np.uint8)
    pieces: list[int] = []

    def digest(piece: object, value: int) -> int:
        pieces.append(memoryview(piece).nbytes)  # type: ignore[arg-type]
        return crc32c_raw(piece, value)

    writer = storage.writer("f.bin", keep_open=True)
    writer.write_at(0, b"head")
    found = writer.write_at_digest(4, data, digest)  # type: ignore[attr-defined]
    writer.finish()
    storage.close()
    assert pieces == [DIGEST_PIECE_BYTES, DIGEST_PIECE_BYTES, 999]
    assert found == crc32c_raw(data.tobytes())
    assert (tmp_path / "f.bin").read_bytes() == b"head" + data.tobytes()
