"""Writers touch only what they own (issue 36, item 5).

- convert's --force replaces only a checkpoint of the destination's own format, never a user's directory
  tree or file (exit 2, nothing deleted);
- the TF writer never replaces a user's `<prefix>.data-00000-of-00001` or `.index`;
- no writer stores a name that is empty, absolute, has a "." / ".." part, a NUL or a lone surrogate;
- a write that runs out of room leaves the old destination whole and no temporary, with DiskFullError.
  Simulated honestly two ways: a child process under a small RLIMIT_FSIZE (Python ignores SIGXFSZ, so the
  write fails with EFBIG, the error a full disk gives as ENOSPC) for every writer, and, where this
  process may mount one (root), a real 1 MiB tmpfs that fills up (ENOSPC);
- CheckpointManager retention deletes only "<checkpoint_name>-<step>" files it makes, never a
  "best_model.h5" a hostile or hand-edited pointer lists.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.checkpoint.format.entry import SaveEntry
from varstore.errors import CheckpointExistsError, DiskFullError, InvalidNameError

from ._hostile_run import ROOT, changed_paths, run_hostile, tree_state

TIMEOUT_S = 120.0
SMALL = {"w": np.arange(4, dtype=np.float32)}
BIG = {"w": np.arange(1 << 19, dtype=np.float32)}  # 2 MiB


def _user_tree(path: Path) -> None:
    path.mkdir()
    (path / "notes.txt").write_text("my notes")
    (path / "sub").mkdir()
    (path / "sub" / "data.bin").write_bytes(b"\x01" * 100)


# ------------------------------------------------------------------ --force
@pytest.mark.parametrize("suffix", ["pt", "npz"])
def test_force_never_deletes_a_users_directory_tree(tmp_path: Path, suffix: str) -> None:
    src = vs.save(tmp_path / "src.h5", SMALL)
    dst = tmp_path / f"model.{suffix}"
    _user_tree(dst)
    before = tree_state(tmp_path)
    outcome = run_hostile("cli", ["convert", str(src), str(dst), "--force"], timeout_s=TIMEOUT_S)
    assert outcome.status == "exit2", outcome
    assert outcome.stderr.startswith("varstore: error: ") and outcome.stderr.count("\n") == 1
    assert "replaces only a checkpoint of the destination's own format" in outcome.stderr
    assert "nothing was written or deleted" in outcome.stderr and "--force" in outcome.stderr
    assert changed_paths(before, tree_state(tmp_path)) == []


@pytest.mark.parametrize("suffix", ["pt", "npz", "safetensors", "gguf", "h5"])
def test_force_never_replaces_a_users_file(tmp_path: Path, suffix: str) -> None:
    src = vs.save(tmp_path / "src.h5", SMALL)
    dst = tmp_path / f"model.{suffix}"
    dst.write_text("a user's file that only looks like a checkpoint by its name")
    before = tree_state(tmp_path)
    with pytest.raises(CheckpointExistsError, match=r"plain file .*force=True replaces only"):
        vs.convert(src, dst, force=True)
    assert changed_paths(before, tree_state(tmp_path)) == []


@pytest.mark.parametrize("suffix", ["pt", "npz", "safetensors", "gguf", "h5", "zarr"])
def test_force_replaces_a_checkpoint_of_the_destination_format(tmp_path: Path, suffix: str) -> None:
    dst = tmp_path / f"model.{suffix}"
    vs.convert(vs.save(tmp_path / "old.h5", {"w": np.zeros(4, np.float32)}), dst)
    vs.convert(vs.save(tmp_path / "new.h5", SMALL), dst, force=True)
    np.testing.assert_array_equal(vs.load(dst)["w"], SMALL["w"])


def test_force_never_replaces_a_checkpoint_of_another_format(tmp_path: Path) -> None:
    """A real .npz at a .pt path is someone's file, not a PyTorch checkpoint --force may replace."""
    dst = tmp_path / "model.pt"
    np.savez(tmp_path / "x.npz", w=np.ones(2))
    (tmp_path / "x.npz").rename(dst)
    before = dst.read_bytes()
    with pytest.raises(CheckpointExistsError, match="own format"):
        vs.convert(vs.save(tmp_path / "src.h5", SMALL), dst, force=True)
    assert dst.read_bytes() == before


