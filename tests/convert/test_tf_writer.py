"""The TensorFlow checkpoint writer: read back by varstore's bundle reader, entry for entry like the test-side
bundle writer, and by TensorFlow itself where it is installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tf_bundle_writer import BundleWriter

import varstore as vs
from varstore import dtypes
from varstore.checkpoint.format.entry import SaveEntry
from varstore.formats.tensorflow import _bundle_format as fmt
from varstore.formats.tensorflow.writer import fixed_size_slices, write_tf_checkpoint
from varstore.errors import CheckpointExistsError, ConversionError

ALL_DTYPES = ["float32", "float64", "int32", "uint8", "int16", "int8", "complex64", "int64", "bool",
              "bfloat16", "uint16", "complex128", "float16", "uint32", "uint64", "float8_e5m2", "float8_e4m3fn"]


def _value(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = dtypes.as_dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    raw = rng.integers(0, 256, int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    value = raw.view(dt).reshape(shape)
    if dtypes.is_floating(dt) or dt.kind == "c":
        value = np.where(np.isfinite(value.astype(np.float64) if dt.kind != "c" else value.real), value, 0).astype(dt)
    return value


def _entries(values: dict[str, np.ndarray]) -> list[SaveEntry]:
    return [SaveEntry(name, value.shape, value.dtype, (lambda v=value: v)) for name, value in values.items()]


def _table(prefix: Path) -> dict[bytes, fmt.BundleEntry]:
    pairs = fmt.read_table(Path(f"{prefix}.index").read_bytes(), "test")
    return {key: fmt.parse_entry(key, value, "test") for key, value in pairs if key}


def test_every_tf_dtype_round_trips_bit_exact(tmp_path: Path) -> None:
    values = {f"layer_{i}/{name}": _value(name, (3, 2) if i % 2 else (5,), i) for i, name in enumerate(ALL_DTYPES)}
    values["scalar"] = np.array(2.5, np.float32)
    values["empty"] = np.zeros((0, 4), np.int32)
    prefix = tmp_path / "model.ckpt"
    assert write_tf_checkpoint(prefix, _entries(values)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "model.ckpt.data-00000-of-00001",
                                                          "model.ckpt.index"]
    assert (tmp_path / "checkpoint").read_text() == ('model_checkpoint_path: "model.ckpt"\n'
                                                     'all_model_checkpoint_paths: "model.ckpt"\n')
    for path in (prefix, Path(f"{prefix}.index"), tmp_path):
        with vs.open_checkpoint(path) as reader:
            assert reader.format == "tf"
            assert sorted(reader.keys()) == sorted(values)
            for name, value in values.items():
                got = np.asarray(reader[name])
                assert got.dtype == value.dtype and got.shape == value.shape and got.tobytes() == value.tobytes()


def test_strings_are_tf_string_tensors(tmp_path: Path) -> None:
    values = {"vocab": np.array([b"ab", b"", b"x" * 300]), "words": np.array([["\u00e9t\u00e9", "z"]])}
    write_tf_checkpoint(tmp_path / "s", _entries(values))
    table = _table(tmp_path / "s")
    assert table[b"vocab"].dtype == 7 and table[b"words"].shape == (1, 2)
    with vs.open_checkpoint(tmp_path / "s") as reader:
        assert reader["vocab"].tolist() == [b"ab", b"", b"x" * 300]
        assert reader["words"].tolist() == [["\u00e9t\u00e9".encode(), b"z"]]


def test_entries_match_the_independent_test_writer(tmp_path: Path) -> None:
    values = {"a/kernel": np.arange(12, dtype=np.float32).reshape(3, 4), "a/bias": np.ones(4, np.float64),
              "step": np.array(7, np.int64), "flags": np.array([True, False])}
    write_tf_checkpoint(tmp_path / "ours", _entries(values))
    theirs = BundleWriter(tmp_path / "theirs")
    for name, value in values.items():
        theirs.add(name, value)
    theirs.finish()
    ours_table, their_table = _table(tmp_path / "ours"), _table(tmp_path / "theirs")
    assert sorted(ours_table) == sorted(their_table)
    for key in ours_table:
        a, b = ours_table[key], their_table[key]
        assert (a.dtype, a.shape, a.size, a.crc32c) == (b.dtype, b.shape, b.size, b.crc32c), key
    assert Path(f"{tmp_path}/ours.data-00000-of-00001").stat().st_size == sum(v.nbytes for v in values.values())


def test_fixed_size_slices_cut_as_tf_partitioner() -> None:
    assert fixed_size_slices((10, 5), 3) == [((0, 4), (0, -1)), ((4, 3), (0, -1)), ((7, 3), (0, -1))]
    assert fixed_size_slices((4,), 4) == [((0, 1),), ((1, 1),), ((2, 1),), ((3, 1),)]
    with pytest.raises(ConversionError, match=r"cannot cut shape \(2, 3\) into 3 parts along axis 0"):
        fixed_size_slices((2, 3), 3)


def test_partitioned_variables_are_written_with_slice_specs(tmp_path: Path) -> None:
    embedding = np.arange(50.0).reshape(10, 5)
    src = vs.save(tmp_path / "src.h5", {"emb": embedding, "w": np.ones(3, np.float32)})
    vs.convert(src, tmp_path / "tf" / "model.ckpt", write_options={"partitions": {"emb": 3}})
    table = _table(tmp_path / "tf" / "model.ckpt")
    full = table[b"emb"]
    assert full.slices == (((0, 4), (0, -1)), ((4, 3), (0, -1)), ((7, 3), (0, -1)))
    assert full.size == 0 and full.shape == (10, 5)
    part = table[fmt.encode_tensor_name_slice(b"emb", ((4, 3), (0, -1)))]
    assert part.shape == (3, 5) and part.size == 3 * 5 * 8
    with vs.open_checkpoint(tmp_path / "tf") as reader:
        np.testing.assert_array_equal(reader["emb"], embedding)
    with pytest.raises(ConversionError, match="slices of variable 'e' do not cover its shape"):
        write_tf_checkpoint(tmp_path / "bad", _entries({"e": embedding}),
                            slices={"e": [((0, 4), (0, -1)), ((5, 5), (0, -1))]})
    assert not Path(f"{tmp_path}/bad.index").exists()


def test_existing_checkpoint_and_foreign_state_file_are_left_alone(tmp_path: Path) -> None:
    entries = _entries({"w": np.arange(3.0)})
    write_tf_checkpoint(tmp_path / "m", entries)
    before = Path(f"{tmp_path}/m.index").read_bytes()
    with pytest.raises(CheckpointExistsError, match="a TensorFlow checkpoint is already at prefix"):
        write_tf_checkpoint(tmp_path / "m", _entries({"w": np.zeros(3)}))
    assert Path(f"{tmp_path}/m.index").read_bytes() == before
    write_tf_checkpoint(tmp_path / "m", _entries({"w": np.zeros(3)}), overwrite=True)
    with vs.open_checkpoint(tmp_path / "m") as reader:
        np.testing.assert_array_equal(reader["w"], np.zeros(3))
    state = 'model_checkpoint_path: "other-7"\n'
    (tmp_path / "checkpoint").write_text(state)
    notes = write_tf_checkpoint(tmp_path / "n", _entries({"w": np.ones(2)}))
    assert notes == [f"left the existing state file '{tmp_path / 'checkpoint'}' as it was; it does not name 'n'"]
    assert (tmp_path / "checkpoint").read_text() == state
    leftovers = [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]
    assert leftovers == []


def test_tensorflow_reads_and_restores_it(tmp_path: Path) -> None:
    """Runs where TensorFlow is installed (it is too large for CI's [dev]); passed with TensorFlow 2.21."""
    tf = pytest.importorskip("tensorflow")
    values = {f"v/{name}": _value(name, (2, 3), i) for i, name in enumerate(ALL_DTYPES)}
    values["vocab"] = np.array([b"ab", b"", b"xyz"])
    values["emb"] = np.arange(50, dtype=np.float32).reshape(10, 5)
    write_tf_checkpoint(tmp_path / "model.ckpt", _entries(values), slices={"emb": fixed_size_slices((10, 5), 3)})
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt")
    reader = tf.train.load_checkpoint(str(tmp_path / "model.ckpt"))
    for name, value in values.items():
        got = reader.get_tensor(name)
        if value.dtype.kind == "S":
            assert list(got) == list(value)
        else:
            assert np.asarray(got).tobytes() == value.tobytes() and got.shape == value.shape, name
    assert dict(tf.train.list_variables(str(tmp_path)))["emb"] == [10, 5]
    graph = tf.Graph()
    with graph.as_default():
        emb = tf.compat.v1.get_variable("emb", shape=(10, 5), partitioner=tf.compat.v1.fixed_size_partitioner(3))
        kernel = tf.compat.v1.get_variable("v/float32", shape=(2, 3))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            saver.restore(session, str(tmp_path / "model.ckpt"))
            np.testing.assert_array_equal(session.run(tf.concat(list(emb), 0)), values["emb"])
            np.testing.assert_array_equal(session.run(kernel), values["v/float32"])
    variable = tf.Variable(tf.zeros((10, 5)), name="emb")  # TF2: name-based matching by the variable's name
    tf.train.Checkpoint(emb=variable).read(str(tmp_path / "model.ckpt"))
    np.testing.assert_array_equal(variable.numpy(), values["emb"])
