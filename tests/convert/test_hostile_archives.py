"""Hostile pickles, zips and headers, built from bytes: each is refused with a typed error naming the file.

The attacks (issue 26): a `.pt` whose dict contains itself, a 10-byte
LONG_BINPUT that made the C unpickler allocate 2.3 GiB, zip members
compressed with BZIP2 (zipfile inflates a bzip2 chunk whole: 2.8 KB became
2.6 GiB), a `.keras` whose deflated weights were extracted into $TMPDIR and
left there, overlapping safetensors offsets, many views of one storage,
and length-prefixed arrays of a million items. Memory claims run in a
child process under RLIMIT_AS (tests/reliability/_hostile_run.py).
"""

from __future__ import annotations

import json
import pickle
import struct
import tempfile
import zipfile
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.reliability._hostile_run import run_hostile
from varstore.formats.tensorflow import _bundle_format as tf_format
from varstore.formats.keras import reader as keras_module
from varstore.formats.tensorflow._leveldb_table import crc32c, mask_crc
from varstore.formats._restricted_pickle import unpickle
from varstore.formats.gguf.reader import GGUFReader
from varstore.formats.keras.reader import open_keras
from varstore.formats.plain.npz import NpzReader
from varstore.formats.pytorch.reader import TorchReader
from varstore.formats.safetensors.single import SafetensorsReader
from varstore.formats.safetensors.sharded import ShardedSafetensorsReader
from varstore.errors import CorruptCheckpointError, NotACheckpointError, UnsafeCheckpointError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
#: A bzip2 stream of 3 GiB of zeros (2,289 bytes; see fixtures/README.md), its inflated size and CRC-32.
BZIP2_BOMB = FIXTURES / "hostile/zeros_3gib.bz2"
BZIP2_BOMB_SIZE = 3 << 30
BZIP2_BOMB_CRC = 0x480BBE37
#: Address-space limit of the child runs (bytes): about 1 GiB above what NumPy and h5py map at import.
RLIMIT = 2 << 30

STORAGE = b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu"


def _torch_zip(path: Path, data_pkl: bytes, storages: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        archive.writestr("archive/byteorder", "little")
        for key, data in (storages or {}).items():
            archive.writestr(f"archive/data/{key}", data)
    return path


def _zip_with_raw_member(path: Path, members: list[tuple[str, int, bytes, int, int]]) -> Path:
    """A zip whose members are (name, method, compressed bytes, inflated size, crc32), written by hand."""
    body, central = b"", b""
    for name, method, data, size, crc in members:
        raw_name = name.encode()
        zip64 = size >= 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, size, len(data)) if zip64 else b""
        sizes = (0xFFFFFFFF, 0xFFFFFFFF) if zip64 else (len(data), size)
        version = 46 if method == zipfile.ZIP_BZIP2 else 20
        local = struct.pack("<4sHHHHHIII HH".replace(" ", ""), b"PK\x03\x04", version, 0, method, 0, 0x21,
                            crc, *sizes, len(raw_name), len(extra)) + raw_name + extra
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", version, version, 0, method, 0, 0x21, crc,
                               *sizes, len(raw_name), len(extra), 0, 0, 0, 0, len(body)) + raw_name + extra
        body += local + data
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(body), 0)
    path.write_bytes(body + central + end)
    return path


def _bomb_member(name: str) -> tuple[str, int, bytes, int, int]:
    return name, zipfile.ZIP_BZIP2, BZIP2_BOMB.read_bytes(), BZIP2_BOMB_SIZE, BZIP2_BOMB_CRC


# ------------------------------------------------------------------ pickles
def test_a_dict_that_contains_itself_is_refused(tmp_path: Path) -> None:
    looped: dict[str, object] = {"lr": 0.1}
    looped["self"] = looped
    path = _torch_zip(tmp_path / "loop.pt", pickle.dumps(looped, protocol=2))
    with pytest.raises(UnsafeCheckpointError, match=r"loop\.pt.*a pickled dict contains itself"):
        TorchReader(path)