# ------------------------------------------------------------------ the TF writer
def _entries(values: dict[str, np.ndarray]) -> list[SaveEntry]:
    return [SaveEntry(name, v.shape, v.dtype, (lambda v=v: v)) for name, v in values.items()]


@pytest.mark.parametrize("which", ["data-00000-of-00001", "index"])
def test_the_tf_writer_never_replaces_a_users_file(tmp_path: Path, which: str) -> None:
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    users = tmp_path / f"model.ckpt.{which}"
    users.write_bytes(b"the user's own bytes")
    with pytest.raises(CheckpointExistsError, match=r"exists.*pass overwrite=True"):
        write_tf_checkpoint(tmp_path / "model.ckpt", _entries(SMALL))
    with pytest.raises(CheckpointExistsError, match=r"replaces only a TensorFlow checkpoint.*nothing was written"):
        write_tf_checkpoint(tmp_path / "model.ckpt", _entries(SMALL), overwrite=True)
    assert users.read_bytes() == b"the user's own bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == [users.name]  # no temporary, no state file
    result = run_hostile("cli", ["convert", str(vs.save(tmp_path / "s.h5", SMALL)), str(tmp_path / "model.ckpt"),
                                 "--force"], timeout_s=TIMEOUT_S)
    assert result.status == "exit2" and "replaces only a TensorFlow checkpoint" in result.stderr, result
    assert users.read_bytes() == b"the user's own bytes"


