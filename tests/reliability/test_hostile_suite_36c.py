"""Confinement includes symlinks (issue 36, item 4): every file a reader opens resolves inside the checkpoint.

Each case builds a real checkpoint, then replaces one file inside it (a TF data shard, an Orbax chunk, a DCP
data file or its .metadata, a safetensors index, a Zarr chunk) with a symlink to a file of an identical
checkpoint outside that holds SENTINEL values, so only the path check can stop the read (crc32c and sizes
match). Each read runs in a child process under RLIMIT_AS and a timeout (run_hostile), and the test
asserts the typed error naming the link, that no SENTINEL came back and that nothing outside changed.
A symlink that stays inside the checkpoint is allowed and read.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.format.entry import SaveEntry
from varstore.errors import CorruptCheckpointError, PathOutsideCheckpointError

from ._hostile import SENTINEL
from ._hostile_run import changed_paths, run_hostile, tree_state

TIMEOUT_S = 120.0
VALUES = np.arange(8, dtype=np.float32)


def _entries(value: np.ndarray) -> list[SaveEntry]:
    return [SaveEntry("w", value.shape, value.dtype, lambda: value)]


def _link(inside: Path, outside: Path) -> None:
    """Replaces the file `inside` with a symlink to `outside` (the same file of the outside twin)."""
    inside.unlink()
    inside.symlink_to(outside)


def _twins(tmp_path: Path, write: Callable[[Path, np.ndarray], None], name: str) -> tuple[Path, Path]:
    """(checkpoint, outside twin): the same writer, VALUES inside, SENTINELs outside."""
    checkpoint, outside = tmp_path / "ckpt" / name, tmp_path / "outside" / name
    write(checkpoint, VALUES)
    write(outside, np.full(VALUES.shape, SENTINEL, np.float32))
    return checkpoint, outside


def _tf_data(tmp_path: Path) -> Path:
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    checkpoint, outside = _twins(tmp_path, lambda p, v: write_tf_checkpoint(p, _entries(v)) and None, "model.ckpt")
    shutil.copy(f"{outside}.index", f"{checkpoint}.index")  # the index's crc32c is the SENTINEL shard's
    _link(Path(f"{checkpoint}.data-00000-of-00001"), Path(f"{outside}.data-00000-of-00001"))
    return checkpoint.parent


def _orbax_chunk(tmp_path: Path) -> Path:
    pytest.importorskip("tensorstore")
    from varstore.formats.orbax.writer import write_orbax

    checkpoint, outside = _twins(tmp_path, lambda p, v: write_orbax(p, _entries(v)) and None, "orbax")
    chunk = next(p for p in (checkpoint / "w").iterdir() if not p.name.startswith("."))
    _link(chunk, outside / "w" / chunk.name)
    return checkpoint


def _dcp_data(tmp_path: Path) -> Path:
    pytest.importorskip("torch")
    from varstore.formats.dcp.writer import write_dcp

    checkpoint, outside = _twins(tmp_path, lambda p, v: write_dcp(p, _entries(v)) and None, "dcp")
    data = next(checkpoint.glob("*.distcp"))
    _link(data, outside / data.name)
    return checkpoint


def _dcp_metadata(tmp_path: Path) -> Path:
    pytest.importorskip("torch")
    from varstore.formats.dcp.writer import write_dcp

    checkpoint, outside = _twins(tmp_path, lambda p, v: write_dcp(p, _entries(v)) and None, "dcp")
    _link(checkpoint / ".metadata", outside / ".metadata")
    return checkpoint


def _hf_index(tmp_path: Path) -> Path:
    """A sharded safetensors directory whose index is a symlink to an outside set's index (with its shard
    names: the shards are copied in, so the index alone would lead the read to SENTINELs if followed)."""
    source = vs.save(tmp_path / "src.h5", {"w": VALUES})
    evil = vs.save(tmp_path / "evil.h5", {"w": np.full(VALUES.shape, SENTINEL, np.float32)})
    checkpoint, outside = tmp_path / "ckpt" / "model", tmp_path / "outside" / "model"
    vs.convert(source, checkpoint, max_shard_size="1KB")
    vs.convert(evil, outside, max_shard_size="1KB")
    index = next(checkpoint.glob("*.index.json"))
    _link(index, outside / index.name)
    return checkpoint


CASES: dict[str, Callable[[Path], Path]] = {
    "TF data shard symlinked out": _tf_data,
    "Orbax chunk symlinked out": _orbax_chunk,
    "DCP data file symlinked out": _dcp_data,
    "DCP .metadata symlinked out": _dcp_metadata,
    "safetensors index symlinked out": _hf_index,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_symlink_leading_out_is_refused_naming_it(tmp_path: Path, case: str) -> None:
    checkpoint = CASES[case](tmp_path)
    before = tree_state(tmp_path / "outside")
    outcome = run_hostile("api", ["read_all", str(checkpoint)], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.error) == ("typed", "PathOutsideCheckpointError"), outcome
    assert "symlink" in outcome.message and "outside" in outcome.message and str(tmp_path / "outside") in \
        outcome.message, outcome.message
    assert outcome.tmp_left == []
    cli = run_hostile("cli", ["convert", str(checkpoint), str(tmp_path / "copy.npz")], timeout_s=TIMEOUT_S)
    assert cli.status == "exit2", cli
    assert cli.stderr.startswith("varstore: error: ") and cli.stderr.count("\n") == 1 and "symlink" in cli.stderr
    assert not (tmp_path / "copy.npz").exists()
    assert changed_paths(before, tree_state(tmp_path / "outside")) == []
    with pytest.raises(PathOutsideCheckpointError):  # in process too: nothing SENTINEL ever comes back
        vs.load(checkpoint)


def test_own_zarr_chunk_symlinked_out_is_a_typed_error_and_no_sentinel(tmp_path: Path) -> None:
    """varstore's Zarr reader checked chunk files before issue 36 (CorruptCheckpointError naming the link)."""
    checkpoint = vs.save(tmp_path / "ckpt.zarr", {"w": VALUES}, pack_threshold_bytes=0)
    outside = vs.save(tmp_path / "outside.zarr", {"w": np.full(VALUES.shape, SENTINEL, np.float32)},
                      pack_threshold_bytes=0)
    chunk = next(p for p in (checkpoint / "w").rglob("*") if p.is_file() and p.name != "zarr.json")
    _link(chunk, outside / chunk.relative_to(checkpoint))
    outcome = run_hostile("api", ["read_all", str(checkpoint)], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.error) == ("typed", "CorruptCheckpointError"), outcome
    assert "leads outside it" in outcome.message and "a symlink?" in outcome.message
    with pytest.raises(CorruptCheckpointError):
        vs.load(checkpoint)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_plain_zarr_chunk_symlinked_out_is_skipped_with_the_reason(tmp_path: Path, zarr_format: int) -> None:
    """A foreign Zarr hierarchy: zarr-python opens chunks itself, so an array holding a link that leads out
    is listed as skipped (naming the link) and never read; the other arrays still read."""
    zarr = pytest.importorskip("zarr")
    for name, fill in (("g.zarr", VALUES), ("out.zarr", np.full(VALUES.shape, SENTINEL, np.float32))):
        group = zarr.open_group(str(tmp_path / name), mode="w", zarr_format=zarr_format)
        for array in ("a", "b"):
            group.create_array(array, shape=(8,), dtype="f4", chunks=(8,))[:] = fill
    chunk = "a/c/0" if zarr_format == 3 else "a/0"
    _link(tmp_path / "g.zarr" / chunk, tmp_path / "out.zarr" / chunk)
    outcome = run_hostile("api", ["read_all", str(tmp_path / "g.zarr")], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.result) == ("ok", ["b"]), outcome
    with vs.open_checkpoint(tmp_path / "g.zarr") as reader:
        assert [s.name for s in reader.skipped] == ["a"] and chunk in reader.skipped[0].reason
        np.testing.assert_array_equal(reader["b"], VALUES)


