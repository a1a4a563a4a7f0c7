"""PyTorch files from real tools: TorchScript archives are refused by name; a tensor's device is shown."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import pytest

import varstore as vs
from varstore.errors import UnsupportedFormatError

MESSAGE = "is a TorchScript program, not a state dict"


def test_a_hand_made_torchscript_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "scripted.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("scripted/data.pkl", pickle.dumps({}, protocol=2))
        archive.writestr("scripted/code/__torch__/model.py", "def forward(self, x):\n    return x\n")
        archive.writestr("scripted/constants.pkl", pickle.dumps((), protocol=2))
        archive.writestr("scripted/version", "3\n")
    with pytest.raises(UnsupportedFormatError, match=f"'{path}' {MESSAGE}") as info:
        vs.open_checkpoint(path)
    assert "torch.save(torch.jit.load(path).state_dict()" in str(info.value)
    with pytest.raises(UnsupportedFormatError, match=MESSAGE):
        vs.convert(path, tmp_path / "out.h5")
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.save is deprecated, still written
def test_torch_jit_script_output_is_refused(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "linear.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 3)), str(path))
    with pytest.raises(UnsupportedFormatError, match=MESSAGE):
        vs.load(path)


def _with_location(source: Path, target: Path, location: bytes) -> Path:
    """A copy of a torch.save zip whose storages name `location` instead of 'cpu' in their persistent ids."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            data = old.read(info)
            if info.filename.endswith("/data.pkl"):
                assert b"X\x03\x00\x00\x00cpu" in data
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X" + len(location).to_bytes(4, "little") + location)
            new.writestr(info.filename, data)
    return target


def test_the_device_a_storage_was_saved_from_is_shown(tmp_path: Path, fixtures_dir: Path, run) -> None:
    path = _with_location(fixtures_dir / "torch_zip" / "state_dict_mixed.pt", tmp_path / "gpu.pt", b"cuda:0")
    with vs.open_checkpoint(path) as reader:
        name = reader.keys()[0]
        assert {reader.info(k).device for k in reader.keys()} == {"cuda:0"}
        value = reader.read(name)
    with vs.open_checkpoint(fixtures_dir / "torch_zip" / "state_dict_mixed.pt") as cpu:
        assert cpu.info(name).device == "cpu"
        assert cpu.read(name).tobytes() == value.tobytes()
    shown = run("show", path, name)
    assert shown.exit_code == 0, shown.output
    assert [line.split() for line in shown.stdout.splitlines() if line.startswith("device ")] == [["device", "cuda:0"]]
    odd = _with_location(fixtures_dir / "torch_zip" / "state_dict_mixed.pt", tmp_path / "odd.pt", b"\x1b[2Jcuda")
    with vs.open_checkpoint(odd) as reader:  # text from the file that is no device name is not shown
        assert reader.info(name).device is None


@pytest.fixture
def run():
    from click.testing import CliRunner

    from varstore_cli.main import cli

    runner = CliRunner()
    return lambda *args: runner.invoke(cli, [str(a) for a in args], prog_name="varstore")


def test_a_tf_saved_model_directory_reads_as_its_variables_bundle(tmp_path: Path, fixtures_dir: Path, run) -> None:
    import shutil

    saved = tmp_path / "exported"
    (saved / "variables").mkdir(parents=True)
    (saved / "saved_model.pb").write_bytes(b"\x08\x01")  # the graph: never read
    source = fixtures_dir / "tf1_scopes"
    shutil.copy(source / "model.ckpt.index", saved / "variables" / "variables.index")
    shutil.copy(source / "model.ckpt.data-00000-of-00001", saved / "variables" / "variables.data-00000-of-00001")
    with vs.open_checkpoint(source / "model.ckpt") as bundle:
        expected = {name: bundle.read(name).tobytes() for name in bundle.keys()}
    for path in (saved, saved / "variables"):
        assert vs.detect_format(path) == "tf"
        with vs.open_checkpoint(path) as reader:
            assert {name: reader.read(name).tobytes() for name in reader.keys()} == expected
    listed = run("ls", saved)
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout.splitlines()[0].startswith(f"{saved / 'variables' / 'variables'}  (tf")