def test_the_tf_writer_replaces_a_tf_checkpoint_with_overwrite(tmp_path: Path) -> None:
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    write_tf_checkpoint(tmp_path / "model.ckpt", _entries({"w": np.zeros(4, np.float32)}))
    write_tf_checkpoint(tmp_path / "model.ckpt", _entries(SMALL), overwrite=True)
    np.testing.assert_array_equal(vs.load(tmp_path / "model.ckpt")["w"], SMALL["w"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "model.ckpt.data-00000-of-00001",
                                                           "model.ckpt.index"]


# ------------------------------------------------------------------ written names
BAD_NAMES = {"parent": "../../evil", "absolute": "/abs/evil", "empty": "", "dot": ".", "nul": "a\x00b",
             "surrogate": "w\udc80"}
WRITERS = {"npz": "out.npz", "pt": "out.pt", "safetensors": "out.safetensors", "gguf": "out.gguf",
           "tf": "out.ckpt", "dcp": "out.distcp", "orbax": "orbax", "h5": "out.h5", "zarr": "out.zarr"}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("kind", sorted(BAD_NAMES))
def test_no_writer_stores_a_name_that_climbs_out_or_is_not_utf8(tmp_path: Path, writer: str, kind: str) -> None:
    src = vs.save(tmp_path / "src.h5", SMALL)
    before = tree_state(tmp_path)
    dst = tmp_path / WRITERS[writer]
    with pytest.raises(InvalidNameError, match=r"cannot write '.*'.*variable name|must not be empty"):
        vs.convert(src, dst, rename=[("w", BAD_NAMES[kind])], to_format=writer)
    assert changed_paths(before, tree_state(tmp_path)) == []  # nothing written, here or above


def test_write_npz_itself_refuses_a_member_name_leading_out(tmp_path: Path) -> None:
    from varstore.formats.plain.npz import write_npz

    (tmp_path / "a").mkdir()
    with pytest.raises(InvalidNameError, match=r"'\.\./\.\./evil' has a '\.\.' part"):
        write_npz(tmp_path / "a" / "x.npz", _entries({"../../evil": np.ones(2)}))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a"]


# ------------------------------------------------------------------ out of room
_CHILD = r"""
import resource, sys
from varstore_cli.main import cli
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # Python ignores SIGXFSZ: writes fail with EFBIG
try:
    cli.main(args=sys.argv[2:], prog_name="varstore", standalone_mode=True)
    code = 0
except SystemExit as exit_:
    code = exit_.code if isinstance(exit_.code, int) else 1
sys.exit(code)
"""


def _convert_under_fsize(tmp_path: Path, limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "cli")]), COLUMNS="200")
    (tmp_path / "child-tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(tmp_path / "child-tmp")
    return subprocess.run([sys.executable, "-c", _CHILD, str(limit), "convert", *args], capture_output=True,
                          text=True, env=env, timeout=TIMEOUT_S, check=False)


FULL_DESTINATIONS = {"tf": "model.ckpt", "npz": "model.npz", "pt": "model.pt", "safetensors": "model.safetensors",
                     "gguf": "model.gguf", "h5": "model.h5", "zarr": "model.zarr"}


@pytest.mark.parametrize("writer", sorted(FULL_DESTINATIONS))
def test_a_write_past_the_file_size_limit_keeps_the_old_checkpoint(tmp_path: Path, writer: str) -> None:
    old = tmp_path / "out" / FULL_DESTINATIONS[writer]
    vs.convert(vs.save(tmp_path / "old.h5", SMALL), old, to_format=writer)
    big = vs.save(tmp_path / "big.h5", BIG)
    before = tree_state(tmp_path / "out")
    result = _convert_under_fsize(tmp_path, 256 << 10, str(big), str(old), "--force", "--to", writer)
    assert result.returncode == 2, result
    assert result.stderr.startswith("varstore: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "left as it was" in result.stderr, result.stderr
    assert "the file size limit is reached" in result.stderr or (  # NumPy's tofile (GGUF): a short write
        writer == "gguf" and "accepted only part of a write" in result.stderr), result.stderr
    assert changed_paths(before, tree_state(tmp_path / "out")) == []  # old files whole, no temporary left
    np.testing.assert_array_equal(vs.load(old)["w"], SMALL["w"])
    assert list((tmp_path / "child-tmp").iterdir()) == []


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root (a real full disk); the RLIMIT_FSIZE test covers the rest")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("writer", ["tf", "npz"])
def test_a_full_disk_keeps_the_old_checkpoint(tmp_path: Path, writer: str) -> None:
    """A real ENOSPC: a 1 MiB tmpfs, an old checkpoint on it, --force with 2 MiB of values."""
    big = vs.save(tmp_path / "big.h5", BIG)
    with _tmpfs(tmp_path / "small", "1M") as disk:
        old = disk / FULL_DESTINATIONS[writer]
        vs.convert(vs.save(tmp_path / "old.h5", SMALL), old, to_format=writer)
        before = tree_state(disk)
        with pytest.raises(DiskFullError, match="no space left on the device.*left as it was") as caught:
            vs.convert(big, old, force=True, to_format=writer)
        assert caught.value.errno == 28 and isinstance(caught.value, OSError)
        assert changed_paths(before, tree_state(disk)) == []
        np.testing.assert_array_equal(vs.load(old)["w"], SMALL["w"])


# ------------------------------------------------------------------ retention
def test_retention_never_deletes_a_file_the_manager_did_not_make(tmp_path: Path) -> None:
    run = tmp_path / "run"
    manager = vs.CheckpointManager(run, max_to_keep=1)
    manager.save(SMALL, step=1)
    best = vs.save(run / "best_model.h5", {"w": np.full(4, 9.0, np.float32)})  # the user's, a varstore file

    def list_best_model() -> None:
        state = json.loads((run / "latest").read_text())
        state["checkpoints"].insert(0, {"name": "best_model.h5", "step": 0, "time": 0.0})
        state["preserved"] = ["best_model.h5"]
        (run / "latest").write_text(json.dumps(state))

    list_best_model()
    kept = tree_state(run)["best_model.h5"]
    outcome = run_hostile("api", ["manager_save", str(run), "1", "2"], timeout_s=TIMEOUT_S)
    assert outcome.status == "ok", outcome
    assert tree_state(run)["best_model.h5"] == kept
    list_best_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.save(SMALL, step=3)
    assert any("best_model.h5" in str(w.message) and "never deleted" in str(w.message) for w in caught)
    assert sorted(p.name for p in run.iterdir()) == [".lock", "best_model.h5", "ckpt-3.h5", "latest"]
    assert tree_state(run)["best_model.h5"] == kept
    np.testing.assert_array_equal(vs.load(best)["w"], np.full(4, 9.0, np.float32))
    assert [entry["name"] for entry in json.loads((run / "latest").read_text())["checkpoints"]] == ["ckpt-3.h5"]
