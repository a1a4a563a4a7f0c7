"""CLI test helpers: a CliRunner wrapper and a factory for varstore checkpoints written in tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from varstore.checkpoint import save_entries
from varstore.checkpoint.format.entry import SaveEntry
from varstore_cli.main import cli


@pytest.fixture
def run() -> Callable[..., Result]:
    """run("ls", path, ...) -> click Result (stdout, stderr and output kept apart; no terminal)."""
    runner = CliRunner()

    def invoke(*args: Any) -> Result:
        return runner.invoke(cli, [str(a) for a in args], prog_name="varstore")

    return invoke


@pytest.fixture
def make_checkpoint(tmp_path: Path) -> Callable[..., Path]:
    """make_checkpoint("a.h5", {"name": array | (array, trainable, collections)}, step=None) -> path.

    Writes a real varstore checkpoint (HDF5 or Zarr by suffix) with the checkpoint layer.
    """

    def make(filename: str, variables: dict[str, Any], step: int | None = None,
             metadata: dict[str, Any] | None = None) -> Path:
        entries = []
        for name, spec in variables.items():
            value, trainable, collections = spec if isinstance(spec, tuple) else (spec, True, ())
            value = np.asarray(value)
            entries.append(SaveEntry(name=name, shape=tuple(value.shape), dtype=value.dtype,
                                     get=lambda v=value: v, trainable=trainable,
                                     collections=tuple(collections)))
        path = tmp_path / filename
        save_entries(path, entries, step=step, metadata=metadata)
        return path

    return make


@pytest.fixture
def flip_byte() -> Callable[[Path, np.ndarray], None]:
    """flip_byte(path, value): flips one bit in the middle of `value`'s stored bytes in the file."""
    return _flip_byte_inside


def _flip_byte_inside(path: Path, value: np.ndarray) -> None:
    """Flips one bit in the middle of `value`'s stored bytes (found by content, layout-agnostic)."""
    data = bytearray(path.read_bytes())
    raw = np.ascontiguousarray(value).tobytes()
    at = data.find(raw)
    assert at >= 0 and data.find(raw, at + 1) < 0, "value bytes must occur exactly once in the file"
    data[at + len(raw) // 2] ^= 0x04
    path.write_bytes(bytes(data))


@pytest.fixture
def tf_checkpoint(fixtures_dir) -> Path:
    """A TF1 tensor-bundle checkpoint (fixtures/tf1_scopes, written by TensorFlow)."""
    return fixtures_dir / "tf1_scopes" / "model.ckpt"
