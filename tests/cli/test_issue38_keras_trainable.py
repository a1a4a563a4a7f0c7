"""Keras trainable flags (issue 38, item 2): only what the file says. Optimizer state is never trainable; a `.keras`
archive's config.json freezes every weight of a layer saved with "trainable": false; everything else is unknown."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from varstore import open_checkpoint
from varstore.formats.keras._config import not_trainable


def _keras_manifest(fixtures_dir: Path, name: str) -> dict[str, bool]:
    doc = json.loads((fixtures_dir / name).read_text())
    return {v["name"]: v["trainable"] for v in doc["variables"]}


def _rewrite_config(fixtures_dir: Path, dst: Path, change) -> Path:
    """A copy of fixtures/keras3/model.keras whose config.json is change(config) (bytes written as they are)."""
    with zipfile.ZipFile(fixtures_dir / "keras3" / "model.keras") as src, zipfile.ZipFile(dst, "w") as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "config.json":
                new = change(json.loads(data))
                data = new if isinstance(new, bytes) else json.dumps(new).encode()
            out.writestr(info, data)
    return dst


def _layer(config: dict, name: str) -> dict:
    return next(layer for layer in config["config"]["layers"] if layer["config"]["name"] == name)


def test_flags_never_contradict_keras_and_optimizer_state_is_not_trainable(fixtures_dir):
    for path, manifest in (("keras3/model.keras", "keras3/model.keras.manifest.json"),
                           ("keras3/model.weights.h5", "keras3/model.weights.h5.manifest.json"),
                           ("keras3_sharded/model.weights.json", "keras3_sharded/model.weights.json.manifest.json")):
        keras = _keras_manifest(fixtures_dir, manifest)
        with open_checkpoint(fixtures_dir / path) as reader:
            flags = {i.name: i.trainable for i in reader.infos()}
            assert reader.skipped == [], path
        assert flags.keys() == keras.keys(), path
        assert all(flags[n] is False for n in flags if n.startswith("optimizer/")), path
        assert all(flags[n] is None for n in flags if n.startswith("layers/")), path  # the file does not say
        assert all(flag == keras[n] for n, flag in flags.items() if flag is not None), path


def test_a_frozen_layer_in_config_json_makes_its_weights_not_trainable(run, fixtures_dir, tmp_path):
    def freeze_bn(config):
        _layer(config, "bn")["config"]["trainable"] = False
        return config

    path = _rewrite_config(fixtures_dir, tmp_path / "frozen.keras", freeze_bn)
    doc = json.loads(run("ls", "--json", path).stdout)
    flags = {v["name"]: v["trainable"] for v in doc["variables"]}
    assert [flags[f"layers/batch_normalization/vars/{i}"] for i in range(4)] == [False] * 4
    assert flags["layers/conv2d/vars/0"] is None and flags["layers/dense/vars/1"] is None
    rows = {line.split()[0]: line.split()[-2] for line in run("ls", path).stdout.splitlines()[2:12]}
    assert rows["layers/batch_normalization/vars/0"] == "no" and rows["layers/conv2d/vars/0"] == "-"


def test_a_frozen_model_freezes_every_weight(fixtures_dir, tmp_path):
    def freeze_model(config):
        config["config"]["trainable"] = False
        return config

    with open_checkpoint(_rewrite_config(fixtures_dir, tmp_path / "m.keras", freeze_model)) as reader:
        assert {i.trainable for i in reader.infos()} == {False}


def test_an_unusable_config_json_is_noted_and_the_weights_stay_readable(run, fixtures_dir, tmp_path):
    path = _rewrite_config(fixtures_dir, tmp_path / "bad.keras", lambda config: b"{not json")
    with open_checkpoint(path) as reader:
        assert [s.name for s in reader.skipped] == ["config.json"]
        assert reader.skipped[0].reason.startswith("not used, trainable flags of frozen layers unknown")
        assert reader.info("layers/conv2d/vars/0").trainable is None
        assert reader.info("optimizer/vars/0").trainable is False
        assert reader["layers/conv2d/vars/1"].shape == (8,)
    result = run("ls", path)
    assert result.exit_code == 0 and "skipped 1 entry:" in result.stdout


def test_nested_models_are_matched_by_the_vars_groups_names():
    names = ["layers/functional/layers/dense/vars/0", "layers/functional/layers/dense_1/vars/0",
             "layers/dense/vars/0", "optimizer/vars/0"]
    groups = {"layers/functional/vars": "inner", "layers/functional/layers/dense/vars": "frozen",
              "layers/functional/layers/dense_1/vars": "live", "layers/dense/vars": "frozen"}
    config = {"class_name": "Sequential", "config": {"name": "outer", "trainable": True, "layers": [
        {"class_name": "Functional", "config": {"name": "inner", "trainable": True, "layers": [
            {"class_name": "Dense", "config": {"name": "frozen", "trainable": False}},
            {"class_name": "Dense", "config": {"name": "live", "trainable": True}}]}},
        {"class_name": "Dense", "config": {"name": "top", "trainable": False}}]}}
    # "frozen" is the inner model's layer: the outer "layers/dense" (named "frozen" too, but not a layer of the
    # inner model, and "top" has no vars group) keeps unknown
    assert not_trainable(names, groups, config) == {"layers/functional/layers/dense/vars/0": False,
                                                    "optimizer/vars/0": False}
