"""Issue 9, finding 3: docs/checkpoint-format.md section 10 runs as written on the README tour's own files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from varstore import restore, save
from varstore.checkpoint import open_varstore as open_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def _blocks(path: Path, language: str, section: str | None = None) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if section is not None:
        text = text[text.index(section):]
        text = text[:text.index("\n## ", 1)]
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _run(code: str, cwd: Path) -> list[str]:
    result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_format_section_10_runs_top_to_bottom_in_an_empty_folder(tmp_path: Path) -> None:
    make, plain, packed = _blocks(ROOT / "docs" / "checkpoint-format.md", "python", "## 10. Reading")
    assert _run(make, tmp_path) == []
    lines = _run(plain, tmp_path)
    assert lines[0] == "(5, 5, 3, 32) float32 crc32c:"
    assert lines[1] == "['conv1/weights', 'conv1/biases', 'global_step']"
    assert _run(packed, tmp_path) == ["(32,) False"]
    with open_checkpoint(tmp_path / "ckpt" / "packed.h5") as reader:
        assert reader.layout == "packed" and reader["conv1/weights"].shape == (5, 5, 3, 32)


def test_default_layout_puts_every_small_variable_at_its_name_and_records_it(tmp_path: Path) -> None:
    import h5py

    values = {f"layer{i}/bias": np.full(4, i, np.float32) for i in range(50)}
    save(tmp_path / "m.h5", values)
    with h5py.File(tmp_path / "m.h5", "r") as f:
        assert f.attrs["varstore_layout"] == "per-variable"
        assert "_varstore/packed" not in f
        assert f["layer7/bias"][()].tolist() == [7.0] * 4
    with open_checkpoint(tmp_path / "m.h5") as reader:
        assert reader.layout == "per-variable"


def test_packed_layout_above_the_threshold_and_both_layouts_read_alike(tmp_path: Path) -> None:
    from varstore.checkpoint.format.layout import PER_VARIABLE_MAX_VARIABLES, choose_layout

    assert PER_VARIABLE_MAX_VARIABLES >= 4096
    assert choose_layout(None, 4096) == "per-variable" and choose_layout(None, 4097) == "packed"
    values = {f"s/v{i}": np.full(3, i, np.int32) for i in range(20)}
    for fmt in ("h5", "zarr"):
        for layout in ("per-variable", "packed"):
            path = save(tmp_path / f"{layout}.{fmt}", values, layout=layout)
            with open_checkpoint(path) as reader:
                assert reader.layout == layout
                assert reader["s/v13"].tolist() == [13, 13, 13]
            out = {name: np.zeros(3, np.int32) for name in values}
            restore(path, out)
            assert out["s/v19"].tolist() == [19, 19, 19]


def test_many_variables_default_to_packed(tmp_path: Path) -> None:
    values = {f"s/v{i}": np.full(2, i, np.float32) for i in range(4097)}
    path = save(tmp_path / "many.h5", values)
    with open_checkpoint(path) as reader:
        assert reader.layout == "packed"
        assert reader["s/v4096"].tolist() == [4096.0, 4096.0]
