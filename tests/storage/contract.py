"""StorageContract and ObjectStoreContract: what every storage must do (varstore/storage/protocol.py); subclass per storage.

As tests/backends/contract.py does for backends and zarr-python's StoreTests for stores: a
subclass provides the `storage` fixture (a fresh, empty root) and inherits every test. The
Storage tests run on every storage; ObjectStoreContract adds the ObjectStore tests
(conditional puts with version tags, listings with info, multipart and staged uploads, URLs,
batch deletes, the sweep) for every storage that commits without rename: the
checkpoint layer's manifest-last commit, manager and staged reads use nothing else.
A new storage is done when its subclass passes (docs/architecture.md, "A new storage").
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from varstore.errors import CorruptCheckpointError
from varstore.storage import ObjectStore, Storage

KiB = 1024


class StorageContract:
    """Subclasses define the `storage` fixture: a Storage at an empty root, relative keys."""

    @pytest.fixture
    def storage(self) -> Storage:  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def _put(storage: Storage, key: str, data: bytes) -> None:
        writer = storage.writer(key)
        writer.write_at(0, data)
        writer.finish()

    # ---------------------------------------------------------------- Storage
    def test_is_a_storage_with_a_url_and_a_commit_rule(self, storage: Storage) -> None:
        assert isinstance(storage, Storage)
        assert isinstance(storage.url, str) and "://" in storage.url
        assert storage.renames in (True, False)
        assert isinstance(storage, ObjectStore) or storage.renames, \
            "a storage without rename must offer the ObjectStore calls (the manifest-last commit needs them)"

    def test_writes_front_to_back_read_back_exactly(self, storage: Storage) -> None:
        writer = storage.writer("a/model.bin")
        writer.reserve(24)
        writer.write_at(0, b"HEAD")
        writer.write_at(4, np.arange(4, dtype="<i4"))  # an array's raw bytes
        writer.write_at(20, memoryview(b"tail"))
        writer.finish()
        expected = b"HEAD" + np.arange(4, dtype="<i4").tobytes() + b"tail"
        assert storage.read_all("a/model.bin") == expected
        assert storage.size("a/model.bin") == 24 and storage.exists("a/model.bin")
        out = np.zeros(8, dtype=np.uint8)
        assert storage.read_range("a/model.bin", 8, 8, out) is out
        assert out.tobytes() == expected[8:16]
        assert bytes(storage.read_range("a/model.bin", 2, 5)) == expected[2:7]
        assert bytes(storage.read_range("a/model.bin", 24, 0)) == b""

    def test_short_read_is_corrupt_naming_the_key_missing_key_is_not_found(self, storage: Storage) -> None:
        self._put(storage, "short.bin", b"0123456789")
        with pytest.raises(CorruptCheckpointError, match="short.bin"):
            storage.read_range("short.bin", 6, 8)
        for call in (lambda: storage.read_range("absent.bin", 0, 1), lambda: storage.size("absent.bin"),
                     lambda: storage.read_all("absent.bin")):
            with pytest.raises(FileNotFoundError):
                call()
        assert not storage.exists("absent.bin")

    def test_an_aborted_writer_leaves_nothing_under_its_key(self, storage: Storage) -> None:
        writer = storage.writer("aborted.bin")
        writer.write_at(0, b"x" * 100)
        writer.abort()  # never raises
        if not storage.renames:  # locally the temporary sibling of the rename commit holds such a file
            assert not storage.exists("aborted.bin")
            assert "aborted.bin" not in storage.list("")

    def test_list_is_sorted_keys_under_a_prefix_and_delete_removes_a_tree(self, storage: Storage) -> None:
        for key in ("m/b/c.bin", "m/a.bin", "m/b/d.bin", "other.bin"):
            self._put(storage, key, key.encode())
        listed = storage.list("m")
        assert [k.rsplit("m/", 1)[-1] for k in listed] == ["a.bin", "b/c.bin", "b/d.bin"]
        assert listed == sorted(listed)
        storage.delete("m/a.bin")
        assert not storage.exists("m/a.bin") and storage.exists("m/b/c.bin")
        storage.delete("m")  # a whole prefix (a directory tree locally)
        assert storage.list("m") == [] and storage.read_all("other.bin") == b"other.bin"
        storage.delete("never-there")  # a missing key is fine

    def test_a_deleted_key_written_again_reads_its_new_bytes(self, storage: Storage) -> None:
        # (a writer over an existing key writes in place locally, replaces the object on a store: not contract)
        self._put(storage, "k.bin", b"first version")
        storage.delete("k.bin")
        self._put(storage, "k.bin", b"second")
        assert storage.read_all("k.bin") == b"second" and storage.size("k.bin") == 6

    def test_reads_of_different_ranges_run_concurrently(self, storage: Storage) -> None:
        data = np.random.default_rng(0).integers(0, 256, 256 * KiB, dtype=np.uint8)
        self._put(storage, "big.bin", data.tobytes())
        got = np.zeros_like(data)
        errors: list[BaseException] = []

        def read(start: int) -> None:
            try:
                storage.read_range("big.bin", start, 32 * KiB, got[start:start + 32 * KiB])
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=read, args=(i * 32 * KiB,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors and np.array_equal(got, data)

    def test_read_ahead_is_a_hint_that_starts_and_stops(self, storage: Storage) -> None:
        data = bytes(range(256)) * 512
        self._put(storage, "ahead.bin", data)
        storage.keep_open("ahead.bin")
        ahead = storage.read_ahead("ahead.bin", [(0, 64 * KiB), (64 * KiB, 64 * KiB)], 64 * KiB)
        try:
            assert bytes(storage.read_range("ahead.bin", 0, 64 * KiB)) == data[:64 * KiB]
            if ahead is not None:
                ahead.done(0)
            assert bytes(storage.read_range("ahead.bin", 64 * KiB, 64 * KiB)) == data[64 * KiB:]
        finally:
            if ahead is not None:
                ahead.stop()
        storage.close()
        assert storage.read_all("ahead.bin") == data  # usable again after close
        with pytest.raises(FileNotFoundError):
            storage.keep_open("absent.bin")



class ObjectStoreContract(StorageContract):
    """The Storage contract plus the ObjectStore calls: for every storage that commits without rename."""

    @pytest.fixture
    def objects(self, storage: Storage) -> ObjectStore:
        assert not storage.renames and isinstance(storage, ObjectStore)
        return storage

    def test_names_and_urls_round_trip(self, objects: ObjectStore) -> None:
        url = objects.url_of("runs/model.h5")
        assert url.endswith("/runs/model.h5") and "://" in url
        assert objects.name_of(url) == "runs/model.h5" and objects.name_of("runs/model.h5") == "runs/model.h5"

    def test_put_if_creates_only_then_matches_the_version(self, objects: ObjectStore) -> None:
        assert objects.version("latest") is None
        first = objects.put_if("latest", b"ckpt-1", None)
        assert first and objects.version("latest") == first
        with pytest.raises(FileExistsError):
            objects.put_if("latest", b"ckpt-x", None)  # create-only: somebody is there
        second = objects.put_if("latest", b"ckpt-2", first)
        assert second != first and objects.read_all("latest") == b"ckpt-2"
        with pytest.raises(FileExistsError):
            objects.put_if("latest", b"ckpt-3", first)  # a stale version loses
        assert objects.read_all("latest") == b"ckpt-2"

    def test_list_info_and_list_children(self, objects: ObjectStore) -> None:
        objects.put("d/a.bin", b"12345")
        objects.put_many([("d/sub/x.bin", b"xx"), ("d/sub/y.bin", np.arange(3, dtype=np.uint8))])
        info = {i.name: i for i in objects.list_info("d")}
        assert {name: i.size for name, i in info.items()} == {"d/a.bin": 5, "d/sub/x.bin": 2, "d/sub/y.bin": 3}
        assert all(i.last_modified.tzinfo is not None for i in info.values())
        directories, files = objects.list_children("d")
        assert directories == ["d/sub"] and [f.name for f in files] == ["d/a.bin"]
        objects.delete_objects(["d/sub/x.bin", "d/never-there"])
        assert objects.list("d/sub") == ["d/sub/y.bin"]

    def test_upload_file_above_one_part_and_download_tree(self, objects: ObjectStore, tmp_path: Path) -> None:
        data = np.random.default_rng(1).integers(0, 256, objects.part_size + 3 * KiB, dtype=np.uint8).tobytes()
        source = tmp_path / "large.bin"
        source.write_bytes(data)
        objects.upload_file("up/large.bin", source)  # a multipart upload: whole or not at all
        objects.upload_file("up/small.bin", self._small(tmp_path))
        assert objects.size("up/large.bin") == len(data)
        target = tmp_path / "copy"
        assert objects.download_tree("up", target) == len(data) + 5
        assert (target / "large.bin").read_bytes() == data and (target / "small.bin").read_bytes() == b"small"
        assert objects.download_tree("up", tmp_path / "one", ["up/small.bin"]) == 5
        assert [p.name for p in (tmp_path / "one").iterdir()] == ["small.bin"]
        assert objects.sweep_uploads("up") == []  # nothing left incomplete

    @staticmethod
    def _small(tmp_path: Path) -> Path:
        path = tmp_path / "small.bin"
        path.write_bytes(b"small")
        return path

    def test_open_reader_is_a_seekable_file_and_objects_read_ahead(self, objects: ObjectStore) -> None:
        data = bytes(range(256)) * 64
        objects.put("r/blob.bin", data)
        with objects.open_reader("r/blob.bin") as file:
            assert file.seekable() and file.read(4) == data[:4]
            file.seek(1000)
            assert file.read(10) == data[1000:1010]
        chunks = {f"r/c{i}": bytes([i]) * (i + 1) for i in range(4)}
        objects.put_many(chunks.items())
        ahead = objects.read_ahead_objects([(name, len(value)) for name, value in chunks.items()], 64 * KiB)
        try:
            for name, value in chunks.items():
                assert objects.read_all(name) == value
        finally:
            if ahead is not None:
                ahead.stop()
        with pytest.raises(FileNotFoundError):
            objects.open_reader("r/absent.bin")

    def test_staged_writer_uploads_whole_files_and_leaves_pieces(self, objects: ObjectStore, tmp_path: Path) -> None:
        root = tmp_path / "stage"
        root.mkdir()
        staged = objects.staged_writer(root, "s/model.zarr")
        assert isinstance(staged, Storage)
        writer = staged.writer(str(root / "w" / "c" / "0"))
        writer.write_at(0, b"chunk bytes")
        writer.finish()
        staged.wait()
        assert staged.uploaded == ["s/model.zarr/w/c/0"]
        assert objects.read_all("s/model.zarr/w/c/0") == b"chunk bytes"
        assert not (root / "w" / "c" / "0").exists()  # went straight to its object
        staged.close()

    def test_sizes_and_existence_follow_writes(self, objects: Any) -> None:
        objects.put("e.bin", b"abc")
        assert objects.exists("e.bin") and objects.size("e.bin") == 3
        objects.delete("e.bin")
        assert not objects.exists("e.bin")
