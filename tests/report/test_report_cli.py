"""`varstore report`: the page written, the summary line, and bad input as one line, exit 2, no page."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from varstore_cli.main import cli

from tests.report.conftest import by_name, page_data, values_b


def _run(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="varstore")


def test_report_writes_the_page_and_says_where(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = _run("report", checkpoints[1], "-o", out, "--figures", "0", "--bins", "8")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {out}: 6 variables, 0 figures, 1 variable with NaN/Inf, " \
                            f"{_size(out)}\n"
    rows = by_name(page_data(out))
    assert set(rows) == set(values_b()) and len(rows["encoder/dense/kernel"]["counts"]) == 8


def _size(path: Path) -> str:
    from varstore_cli.formatting import human_size

    return human_size(path.stat().st_size)


def test_report_with_other_compares(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "d.html"
    result = _run("report", checkpoints[0], checkpoints[1], "-o", out, "--figures", "0", "--title", "step 1000 -> 2000")
    assert result.exit_code == 0, result.output
    data = page_data(out)["diff"]
    assert [r[0] for r in data["added"]] == ["decoder/new"] and [r[0] for r in data["removed"]] == ["decoder/old"]
    assert "<title>step 1000 -&gt; 2000</title>" in out.read_text(encoding="utf-8")


def test_a_missing_source_is_one_line_exit_2_and_no_page(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    for args in (["report", tmp_path / "missing.h5", "-o", out],
                 ["report", checkpoints[0], tmp_path / "missing.h5", "-o", out]):
        result = _run(*args)
        assert result.exit_code == 2
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("varstore: error: ")
        assert "missing.h5" in result.stderr and result.stdout == ""
        assert list(tmp_path.iterdir()) == []


def test_an_unreadable_source_is_one_line_exit_2(tmp_path: Path) -> None:
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not a checkpoint at all")
    result = _run("report", junk, "-o", tmp_path / "r.html")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "junk.h5" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_output_is_required(checkpoints: tuple[Path, Path]) -> None:
    result = _run("report", checkpoints[0])
    assert result.exit_code == 2 and "'-o' / '--output'" in result.stderr


def test_the_bar_is_converts_and_drawn_on_a_terminal_only(checkpoints: tuple[Path, Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tqdm")
    from varstore_cli import convert_command

    args = ["report", checkpoints[0], checkpoints[1], "-o", tmp_path / "r.html", "--figures", "0"]
    plain = _run(*args)
    assert plain.exit_code == 0 and "B/s" not in plain.stderr
    monkeypatch.setattr(convert_command, "_stderr_is_terminal", lambda: True)
    drawn = _run(*args)
    assert drawn.exit_code == 0, drawn.output
    assert "B/s" in drawn.stderr and drawn.stdout == plain.stdout