def test_a_symlink_staying_inside_the_checkpoint_is_read(tmp_path: Path) -> None:
    """Allowed: a TF data shard kept in a subfolder of the checkpoint directory and linked (relative) to."""
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    write_tf_checkpoint(tmp_path / "ckpt" / "model.ckpt", _entries(VALUES))
    data = tmp_path / "ckpt" / "model.ckpt.data-00000-of-00001"
    (tmp_path / "ckpt" / "blobs").mkdir()
    data.rename(tmp_path / "ckpt" / "blobs" / "shard0")
    data.symlink_to(Path("blobs") / "shard0")
    outcome = run_hostile("api", ["read_all", str(tmp_path / "ckpt")], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.result) == ("ok", ["w"]), outcome
    np.testing.assert_array_equal(vs.load(tmp_path / "ckpt")["w"], VALUES)


def test_the_checkpoint_path_itself_may_be_a_symlink(tmp_path: Path) -> None:
    """Only links inside are checked: the user chose the path they gave."""
    pytest.importorskip("tensorstore")
    from varstore.formats.orbax.writer import write_orbax

    write_orbax(tmp_path / "real" / "orbax", _entries(VALUES))
    (tmp_path / "alias").symlink_to(tmp_path / "real" / "orbax")
    np.testing.assert_array_equal(vs.load(tmp_path / "alias")["w"], VALUES)


