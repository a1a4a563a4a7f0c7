"""Paths from file content stay inside the checkpoint, partitioned values cover their array exactly once.

Each hostile directory is built from a real checkpoint with one field edited: a TF state file, an HF or
Keras shard index, an Orbax leaf key, a DCP data file name or chunk list, TF slices. Values outside the
checkpoint are SENTINEL-filled, so a test can prove none was read.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from tf_bundle_writer import BundleWriter

import varstore as vs
from varstore.checkpoint.format.entry import SaveEntry
from varstore.errors import CoverageError, PathOutsideCheckpointError, SpecialFileError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))
from _hostile_run import run_hostile  # noqa: E402

SENTINEL = np.float32(-7.7777e-33)


def _entries(values: dict[str, np.ndarray]) -> list[SaveEntry]:
    return [SaveEntry(name, value.shape, value.dtype, (lambda v=value: v)) for name, value in values.items()]


def _outside_tf(tmp_path: Path) -> Path:
    """TF bundle of SENTINELs in tmp_path/other; a checkpoint directory tmp_path/ckpt whose state file names it."""
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    write_tf_checkpoint(tmp_path / "other" / "model.ckpt", _entries({"w": np.full(4, SENTINEL)}))
    (tmp_path / "ckpt").mkdir()
    return tmp_path / "ckpt"


# ------------------------------------------------------------------ TF state file
@pytest.mark.parametrize("recorded", ["../other/model.ckpt", "ABSOLUTE"])
def test_tf_state_file_naming_a_prefix_outside_is_refused(tmp_path: Path, recorded: str) -> None:
    ckpt = _outside_tf(tmp_path)
    recorded = str(tmp_path / "other" / "model.ckpt") if recorded == "ABSOLUTE" else recorded
    (ckpt / "checkpoint").write_text(f'model_checkpoint_path: "{recorded}"\n')
    with pytest.raises(PathOutsideCheckpointError, match=r"checkpoint': model_checkpoint_path names .*outside the "
                                                         r"checkpoint directory"):
        vs.open_checkpoint(ckpt)
    outcome = run_hostile("cli", ["ls", str(ckpt)])
    assert outcome.status == "exit2", outcome
    assert outcome.stderr.count("\n") == 1 and "outside the checkpoint directory" in outcome.stderr
    assert "-7.7777e-33" not in outcome.stdout


def test_tf1_absolute_state_path_of_a_copied_directory_reads_the_copy(tmp_path: Path) -> None:
    """TF1's Saver records absolute paths; a copied directory is read where it is now, as TF does."""
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    ckpt = _outside_tf(tmp_path)
    write_tf_checkpoint(ckpt / "model.ckpt", _entries({"w": np.arange(4, dtype=np.float32)}), state_file=False)
    (ckpt / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path / "other" / "model.ckpt"}"\n')
    with vs.open_checkpoint(ckpt) as reader:
        np.testing.assert_array_equal(reader["w"], np.arange(4, dtype=np.float32))


def test_a_fifo_as_a_tf_data_shard_is_refused_without_blocking(tmp_path: Path) -> None:
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    write_tf_checkpoint(tmp_path / "m.ckpt", _entries({"w": np.ones(4, np.float32)}))
    data = tmp_path / "m.ckpt.data-00000-of-00001"
    data.unlink()
    os.mkfifo(data)
    with vs.open_checkpoint(tmp_path / "m.ckpt") as reader, pytest.raises(SpecialFileError, match="FIFO"):
        reader["w"]
    outcome = run_hostile("cli", ["show", str(tmp_path / "m.ckpt"), "w"], timeout_s=60)
    assert outcome.status == "exit2" and "FIFO" in outcome.stderr, outcome


# ------------------------------------------------------------------ TF slices
@pytest.mark.parametrize("slices, what", [
    ([((0, 3), (0, -1)), ((2, 2), (0, -1))], "overlap"),
    ([((0, 2), (0, -1)), ((3, 1), (0, -1))], "cover 9 of its 12 elements"),
])
def test_tf_slices_must_tile_the_variable(tmp_path: Path, slices: list, what: str) -> None:
    writer = BundleWriter(tmp_path / "m")
    writer.add_partitioned("emb", np.arange(12, dtype=np.float32).reshape(4, 3), slices)
    writer.finish()
    with vs.open_checkpoint(tmp_path / "m") as reader, pytest.raises(CoverageError, match=what):
        reader["emb"]


def test_the_coverage_rule_names_the_offending_boxes() -> None:
    from varstore.formats._coverage import check_coverage

    check_coverage((4, 3), [((0, 0), (2, 3)), ((2, 0), (2, 1)), ((2, 1), (2, 2))], "t")  # tiles: no error
    check_coverage((), [((), ())], "scalar")
    with pytest.raises(CoverageError, match=r"t: the box at \[3, 0\] of size \[2, 3\] lies outside shape \[4, 3\]"):
        check_coverage((4, 3), [((0, 0), (3, 3)), ((3, 0), (2, 3))], "t")
    with pytest.raises(CoverageError, match=r"the boxes at \[0, 0\] \(size \[2, 3\]\) and \[1, 2\] "
                                            r"\(size \[1, 1\]\) overlap"):
        check_coverage((4, 3), [((1, 2), (1, 1)), ((0, 0), (2, 3)), ((2, 0), (2, 3))], "t")
    many = [((i, 0), (1, 3)) for i in range(100_000)]  # a sweep, not all pairs
    check_coverage((100_000, 3), many, "t")
    columns = [((0, j), (3, 1)) for j in range(100_000)]  # column shards: swept along axis 1, not all pairs
    check_coverage((3, 100_000), columns, "t")
    with pytest.raises(CoverageError, match=r"the boxes at \[0, 99998\] \(size \[3, 2\]\) and \[0, 99999\]"):
        check_coverage((3, 100_000), [*columns[:-2], ((0, 99_998), (3, 2)), columns[-1]], "t")


