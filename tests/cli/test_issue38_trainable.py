"""The trainable flag is never invented (issue 38, item 2): unknown stays unknown through convert, non-floating
variables are never trainable, restoring never changes a variable's own flag, recorded flags are kept."""

from __future__ import annotations

import json

import numpy as np
from safetensors.numpy import save_file

import varstore as vs
from varstore import open_checkpoint


def _torch_like(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"bn.running_mean": np.zeros(3, np.float32), "bn.num_batches_tracked": np.array(7, np.int64),
               "position_ids": np.arange(4, dtype=np.int64), "mask": np.array([True, False]),
               "fc.weight": np.ones((2, 3), np.float32)}, str(path))
    return path


def test_foreign_reader_reports_unknown_for_floats_and_false_for_the_rest(tmp_path):
    with open_checkpoint(_torch_like(tmp_path)) as reader:
        flags = {info.name: info.trainable for info in reader.infos()}
    assert flags == {"bn.running_mean": None, "bn.num_batches_tracked": False, "position_ids": False,
                     "mask": False, "fc.weight": None}


def test_converted_varstore_file_keeps_unknown_flags(run, tmp_path):
    dst = tmp_path / "m.h5"
    assert run("convert", _torch_like(tmp_path), dst).exit_code == 0
    doc = json.loads(run("ls", "--json", dst).stdout)
    assert {v["name"]: v["trainable"] for v in doc["variables"]} == {
        "bn.running_mean": None, "bn.num_batches_tracked": False, "position_ids": False, "mask": False,
        "fc.weight": None}
    lines = run("ls", dst).stdout.splitlines()
    assert lines[1].split() == ["name", "shape", "dtype", "size", "trainable", "collections"]
    flags = {line.split()[0]: line.split()[-2] for line in lines[2:7]}  # "... 12 B  -  -": flag, collections
    assert flags == {"bn.running_mean": "-", "bn.num_batches_tracked": "no", "fc.weight": "-", "mask": "no",
                     "position_ids": "no"}
    zarr = tmp_path / "m.zarr"
    assert run("convert", dst, zarr).exit_code == 0
    with open_checkpoint(zarr) as reader:
        assert reader.info("fc.weight").trainable is None and reader.info("mask").trainable is False


def test_restore_never_changes_a_variables_own_flag(tmp_path):
    src = tmp_path / "m.h5"
    vs.convert(_torch_like(tmp_path), src)
    store = vs.VariableStore()
    with vs.variable_scope("bn"):
        mean = store.get_variable("running_mean", [3], trainable=False)
    weight = store.get_variable("fc.weight", [2, 3])
    vs.restore(src, store, strict=False)
    assert (mean.trainable, weight.trainable) == (False, True)
    assert [v.name for v in store.collection(vs.TRAINABLE_VARIABLES)] == ["fc.weight"]
    np.testing.assert_array_equal(weight.numpy(), np.ones((2, 3), np.float32))


def test_recorded_flags_are_kept(tmp_path):
    store = vs.VariableStore()
    store.get_variable("w", [2])
    store.get_variable("step", [], dtype=np.int64, trainable=False)
    store.get_variable("frozen", [2], trainable=False)
    own = tmp_path / "own.h5"
    vs.save(own, store)
    vs.convert(own, tmp_path / "copy.zarr")
    with open_checkpoint(tmp_path / "copy.zarr") as reader:
        assert {i.name: i.trainable for i in reader.infos()} == {"w": True, "step": False, "frozen": False}