def test_a_dict_that_contains_itself_stays_small_in_a_child(tmp_path: Path) -> None:
    looped: dict[str, object] = {}
    looped["a"] = [looped, {"b": looped}]
    path = _torch_zip(tmp_path / "loop.pt", pickle.dumps(looped, protocol=2))
    outcome = run_hostile("api", ["ls", str(path)], rlimit_as=RLIMIT, timeout_s=120)
    assert (outcome.status, outcome.error) == ("typed", "UnsafeCheckpointError"), outcome
    assert "contains itself" in outcome.message and "loop.pt" in outcome.message


def test_shared_children_that_double_at_every_level_are_refused(tmp_path: Path) -> None:
    node: object = 1.0
    for _ in range(60):  # 2**60 names from 60 dicts
        node = {"a": node, "b": node}
    data = pickle.dumps(node, protocol=2)
    assert len(data) < 2000
    with pytest.raises(UnsafeCheckpointError, match=r"flattens to more than \d+ names"):
        TorchReader(_torch_zip(tmp_path / "doubling.pt", data))


def test_a_shared_tuple_is_read_under_every_name(tmp_path: Path) -> None:
    betas = (0.9, 0.999)  # torch shares one tuple between an optimizer's param groups
    data = pickle.dumps({"opt": [{"betas": betas, "lr": 0.1}, {"betas": betas, "lr": 0.2}]}, protocol=2)
    reader = TorchReader(_torch_zip(tmp_path / "shared.pt", data))
    assert reader.metadata["non_tensor"] == {"opt.0.betas": [0.9, 0.999], "opt.0.lr": 0.1,
                                             "opt.1.betas": [0.9, 0.999], "opt.1.lr": 0.2}
    reader.close()


def test_a_far_memo_index_is_refused_before_the_unpickler_allocates() -> None:
    bomb = b"\x80\x02N" + b"r" + struct.pack("<I", 150_000_000) + b"."  # LONG_BINPUT 150000000
    with pytest.raises(UnsafeCheckpointError, match="memo entry 150000000 after only 0 entries"):
        unpickle(bomb, "PyTorch file 'memo.pt'")
    with pytest.raises(UnsafeCheckpointError, match="memo entry 7 after only 1"):
        unpickle(b"\x80\x02Nq\x00Nq\x07.", "PyTorch file 'memo.pt'")
    assert unpickle(b"\x80\x02Nq\x00h\x00\x86q\x01.", "ok") == (None, None)  # in-order PUTs and a GET


def test_a_far_memo_index_stays_small_in_a_child(tmp_path: Path) -> None:
    path = _torch_zip(tmp_path / "memo.pt", b"\x80\x02}r" + struct.pack("<I", 150_000_000) + b".")
    outcome = run_hostile("api", ["ls", str(path)], rlimit_as=RLIMIT, timeout_s=120)
    assert (outcome.status, outcome.error) == ("typed", "UnsafeCheckpointError"), outcome
    assert "memo.pt" in outcome.message and "150000000" in outcome.message


def test_many_views_of_one_storage_are_refused(tmp_path: Path) -> None:
    numel = 1 << 16  # a 256 KiB storage viewed whole 100 times: 25 MiB of views
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n(" + STORAGE + b"J" + struct.pack("<i", numel) + b"tQK\x00J"
              + struct.pack("<i", numel) + b"\x85K\x01\x85\x89}tR")
    body = b"\x80\x02}(" + b"".join(b"X\x03\x00\x00\x00" + b"v%02d" % i + tensor for i in range(100)) + b"u."
    path = _torch_zip(tmp_path / "views.pt", body, {"0": b"\0" * (4 * numel)})
    with pytest.raises(UnsafeCheckpointError, match=r"views\.pt.*storage '0' \(262144 bytes\) add up to "
                                                    r"\d+ bytes, more than 64 times"):
        TorchReader(path)


