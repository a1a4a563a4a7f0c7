"""Pickle-based files are refused with advice, and nothing is ever unpickled."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from varstore.convert import convert, detect_format, open_checkpoint
from varstore.errors import UnsafeFormatError

MARKER = Path("/tmp/varstore_pwned_marker")
TORCH_FILES = ["torch/state_dict.pt", "torch/state_dict_legacy.pt", "torch/model_full.pt", "torch/evil.pt"]


@pytest.fixture
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to unpickle during the test fails it."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("something tried to unpickle")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)


@pytest.mark.parametrize("fixture", TORCH_FILES)
def test_torch_files_are_refused_with_advice(fixtures_dir: Path, fixture: str, no_unpickling: None) -> None:
    with pytest.raises(UnsafeFormatError, match="never unpickles") as caught:
        open_checkpoint(fixtures_dir / fixture)
    message = str(caught.value)
    assert fixture.split("/")[1] in message
    assert "weights_only=True" in message and "safetensors.torch.save_file" in message
    with pytest.raises(UnsafeFormatError):
        detect_format(fixtures_dir / fixture)


def test_evil_pickle_never_creates_its_marker(fixtures_dir: Path, tmp_path: Path, no_unpickling: None) -> None:
    manifest = json.loads((fixtures_dir / "torch/evil.pt.manifest.json").read_text())
    assert manifest["marker_file"] == str(MARKER)
    before = MARKER.stat().st_mtime_ns if MARKER.exists() else None
    for attempt in (lambda: open_checkpoint(fixtures_dir / "torch/evil.pt"),
                    lambda: open_checkpoint(fixtures_dir / "torch/evil.pt", format="npz"),
                    lambda: convert(fixtures_dir / "torch/evil.pt", tmp_path / "out.h5")):
        with pytest.raises(Exception):
            attempt()
    after = MARKER.stat().st_mtime_ns if MARKER.exists() else None
    assert after == before  # not created (or, if some earlier process made it, not touched)
    assert before is not None or not MARKER.exists()
    assert not (tmp_path / "out.h5").exists()


def test_object_array_npz_is_refused_naming_the_member(fixtures_dir: Path, no_unpickling: None) -> None:
    with pytest.raises(UnsafeFormatError, match="'objects.npy'.*object array"):
        open_checkpoint(fixtures_dir / "npz/object_array.npz")


def test_object_array_npz_other_members_readable_on_request(fixtures_dir: Path, no_unpickling: None) -> None:
    manifest = json.loads((fixtures_dir / "npz/object_array.npz.manifest.json").read_text())
    with open_checkpoint(fixtures_dir / "npz/object_array.npz", skip_object_arrays=True) as reader:
        assert reader.keys() == ["plain"]
        assert [s.name for s in reader.skipped] == ["objects"]
        import hashlib

        assert hashlib.sha256(reader["plain"].tobytes()).hexdigest() == manifest["variables"][0]["sha256"]


def test_raw_pickle_and_pickle_zips_are_refused(tmp_path: Path, no_unpickling: None) -> None:
    raw = tmp_path / "weights.bin"
    raw.write_bytes(b"\x80\x04\x95" + b"\x00" * 20)
    with pytest.raises(UnsafeFormatError, match="pickle"):
        open_checkpoint(raw)
    zipped = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", b"\0" * 8)
    with pytest.raises(UnsafeFormatError, match="data.pkl"):
        open_checkpoint(zipped)
    unknown = tmp_path / "model.pth"
    unknown.write_bytes(b"not a pickle at all")
    with pytest.raises(UnsafeFormatError, match="'.pth'"):
        open_checkpoint(unknown)
    assert sorted(os.listdir(tmp_path)) == ["model.pth", "pytorch_model.bin", "weights.bin"]
