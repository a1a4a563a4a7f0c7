"""Probe: a path as detection sees it, read through one handle, with cached zip directory and HDF5 walk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from varstore.formats.probe import Probe
from varstore.errors import CorruptCheckpointError


def test_the_probe_reads_a_file_through_one_handle(fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from varstore.formats import probe as probe_module

    opened: list[str] = []
    real_open = probe_module.open_for_reading  # the probe's one open (never blocks on a FIFO)

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(probe_module, "open_for_reading", counting_open)
    path = fixtures_dir / "npz/arrays.npz"
    with Probe(path) as probe:
        assert probe.is_file and probe.size == path.stat().st_size and probe.head == path.read_bytes()[:4096]
        assert probe.tail == path.read_bytes()[-64:]
        names = probe.zip_names
        assert names is not None and all(n.endswith(".npy") for n in names) and probe.zip_names is names
        assert not probe.is_hdf5 and probe.take_hdf5() is None
    assert opened == [str(path)]


def test_a_probe_of_a_missing_path_or_a_directory_reads_nothing(tmp_path: Path) -> None:
    with Probe(tmp_path / "missing") as probe:
        assert (probe.exists, probe.is_file, probe.size, probe.head, probe.zip_names) == (False, False, 0, b"", None)
    with Probe(tmp_path) as probe:
        assert probe.is_dir and not probe.is_file and probe.head == b"" and not probe.is_hdf5


def test_the_hdf5_walk_is_cached_handed_over_once_and_its_failure_remembered(tmp_path: Path) -> None:
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a/b", data=np.arange(3, dtype=np.int32))
    with Probe(path) as probe:
        assert probe.is_hdf5
        walker = probe.hdf5()
        assert probe.hdf5() is walker and [d.path for d in walker.datasets] == ["a/b"]
        assert probe.take_hdf5() is walker and probe.take_hdf5() is None
    assert walker.read("a/b").tolist() == [0, 1, 2]  # the probe's close left the taken walk open
    walker.close()
    broken = tmp_path / "broken.h5"
    broken.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 40)
    with Probe(broken) as probe:
        assert probe.is_hdf5
        with pytest.raises(CorruptCheckpointError, match="broken.h5") as first:
            probe.hdf5()
        with pytest.raises(CorruptCheckpointError) as second:
            probe.hdf5()
        assert second.value is first.value


def test_an_hdf5_signature_behind_a_user_block_is_found(tmp_path: Path) -> None:
    path = tmp_path / "weights.dat"
    with h5py.File(path, "w", userblock_size=8192) as f:
        f.create_dataset("w", data=np.ones(2))
    with Probe(path) as probe:
        assert probe.head[:8] != b"\x89HDF\r\n\x1a\n" and probe.is_hdf5
