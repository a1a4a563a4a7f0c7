"""Direct reads of a local repository's chunk objects (checkpoint/read/icechunk_layout.py): each chunk's place
read from the snapshot and manifest files, its bytes checked (size + crc32c), and every other case read
through Icechunk (a layout not parsed, an object missing or holding other bytes); hostile files refused."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import varstore as vs
from varstore.backends.zarr3.zstd_stream import ZstdStreamError, decode_bounded
from varstore.checkpoint.read import icechunk_layout, snapshot_reader
from varstore.checkpoint.read.icechunk_layout import ChunkPlace, LayoutError, SnapshotLayout, object_name
from varstore.checkpoint.read.snapshot_reader import open_snapshot
from varstore.errors import ChecksumError
from varstore.storage.icechunk_repo import IcechunkRepository, SnapshotView

pytest.importorskip("icechunk", reason="the [icechunk] extra is not installed")


def _model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    # over INLINE_CHUNK_BYTES (16 KiB): each kernel is a chunk object of its own, not inline in its manifest
    model = {f"layer_{i}/kernel": rng.standard_normal((128, 40 + i)).astype(np.float32) for i in range(4)}
    model["big"] = rng.standard_normal((600, 512)).astype(np.float32)  # > icechunk_layout.BLOCK_BYTES / 4 when shrunk
    model["embed"] = rng.standard_normal((16, 8)).astype(vs.dtypes.bfloat16)
    model["step"] = np.array(3, np.int64)  # 8 bytes: Icechunk keeps it inline in the manifest
    model["empty"] = np.zeros((0, 2), np.float32)
    return model


def _two_steps(tmp_path: Path, compression: str | None = None) -> tuple[Path, dict[str, np.ndarray], dict[str, np.ndarray]]:
    first = _model()
    manager = vs.CheckpointManager(tmp_path / "run", format="icechunk", compression=compression)
    manager.save(first, step=1)
    second = {name: value.copy() for name, value in first.items()}
    second["layer_2/kernel"] *= 2
    second["step"] = np.array(4, np.int64)
    manager.save(second, step=2)
    return tmp_path / "run", first, second


def _restored(location: str, model: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    targets = {name: np.full_like(value, 7) for name, value in model.items()}
    vs.restore(location, targets)
    return targets


def _exact(found: dict[str, np.ndarray], model: dict[str, np.ndarray]) -> bool:
    return all(found[n].dtype == v.dtype and found[n].tobytes() == v.tobytes() for n, v in model.items())


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_every_step_restores_bit_exactly_from_its_objects_without_opening_an_icechunk_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str | None) -> None:
    monkeypatch.setattr(icechunk_layout, "BLOCK_BYTES", 1 << 20)  # "big" gets its own buffer, the rest share blocks
    run, first, second = _two_steps(tmp_path, compression)
    for step, model in ((1, first), (2, second)):
        assert _exact(_restored(f"{run}@ckpt-{step}", model), model)
        with open_snapshot(f"{run}@ckpt-{step}") as reader:
            values = {name: reader.read_view(name) for name in reader.keys()}
            assert _exact(values, model)
            assert reader.snapshot._opened is None  # no chunk, no zarr.json went through Icechunk
            assert reader._places is not None and len(reader._places) == len(model) - 1  # all but the empty one
            assert not values["big"].flags.writeable and not values["layer_0/kernel"].flags.writeable
            assert reader.read("layer_1/kernel").flags.writeable
            assert reader._places["step"].inline is not None  # 8 bytes: kept inside the manifest file


def test_without_a_layout_every_read_goes_through_icechunk_and_stays_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, _, second = _two_steps(tmp_path)

    def refuse(path: str, kind: int) -> None:
        raise LayoutError("not this layout")

    monkeypatch.setattr(icechunk_layout, "_flatbuffer", refuse)
    assert _exact(_restored(f"{run}@ckpt-2", second), second)
    with open_snapshot(f"{run}@ckpt-2") as reader:
        assert reader._layout is None
        assert _exact({name: reader.read(name) for name in reader.keys()}, second)
        assert reader.snapshot._opened is not None


def test_an_object_missing_or_holding_other_bytes_is_read_through_icechunk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, _, second = _two_steps(tmp_path)
    places = SnapshotLayout.places
    swapped: list[str] = []

    def misplaced(self: SnapshotLayout, paths: list[str]) -> dict[str, ChunkPlace]:
        found = places(self, paths)
        if "layer_0/kernel" in found and "layer_1/kernel" in found:
            # layer_0 pointed at a missing object, layer_1 past its object's end, layer_2 at layer_3's
            # object cut to layer_2's size (other bytes of the right size)
            found["layer_0/kernel"] = ChunkPlace("0" * 20, 0, found["layer_0/kernel"].length)
            found["layer_1/kernel"] = ChunkPlace(found["layer_1/kernel"].name, 8, found["layer_1/kernel"].length)
            found["layer_2/kernel"] = ChunkPlace(found["layer_3/kernel"].name, 0, found["layer_2/kernel"].length)
            swapped.append("yes")
        return found

    fetched: list[str] = []
    fetch = SnapshotView.fetch

    def counted(self: SnapshotView, key: str) -> Any:
        fetched.append(key)
        return fetch(self, key)

    monkeypatch.setattr(SnapshotLayout, "places", misplaced)
    monkeypatch.setattr(SnapshotView, "fetch", counted)
    assert _exact(_restored(f"{run}@ckpt-2", second), second)
    assert swapped and sorted(fetched) == [f"layer_{i}/kernel/c/0/0" for i in range(3)]


def test_a_damaged_object_still_fails_its_crc32c_after_the_icechunk_read(tmp_path: Path) -> None:
    run, _, second = _two_steps(tmp_path)
    with open_snapshot(f"{run}@ckpt-2") as reader:
        reader.read("layer_0/kernel")
        assert reader._places is not None
        place = reader._places["layer_1/kernel"]
    assert place.name is not None
    target = run / "chunks" / place.name
    data = bytearray(target.read_bytes())
    data[10] ^= 0xFF
    os.chmod(target, 0o644)
    target.write_bytes(bytes(data))
    targets = {name: np.zeros_like(value) for name, value in second.items()}
    with pytest.raises(ChecksumError, match="layer_1/kernel.*crc32c mismatch"):
        vs.restore(f"{run}@ckpt-2", targets)
    assert all(not targets[n].any() for n in targets)  # all-or-nothing: no target changed


def test_damaged_snapshot_and_manifest_files_raise_layout_errors_only(tmp_path: Path) -> None:
    run, _, second = _two_steps(tmp_path)
    snapshot_id = IcechunkRepository(run).readonly("ckpt-2").snapshot_id
    layout = SnapshotLayout(run, snapshot_id)
    paths = list(layout.documents)
    assert set(second) - {"empty"} <= set(layout.places(paths))
    body = icechunk_layout._flatbuffer(str(run / "snapshots" / snapshot_id), 1).data
    rng = np.random.default_rng(0)
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    header = (run / "snapshots" / snapshot_id).read_bytes()[:39]
    header = header[:38] + b"\x00"  # the same file, stored uncompressed
    outcomes = {"parsed": 0, "refused": 0}
    for _ in range(150):
        damaged = bytearray(body)
        for at in rng.integers(0, len(damaged), size=int(rng.integers(1, 8))):
            damaged[int(at)] = int(rng.integers(0, 256))
        (copy / "snapshots" / snapshot_id).write_bytes(header + bytes(damaged))
        try:
            found = SnapshotLayout(copy, snapshot_id)
            found.places(list(found.documents))
            outcomes["parsed"] += 1
        except LayoutError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == 150
    (copy / "snapshots" / snapshot_id).write_bytes(header + body)
    manifests = sorted((copy / "manifests").iterdir())
    manifest_body = icechunk_layout._flatbuffer(str(manifests[0]), 2).data
    manifest_header = manifests[0].read_bytes()[:38] + b"\x00"
    for _ in range(100):  # every manifest damaged the same way: places() parses or refuses, nothing else
        damaged = bytearray(manifest_body)
        for at in rng.integers(0, len(damaged), size=int(rng.integers(1, 6))):
            damaged[int(at)] = int(rng.integers(0, 256))
        for path in manifests:
            path.write_bytes(manifest_header + bytes(damaged))
        try:
            SnapshotLayout(copy, snapshot_id).places(paths)
        except LayoutError:
            pass
    for cut in (0, 10, 39, 60, len(body) // 2):  # truncated files, wrong magic, wrong type
        (copy / "snapshots" / snapshot_id).write_bytes((header + body)[:cut])
        with pytest.raises(LayoutError):
            SnapshotLayout(copy, snapshot_id)
    (copy / "snapshots" / snapshot_id).write_bytes(header[:37] + b"\x02\x00" + body)
    with pytest.raises(LayoutError, match="file type 2"):
        SnapshotLayout(copy, snapshot_id)
    with pytest.raises(LayoutError, match="base-32"):
        SnapshotLayout(copy, "../../outside/000000")


def test_object_names_are_crockford_base32_and_stay_inside_the_repository() -> None:
    rng = np.random.default_rng(1)
    for size in (8, 12):
        for _ in range(200):
            raw = rng.integers(0, 256, size=size, dtype=np.uint8).tobytes()
            name = object_name(raw)
            assert len(name) == -(-size * 8 // 5) and set(name) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    assert object_name(bytes(12)) == "0" * 20
    assert object_name(b"\xff" * 12) == "Z" * 19 + "G"  # 96 bits: the last character holds 1 bit + 4 zero bits


def test_a_chunk_place_is_read_only_within_its_object_and_its_limit(tmp_path: Path) -> None:
    run, first, _ = _two_steps(tmp_path)
    snapshot_id = IcechunkRepository(run).readonly("ckpt-1").snapshot_id
    layout = SnapshotLayout(run, snapshot_id)
    place = layout.places(["layer_0/kernel"])["layer_0/kernel"]
    data = layout.read(place, place.length)
    assert data is not None and bytes(data) == first["layer_0/kernel"].tobytes()
    assert layout.read(place, place.length - 1) is None  # longer than the caller allows: nothing allocated
    assert layout.read(ChunkPlace(place.name, 1, place.length), place.length) is None  # past the object's end
    assert layout.read(ChunkPlace(place.name, -1, 4), 8) is None
    assert layout.read(ChunkPlace("0" * 20, 0, 4), 8) is None  # no such object (garbage-collected)
    assert layout.read(ChunkPlace(None, 0, 3, b"abc"), 3) == b"abc"


def _frame(blocks: list[tuple[int, int, bytes]]) -> bytes:
    """A zstd frame (no declared size, a 1-byte window descriptor) of (type, size, payload) blocks."""
    out = bytearray(b"\x28\xb5\x2f\xfd\x00\x58")
    for k, (kind, size, payload) in enumerate(blocks):
        last = 1 if k == len(blocks) - 1 else 0
        out += ((size << 3) | (kind << 1) | last).to_bytes(3, "little") + payload
    return bytes(out)


def test_zstd_streams_are_bounded_by_their_block_headers_before_decoding() -> None:
    raw = _frame([(0, 5, b"hello"), (1, 3, b"!")])  # a raw block, then an RLE block
    assert decode_bounded(raw, 8) == b"hello!!!"
    with pytest.raises(ZstdStreamError, match="more than the 7 allowed"):
        decode_bounded(raw, 7)
    bomb = _frame([(1, 128 << 10, b"\x00")] * 64)  # 260 bytes that ask for 8 MiB
    with pytest.raises(ZstdStreamError, match="8,388,608 bytes"):
        decode_bounded(bomb, 1 << 20)
    for bad in (b"", b"\x00" * 12, raw[:-1], raw + b"\x00", _frame([(3, 1, b"\x00")])):
        with pytest.raises(ZstdStreamError):
            decode_bounded(bad, 1 << 20)


def test_a_direct_read_restores_the_same_values_as_icechunk_for_every_kept_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, first, second = _two_steps(tmp_path)
    direct = {step: _restored(f"{run}@ckpt-{step}", model) for step, model in ((1, first), (2, second))}
    monkeypatch.setattr(snapshot_reader, "_local_layout", lambda snapshot: None)
    through = {step: _restored(f"{run}@ckpt-{step}", model) for step, model in ((1, first), (2, second))}
    assert all(_exact(direct[step], through[step]) for step in (1, 2))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="symlinks and FIFOs as POSIX makes them")
def test_a_symlinked_object_is_read_through_icechunk_and_a_fifo_is_never_opened_blocking(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, _, second = _two_steps(tmp_path)
    with open_snapshot(f"{run}@ckpt-2") as reader:
        reader.read("layer_0/kernel")
        assert reader._places is not None
        name = reader._places["layer_0/kernel"].name
    assert name is not None
    moved = tmp_path / "elsewhere"
    (run / "chunks" / name).rename(moved)
    (run / "chunks" / name).symlink_to(moved)
    fetched: list[str] = []
    fetch = SnapshotView.fetch

    def counted(self: SnapshotView, key: str) -> Any:
        fetched.append(key)
        return fetch(self, key)

    monkeypatch.setattr(SnapshotView, "fetch", counted)
    assert _exact(_restored(f"{run}@ckpt-2", second), second)
    assert fetched == ["layer_0/kernel/c/0/0"]  # the link itself is not followed by the direct read
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(LayoutError, match="not a regular file"):
        icechunk_layout._flatbuffer(str(fifo), 1)