def test_a_state_dict_with_two_names_for_one_storage_still_reads(tmp_path: Path) -> None:
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n(" + STORAGE + b"K\x04tQK\x00K\x04\x85K\x01\x85\x89}tR")
    body = b"\x80\x02}(X\x01\x00\x00\x00a" + tensor + b"X\x01\x00\x00\x00b" + tensor + b"u."
    values = np.arange(4, dtype=np.float32)
    with TorchReader(_torch_zip(tmp_path / "tied.pt", body, {"0": values.tobytes()})) as reader:
        assert reader.keys() == ["a", "b"]
        np.testing.assert_array_equal(reader.read("b"), values)


# ------------------------------------------------------------------ zip members
@pytest.mark.parametrize("kind", ["pt", "npz", "keras"])
def test_a_bzip2_member_is_refused_naming_member_and_method(tmp_path: Path, kind: str) -> None:
    member = {"pt": "archive/data.pkl", "npz": "w.npy", "keras": "metadata.json"}[kind]
    members = [_bomb_member(member)]
    if kind == "keras":
        members.append(("model.weights.h5", zipfile.ZIP_STORED, b"x", 1, zlib.crc32(b"x")))
    path = _zip_with_raw_member(tmp_path / f"bomb.{kind}", members)
    opener = {"pt": TorchReader, "npz": NpzReader, "keras": open_keras}[kind]
    with pytest.raises(UnsafeCheckpointError, match=rf"bomb\.{kind}.*member '{member}' is compressed with bzip2"):
        opener(path)


@pytest.mark.parametrize("kind", ["pt", "npz", "keras"])
def test_a_bzip2_bomb_stays_small_in_a_child(tmp_path: Path, kind: str) -> None:
    member = {"pt": "archive/data.pkl", "npz": "w.npy", "keras": "model.weights.h5"}[kind]
    path = _zip_with_raw_member(tmp_path / f"bomb.{kind}", [_bomb_member(member)])
    assert path.stat().st_size < 4096
    for action in (["cli", ["ls", str(path)]], ["api", ["read_all", str(path)]]):
        outcome = run_hostile(action[0], action[1], rlimit_as=RLIMIT, timeout_s=120)  # type: ignore[arg-type]
        if action[0] == "api":
            assert (outcome.status, outcome.error) == ("typed", "UnsafeCheckpointError"), outcome
            assert "bzip2" in outcome.message and f"bomb.{kind}" in outcome.message
        else:
            assert outcome.status == "exit2" and "bzip2" in outcome.stderr, outcome
        assert outcome.tmp_left == []


def test_a_member_is_never_read_past_its_declared_size(tmp_path: Path) -> None:
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = b"\x80\x02}." + b"X\x01\x00\x00\x00a" * 100_000  # 4 declared bytes, then 500 KB more
    data = deflate.compress(payload) + deflate.flush()
    path = _zip_with_raw_member(tmp_path / "liar.pt", [("archive/data.pkl", zipfile.ZIP_DEFLATED, data, 4,
                                                        zlib.crc32(payload[:4]))])
    with TorchReader(path) as reader:  # the 4 declared bytes are an empty dict; nothing past them is read
        assert reader.keys() == [] and reader.metadata == {}


def test_a_long_byteorder_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "order.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}.")
        archive.writestr("archive/byteorder", "little" * 100)
    with pytest.raises(UnsafeCheckpointError, match=r"'archive/byteorder' declares 600 bytes, more than the 16"):
        TorchReader(path)


def _weights_h5(path: Path, keras_layout: bool) -> bytes:
    with h5py.File(path, "w") as f:
        f.create_dataset("layers/dense/vars/0" if keras_layout else "plain/data", data=np.zeros((64, 64)))
    return path.read_bytes()


