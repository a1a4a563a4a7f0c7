"""Every foreign fixture opens with the names, dtypes, shapes and value hashes of its manifest."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from convert_manifests import CHECKPOINT_FIXTURES, EXPECTED_FORMAT, expected_dtype, value_sha256, variables

from varstore import detect_format, open_checkpoint
from varstore.errors import NotACheckpointError, UnknownVariableError, UnsupportedFormatError


@pytest.mark.parametrize("fixture", sorted(CHECKPOINT_FIXTURES))
def test_fixture_matches_its_manifest(fixtures_dir: Path, fixture: str) -> None:
    expected = variables(fixtures_dir, CHECKPOINT_FIXTURES[fixture])
    assert detect_format(fixtures_dir / fixture) == EXPECTED_FORMAT[fixture]
    with open_checkpoint(fixtures_dir / fixture) as reader:
        assert reader.format == EXPECTED_FORMAT[fixture]
        assert sorted(reader.keys()) == sorted(expected)
        for name, record in expected.items():
            value = reader[name]
            info = reader.info(name)
            assert value.shape == tuple(record["shape"]) == info.shape, name
            assert info.dtype == expected_dtype(record, value), name
            assert value_sha256(record, value) == record["sha256"], name
            if record["hash_scheme"] == "raw_c_order":
                assert info.nbytes == record["nbytes"] == value.nbytes, name


def test_tf_checkpoint_values_and_step(fixtures_dir: Path) -> None:
    with open_checkpoint(fixtures_dir / "tf1_scopes/model.ckpt") as reader:
        assert reader.step == 42
        assert reader["zoo/names"].tolist() == [b"alpha", b"beta", b"\xff\x00bin", "ünï".encode()]
        assert reader["zoo/c64"].tolist() == [1 + 2j, -0.5j, 3 + 0j]
        assert reader["zoo/flags"].tolist() == [[True, False], [False, True]]
        assert reader.info("encoder/layer_a/weights").checksum.startswith("tf-crc32c-masked:")
        reader.verify()


@pytest.mark.parametrize("path", ["tf1_scopes", "tf1_scopes/model.ckpt", "tf1_scopes/model.ckpt.index",
                                  "tf1_scopes/model.ckpt.data-00000-of-00001"])
def test_tf_checkpoint_opens_from_every_path_form(fixtures_dir: Path, path: str) -> None:
    with open_checkpoint(fixtures_dir / path) as reader:
        assert reader.format == "tf" and len(reader) == 18
        assert reader["zoo/scale"] == np.float32(3.5)


def test_keras3_archive_equals_weights_file(fixtures_dir: Path) -> None:
    with open_checkpoint(fixtures_dir / "keras3/model.keras") as archive, \
            open_checkpoint(fixtures_dir / "keras3/model.weights.h5") as weights:
        assert archive.keys() == weights.keys()
        assert archive.keys()[:2] == ["layers/batch_normalization/vars/0", "layers/batch_normalization/vars/1"]
        assert archive.metadata["keras_version"] == "3.15.1"
        assert weights.metadata["layer_names"]["layers/dense/vars"] == "dense_hidden"
        for name in archive.keys():
            assert archive[name].tobytes() == weights[name].tobytes()


def test_compressed_keras_archive_uses_a_temporary_file_that_is_removed(
        fixtures_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = zipfile.ZipFile(fixtures_dir / "keras3/model.keras")
    deflated = tmp_path / "deflated.keras"
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            out.writestr(info.filename, source.read(info.filename))
    temp_dir = tmp_path / "temp"
    temp_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp_dir))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(temp_dir))
    reader = open_checkpoint(deflated)
    assert len(os.listdir(temp_dir)) == 1
    with open_checkpoint(fixtures_dir / "keras3/model.weights.h5") as weights:
        assert reader["layers/dense/vars/0"].tobytes() == weights["layers/dense/vars/0"].tobytes()
    reader.close()
    assert os.listdir(temp_dir) == []


def _keras2_file(path: Path, whole_model: bool) -> dict[str, np.ndarray]:
    kernel = np.arange(6, dtype=np.float32).reshape(3, 2)
    bias = np.array([0.5, -0.5], np.float32)
    out_kernel = np.ones((2, 1), np.float32)
    with h5py.File(path, "w") as f:
        root = f.create_group("model_weights") if whole_model else f
        root.attrs["layer_names"] = np.array([b"dense", b"dropout", b"dense_1"])
        root.attrs["backend"] = b"tensorflow"
        root.attrs["keras_version"] = b"2.15.0"
        for layer, weights in [("dense", {"dense/kernel:0": kernel, "dense/bias:0": bias}),
                               ("dropout", {}), ("dense_1", {"dense_1/kernel:0": out_kernel})]:
            group = root.create_group(layer)
            group.attrs["weight_names"] = np.array([w.encode() for w in weights], dtype="S")
            for weight, value in weights.items():
                group.create_dataset(weight, data=value)
        if whole_model:
            f.attrs["keras_version"] = b"2.15.0"
            f.attrs["backend"] = b"tensorflow"
            opt = f.create_group("optimizer_weights")
            opt.attrs["weight_names"] = np.array([b"Adam/iter:0"])
            opt.create_dataset("Adam/iter:0", data=np.int64(7))
            f.create_dataset("stray", data=np.zeros(2))
    names = {"dense/kernel:0": kernel, "dense/bias:0": bias, "dense_1/kernel:0": out_kernel}
    if whole_model:
        names["Adam/iter:0"] = np.array(7, np.int64)
    return names


@pytest.mark.parametrize("whole_model", [False, True])
def test_keras2_weight_names_are_the_variable_names(tmp_path: Path, whole_model: bool) -> None:
    path = tmp_path / "legacy.h5"
    expected = _keras2_file(path, whole_model)
    assert detect_format(path) == "keras2"
    with open_checkpoint(path) as reader:
        assert reader.format == "keras2"
        assert reader.keys() == list(expected)
        assert reader.metadata == {"keras_version": "2.15.0", "backend": "tensorflow"}
        for name, value in expected.items():
            np.testing.assert_array_equal(reader[name], value)
        if whole_model:
            assert reader.info("Adam/iter:0").trainable is False
            assert [(s.name, s.reason) for s in reader.skipped] == [
                ("stray", "not listed in any Keras weight_names attribute")]
            assert reader.info("dense/kernel:0").attributes["path"] == "model_weights/dense/dense/kernel:0"


def test_generic_hdf5_lists_what_it_skips_and_why(fixtures_dir: Path) -> None:
    with open_checkpoint(fixtures_dir / "foreign_h5/generic.h5") as reader:
        reasons = {s.name: s.reason for s in reader.skipped}
        assert set(reasons) == {"experiment/run_01/records", "experiment/run_01/vlen_strings", "soft_link",
                                "dangling_soft_link", "external_link_missing", "object_refs"}
        assert reasons["experiment/run_01/records"].startswith("compound dtype (id: int32, x: float64")
        assert "variable-length" in reasons["experiment/run_01/vlen_strings"]
        assert reasons["dangling_soft_link"] == "dangling soft link to '/does/not/exist'"
        assert "never follows external links" in reasons["external_link_missing"]
        assert "references" in reasons["object_refs"]
        assert reasons["soft_link"].startswith("soft link to '/experiment/run_01/measurements'")
        assert reader.metadata["title"] == "generic HDF5, not a checkpoint"
        assert reader.info("experiment/run_01/measurements").attributes == {"units": "volts"}
        with pytest.raises(UnknownVariableError, match="soft_link"):
            reader["soft_link"]
        reader._walker.close()
    from varstore.backends.hdf5.walker import HDF5Walker

    walker = HDF5Walker(fixtures_dir / "foreign_h5/generic.h5")
    with pytest.raises(UnsupportedFormatError, match="external link"):
        walker.read("external_link_missing")
    walker.close()


def test_zarr_groups_report_format_and_trainable(fixtures_dir: Path) -> None:
    with open_checkpoint(fixtures_dir / "foreign_zarr/v2_group.zarr") as v2:
        assert v2.format_version == "zarr-v2"
        assert v2.info("encoder/block_0/kernel").trainable is True
        assert v2.info("counts").trainable is False  # int64: never trainable (issue 38)
        assert v2["counts"][:3].tolist() == [0, 1, 2] and v2["counts"][-1] == -1  # unwritten: fill value
        assert v2["mask"].tolist() == np.eye(3, dtype=bool).tolist()
    with open_checkpoint(fixtures_dir / "foreign_zarr/v3_group.zarr") as v3:
        assert v3.format_version == "zarr-v3"
        assert v3["scalar"].shape == () and float(v3["scalar"]) == 1.5
        assert v3["complex_partial"].tolist() == [k + 1j for k in range(6)] + [0j] * 4


def test_safetensors_metadata_and_extension_dtypes(fixtures_dir: Path) -> None:
    manifest = json.loads((fixtures_dir / "safetensors/mixed_numpy.safetensors.manifest.json").read_text())
    with open_checkpoint(fixtures_dir / "safetensors/mixed_numpy.safetensors") as reader:
        assert reader.metadata == manifest["metadata"]
    with open_checkpoint(fixtures_dir / "safetensors/mixed_torch.safetensors") as reader:
        assert reader.info("w.bf16").dtype == "bfloat16"
        assert reader.info("w.f8e4m3").dtype == "float8_e4m3fn"
        assert reader.info("w.f8e5m2").attributes["safetensors_dtype"] == "F8_E5M2"
        out = np.empty((4, 3), reader["w.bf16"].dtype)
        assert reader.read("w.bf16", out=out) is out


def test_npz_fortran_member_reads_c_ordered(fixtures_dir: Path) -> None:
    with open_checkpoint(fixtures_dir / "npz/arrays.npz") as reader:
        value = reader["fortran"]
        assert value.flags.c_contiguous and value.shape == (3, 2)
        assert reader.info("fortran").attributes == {"member": "fortran.npy", "fortran_order": True}
        assert reader["labels"].dtype == np.dtype("<U4")


def test_hdf5_that_is_not_keras_refused_by_the_keras_reader(fixtures_dir: Path) -> None:
    with pytest.raises(NotACheckpointError, match="Keras"):
        open_checkpoint(fixtures_dir / "foreign_h5/generic.h5", format="keras")
    with open_checkpoint(fixtures_dir / "keras3/model.weights.h5", format="hdf5") as plain:
        assert plain.format == "hdf5" and len(plain) == 28


def test_keras3_nested_layers_of_keras_3_0(tmp_path: Path) -> None:
    path = tmp_path / "old.weights.h5"
    with h5py.File(path, "w") as f:
        f.create_group("vars")
        f.create_dataset("_layer_checkpoint_dependencies/block/_layer_checkpoint_dependencies/dense/vars/0",
                         data=np.ones((2, 2), np.float32))
    with open_checkpoint(path) as reader:
        assert reader.format == "keras3"
        assert reader.keys() == ["_layer_checkpoint_dependencies/block/_layer_checkpoint_dependencies/dense/vars/0"]


def test_keras2_converts_to_varstore_with_weight_names(tmp_path: Path) -> None:
    from varstore.formats import convert

    expected = _keras2_file(tmp_path / "legacy.h5", whole_model=True)
    report = convert(tmp_path / "legacy.h5", tmp_path / "out.h5")
    assert report.source_format == "keras2" and report.variables == 4
    with open_checkpoint(tmp_path / "out.h5") as out:
        assert out.keys() == list(expected)
        assert out.info("Adam/iter:0").trainable is False
        for name, value in expected.items():
            np.testing.assert_array_equal(out[name], value)
