"""The hostile-input suite: one file or directory of each class, built from bytes, run through the CLI in a child.

Each case runs `varstore ls` and `varstore convert` on it in a fresh process under RLIMIT_AS (2 GiB) and
a timeout (tests/reliability/_hostile_run.py) and asserts what issue 26 promises all together: one
typed error line and exit status 2 (or, for a hostile name, a clean run with escaped output), a peak
RSS far below what the file declares, nothing read-modified, written or deleted anywhere in the test's
folder (the checkpoint and its neighbours), and nothing left in the child's TMPDIR. The classes' own
tests (test_hostile_sizes, test_hostile_archives, test_hostile_paths, test_special_files,
test_hostile_manager, test_terminal_safety) go deeper; this is the one table of them.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from tests.convert.test_hostile_archives import _bomb_member, _torch_zip, _zip_with_raw_member
from tests.reliability import _hostile_sizes as sizes
from tests.reliability._hostile_run import changed_paths, run_hostile, tree_state

#: Peak RSS a refused file may cost a child (MiB): imports take about 60; every declared size is in GiB.
PEAK_MB = 400


def _self_containing_pt(folder: Path) -> Path:
    return _torch_zip(folder / "loop.pt", b"\x80\x02}q\x00(X\x01\x00\x00\x00ah\x00u.")


def _far_memo_pt(folder: Path) -> Path:
    return _torch_zip(folder / "memo.pt", b"\x80\x02}r\x80\xd1\xf0\x08.")  # LONG_BINPUT 150,000,000


def _bzip2_npz(folder: Path) -> Path:
    return _zip_with_raw_member(folder / "bomb.npz", [_bomb_member("w.npy")])


def _tf_state_outside(folder: Path) -> Path:
    from varstore.checkpoint.format.entry import SaveEntry
    from varstore.formats.tensorflow.writer import write_tf_checkpoint

    entry = SaveEntry("w", (4,), np.dtype(np.float32), lambda: np.full(4, -7.5, np.float32))
    write_tf_checkpoint(folder / "other" / "model.ckpt", [entry])
    (folder / "ckpt").mkdir()
    (folder / "ckpt" / "checkpoint").write_text('model_checkpoint_path: "../other/model.ckpt"\n')
    return folder / "ckpt"


def _hf_index_outside(folder: Path) -> Path:
    vs.convert(vs.save(folder / "src.h5", {"w": np.full(4, -7.5, np.float32)}), folder / "evil.safetensors")
    model = folder / "model"
    vs.convert(vs.save(folder / "m.h5", {"a": np.ones(3, np.float32)}), model, max_shard_size="1KB")
    index = model / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    document["weight_map"]["a"] = "../evil.safetensors"
    index.write_text(json.dumps(document))
    return model


def _fifo(folder: Path) -> Path:
    os.mkfifo(folder / "model.h5")
    return folder / "model.h5"


def _overlapping_safetensors(folder: Path) -> Path:
    header = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                         "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}).encode()
    path = folder / "alias.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(24))
    return path


def _hostile_name(folder: Path) -> Path:
    header = json.dumps({"a\x1b[2Jb": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path = folder / "name.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    return path


#: class -> (builder, the error class the CLI names, or None when the file is valid but hostile in name)
CASES: dict[str, tuple[Callable[[Path], Path], str | None]] = {
    "pickle that contains itself": (_self_containing_pt, "contains itself"),
    "far pickle memo index": (_far_memo_pt, "memo"),
    "bzip2 zip member": (_bzip2_npz, "bzip2"),
    "unwritten chunked HDF5 dataset": (sizes.unwritten_h5, None),
    "compressed own manifest declaring 2.6 GB": (lambda f: sizes.compressed_manifest_zarr(f, declared=2_600_000_000),
                                                 "manifest"),
    "TF state file naming ../": (_tf_state_outside, "outside the checkpoint directory"),
    "HF index naming ../": (_hf_index_outside, "outside the checkpoint directory"),
    "FIFO as a checkpoint": (_fifo, "FIFO"),
    "overlapping safetensors ranges": (_overlapping_safetensors, "overlap"),
    "control characters in a name": (_hostile_name, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_input_is_refused_in_bounded_memory_touching_nothing(tmp_path: Path, case: str) -> None:
    build, needle = CASES[case]
    folder = tmp_path / "area"
    folder.mkdir()
    path = build(folder)
    before = tree_state(tmp_path)
    listed = run_hostile("cli", ["ls", str(path)], timeout_s=60)
    converted = run_hostile("cli", ["convert", str(path), str(tmp_path / "out.h5")], timeout_s=60)
    for outcome in (listed, converted):
        assert outcome.status in ("exit2", "exit0"), (case, outcome)
        assert outcome.peak_rss_mb is not None and outcome.peak_rss_mb < PEAK_MB, (case, outcome.peak_rss_mb)
        assert outcome.tmp_left == [], (case, outcome.tmp_left)
        assert "\x1b" not in outcome.stdout + outcome.stderr
    if needle is not None:
        for outcome in (listed, converted):
            assert outcome.status == "exit2" and outcome.stderr.count("\n") == 1, (case, outcome)
            assert needle in outcome.stderr, (case, outcome.stderr)
    elif case == "control characters in a name":
        assert listed.status == "exit0" and "a\\x1b[2Jb" in listed.stdout
    else:  # the unwritten dataset lists (nothing is allocated for listing); its value is refused on convert
        assert listed.status == "exit0", listed
        assert converted.status == "exit2" and "'big'" in converted.stderr and "limit" in converted.stderr, converted
    after = tree_state(tmp_path)
    assert [p for p in changed_paths(before, after) if p != "out.h5"] == [], case
    if needle is not None:
        assert not (tmp_path / "out.h5").exists()
