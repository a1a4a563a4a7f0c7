"""verify and diff draw the same progress bar as convert on a terminal: bytes done of the total, per variable."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.inspect import diff_checkpoints

VALUES = {f"layer_{i}/w": np.full((64, 64), i, np.float32) for i in range(5)}
TOTAL = sum(v.nbytes for v in VALUES.values())


@pytest.mark.parametrize("suffix", [".h5", ".zarr", ".safetensors"])
def test_verify_reports_bytes_per_variable(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"m{suffix}"
    vs.save(tmp_path / "m.h5", VALUES) if suffix == ".h5" else vs.convert(vs.save(tmp_path / "s.h5", VALUES), path)
    calls: list[tuple[int, int, str]] = []
    with vs.open_checkpoint(path) as reader:
        reader.verify(lambda done, total, name: calls.append((done, total, name)))
    assert calls[0] == (0, TOTAL, "")
    assert calls[-1][:2] == (TOTAL, TOTAL)
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)  # never goes back


def test_diff_reports_both_sides(tmp_path: Path) -> None:
    a = vs.save(tmp_path / "a.h5", VALUES)
    b = vs.save(tmp_path / "b.zarr", {**VALUES, "layer_0/w": np.full((64, 64), 7, np.float32)})
    calls: list[tuple[int, int, str]] = []
    result = diff_checkpoints(a, b, progress=lambda done, total, name: calls.append((done, total, name)))
    assert result.differs and [d.name for d in result.values_differ] == ["layer_0/w"]
    assert calls[0] == (0, 2 * TOTAL, "")
    assert calls[-1] == (2 * TOTAL, 2 * TOTAL, "layer_4/w")
    assert [c[2] for c in calls[1:]] == sorted(VALUES)


@pytest.mark.parametrize("command", ["verify", "diff"])
def test_the_cli_draws_a_bar_on_a_terminal_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                command: str) -> None:
    pytest.importorskip("tqdm")
    from click.testing import CliRunner

    from varstore_cli import convert_command
    from varstore_cli.main import cli

    a = vs.save(tmp_path / "a.h5", VALUES)
    args = [command, str(a)] + ([str(vs.save(tmp_path / "b.h5", VALUES))] if command == "diff" else [])
    plain = CliRunner().invoke(cli, args)
    assert plain.exit_code == 0 and "B/s" not in plain.stderr
    monkeypatch.setattr(convert_command, "_stderr_is_terminal", lambda: True)
    drawn = CliRunner().invoke(cli, args)
    assert drawn.exit_code == 0, drawn.output
    total = "160k" if command == "diff" else "80.0k"  # bytes of both sides for diff
    assert total in drawn.stderr and "B/s" in drawn.stderr and drawn.stdout == plain.stdout
    as_json = CliRunner().invoke(cli, [*args, "--json"])
    assert "B/s" not in as_json.stderr
