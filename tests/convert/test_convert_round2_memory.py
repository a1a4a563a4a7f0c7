"""Memory of the round-2 readers: opening reads metadata only, reading holds one tensor, converting streams.

Files of four 2 MiB tensors are written by the real tools (torch.save, gguf.GGUFWriter) or varstore's
sharded writer; tracemalloc (which sees NumPy's buffers) measures the peak of each step.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from varstore.checkpoint.format.entry import SaveEntry
from varstore import convert, open_checkpoint

TENSOR = 2 << 20  # bytes per tensor
SLACK = 1 << 20  # constant overhead allowed per step


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {f"layer{i}.weight": rng.standard_normal(TENSOR // 4).astype(np.float32).reshape(1024, -1)
            for i in range(4)}


def _peak(call: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _check(path: Path, tmp_path: Path, values: dict[str, np.ndarray]) -> None:
    open_checkpoint(path).close()  # first-time imports are not the reader's memory
    assert _peak(lambda: open_checkpoint(path).close()) < SLACK
    with open_checkpoint(path) as reader:
        for name, value in values.items():
            got: list[np.ndarray] = []
            assert _peak(lambda name=name: got.append(reader.read(name))) < TENSOR + SLACK
            np.testing.assert_array_equal(got[0], value)
            got.clear()
    # (the safetensors writer streams one variable at a time; the .h5 writer batches its writes itself)
    assert _peak(lambda: convert(path, tmp_path / "out.safetensors")) < 2 * TENSOR + SLACK


def test_torch_zip_and_legacy_memory(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    values = _values()
    state = {k: torch.from_numpy(v) for k, v in values.items()}
    torch.save(state, tmp_path / "zip.pt")
    _check(tmp_path / "zip.pt", tmp_path, values)
    torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    (tmp_path / "out.safetensors").unlink()
    _check(tmp_path / "legacy.pt", tmp_path, values)


def test_gguf_memory(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    values = _values()
    writer = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    for name, value in values.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _check(tmp_path / "m.gguf", tmp_path, values)


def test_sharded_safetensors_memory(tmp_path: Path) -> None:
    from varstore.formats.safetensors.sharded import write_sharded_safetensors

    values = _values()
    entries = [SaveEntry(name=k, shape=v.shape, dtype=v.dtype, get=lambda v=v: v) for k, v in values.items()]
    write_sharded_safetensors(tmp_path / "sharded", entries, max_shard_size=TENSOR * 2)
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) == 2
    _check(tmp_path / "sharded", tmp_path, values)