@pytest.mark.parametrize("keras_layout", [False, True])
def test_a_deflated_keras_weights_member_leaves_nothing_in_tmpdir(tmp_path: Path, keras_layout: bool) -> None:
    weights = _weights_h5(tmp_path / "w.h5", keras_layout)
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.4.1"}))
        archive.writestr("model.weights.h5", weights)
    outcome = run_hostile("api", ["read_all", str(path)], rlimit_as=RLIMIT, timeout_s=120)
    if keras_layout:
        assert (outcome.status, outcome.result) == ("ok", ["layers/dense/vars/0"]), outcome
    else:
        assert (outcome.status, outcome.error) == ("typed", "NotACheckpointError"), outcome
    assert outcome.tmp_left == []


@pytest.mark.parametrize("where", ["walk", "copy"])
def test_a_keyboard_interrupt_while_opening_a_keras_archive_leaves_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    weights = _weights_h5(tmp_path / "w.h5", True)
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("model.weights.h5", weights)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    if where == "walk":
        monkeypatch.setattr(keras_module, "HDF5Walker", interrupt)
    else:
        monkeypatch.setattr(zipfile.ZipExtFile, "read", interrupt)
    with pytest.raises(KeyboardInterrupt):
        open_keras(path)
    assert list(scratch.iterdir()) == []


def test_a_keras_weights_member_that_claims_more_than_deflate_can_make_is_refused(tmp_path: Path) -> None:
    data = zlib.compressobj(9, zlib.DEFLATED, -15).compress(b"x")
    path = _zip_with_raw_member(tmp_path / "claim.keras", [("model.weights.h5", zipfile.ZIP_DEFLATED, data,
                                                             1 << 40, 0)])
    with pytest.raises(UnsafeCheckpointError, match=r"claim\.keras.*declares 1099511627776 bytes from \d+ "
                                                    r"compressed, more than deflate can produce"):
        open_keras(path)


# ------------------------------------------------------------------ safetensors aliasing
def _safetensors(path: Path, offsets: dict[str, tuple[int, int]], data_size: int) -> Path:
    header = {name: {"dtype": "U8", "shape": [end - begin], "data_offsets": [begin, end]}
              for name, (begin, end) in offsets.items()}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(range(data_size)))
    return path


@pytest.mark.parametrize("offsets", [{"a": (0, 8), "b": (4, 12)}, {"a": (0, 12), "b": (4, 8)},
                                     {"a": (0, 8), "b": (0, 8)}])
def test_overlapping_safetensors_offsets_are_refused(tmp_path: Path, offsets: dict[str, tuple[int, int]]) -> None:
    path = _safetensors(tmp_path / "alias.safetensors", offsets, 12)
    with pytest.raises(UnsafeCheckpointError, match=r"alias\.safetensors.*tensors 'a' \(data_offsets \[0, \d+\]\) "
                                                    r"and 'b' \(\[\d+, \d+\]\) overlap"):
        SafetensorsReader(path)


def test_adjacent_empty_and_gapped_safetensors_offsets_still_read(tmp_path: Path) -> None:
    path = _safetensors(tmp_path / "ok.safetensors", {"a": (0, 4), "e": (4, 4), "b": (4, 8), "c": (10, 12)}, 12)
    reader = SafetensorsReader(path)
    assert reader.read("b").tolist() == [4, 5, 6, 7] and reader.read("c").tolist() == [10, 11]
    reader.close()


def test_overlapping_offsets_in_a_shard_are_refused(tmp_path: Path) -> None:
    _safetensors(tmp_path / "model-00001-of-00001.safetensors", {"a": (0, 8), "b": (6, 10)}, 10)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00001.safetensors", "b": "model-00001-of-00001.safetensors"}}))
    with pytest.raises(UnsafeCheckpointError, match=r"model-00001-of-00001\.safetensors.*'a'.*'b'.*overlap"):
        ShardedSafetensorsReader(tmp_path)


