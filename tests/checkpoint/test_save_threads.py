"""A blocking local save: the caller writes every value (its crc32c taken piece by piece on the way) while a
helper thread makes the arrays ahead (checkpoint/write/metadata_ahead.py); failures on either side leave nothing."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import crc32c
import h5py
import numpy as np
import pytest

import varstore as vs
from varstore.backends.hdf5.store import Hdf5Writer
from varstore.backends.zarr3.store import Zarr3Writer
from varstore.checkpoint.write import write_engine
from varstore.storage.local import DIGEST_PIECE_BYTES, LocalWriter

VALUES = {f"layer_{i}/kernel": np.random.default_rng(i).standard_normal((300 + i, 1000)).astype(np.float32)
          for i in range(5)}  # 1.2 MB each: several pieces of DIGEST_PIECE_BYTES
SMALL = [f"layer_{i}/bias" for i in range(3)]
VALUES.update({name: np.arange(7 + i, dtype=np.float32) for i, name in enumerate(SMALL)})
VALUES["odd"] = np.arange(DIGEST_PIECE_BYTES + 13, dtype=np.uint8)  # a last piece of 13 bytes
WRITERS = {".h5": Hdf5Writer, ".zarr": Zarr3Writer}


def _metadata_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "varstore-metadata"]


def _stored_checksums(path: Path) -> dict[str, str]:
    if path.suffix == ".h5":
        with h5py.File(path, "r") as f:
            return {name: f[name].attrs["checksum"] for name in VALUES}
    return {name: json.loads((path / name / "zarr.json").read_text())["attributes"]["checksum"]
            for name in VALUES}


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_the_caller_writes_the_values_while_a_helper_makes_the_arrays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    writes: list[str] = []
    made: list[str] = []
    real_write, real_create = LocalWriter.write_at_digest, WRITERS[suffix].create_array

    def recording_write(self: LocalWriter, *args: object, **kwargs: object) -> int:
        writes.append(threading.current_thread().name)
        return real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    def recording_create(self: object, path: str, *args: object, **kwargs: object) -> object:
        made.append(f"{threading.current_thread().name}:{path}")
        return real_create(self, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LocalWriter, "write_at_digest", recording_write)
    monkeypatch.setattr(WRITERS[suffix], "create_array", recording_create)
    path = vs.save(tmp_path / f"ck{suffix}", VALUES)
    assert writes == [threading.current_thread().name] * len(VALUES)  # every value, by the caller
    assert {entry for entry in made if entry.startswith("varstore-metadata:")} == {
        f"varstore-metadata:{name}" for name in VALUES}
    assert not _metadata_threads()
    # each checksum, taken on the way, is the crc32c of the value's bytes (computed here by the crc32c package)
    assert _stored_checksums(path) == {name: f"crc32c:{crc32c.crc32c(value.tobytes()):08x}"
                                       for name, value in VALUES.items()}
    loaded = vs.load(path)
    for name, value in VALUES.items():
        np.testing.assert_array_equal(loaded[name], value)
    with vs.open_checkpoint(path) as ck:
        ck.verify()


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_an_array_that_cannot_be_made_fails_the_save_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    real_create = WRITERS[suffix].create_array

    def failing(self: object, path: str, *args: object, **kwargs: object) -> object:
        if path == "layer_3/kernel":
            raise OSError(28, "No space left on device")
        return real_create(self, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(WRITERS[suffix], "create_array", failing)
    with pytest.raises(Exception, match="No space left on device"):
        vs.save(tmp_path / f"ck{suffix}", VALUES)
    assert list(tmp_path.iterdir()) == []
    assert not _metadata_threads()


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_a_value_that_fails_while_arrays_are_made_ahead_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    real_value = write_engine.host_value
    fetched: list[str] = []

    def failing(entry: object, record: object, where: Path) -> np.ndarray:
        fetched.append(record.name)  # type: ignore[attr-defined]
        if record.name == "layer_2/kernel":  # type: ignore[attr-defined]
            raise MemoryError("no room for a host copy")
        return real_value(entry, record, where)  # type: ignore[arg-type]

    monkeypatch.setattr(write_engine, "host_value", failing)
    with pytest.raises(MemoryError, match="no room for a host copy"):
        vs.save(tmp_path / f"ck{suffix}", VALUES)
    assert "layer_2/kernel" in fetched and list(tmp_path.iterdir()) == []
    assert not _metadata_threads()


def test_saves_that_keep_the_writer_thread_still_checksum_every_value(tmp_path: Path) -> None:
    """An async save (blocking=False) and a compressed Zarr save keep the writer thread; same checksums."""
    handle = vs.save(tmp_path / "async.h5", VALUES, blocking=False)
    path = handle.wait() if hasattr(handle, "wait") else handle
    compressed = vs.save(tmp_path / "z.zarr", VALUES, compression="zstd")
    for each in (Path(path), compressed):
        with vs.open_checkpoint(each) as ck:
            ck.verify()
            for name, value in VALUES.items():
                np.testing.assert_array_equal(ck[name], value)
    assert _stored_checksums(Path(path)) == {name: f"crc32c:{crc32c.crc32c(value.tobytes()):08x}"
                                             for name, value in VALUES.items()}


def test_a_zarr_array_whose_attributes_never_come_is_written_at_close(tmp_path: Path) -> None:
    writer = Zarr3Writer(tmp_path / "z.zarr")
    writer.create_array("a/w", np.dtype("float32"), (3,), {"dtype": "float32"}, hold_attrs=True)
    writer.create_array("a/v", np.dtype("float32"), (3,), {"dtype": "float32"}, hold_attrs=True)
    assert not (tmp_path / "z.zarr/a/w/zarr.json").exists()  # held
    writer.add_attrs("a/v", {"checksum": "crc32c:00000001"})
    writer.close()
    assert json.loads((tmp_path / "z.zarr/a/w/zarr.json").read_text())["attributes"] == {"dtype": "float32"}
    assert json.loads((tmp_path / "z.zarr/a/v/zarr.json").read_text())["attributes"] == {
        "dtype": "float32", "checksum": "crc32c:00000001"}


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_packed_small_values_are_written_by_the_caller_too(tmp_path: Path, suffix: str) -> None:
    values = {f"s/v{i:03d}": np.full(5 + i % 3, i, np.float32) for i in range(200)} | {"big": VALUES["odd"]}
    path = vs.save(tmp_path / f"ck{suffix}", values, layout="packed")
    assert not _metadata_threads()
    with vs.open_checkpoint(path) as ck:
        ck.verify()
        for name, value in values.items():
            np.testing.assert_array_equal(ck[name], value)


def _layout(path: Path) -> tuple[int, dict[str, int | None]]:
    with h5py.File(path, "r") as f:
        return path.stat().st_size, {name: f[name].id.get_offset() for name in f if name != "_varstore"}


def test_the_same_hdf5_save_lays_out_the_same_file_however_the_threads_interleave(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HDF5 places a scalar's value when it is written: the caller writes scalars once every array is made, so a
    helper running behind or ahead of the caller gives the same offsets and size (CI once saw another size)."""
    values = {"a": VALUES["layer_0/kernel"], "step": np.int64(7), "b": VALUES["layer_1/kernel"],
              "rate": np.float32(0.5), "c": VALUES["layer_2/kernel"], "d": VALUES["layer_3/kernel"]}
    real_create, real_write = Hdf5Writer.create_array, LocalWriter.write_at_digest
    scalar_writes: list[str] = []
    real_scalar = Hdf5Writer.write_array

    def helper_behind(self: Hdf5Writer, path: str, *args: object, **kwargs: object) -> object:
        if threading.current_thread().name == "varstore-metadata" and path != "a":
            threading.Event().wait(0.03)  # the caller reaches each scalar before the arrays after it exist
        return real_create(self, path, *args, **kwargs)  # type: ignore[arg-type]

    def caller_behind(self: LocalWriter, *args: object, **kwargs: object) -> int:
        threading.Event().wait(0.03)  # the helper has made every array before the caller reaches a scalar
        return real_write(self, *args, **kwargs)  # type: ignore[arg-type]

    def recording_scalar(self: Hdf5Writer, path: str, value: np.ndarray) -> None:
        scalar_writes.append(path)
        real_scalar(self, path, value)

    monkeypatch.setattr(Hdf5Writer, "write_array", recording_scalar)
    layouts = []
    for slow in ((Hdf5Writer, "create_array", helper_behind), (LocalWriter, "write_at_digest", caller_behind)):
        with monkeypatch.context() as patch:
            patch.setattr(*slow)
            layouts.append(_layout(vs.save(tmp_path / f"{slow[1]}.h5", values)))
    assert scalar_writes == ["step", "rate"] * 2  # the scalars went through the library, as the case needs
    assert layouts[0] == layouts[1]
    assert layouts[0][1]["step"] is not None and layouts[0][1]["rate"] is not None
    loaded = vs.load(tmp_path / "create_array.h5")
    assert loaded["step"] == 7 and loaded["rate"] == np.float32(0.5)
