"""TF1 trainable flags come from the graph's collections in `<prefix>.meta` (issue 38, item 2): kept as TensorFlow
recorded them, unknown without a .meta, and a damaged .meta never makes the checkpoint unreadable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from varstore import open_checkpoint
from varstore.formats.tensorflow import _meta_graph as _tf_meta_graph

BUNDLE = ("model.ckpt.index", "model.ckpt.data-00000-of-00001", "checkpoint")


def _copy(fixtures_dir: Path, folder: Path, meta: bytes | None) -> Path:
    folder.mkdir()
    for name in BUNDLE:
        shutil.copyfile(fixtures_dir / "tf1_scopes" / name, folder / name)
    if meta is not None:
        (folder / "model.ckpt.meta").write_bytes(meta)
    return folder / "model.ckpt"


def _manifest(fixtures_dir: Path) -> dict[str, dict]:
    doc = json.loads((fixtures_dir / "tf1_scopes" / "model.ckpt.manifest.json").read_text())
    return {v["name"]: v for v in doc["variables"]}


# ------------------------------------------------------------ protobuf wire format, as TF writes it
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): tag, length, bytes."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _variable_def(name: str, full_name: str | None = None) -> bytes:
    """VariableDef: variable_name 1, initializer_name 2, snapshot_name 3, save_slice_info_def 4 (full_name 1)."""
    op = name.rsplit(":", 1)[0]
    out = _field(1, name.encode()) + _field(2, f"{op}/Assign".encode()) + _field(3, f"{op}/read:0".encode())
    if full_name is not None:
        out += _field(4, _field(1, full_name.encode()))
    return out


def _meta_graph(collections: dict[str, list[bytes]], node_lists: dict[str, list[str]] | None = None,
                graph: bytes = b"") -> bytes:
    """MetaGraphDef: meta_info_def 1, graph_def 2, collection_def 4 (map entries: key 1, CollectionDef 2, whose
    node_list is field 1 and bytes_list field 2, each a repeated field 1)."""
    out = _field(1, _field(1, b"v1")) + _field(2, graph)
    for name, items in collections.items():
        out += _field(4, _field(1, name.encode()) + _field(2, _field(2, b"".join(_field(1, i) for i in items))))
    for name, tensors in (node_lists or {}).items():
        out += _field(4, _field(1, name.encode()) + _field(2, _field(1, b"".join(_field(1, t.encode())
                                                                               for t in tensors))))
    return out


# ------------------------------------------------------------ the real .meta TensorFlow wrote
def test_flags_and_collections_are_tensorflows(fixtures_dir):
    expected = _manifest(fixtures_dir)
    with open_checkpoint(fixtures_dir / "tf1_scopes" / "model.ckpt") as reader:
        infos = {i.name: i for i in reader.infos()}
        assert reader.skipped == []
    floating = {n for n, v in expected.items() if v["dtype"].startswith(("float", "bfloat", "complex"))}
    assert {n: i.trainable for n, i in infos.items()} == {n: v["trainable"] and n in floating
                                                          for n, v in expected.items()}
    assert {n: list(i.collections) for n, i in infos.items()} == {n: v["collections"] for n, v in expected.items()}
    assert infos["state/ema_decay"].trainable is False and infos["encoder/layer_a/weights"].trainable is True
    # TF lists its int, bool and string variables in "trainable_variables": the collection is kept, the flag is
    # False (a non-floating variable is never trainable)
    assert expected["zoo/i32"]["trainable"] is True and infos["zoo/i32"].trainable is False
    assert infos["zoo/flags"].collections == ("trainable_variables", "variables")
    assert infos["global_step"].collections == ("global_step", "variables")


def test_ls_shows_yes_and_no_from_the_graph(run, tf_checkpoint):
    result = run("ls", tf_checkpoint)
    assert result.exit_code == 0
    rows = {line.split()[0]: line.split()[-2:] for line in result.stdout.splitlines()[2:20]}
    assert rows["encoder/layer_a/weights"] == ["yes", "trainable_variables,variables"]
    assert rows["state/ema_decay"] == ["no", "variables"]
    assert rows["global_step"] == ["no", "global_step,variables"]
    assert rows["zoo/i32"] == ["no", "trainable_variables,variables"]
    doc = json.loads(run("ls", "--json", tf_checkpoint).stdout)
    flags = {v["name"]: v["trainable"] for v in doc["variables"]}
    assert (flags["state/ema_decay"], flags["zoo/f64"], flags["state/model_var"]) == (False, True, True)
    assert (flags["zoo/flags"], flags["zoo/names"], flags["global_step"]) == (False, False, False)
    assert doc["skipped"] == []


def test_without_a_meta_file_floats_are_unknown(run, fixtures_dir, tmp_path):
    prefix = _copy(fixtures_dir, tmp_path / "tf", None)
    doc = json.loads(run("ls", "--json", prefix).stdout)
    flags = {v["name"]: v["trainable"] for v in doc["variables"]}
    assert flags["state/ema_decay"] is None and flags["encoder/layer_a/weights"] is None
    assert flags["global_step"] is False and flags["zoo/i32"] is False  # not floating: never trainable
    assert all(v["collections"] == [] for v in doc["variables"])
    line = next(x for x in run("ls", prefix).stdout.splitlines() if x.startswith("state/ema_decay "))
    assert line.split()[-2:] == ["-", "-"]


def test_convert_keeps_the_graphs_flags(run, tf_checkpoint, tmp_path):
    assert run("convert", tf_checkpoint, tmp_path / "m.h5").exit_code == 0
    doc = json.loads(run("ls", "--json", tmp_path / "m.h5").stdout)
    got = {v["name"]: (v["trainable"], v["collections"]) for v in doc["variables"]}
    assert got["state/ema_decay"] == (False, ["variables"])
    assert got["encoder/layer_b/biases"] == (True, ["trainable_variables", "variables"])


# ------------------------------------------------------------ a .meta built byte by byte
def test_a_partitioned_part_names_its_full_variable(fixtures_dir, tmp_path):
    meta = _meta_graph({"variables": [_variable_def("encoder/layer_a/weights/part_0:0", "encoder/layer_a/weights"),
                                      _variable_def("zoo/f64:0")],
                        "trainable_variables": [_variable_def("zoo/f64:0")]},
                       node_lists={"extra": ["zoo/f16:0", "zoo/scale", "zoo/f64:1"]}, graph=b"\x0a\x00" * 50)
    with open_checkpoint(_copy(fixtures_dir, tmp_path / "tf", meta)) as reader:
        assert reader.info("encoder/layer_a/weights").trainable is False
        assert reader.info("encoder/layer_a/weights").collections == ("variables",)
        assert reader.info("zoo/f64").trainable is True
        assert reader.info("zoo/f16").collections == ("extra",)  # a node_list tensor "op:0" names its variable
        assert reader.info("zoo/f16").trainable is None  # ... but no VariableDef collection describes it
        assert reader.info("zoo/scale").collections == () and reader.info("zoo/scale").trainable is None


def _assert_readable_and_unknown(prefix: Path, fixtures_dir: Path, reason: str) -> None:
    with open_checkpoint(prefix) as reader:
        assert [s.name for s in reader.skipped] == ["model.ckpt.meta"]
        assert reason in reader.skipped[0].reason and "trainable flags and collections unknown" in reader.skipped[0].reason
        assert reader.info("state/ema_decay").trainable is None and reader.info("zoo/i64").trainable is False
        assert reader.info("zoo/f64").collections == ()
        expected = _manifest(fixtures_dir)["zoo/f64"]["values"]
        np.testing.assert_array_equal(reader["zoo/f64"], np.array(expected))
        reader.verify()


def test_every_truncation_of_the_real_meta_leaves_the_checkpoint_readable(fixtures_dir, tmp_path):
    real = (fixtures_dir / "tf1_scopes" / "model.ckpt.meta").read_bytes()
    prefix = _copy(fixtures_dir, tmp_path / "tf", None)
    meta = prefix.parent / "model.ckpt.meta"
    for size in list(range(1, 40)) + list(range(40, len(real), 997)) + [len(real) - 1]:
        meta.write_bytes(real[:size])
        with open_checkpoint(prefix) as reader:
            assert reader["global_step"] == 42, size
            assert [s.name for s in reader.skipped] in ([], ["model.ckpt.meta"]), size
            flags = {i.name: i.trainable for i in reader.infos()}
            assert flags["zoo/i32"] in (True, False), size
    meta.write_bytes(real[:len(real) - 1])
    _assert_readable_and_unknown(prefix, fixtures_dir, "claims")


def test_damaged_collections_are_noted_in_ls(run, fixtures_dir, tmp_path):
    meta = _meta_graph({"variables": [_field(1, b"\xff\xfe:0")]})  # a variable_name that is not UTF-8
    prefix = _copy(fixtures_dir, tmp_path / "tf", meta)
    _assert_readable_and_unknown(prefix, fixtures_dir, "not valid UTF-8")
    result = run("ls", prefix)
    assert result.exit_code == 0
    assert "skipped 1 entry:" in result.stdout
    assert any(line.split()[:4] == ["model.ckpt.meta", "not", "used,", "trainable"] and "not valid UTF-8" in line
               for line in result.stdout.splitlines())


def test_collections_past_the_cap_are_not_read(fixtures_dir, tmp_path, monkeypatch):
    meta = _meta_graph({"variables": [_variable_def(f"v{i}:0") for i in range(20)]})
    monkeypatch.setattr(_tf_meta_graph, "MAX_COLLECTION_BYTES", 100)
    _assert_readable_and_unknown(_copy(fixtures_dir, tmp_path / "tf", meta), fixtures_dir, "more than 100 bytes")


def test_more_members_than_the_cap_are_not_read(fixtures_dir, tmp_path, monkeypatch):
    meta = _meta_graph({"variables": [_variable_def(f"v{i}:0") for i in range(3)]},
                       node_lists={"extra": [f"t{i}:0" for i in range(3)]})
    monkeypatch.setattr(_tf_meta_graph, "MAX_MEMBERS", 5)
    _assert_readable_and_unknown(_copy(fixtures_dir, tmp_path / "tf", meta), fixtures_dir, "more than 5 members")


def test_more_top_level_fields_than_the_cap_are_not_read(fixtures_dir, tmp_path):
    meta = _field(5, b"") * 70_000  # 140 KB of empty fields: refused after 65,536, not walked to the end
    _assert_readable_and_unknown(_copy(fixtures_dir, tmp_path / "tf", meta), fixtures_dir, "top-level fields")


def test_a_graph_field_claiming_more_than_the_file_is_damage(fixtures_dir, tmp_path):
    meta = _varint(2 << 3 | 2) + _varint(1 << 40) + b"\x00" * 10  # graph_def "of a TiB": never allocated
    _assert_readable_and_unknown(_copy(fixtures_dir, tmp_path / "tf", meta), fixtures_dir, "claims 1099511627776")


def test_a_meta_link_leading_out_is_not_followed(fixtures_dir, tmp_path):
    outside = tmp_path / "elsewhere.meta"
    outside.write_bytes((fixtures_dir / "tf1_scopes" / "model.ckpt.meta").read_bytes())
    prefix = _copy(fixtures_dir, tmp_path / "tf", None)
    (prefix.parent / "model.ckpt.meta").symlink_to(outside)
    _assert_readable_and_unknown(prefix, fixtures_dir, "outside the checkpoint")


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no FIFOs here")
def test_a_fifo_meta_never_blocks(fixtures_dir, tmp_path):
    import os

    prefix = _copy(fixtures_dir, tmp_path / "tf", None)
    os.mkfifo(prefix.parent / "model.ckpt.meta")
    _assert_readable_and_unknown(prefix, fixtures_dir, "FIFO")