# ------------------------------------------------------------------ the manager's own files
def test_a_symlinked_lock_creates_nothing_outside(tmp_path: Path) -> None:
    run = tmp_path / "run"
    vs.CheckpointManager(run).save({"w": np.arange(4.0)}, step=1)
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(tmp_path / "outside" / "victim.lock")
    (tmp_path / "outside").mkdir()
    before = tree_state(tmp_path / "outside")
    outcome = run_hostile("api", ["manager_save", str(run), "2", "2"], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.error) == ("typed", "PathOutsideCheckpointError"), outcome
    assert ".lock" in outcome.message and "victim.lock" in outcome.message and "symlink" in outcome.message
    assert changed_paths(before, tree_state(tmp_path / "outside")) == []
    assert not (tmp_path / "outside" / "victim.lock").exists()
    assert not (run / "ckpt-2.h5").exists()


def test_a_symlinked_pointer_is_never_read_through(tmp_path: Path) -> None:
    run = tmp_path / "run"
    vs.CheckpointManager(run).save({"w": np.arange(4.0)}, step=1)
    (tmp_path / "elsewhere.json").write_text('{"latest": "ckpt-1.h5", "checkpoints": []}')
    (run / "latest").unlink()
    (run / "latest").symlink_to(tmp_path / "elsewhere.json")
    outcome = run_hostile("api", ["manager_save", str(run), "2", "2"], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.error) == ("typed", "PathOutsideCheckpointError"), outcome
    assert "latest" in outcome.message and "elsewhere.json" in outcome.message
    assert vs.list_checkpoints(run)[-1].step == 1  # the listing ignores the linked pointer, uses the steps
    assert vs.CheckpointManager(run).rebuild_state() == run / "ckpt-1.h5"  # replaces the link itself
    assert not (run / "latest").is_symlink()
    assert (tmp_path / "elsewhere.json").read_text() == '{"latest": "ckpt-1.h5", "checkpoints": []}'


def test_a_saved_model_index_symlinked_out_is_refused(tmp_path: Path) -> None:
    """A SavedModel directory given by the user: its variables/variables.index is a file of the checkpoint."""
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    for where, value in (("model", VALUES), ("outside", np.full(VALUES.shape, SENTINEL, np.float32))):
        (tmp_path / where).mkdir()
        (tmp_path / where / "saved_model.pb").write_bytes(b"")
        write_tf_checkpoint(tmp_path / where / "variables" / "variables", _entries(value), state_file=False)
    np.testing.assert_array_equal(vs.load(tmp_path / "model")["w"], VALUES)
    _link(tmp_path / "model" / "variables" / "variables.index", tmp_path / "outside" / "variables" / "variables.index")
    outcome = run_hostile("api", ["read_all", str(tmp_path / "model")], timeout_s=TIMEOUT_S)
    assert (outcome.status, outcome.error) == ("typed", "PathOutsideCheckpointError"), outcome
    assert "variables.index" in outcome.message and "outside" in outcome.message
