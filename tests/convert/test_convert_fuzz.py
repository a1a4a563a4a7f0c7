"""Fuzzing the TF table/entry decoder: hostile bytes raise only VarstoreError subclasses."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tf_bundle_writer import BundleWriter, table

from varstore.formats.tensorflow import _leveldb_table as leveldb_table
from varstore.formats.tensorflow import _bundle_format as fmt
from varstore.formats.tensorflow.reader import TFCheckpointReader
from varstore.errors import VarstoreError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REAL_INDEX = (FIXTURES / "tf1_scopes/model.ckpt.index").read_bytes()
REAL_DATA = (FIXTURES / "tf1_scopes/model.ckpt.data-00000-of-00001").read_bytes()
REAL_PAIRS = fmt.read_table(REAL_INDEX, "real")
_SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                     deadline=None)


def _open_and_read_everything(prefix: Path) -> None:
    """Opens a bundle and reads every variable; only VarstoreError may escape."""
    try:
        reader = TFCheckpointReader(prefix)
    except VarstoreError:
        return
    with reader:
        for name in reader.keys():
            try:
                reader.info(name)
                reader.read(name)
            except VarstoreError:
                pass


def _write(tmp: Path, index: bytes, tag: str) -> Path:
    prefix = tmp / f"fuzz-{tag}"
    Path(f"{prefix}.index").write_bytes(index)
    Path(f"{prefix}.data-00000-of-00001").write_bytes(REAL_DATA)
    return prefix


@_SETTINGS
@given(data=st.binary(max_size=400))
def test_random_index_bytes(tmp_path_factory, data: bytes) -> None:
    tmp = tmp_path_factory.mktemp("random")
    _open_and_read_everything(_write(tmp, data, "a"))
    _open_and_read_everything(_write(tmp, data + REAL_INDEX[-48:], "b"))  # with a valid-looking footer


@_SETTINGS
@given(flips=st.lists(st.tuples(st.integers(0, len(REAL_INDEX) - 1), st.integers(1, 255)), min_size=1, max_size=6),
       cut=st.integers(0, len(REAL_INDEX)))
def test_mutated_real_index(tmp_path_factory, flips: list[tuple[int, int]], cut: int) -> None:
    raw = bytearray(REAL_INDEX)
    for position, xor in flips:
        raw[position] ^= xor
    tmp = tmp_path_factory.mktemp("mutated")
    _open_and_read_everything(_write(tmp, bytes(raw), "flip"))
    _open_and_read_everything(_write(tmp, REAL_INDEX[:cut], "cut"))


@_SETTINGS
@given(which=st.integers(0, len(REAL_PAIRS) - 1),
       mutation=st.one_of(st.binary(max_size=60),
                          st.tuples(st.integers(0, 200), st.integers(1, 255))))
def test_mutated_entries_with_valid_block_checksums(tmp_path_factory, which: int, mutation) -> None:
    """Mutates one entry (header or BundleEntryProto) and rebuilds the table so the block crcs pass."""
    pairs = list(REAL_PAIRS)
    key, value = pairs[which]
    if isinstance(mutation, bytes):
        value = mutation
    else:
        position, xor = mutation
        raw = bytearray(value)
        if raw:
            raw[position % len(raw)] ^= xor
        value = bytes(raw)
    pairs[which] = (key, value)
    tmp = tmp_path_factory.mktemp("entries")
    _open_and_read_everything(_write(tmp, table(pairs), "entry"))


@_SETTINGS
@given(data=st.binary(max_size=200), count=st.integers(0, 300))
def test_decoders_on_random_bytes(data: bytes, count: int) -> None:
    for call in (lambda: fmt.parse_entry(b"k", data, "x"), lambda: fmt.parse_header(data, "x"),
                 lambda: fmt.decode_string_tensor(data, count, "x"), lambda: leveldb_table._block_entries(data, "x")):
        try:
            call()
        except VarstoreError:
            pass


@_SETTINGS
@given(values=st.lists(st.integers(-(2 ** 63), 2 ** 63 - 1), min_size=2, max_size=20))
def test_ordered_code_keeps_number_order(values: list[int]) -> None:
    """TF's OrderedCode promises a < b  <=>  encode(a) < encode(b); slice keys rely on it."""
    encoded = sorted(values, key=fmt._write_signed_num_increasing)
    assert encoded == sorted(values)


@_SETTINGS
@given(data=st.data())
def test_mutated_partitioned_bundle(tmp_path_factory, data: st.DataObject) -> None:
    tmp = tmp_path_factory.mktemp("parts")
    writer = BundleWriter(tmp / "p", num_shards=2)
    full = np.arange(24, dtype=np.float32).reshape(6, 4)
    writer.add_partitioned("emb", full, [((0, 3), (0, -1)), ((3, 3), (0, -1))], shards=[0, 1])
    writer.add("names", [b"a", b"bcd"], shape=(2,), shard=1)
    pairs = list(writer.pairs)
    which = data.draw(st.integers(0, len(pairs) - 1))
    key, value = pairs[which]
    raw = bytearray(value)
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    writer.pairs[which] = (key, bytes(raw))
    writer.finish()
    try:
        reader = TFCheckpointReader(tmp / "p")
    except VarstoreError:
        return
    for name in reader.keys():
        try:
            reader.read(name)
        except VarstoreError:
            pass
    reader.close()
    shutil.rmtree(tmp)
