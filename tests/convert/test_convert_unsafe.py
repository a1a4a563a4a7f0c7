"""Pickles: torch.save state dicts are read through the restricted unpickler; everything else is refused.

Malicious files and whole-module pickles are refused naming the global, and
their marker files never appear; plain `pickle.load`/`loads` is never called.
"""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from varstore import convert, detect_format, open_checkpoint
from varstore.errors import NotACheckpointError, UnsafeFormatError

MARKER = Path("/tmp/varstore_pwned_marker")
MARKERS = (MARKER, Path("/tmp/varstore_pwned_marker2"))
STATE_DICTS = ["torch/state_dict.pt", "torch/state_dict_legacy.pt"]
EVIL = {"torch/evil.pt": "io.open", "torch_zip/evil_reduce.pt": "os.system",
        "torch_zip/evil_builtins.pt": "builtins.eval", "torch_zip/evil_global_in_tensor.pt": "subprocess.call"}


@pytest.fixture
def no_unpickling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any call of plain pickle.load / pickle.loads during the test fails it (the restricted Unpickler's
    own .load() is the one allowed path; it is imported before the patch)."""
    import varstore.formats._restricted_pickle  # noqa: F401  (binds pickle.Unpickler before the patch)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("something called plain pickle.load / pickle.loads")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)


def _marker_times() -> list[int | None]:
    return [m.stat().st_mtime_ns if m.exists() else None for m in MARKERS]


@pytest.mark.parametrize("fixture", STATE_DICTS)
def test_torch_state_dicts_are_read_without_plain_pickle(fixtures_dir: Path, fixture: str,
                                                         no_unpickling: None) -> None:
    with open_checkpoint(fixtures_dir / fixture) as reader:
        assert reader.format == "pytorch"
        assert len(reader.keys()) == 13
        reader.verify()
    assert detect_format(fixtures_dir / fixture) == "pytorch"


@pytest.mark.parametrize("fixture", sorted(EVIL))
def test_malicious_pickles_are_refused_naming_the_global(fixtures_dir: Path, tmp_path: Path, fixture: str,
                                                         no_unpickling: None) -> None:
    before = _marker_times()
    for attempt in (lambda: open_checkpoint(fixtures_dir / fixture),
                    lambda: open_checkpoint(fixtures_dir / fixture, format="pytorch"),
                    lambda: convert(fixtures_dir / fixture, tmp_path / "out.h5")):
        with pytest.raises(UnsafeFormatError, match=f"global '{EVIL[fixture]}'.*nothing was executed"):
            attempt()
    assert _marker_times() == before
    assert not any(m.exists() for m, t in zip(MARKERS, before) if t is None)
    assert not (tmp_path / "out.h5").exists()


def test_evil_manifests_name_the_markers_we_watch(fixtures_dir: Path) -> None:
    assert json.loads((fixtures_dir / "torch/evil.pt.manifest.json").read_text())["marker_file"] == str(MARKER)
    for fixture in EVIL:
        if fixture.startswith("torch_zip/"):
            manifest = json.loads((fixtures_dir / f"{fixture}.manifest.json").read_text())
            assert manifest["marker"] == str(MARKERS[1]) or str(MARKERS[1]) in json.dumps(manifest)


def test_whole_module_pickle_is_refused_with_state_dict_advice(fixtures_dir: Path, no_unpickling: None) -> None:
    with pytest.raises(UnsafeFormatError, match=r"whole Python object \(class "
                       r"'torch.nn.modules.container.Sequential'\).*state_dict\(\)") as caught:
        open_checkpoint(fixtures_dir / "torch/model_full.pt")
    assert "model_full.pt" in str(caught.value)


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


def test_raw_pickles_are_refused_and_torch_zips_read(tmp_path: Path, no_unpickling: None) -> None:
    raw = tmp_path / "weights.bin"
    raw.write_bytes(b"\x80\x04\x95" + b"\x00" * 20)
    with pytest.raises(UnsafeFormatError, match="a Python pickle but not a torch.save file"):
        open_checkpoint(raw)
    zipped = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")  # an empty state dict
        z.writestr("archive/data/0", b"\0" * 8)
    with open_checkpoint(zipped) as reader:
        assert reader.format == "pytorch" and reader.keys() == []
    nested = tmp_path / "nested.pt"
    with zipfile.ZipFile(nested, "w") as z:
        z.writestr("a/b/data.pkl", b"\x80\x02}q\x00.")
    with pytest.raises(UnsafeFormatError, match="not where torch.save puts it"):
        open_checkpoint(nested)
    unknown = tmp_path / "model.pth"
    unknown.write_bytes(b"not a pickle at all")
    with pytest.raises(NotACheckpointError, match="'.pth'"):
        open_checkpoint(unknown)
    assert sorted(os.listdir(tmp_path)) == ["model.pth", "nested.pt", "pytorch_model.bin", "weights.bin"]
