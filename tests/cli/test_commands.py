"""varstore ls / show / diff / verify on real files: fixtures/ and checkpoints written in tmp_path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest


KERNEL = np.arange(12, dtype=np.float32).reshape(3, 4) / 4  # 0, 0.25, ..., 2.75
BIAS = np.array([0.5, -1.0, np.nan, np.inf])
GV, TV = "global_variables", "trainable_variables"
MODEL = {
    "enc/dense/kernel": (KERNEL, True, (GV, TV)),
    "enc/dense/bias": (BIAS, True, (GV, TV)),
    "global_step": (np.int64(7), False, (GV,)),
    "model/w/.ATTRIBUTES/VARIABLE_VALUE": (np.array([True, False]), True, ()),
}


@pytest.fixture
def model_h5(make_checkpoint) -> Path:
    return make_checkpoint("a.h5", MODEL, step=7, metadata={"run": "a7"})


def _manifest(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".manifest.json").read_text())


# ----------------------------------------------------------------------- ls
def test_ls_table_has_aligned_columns_and_totals(run, model_h5):
    result = run("ls", model_h5)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        f"{model_h5}  (varstore-hdf5, version 1.0, step 7)",
        "name                                shape   dtype    size  trainable  collections",
        "enc/dense/kernel                    [3, 4]  float32  48 B  yes        global_variables,trainable_variables",
        "enc/dense/bias                      [4]     float64  32 B  yes        global_variables,trainable_variables",
        "global_step                         []      int64     8 B  no         global_variables",
        "model/w/.ATTRIBUTES/VARIABLE_VALUE  [2]     bool      2 B  yes        -",
        "total: 4 variables, 19 elements, 90 B",
    ]


def test_ls_tf_checkpoint_matches_the_tensorflow_manifest(run, tf_checkpoint):
    manifest = _manifest(tf_checkpoint)
    result = run("ls", "--json", tf_checkpoint)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["schema"], doc["format"], doc["step"]) == ("varstore.ls/1", "tf", 42)
    got = {v["name"]: (v["shape"], v["dtype"], v["nbytes"]) for v in doc["variables"]}
    want = {v["name"]: (v["shape"], v["dtype"], v["nbytes"]) for v in manifest["variables"]
            if v["dtype"] != "bytes"}
    assert {k: got[k] for k in want} == want
    assert len(got) == len(manifest["variables"]) == 18
    assert got["zoo/names"][:2] == ([4], "S5")  # TF strings become fixed-length bytes
    assert doc["totals"] == {"variables": 18, "elements": sum(math.prod(s) for s, _, _ in got.values()),
                             "nbytes": sum(n for _, _, n in got.values())}
    text = run("ls", tf_checkpoint).stdout.splitlines()
    assert text[0] == f"{tf_checkpoint}  (tf, version tensor-bundle-1, step 42)"
    assert "encoder/layer_b/weights  [3, 3, 8, 16]  float32    4.5 KiB  yes        trainable_variables,variables" in text
    # flags and collections from the graph's collections in model.ckpt.meta, as TensorFlow's own reader saw them
    # (TF lists its int/bool/string variables as trainable: a non-floating variable never is, issue 38)
    floating = ("float", "bfloat", "complex")
    assert {v["name"]: (v["trainable"], v["collections"]) for v in doc["variables"]} == {
        v["name"]: (v["trainable"] and v["dtype"].startswith(floating), v["collections"])
        for v in manifest["variables"]}
    assert text[-1] == "total: 18 variables, 1,821 elements, 7.1 KiB"


def test_ls_json_schema_and_values(run, model_h5):
    doc = json.loads(run("ls", "--json", model_h5).stdout)
    assert list(doc) == ["schema", "path", "format", "format_version", "step", "metadata", "filter",
                         "exclude", "variables", "totals", "skipped"]
    assert (doc["path"], doc["format_version"], doc["metadata"]) == (str(model_h5), "1.0", {"run": "a7"})
    kernel = doc["variables"][0]
    assert list(kernel) == ["name", "shape", "dtype", "nbytes", "trainable", "collections", "checksum",
                            "device", "key"]
    assert kernel["name"] == kernel["key"] == "enc/dense/kernel"
    assert (kernel["shape"], kernel["dtype"], kernel["nbytes"]) == ([3, 4], "float32", 48)
    assert kernel["collections"] == [GV, TV] and kernel["trainable"] is True
    assert kernel["checksum"].startswith("crc32c:") and len(kernel["checksum"]) == 15
    assert doc["variables"][2]["trainable"] is False
    assert doc["totals"] == {"variables": 4, "elements": 19, "nbytes": 90}
    assert doc["skipped"] == [] and doc["filter"] is None


def test_ls_filter_glob(run, model_h5):
    doc = json.loads(run("ls", "--json", "--filter", "enc/*", model_h5).stdout)
    assert [v["name"] for v in doc["variables"]] == ["enc/dense/kernel", "enc/dense/bias"]
    assert doc["filter"] == "enc/*" and doc["totals"] == {"variables": 2, "elements": 16, "nbytes": 80}
    text = run("ls", "--filter", "*step", model_h5).stdout.splitlines()
    assert text[-1] == "total: 1 variable matching '*step', 1 element, 8 B"
    assert run("ls", "--filter", "nothing*", model_h5).stdout.splitlines()[1:] == [
        "total: 0 variables matching 'nothing*', 0 elements, 0 B"]


def test_ls_tree_shows_scopes_with_totals(run, model_h5):
    result = run("ls", "--tree", "--strip-attributes", model_h5)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [
        ".                   4 variables           90 B",
        "├── enc/            2 variables           80 B",
        "│   └── dense/      2 variables           80 B",
        "│       ├── bias    [4]          float64  32 B",
        "│       └── kernel  [3, 4]       float32  48 B",
        "├── global_step     []           int64     8 B",
        "└── model/          1 variable             2 B",
        "    └── w           [2]          bool      2 B",
        "total: 4 variables, 19 elements, 90 B",
    ]


def test_ls_tree_json_has_per_scope_totals(run, tf_checkpoint):
    doc = json.loads(run("ls", "--tree", "--json", tf_checkpoint).stdout)
    tree = doc["tree"]
    assert (tree["path"], tree["variables"], tree["nbytes"]) == ("", 18, doc["totals"]["nbytes"])
    encoder = next(c for c in tree["children"] if c["name"] == "encoder")
    assert (encoder["variables"], encoder["nbytes"]) == (4, 32 + 2400 + 64 + 4608)
    layer_a = encoder["children"][0]
    assert [c["path"] for c in layer_a["children"]] == ["encoder/layer_a/biases", "encoder/layer_a/weights"]
    assert layer_a["children"][1]["variable"]["shape"] == [5, 5, 3, 8]


def test_ls_strip_attributes_keeps_the_real_key(run, model_h5):
    doc = json.loads(run("ls", "--json", "--strip-attributes", "--filter", "model/*", model_h5).stdout)
    (entry,) = doc["variables"]
    assert (entry["name"], entry["key"]) == ("model/w", "model/w/.ATTRIBUTES/VARIABLE_VALUE")
    text = run("ls", "--strip-attributes", model_h5).stdout
    assert "\nmodel/w           [2]     bool      2 B  yes        -\n" in text
    assert ".ATTRIBUTES" not in text


def test_ls_lists_skipped_entries_with_reasons(run, fixtures_dir):
    path = fixtures_dir / "foreign_h5" / "generic.h5"
    doc = json.loads(run("ls", "--json", path).stdout)
    assert doc["format"] == "hdf5"
    assert "experiment/run_01/measurements" in [v["name"] for v in doc["variables"]]
    skipped = {s["name"]: s["reason"] for s in doc["skipped"]}
    assert "compound" in skipped["experiment/run_01/records"]
    assert "dangling" in skipped["dangling_soft_link"]
    text = run("ls", path).stdout.splitlines()
    start = text.index(f"skipped {len(skipped)} entries:")
    assert [line.split()[0] for line in text[start + 1:]] == list(skipped)
    assert all(line.startswith("  ") for line in text[start + 1:])


# --------------------------------------------------------------------- show
def test_show_prints_metadata_stats_and_values(run, model_h5):
    result = run("show", model_h5, "enc/dense/bias")
    assert result.exit_code == 0, result.output
    lines = dict(line.split(None, 1) for line in result.stdout.splitlines() if not line.startswith("attribute"))
    assert lines["shape"] == "[4]" and lines["dtype"] == "float64"
    assert lines["size"] == "32 B (4 elements)"
    assert lines["trainable"] == "yes" and lines["collections"] == "global_variables,trainable_variables"
    assert (lines["min"], lines["max"], lines["mean"], lines["std"]) == ("-1", "0.5", "-0.25", "0.75")
    assert (lines["nan"], lines["inf"], lines["zeros"]) == ("1", "1", "0")
    assert lines["values"] == "[0.5, -1, nan, inf]"


def test_show_json(run, model_h5):
    doc = json.loads(run("show", "--json", "--values", "5", model_h5, "enc/dense/kernel").stdout)
    assert doc["schema"] == "varstore.show/1" and doc["step"] == 7
    assert doc["variable"]["name"] == "enc/dense/kernel" and doc["variable"]["shape"] == [3, 4]
    assert doc["stats"] == {"dtype": "float32", "kind": "float", "count": 12, "min": 0.0, "max": 2.75,
                            "mean": 1.375, "std": pytest.approx(float(KERNEL.std())), "nan_count": 0,
                            "inf_count": 0, "zeros": 1}
    assert doc["values"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    bias = json.loads(run("show", "--json", model_h5, "enc/dense/bias").stdout)
    assert bias["values"] == [0.5, -1.0, "nan", "inf"]


def test_show_values_option(run, model_h5):
    out = run("show", "--values", "3", model_h5, "enc/dense/kernel").stdout
    assert "\nvalues[:3]         [0, 0.25, 0.5]\n" in out
    assert "values" not in run("show", "--values", "0", model_h5, "enc/dense/kernel").stdout.split("zeros")[1]


def test_show_tf_strings_and_bfloat16(run, tf_checkpoint):
    names = json.loads(run("show", "--json", tf_checkpoint, "zoo/names").stdout)
    assert names["stats"]["kind"] == "string" and names["stats"]["count"] == 4
    assert names["values"][:2] == ["alpha", "beta"]
    expected = next(v for v in _manifest(tf_checkpoint)["variables"] if v["name"] == "encoder/layer_a/biases")
    biases = json.loads(run("show", "--json", tf_checkpoint, "encoder/layer_a/biases").stdout)
    assert biases["values"] == pytest.approx(expected["values"])
    bf16 = json.loads(run("show", "--json", tf_checkpoint, "zoo/bf16").stdout)
    assert bf16["variable"]["dtype"] == "bfloat16" and bf16["stats"]["kind"] == "float"


def test_show_accepts_the_name_without_the_attribute_suffix(run, model_h5):
    doc = json.loads(run("show", "--json", model_h5, "model/w").stdout)
    assert doc["variable"]["name"] == "model/w/.ATTRIBUTES/VARIABLE_VALUE"
    assert doc["stats"]["kind"] == "bool" and doc["values"] == [True, False]


def test_show_unknown_name_suggests_close_names(run, model_h5):
    result = run("show", model_h5, "enc/dense/kernl")
    assert result.exit_code == 2
    assert result.stderr == (f"varstore: error: no variable 'enc/dense/kernl' in '{model_h5}' (varstore-hdf5, "
                             f"4 variables); did you mean 'enc/dense/kernel', 'enc/dense/bias'? `varstore ls {model_h5}` lists them\n")


# --------------------------------------------------------------------- diff
def test_diff_of_a_conversion_is_equal_and_exits_0(run, tf_checkpoint, tmp_path):
    assert run("convert", tf_checkpoint, tmp_path / "m.zarr").exit_code == 0
    result = run("diff", tf_checkpoint, tmp_path / "m.zarr")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == ("checkpoints are equal (exact): 18 equal, 0 added, 0 removed, "
                                              "0 shape changed, 0 dtype changed, 0 values differ")


def test_diff_lists_changes_and_exits_1(run, make_checkpoint, model_h5):
    other = make_checkpoint("b.zarr", {
        "enc/dense/kernel": KERNEL + np.float32(0.5) * (KERNEL > 2),  # 3 elements move by 0.5
        "enc/dense/bias": BIAS[:3].copy(),
        "global_step": np.int32(7),
        "extra": np.zeros(2, np.float16),
    })
    result = run("diff", model_h5, other)
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[2:] == [
        "added    extra                               [2] float16",
        "removed  model/w/.ATTRIBUTES/VARIABLE_VALUE  [2] bool",
        "shape    enc/dense/bias                      [4] -> [3]",
        "dtype    global_step                         int64 -> int32",
        "values   enc/dense/kernel                    3 of 12 elements differ, max abs diff 0.5, "
        "max rel diff 0.1818182",
        "checkpoints differ (exact): 0 equal, 1 added, 1 removed, 1 shape changed, 1 dtype changed, "
        "1 values differ",
    ]
    doc = json.loads(run("diff", "--json", model_h5, other).stdout)
    assert doc["schema"] == "varstore.diff/1" and doc["differs"] is True
    assert doc["a"]["path"] == str(model_h5) and doc["b"]["format"] == "varstore-zarr"
    assert doc["values_differ"] == [{"name": "enc/dense/kernel", "count": 12, "mismatched": 3,
                                     "max_abs_diff": 0.5, "max_rel_diff": pytest.approx(0.5 / 2.75)}]
    assert doc["shape_changed"] == [{"name": "enc/dense/bias", "shape_a": [4], "shape_b": [3]}]
    assert doc["dtype_changed"] == [{"name": "global_step", "dtype_a": "int64", "dtype_b": "int32"}]
    assert (doc["added"], doc["removed"], doc["equal"]) == (["extra"], ["model/w/.ATTRIBUTES/VARIABLE_VALUE"], [])


def test_diff_tolerances(run, make_checkpoint):
    a = make_checkpoint("a.h5", {"w": np.array([1.0, 100.0])})
    b = make_checkpoint("b.h5", {"w": np.array([1.001, 100.05])})
    assert run("diff", a, b).exit_code == 1
    assert run("diff", "--atol", "0.01", a, b).exit_code == 1  # 100 vs 100.05 is off by 0.05
    assert run("diff", "--rtol", "1e-3", a, b).exit_code == 0
    result = run("diff", "--atol", "0.1", a, b)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1].startswith("checkpoints are equal (rtol 0, atol 0.1): 1 equal")


# ------------------------------------------------------------------- verify
def test_verify_ok(run, model_h5, tf_checkpoint):
    result = run("verify", model_h5)
    assert result.exit_code == 0
    assert result.stdout == (f"ok: {model_h5}  (varstore-hdf5, version 1.0, step 7): 4 variables, 90 B, "
                             f"4 checksums matched\n")
    doc = json.loads(run("verify", "--json", tf_checkpoint).stdout)
    assert (doc["schema"], doc["ok"], doc["variables"], doc["checksums"]) == ("varstore.verify/1", True, 18, 18)


def test_verify_names_the_first_bad_variable(run, make_checkpoint, flip_byte):
    good = np.linspace(-1, 1, 4096, dtype=np.float32)
    path = make_checkpoint("c.h5", {"a/ok": np.ones(8, np.float32), "b/big": good, "c/later": np.zeros(3)})
    flip_byte(path, good)
    result = run("verify", path)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("varstore: error: ") and result.stderr.count("\n") == 1
    assert "'b/big'" in result.stderr and str(path) in result.stderr and "Traceback" not in result.output
    assert run("ls", path).exit_code == 0  # metadata is intact; only the values are bad
    assert run("diff", path, path).exit_code == 2  # reading the values fails the checksum