# ------------------------------------------------------------------ shard indexes
def test_hf_index_naming_a_shard_outside_is_refused(tmp_path: Path) -> None:
    from tests.reliability.test_hostile_suite import _hf_index_outside

    model = _hf_index_outside(tmp_path)
    with pytest.raises(PathOutsideCheckpointError, match=r"weight_map names '../evil.safetensors', outside"):
        vs.open_checkpoint(model)


def test_a_shard_symlink_pointing_outside_is_refused(tmp_path: Path) -> None:
    vs.convert(vs.save(tmp_path / "src.h5", {"a": np.full(3, SENTINEL)}), tmp_path / "evil.safetensors")
    model = tmp_path / "model"
    vs.convert(vs.save(tmp_path / "m.h5", {"a": np.ones(3, np.float32)}), model, max_shard_size="1KB")
    shard = next(model.glob("*-of-*.safetensors"))
    shard.unlink()
    shard.symlink_to(tmp_path / "evil.safetensors")
    with pytest.raises(PathOutsideCheckpointError, match="outside the checkpoint directory"):
        vs.open_checkpoint(model)


def test_keras_sharded_index_naming_a_shard_outside_is_refused(fixtures_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "keras"
    shutil.copytree(fixtures_dir / "keras3_sharded", folder)
    index = folder / "model.weights.json"
    document = json.loads(index.read_text())
    group = next(iter(document["weight_map"]))
    document["weight_map"][group] = ["../../etc/passwd"]
    index.write_text(json.dumps(document))
    with pytest.raises(PathOutsideCheckpointError, match=r"model.weights.json': weight_map names '../../etc/passwd'"):
        vs.open_checkpoint(index)


# ------------------------------------------------------------------ Orbax
def test_orbax_leaf_key_leading_outside_is_refused(tmp_path: Path) -> None:
    from varstore.formats.orbax.writer import write_orbax

    pytest.importorskip("tensorstore")
    write_orbax(tmp_path / "outside", _entries({"x": np.full(3, SENTINEL)}))
    ckpt = tmp_path / "ck"
    write_orbax(ckpt, _entries({"w": np.ones(3, np.float32)}))
    meta = json.loads((ckpt / "_METADATA").read_text())
    leaf = meta["tree_metadata"].pop("('w',)")
    leaf["key_metadata"] = [{"key": "../outside/x", "key_type": 2}]
    meta["tree_metadata"]["('../outside/x',)"] = leaf
    (ckpt / "_METADATA").write_text(json.dumps(meta))
    with pytest.raises(PathOutsideCheckpointError, match=r"_METADATA': the key path of leaf .* names '../outside/x'"):
        vs.open_checkpoint(ckpt)


# ------------------------------------------------------------------ DCP
def _dcp(tmp_path: Path) -> tuple[Path, object]:
    pytest.importorskip("torch")
    from varstore.formats.dcp.writer import write_dcp

    folder = tmp_path / "dcp"
    write_dcp(folder, _entries({"w": np.arange(8, dtype=np.float32).reshape(4, 2)}))
    with open(folder / ".metadata", "rb") as handle:
        metadata = pickle.load(handle)  # noqa: S301 - the test's own file, written by torch just above
    return folder, metadata


def _save(folder: Path, metadata: object) -> None:
    with open(folder / ".metadata", "wb") as handle:
        pickle.dump(metadata, handle)


def test_dcp_data_file_outside_is_refused(tmp_path: Path) -> None:
    folder, metadata = _dcp(tmp_path)
    (tmp_path / "evil.distcp").write_bytes((folder / next(iter(metadata.storage_data.values())).relative_path)
                                           .read_bytes())
    for index, info in list(metadata.storage_data.items()):
        metadata.storage_data[index] = type(info)(relative_path="../evil.distcp", offset=info.offset,
                                                  length=info.length)
    _save(folder, metadata)
    with pytest.raises(PathOutsideCheckpointError, match=r"the relative_path of 'w' names '../evil.distcp'"):
        vs.open_checkpoint(folder)


@pytest.mark.parametrize("chunks, what", [
    ([((0, 0), (2, 2)), ((0, 0), (2, 2)), ((2, 0), (1, 2))], "overlap"),  # 2 + 2 + ... overlapping rows 0-1
    ([((0, 0), (2, 2))], "cover 4 of its 8 elements"),
])
def test_dcp_chunks_must_tile_the_tensor(tmp_path: Path, chunks: list, what: str) -> None:
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

    import torch

    folder, metadata = _dcp(tmp_path)
    tensor = metadata.state_dict_metadata["w"]
    tensor.chunks = [ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s)) for o, s in chunks]
    record = next(iter(metadata.storage_data.values()))
    index_type = type(next(iter(metadata.storage_data)))
    for o, _ in chunks:
        metadata.storage_data[index_type("w", torch.Size(o))] = record
    _save(folder, metadata)
    with pytest.raises(CoverageError, match=what):
        vs.open_checkpoint(folder)
