"""Damaged or unsupported input: one line "varstore: error: ...", exit status 2, never a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from varstore_cli import commands

MARKER = Path("/tmp/varstore_pwned_marker")


def _truncate(src: Path, dst: Path, keep: float = 0.5) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])
    return dst


def _damaged(kind: str, tmp_path: Path, fixtures_dir: Path, make_checkpoint) -> Path:
    """Builds one damaged input in tmp_path and returns the path to pass to the CLI."""
    if kind == "missing":
        return tmp_path / "no_such_checkpoint.h5"
    if kind == "empty-h5":
        (tmp_path / "empty.h5").write_bytes(b"")
        return tmp_path / "empty.h5"
    if kind == "empty-dir":
        (tmp_path / "empty_dir").mkdir()
        return tmp_path / "empty_dir"
    if kind == "wrong-magic-h5":
        (tmp_path / "wrong.h5").write_bytes(b"this is a text file, not HDF5\n" * 20)
        return tmp_path / "wrong.h5"
    if kind == "wrong-magic-safetensors":
        (tmp_path / "wrong.safetensors").write_bytes(b"\x00\x01garbage" * 10)
        return tmp_path / "wrong.safetensors"
    if kind == "truncated-varstore-h5":
        good = make_checkpoint("good.h5", {"w": np.arange(5000, dtype=np.float32), "b": np.ones(3)})
        return _truncate(good, tmp_path / "truncated.h5")
    if kind == "truncated-safetensors":
        return _truncate(fixtures_dir / "safetensors" / "mixed_numpy.safetensors", tmp_path / "t.safetensors")
    if kind == "truncated-npz":
        return _truncate(fixtures_dir / "npz" / "arrays.npz", tmp_path / "t.npz")
    if kind == "truncated-keras":
        return _truncate(fixtures_dir / "keras3" / "model.weights.h5", tmp_path / "t.weights.h5")
    if kind == "truncated-tf-index":
        source = fixtures_dir / "tf1_scopes"
        shutil.copy(source / "model.ckpt.data-00000-of-00001", tmp_path / "model.ckpt.data-00000-of-00001")
        _truncate(source / "model.ckpt.index", tmp_path / "model.ckpt.index")
        return tmp_path / "model.ckpt"
    if kind == "broken-zarr-metadata":
        good = make_checkpoint("good.zarr", {"w": np.arange(10.0)})
        (good / "zarr.json").write_text("{ not json")
        return good
    if kind == "pytorch-pickle":
        return fixtures_dir / "torch" / "evil.pt"
    if kind == "npz-object-array":
        return fixtures_dir / "npz" / "object_array.npz"
    raise AssertionError(kind)


UNREADABLE = ["missing", "empty-h5", "empty-dir", "wrong-magic-h5", "wrong-magic-safetensors",
              "truncated-varstore-h5", "truncated-safetensors", "truncated-npz", "truncated-keras",
              "truncated-tf-index", "broken-zarr-metadata", "pytorch-pickle", "npz-object-array"]


def _assert_one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("varstore: error: "), result.stderr
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.output and "internal error" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr


@pytest.mark.parametrize("kind", UNREADABLE)
@pytest.mark.parametrize("command", ["ls", "show", "verify", "convert", "diff"])
def test_damaged_input_gives_one_line_and_exit_2(run, tmp_path, fixtures_dir, make_checkpoint, kind, command):
    path = _damaged(kind, tmp_path, fixtures_dir, make_checkpoint)
    args = {"ls": ["ls", path], "show": ["show", path, "w"], "verify": ["verify", path],
            "convert": ["convert", path, tmp_path / "out.h5"], "diff": ["diff", path, path]}[command]
    result = run(*args)
    _assert_one_line_error(result, path.name)
    assert not (tmp_path / "out.h5").exists()
    assert not MARKER.exists()  # nothing was unpickled


def test_whole_module_pickle_refusal_says_to_save_the_state_dict(run, fixtures_dir):
    result = run("ls", fixtures_dir / "torch" / "model_full.pt")
    _assert_one_line_error(result, "model_full.pt", "torch.nn.modules.container.Sequential", "state_dict()")
    assert not MARKER.exists()


def test_truncated_tf_data_shard(run, tmp_path, fixtures_dir):
    source = fixtures_dir / "tf1_scopes"
    shutil.copy(source / "model.ckpt.index", tmp_path / "model.ckpt.index")
    _truncate(source / "model.ckpt.data-00000-of-00001", tmp_path / "model.ckpt.data-00000-of-00001", 0.3)
    prefix = tmp_path / "model.ckpt"
    # (ls fails too: string variables are read at open to learn their longest length)
    _assert_one_line_error(run("verify", prefix), "model.ckpt")
    _assert_one_line_error(run("convert", prefix, tmp_path / "out.zarr"))
    assert not (tmp_path / "out.zarr").exists()


def test_flipped_bit_in_a_tf_shard_is_caught_by_its_crc(run, tmp_path, fixtures_dir):
    source = fixtures_dir / "tf1_scopes"
    shutil.copy(source / "model.ckpt.index", tmp_path / "model.ckpt.index")
    data = bytearray((source / "model.ckpt.data-00000-of-00001").read_bytes())
    data[len(data) // 2] ^= 0x01
    (tmp_path / "model.ckpt.data-00000-of-00001").write_bytes(bytes(data))
    _assert_one_line_error(run("verify", tmp_path / "model.ckpt"), "model.ckpt")


def test_debug_flag_shows_the_traceback(run, tmp_path):
    (tmp_path / "empty.h5").write_bytes(b"")
    result = run("--debug", "ls", tmp_path / "empty.h5")
    assert result.exit_code == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().endswith("is an empty file, not a checkpoint") or \
        "varstore: error: " in result.stderr.splitlines()[-1]


def test_a_bug_is_still_one_line_and_says_so(run, make_checkpoint, monkeypatch):
    path = make_checkpoint("a.h5", {"w": np.ones(3)})

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(commands, "variable_stats", broken)
    result = run("show", path, "w")
    assert result.exit_code == 2
    assert result.stderr == ("varstore: error: internal error: RuntimeError: boom "
                             "(please report it; run with --debug for the traceback)\n")


def test_usage_errors_exit_2(run):
    assert run("ls").exit_code == 2
    assert run("frobnicate").exit_code == 2
    assert run("show", "--values", "-1", "x", "y").exit_code == 2


def test_format_option_skips_detection(run, fixtures_dir):
    assert run("ls", "--format", "npz", fixtures_dir / "npz" / "arrays.npz").exit_code == 0
    result = run("ls", "--format", "bogus", fixtures_dir / "npz" / "arrays.npz")
    _assert_one_line_error(result, "unknown checkpoint format 'bogus'")


def test_a_value_the_library_rejects_is_one_line(run, fixtures_dir, tmp_path):
    result = run("convert", "--dtype", "int8", fixtures_dir / "npz" / "arrays.npz", tmp_path / "x.h5")
    _assert_one_line_error(result, "int8")
    assert not (tmp_path / "x.h5").exists()
    result = run("convert", fixtures_dir / "npz" / "arrays.npz", tmp_path / "x.onnx")
    _assert_one_line_error(result, "x.onnx")