# ------------------------------------------------------------------ length-prefixed arrays
def test_a_million_tf_string_lengths_decode_with_their_checksum() -> None:
    strings = [b"", b"ab", b"x" * 200] * 333_334
    lengths = b"".join(bytes([len(s)]) if len(s) < 128 else bytes([0x80 | len(s) & 0x7F, len(s) >> 7])
                       for s in strings)
    crc = crc32c(b"".join(struct.pack("<I", len(s)) for s in strings))
    raw = lengths + struct.pack("<I", mask_crc(crc)) + b"".join(strings)
    elements, whole = tf_format.decode_string_tensor(raw, len(strings), "variable 's'")
    assert elements[:4] == [b"", b"ab", b"x" * 200, b""] and len(elements) == len(strings)
    assert whole == crc32c(b"".join(strings), crc32c(struct.pack("<I", mask_crc(crc)), crc))
    with pytest.raises(CorruptCheckpointError, match="variable 's': truncated varint"):
        tf_format.decode_string_tensor(b"\x80" * 20, 3, "variable 's'")
    with pytest.raises(CorruptCheckpointError, match="varint longer than 10 bytes"):
        tf_format.decode_string_tensor(b"\x80" * 11 + b"\x01" * 10, 2, "variable 's'")


def _gguf(path: Path, kvs: bytes, kv_count: int, tensors: bytes = b"", tensor_count: int = 0) -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, tensor_count, kv_count) + kvs + tensors + b"\0" * 64)
    return path


def _gguf_string(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def test_a_million_item_gguf_string_array_reads(tmp_path: Path) -> None:
    count = 1_000_000
    tokens = b"".join(_gguf_string(b"t%d" % i) for i in range(count))
    kvs = (_gguf_string(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, count) + tokens
           + _gguf_string(b"general.name") + struct.pack("<I", 8) + _gguf_string(b"tiny"))
    reader = GGUFReader(_gguf(tmp_path / "vocab.gguf", kvs, 2))
    tokens_read = reader.metadata["gguf"]["tokenizer.ggml.tokens"]
    assert len(tokens_read) == count and tokens_read[:2] == ["t0", "t1"] and tokens_read[-1] == "t999999"
    assert reader.metadata["gguf"]["general.name"] == "tiny"


def test_a_gguf_string_array_that_runs_past_the_file_is_refused(tmp_path: Path) -> None:
    kvs = _gguf_string(b"tokens") + struct.pack("<IIQ", 9, 8, 3) + _gguf_string(b"a") + struct.pack("<Q", 1 << 40)
    with pytest.raises(CorruptCheckpointError, match=r"short\.gguf.*the value of key 'tokens' needs \d+ bytes"):
        GGUFReader(_gguf(tmp_path / "short.gguf", kvs, 1))


def test_a_0d_quantized_gguf_tensor_is_refused(tmp_path: Path) -> None:
    tensor = _gguf_string(b"q") + struct.pack("<I", 0) + struct.pack("<IQ", 8, 0)  # rank 0, Q8_0, offset 0
    with pytest.raises(CorruptCheckpointError, match=r"zero\.gguf.*tensor 'q' is 0-d but of quantized type Q8_0"):
        GGUFReader(_gguf(tmp_path / "zero.gguf", b"", 0, tensor, 1))


def test_a_gguf_shape_too_large_for_numpy_is_refused(tmp_path: Path) -> None:
    tensor = _gguf_string(b"w") + struct.pack("<I", 8) + struct.pack("<8Q", 0, *([400] * 7)) + struct.pack("<IQ", 0, 0)
    path = tmp_path / "wide.gguf"
    _gguf(path, b"", 0, tensor, 1)
    path.write_bytes(path.read_bytes() + b"\0" * 500)  # every dim fits the file; their product does not fit NumPy
    with pytest.raises(CorruptCheckpointError, match=r"wide\.gguf.*tensor 'w' dims .* larger than any array"):
        GGUFReader(path)


def test_not_a_checkpoint_stays_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "plain.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("other.txt", "x")
    with pytest.raises(NotACheckpointError, match="plain.keras"):
        open_keras(path)
