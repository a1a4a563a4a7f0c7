"""--filter (repeatable: the union) and --exclude (repeatable) on convert, ls, diff and verify (issue 38, item 1)."""

from __future__ import annotations

import json

import numpy as np

from varstore import open_checkpoint, select_names


def _model(make_checkpoint, name="m.h5", scale=1.0):
    return make_checkpoint(name, {
        "model/count": np.arange(3, dtype=np.int64),
        "model/mask": np.array([True, False]),
        "model/weight": np.full((2, 2), scale, np.float32),
        "opt/exp_avg": np.zeros(2, np.float32),
    })


def test_select_names_is_the_union_of_filters_minus_excludes():
    names = ["a/x", "a/y", "b/x", "c"]
    assert select_names(names) == names
    assert select_names(names, ["a/*", "c"]) == ["a/x", "a/y", "c"]
    assert select_names(names, None, ["*/x"]) == ["a/y", "c"]
    assert select_names(names, "a/*", "a/y") == ["a/x"]


def test_convert_repeated_filter_keeps_both_and_exclude_leaves_out(run, make_checkpoint, tmp_path):
    src = _model(make_checkpoint)
    two = tmp_path / "two.npz"
    result = run("convert", "--filter", "model/count", "--filter", "model/mask", src, two)
    assert result.exit_code == 0, result.output
    with open_checkpoint(two) as reader:
        assert sorted(reader.keys()) == ["model/count", "model/mask"]
    rest = tmp_path / "rest.safetensors"
    result = run("convert", "--exclude", "model/mask", "--exclude", "opt/*", src, rest)
    assert result.exit_code == 0, result.output
    with open_checkpoint(rest) as reader:
        assert sorted(reader.keys()) == ["model/count", "model/weight"]


def test_ls_filter_and_exclude_lines_and_json(run, make_checkpoint):
    src = _model(make_checkpoint)
    text = run("ls", "--filter", "model/*", "--filter", "opt/*", "--exclude", "*mask", src).stdout.splitlines()
    assert text[-1] == ("total: 3 variables matching 'model/*' or 'opt/*', excluding '*mask', "
                        "9 elements, 48 B")
    doc = json.loads(run("ls", "--json", "--exclude", "model/*", src).stdout)
    assert [v["name"] for v in doc["variables"]] == ["opt/exp_avg"]
    assert doc["filter"] is None and doc["exclude"] == ["model/*"]
    doc = json.loads(run("ls", "--json", "--filter", "a", "--filter", "b", src).stdout)
    assert doc["filter"] == ["a", "b"] and doc["variables"] == []


def test_diff_compares_only_the_selection(run, make_checkpoint):
    a = _model(make_checkpoint, "a.h5", 1.0)
    b = _model(make_checkpoint, "b.h5", 2.0)
    assert run("diff", a, b).exit_code == 1
    result = run("diff", "--exclude", "model/weight", a, b)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "checkpoints are equal (exact), excluding 'model/weight': 3 equal, 0 added, 0 removed, "
        "0 shape changed, 0 dtype changed, 0 values differ")
    doc = json.loads(run("diff", "--json", "--filter", "model/w*", a, b).stdout)
    assert doc["filter"] == "model/w*" and [d["name"] for d in doc["values_differ"]] == ["model/weight"]
    assert doc["equal"] == []


def test_verify_checks_only_the_selection(run, make_checkpoint, flip_byte):
    src = _model(make_checkpoint)
    flip_byte(src, np.full((2, 2), 1.0, np.float32))
    assert run("verify", src).exit_code == 2
    result = run("verify", "--exclude", "model/weight", src)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"ok: {src}  (varstore-hdf5, version 1.0): 3 variables, excluding "
                                    f"'model/weight', ")
    bad = run("verify", "--filter", "model/weight", src)
    assert bad.exit_code == 2 and "model/weight" in bad.stderr
    doc = json.loads(run("verify", "--json", "--filter", "opt/*", src).stdout)
    assert doc["variables"] == 1 and doc["filter"] == "opt/*" and doc["exclude"] == []
