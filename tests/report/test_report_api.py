"""varstore.inspect.report: the page's numbers, the diff, streaming, formats, escaping, and no page on failure."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import varstore
from varstore.errors import CheckpointNotFoundError, ChecksumError
from varstore.inspect import html_report, report
from varstore.inspect.report_chunks import chunk_boxes, value_chunks
from varstore.inspect.report_stats import compare, summarize

from tests.report.conftest import HOSTILE, by_name, page_data, values_a, values_b

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"


def _finite(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64).reshape(-1)
    return wide[np.isfinite(wide)]


def test_single_report_shows_each_variables_statistics(single: tuple[Path, Any]) -> None:
    path, result = single
    data = by_name(page_data(path))
    assert set(data) == set(values_b())
    assert result.variables == 6 and result.path == path and result.nbytes == path.stat().st_size
    kernel = values_b()["encoder/dense/kernel"]
    finite = _finite(kernel)
    row = data["encoder/dense/kernel"]
    assert (row["shape"], row["dtype"], row["trainable"], row["count"]) == ("(64, 48)", "float32", "yes", 64 * 48)
    assert (row["nan"], row["inf"], row["zeros"]) == (1, 1, 0)
    assert row["min"] == pytest.approx(finite.min()) and row["max"] == pytest.approx(finite.max())
    assert row["mean"] == pytest.approx(finite.mean(), rel=1e-12)
    assert row["std"] == pytest.approx(finite.std(), rel=1e-12)
    assert row["l2"] == pytest.approx(math.sqrt(float(np.dot(finite, finite))), rel=1e-12)
    assert sum(row["counts"]) == finite.size and len(row["counts"]) == 40
    steps = data["encoder/steps"]
    assert (steps["min"], steps["max"], steps["zeros"], steps["nan"]) == (0, 11, 1, None)
    assert steps["counts"] == [1] * 12  # one bin per integer
    assert result.flagged == ("encoder/dense/kernel",)


def test_flagged_variables_come_first_in_the_figures_and_the_flags(single: tuple[Path, Any]) -> None:
    path, result = single
    assert result.figures[0] == "encoder/dense/kernel" or "encoder/dense/kernel" in result.figures
    assert len(result.figures) == 2
    text = path.read_text(encoding="utf-8")
    flags = text[text.index('<section id="flags"'):text.index('<section id="overview"')]
    assert "encoder/dense/kernel</code>: 1 NaN, 1 Inf of 3,072" in flags


def test_overview_counts_bytes_by_dtype_and_trainable(single: tuple[Path, Any]) -> None:
    text = single[0].read_text(encoding="utf-8")
    b = values_b()
    params = sum(v.size for v in b.values())
    assert f"<b>{params:,}</b>parameters" in text
    assert "<b>varstore-zarr" in text
    assert '<tr><td>float64</td><td class="n">256 B</td><td class="n">32</td></tr>' in text
    assert f'<tr><td>yes</td><td class="n">6</td><td class="n">{params:,}</td></tr>' in text
    assert '<details class="tree" open>' in text and "encoder" in text


def test_diff_report_lists_added_removed_reshaped_and_the_relative_change(diff: tuple[Path, Any]) -> None:
    path, result = diff
    assert result.added == ("decoder/new",) and result.removed == ("decoder/old",)
    assert result.changed == ("encoder/dense/kernel",)
    data = page_data(path)["diff"]
    assert [r[0] for r in data["added"]] == ["decoder/new"]
    assert [r[0] for r in data["removed"]] == ["decoder/old"]
    assert data["retyped"] == [["decoder/out/kernel", "(8, 4)", "(4, 8)", "float64", "float64"]]
    rows = {r[0]: r for r in data["changed"]}
    a, b = values_a()["encoder/dense/kernel"].astype(np.float64), values_b()["encoder/dense/kernel"].astype(np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    expected = np.linalg.norm((b - a)[both]) / np.linalg.norm(a)
    name, relative, max_abs, share, changed, appeared = rows["encoder/dense/kernel"]
    assert relative == pytest.approx(expected, rel=1e-9)
    assert max_abs == pytest.approx(1.0, rel=1e-6)
    assert changed == 48 + 1 + 1 and share == pytest.approx(50 / 3072)
    assert appeared == 2
    assert rows["encoder/dense/bias"][1:] == [0.0, 0.0, 0.0, 0, 0]
    text = path.read_text(encoding="utf-8")
    assert "NaN/Inf appeared since A in 1 variable" in text and 'id="scope-chart"' in text


def test_names_are_escaped_everywhere(single: tuple[Path, Any], diff: tuple[Path, Any]) -> None:
    for path in (single[0], diff[0]):
        text = path.read_text(encoding="utf-8")
        assert "<script>alert" not in text
        assert text.count("<script") == 2 and text.count("</script>") == 2  # the data island and the script
        assert HOSTILE in by_name(page_data(path))  # the name itself survives, as data
        assert "&lt;script&gt;alert(1)&lt;" in text  # a part of it in the scope tree, escaped


def test_page_is_self_contained(single: tuple[Path, Any]) -> None:
    text = single[0].read_text(encoding="utf-8")
    assert "default-src 'none'" in text
    for needle in ("http://", "https://", "src=\"//", "<link"):
        assert needle not in text.replace("http://www.w3.org", "")


def test_chunked_statistics_equal_whole_ones_and_read_regions(checkpoints: tuple[Path, Path]) -> None:
    with varstore.open_checkpoint(checkpoints[1]) as reader:
        whole = summarize(reader, "encoder/dense/kernel")
        reads: list[str] = []
        original = reader.read
        reader.read = lambda name, *args, **kw: reads.append(name) or original(name, *args, **kw)  # type: ignore[method-assign]
        chunked = summarize(reader, "encoder/dense/kernel", chunk_elements=100)
        assert reads == []  # 31 region reads of 2 rows, never the whole variable
        assert len(list(value_chunks(reader, "encoder/dense/kernel", 100))) == 32
    assert chunked.counts == whole.counts and chunked.stats.nan_count == whole.stats.nan_count
    assert chunked.stats.mean == pytest.approx(whole.stats.mean, rel=1e-12)
    assert chunked.stats.std == pytest.approx(whole.stats.std, rel=1e-12)
    assert chunked.l2_norm == pytest.approx(whole.l2_norm, rel=1e-12)


def test_chunked_comparison_equals_whole(checkpoints: tuple[Path, Path]) -> None:
    with varstore.open_checkpoint(checkpoints[0]) as a, varstore.open_checkpoint(checkpoints[1]) as b:
        whole = compare(a, b, "encoder/dense/kernel")
        chunked = compare(a, b, "encoder/dense/kernel", chunk_elements=50)
    assert (chunked.changed, chunked.nan_inf_appeared) == (whole.changed, whole.nan_inf_appeared) == (50, 2)
    assert chunked.relative_change == pytest.approx(whole.relative_change, rel=1e-12)


@pytest.mark.parametrize("shape, chunk, expected", [
    ((), 4, [((), ())]),
    ((0, 3), 4, []),
    ((5,), 2, [((0,), (2,)), ((2,), (2,)), ((4,), (1,))]),
    ((2, 3, 4), 8, [((0, 0, 0), (1, 2, 4)), ((0, 2, 0), (1, 1, 4)), ((1, 0, 0), (1, 2, 4)), ((1, 2, 0), (1, 1, 4))]),
    ((3, 5), 2, [((i, j), (1, min(2, 5 - j))) for i in range(3) for j in (0, 2, 4)]),
])
def test_chunk_boxes_cover_the_array_once(shape: tuple[int, ...], chunk: int, expected: list[Any]) -> None:
    boxes = list(chunk_boxes(shape, chunk))
    assert boxes == expected
    assert sum(math.prod(s) for _, s in boxes) == math.prod(shape)


@pytest.mark.parametrize("fixture", [
    "safetensors/mixed_numpy.safetensors",
    "torch/state_dict.pt",
    "tf1_scopes/model.ckpt",
    "gguf/mini.gguf",
    "foreign_h5/generic.h5",
])
def test_foreign_formats_report_every_variable(fixture: str, tmp_path: Path) -> None:
    source = FIXTURES / fixture
    result = report(source, output=tmp_path / "r.html", figures=0)
    data = by_name(page_data(tmp_path / "r.html"))
    options = {"dequantize": True} if fixture.endswith(".gguf") else {}
    with varstore.open_checkpoint(source, **options) as reader:
        assert list(data) == reader.keys() and result.variables == len(reader.keys())
        for name in reader.keys():
            stats = varstore.variable_stats(reader.read(name))
            row = data[name]
            assert row["count"] == stats.count and row["zeros"] == stats.zeros
            if isinstance(stats.mean, float) and math.isfinite(stats.mean):
                assert row["mean"] == pytest.approx(stats.mean, rel=1e-9, abs=1e-12)
    if fixture.endswith(".safetensors"):
        assert all(row["trainable"] == "unknown" for row in data.values())
        assert "the format records no trainable flag" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_gguf_quantized_tensors_are_dequantized_with_a_note(tmp_path: Path) -> None:
    report(FIXTURES / "gguf/mini.gguf", output=tmp_path / "g.html", figures=0)
    row = by_name(page_data(tmp_path / "g.html"))["blk.1.ffn_gate.weight"]
    assert (row["dtype"], row["shape"]) == ("float32", "(4, 64)")  # not the raw (4, 68) uint8 blocks
    assert row["note"] == "quantized (Q8_0): statistics of the dequantized float32 values"
    assert "1 quantized tensor (Q8_0): statistics and histograms of the dequantized" in (
        tmp_path / "g.html").read_text(encoding="utf-8")


def test_a_diff_across_formats(tmp_path: Path) -> None:
    source = FIXTURES / "torch/state_dict.pt"
    with varstore.open_checkpoint(source) as reader:
        arrays = {name: reader.read(name) for name in reader.keys()}
    first = next(n for n, v in arrays.items() if v.dtype.kind == "f" and v.size > 1)
    arrays[first] = arrays[first] * 2
    varstore.save(tmp_path / "doubled.h5", arrays)
    result = report(source, tmp_path / "doubled.h5", output=tmp_path / "d.html", figures=0)
    rows = {r[0]: r for r in page_data(tmp_path / "d.html")["diff"]["changed"]}
    assert result.changed == (first,) and rows[first][1] == pytest.approx(1.0)


def test_missing_source_raises_and_leaves_no_page(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError, match="missing.h5"):
        report(tmp_path / "missing.h5", output=tmp_path / "r.html")
    assert list(tmp_path.iterdir()) == []


def test_a_failure_midway_leaves_the_old_page_and_no_temporary(checkpoints: tuple[Path, Path], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r.html"
    out.write_text("old page")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ChecksumError("variable 'encoder/steps' in 'b.zarr' is corrupt")

    monkeypatch.setattr(html_report, "summarize", broken)
    with pytest.raises(ChecksumError, match="encoder/steps"):
        report(checkpoints[1], output=out)
    assert out.read_text() == "old page" and [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_bad_arguments_are_refused(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bins >= 1"):
        report(checkpoints[0], output=tmp_path / "r.html", bins=0)
    assert not (tmp_path / "r.html").exists()


def test_progress_counts_every_byte_read(checkpoints: tuple[Path, Path], tmp_path: Path) -> None:
    calls: list[tuple[int, int, str]] = []
    report(checkpoints[0], checkpoints[1], output=tmp_path / "r.html", figures=0,
           progress=lambda done, total, name: calls.append((done, total, name)))
    assert calls[0][0] == 0 and calls[-1][0] == calls[-1][1] > 0
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_figures_go_to_flagged_then_named_then_largest() -> None:
    from varstore.checkpoint.read.reader_api import VariableInfo
    from varstore.inspect.report_stats import VariableSummary

    def summary(name: str, nbytes: int, nan: int) -> VariableSummary:
        stats = varstore.variable_stats(np.zeros(1, np.float32))
        stats = type(stats)(**{**stats.__dict__, "nan_count": nan})
        return VariableSummary(VariableInfo(name, (nbytes // 4,), "float32", nbytes), stats, 0.0, (0.0, 1.0), (1,))

    summaries = [summary("small_nan", 4, 1), summary("big", 4000, 0), summary("mid", 400, 0),
                 summary("named/x", 8, 0), summary("tiny", 4, 0)]
    assert html_report._figure_choice(summaries, 3, ("named/*",)) == [0, 1, 3]  # in checkpoint order
    assert html_report._figure_choice(summaries, 2, ()) == [0, 1]
    assert html_report._figure_choice(summaries, 0, ("*",)) == []


def test_scope_chart_groups_by_the_deepest_scope_that_fits() -> None:
    from varstore.inspect.report_stats import VariableChange

    drawn: dict[str, Any] = {}

    def bar_figure(labels: list[str], values: list[float], **options: Any) -> str:
        drawn.update(labels=labels, values=values, **options)
        return "data:image/svg+xml;base64,"

    changes = [VariableChange(f"block_{i}/layer/w", 4, 0.5, 1.0, 4, 0, norm_a=3.0, norm_diff=4.0 if i else 0.0)
               for i in range(3)]
    changes.append(VariableChange("block_1/layer/b", 4, None, None, 0, 2))  # strings have no norm
    changes.append(VariableChange("block_2/layer/b", 4, 0.0, 0.0, 0, 2, norm_a=4.0, norm_diff=0.0))
    chart, note = html_report._scope_chart(changes, bar_figure)
    assert chart and note.startswith("scopes: the first 2 '/'-separated parts")
    assert drawn["labels"] == ["block_0/layer", "block_1/layer", "block_2/layer (NaN/Inf)"]
    assert drawn["values"] == pytest.approx([0.0, 4 / 3, 4 / 5])
    many = [VariableChange(f"s{i}/t{j}/w", 1, 0.1, 0.1, 1, 0, norm_a=1.0, norm_diff=0.1)
            for i in range(5) for j in range(20)]
    html_report._scope_chart(many, bar_figure)
    assert drawn["labels"] == [f"s{i}" for i in range(5)]  # 100 two-part scopes do not fit in 40 bars
    dotted = [VariableChange(f"layers.{i}.weight", 1, 0.1, 0.1, 1, 0, norm_a=1.0, norm_diff=0.1) for i in range(3)]
    html_report._scope_chart(dotted, bar_figure)
    assert drawn["labels"] == ["layers.0", "layers.1", "layers.2"]


def test_the_docs_example_runs(tmp_path: Path) -> None:
    """docs/report.md's example (the screenshots' source) runs as a script and writes the two pages it describes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("report_screenshots", ROOT / "docs" / "report_screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    code = module.example_code((ROOT / "docs" / "report.md").read_text(encoding="utf-8"))
    (tmp_path / "example.py").write_text(code.replace("figures=6", "figures=1"), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "cli")]))
    run = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    single, diff = page_data(tmp_path / "report.html"), page_data(tmp_path / "diff.html")
    assert [v["name"] for v in single["variables"] if v["nan"]] == ["head/kernel"]
    assert [r[0] for r in diff["diff"]["added"]] == ["head/bias"]
    assert [r[0] for r in diff["diff"]["removed"]] == ["optimizer/learning_rate"]
    for shot in ("report_single.png", "report_diff.png"):
        assert 10_000 < (ROOT / "docs" / shot).stat().st_size < 300_000


def test_empty_scalar_string_and_bool_variables(tmp_path: Path) -> None:
    values = {"empty": np.zeros((0, 3), np.float32), "scalar": np.float64(-2.5),
              "names": np.array([b"ab", b"", b"c"]), "mask": np.array([True, False, True, True])}
    varstore.save(tmp_path / "m.h5", values)
    report(tmp_path / "m.h5", output=tmp_path / "m.html", figures=4)
    rows = by_name(page_data(tmp_path / "m.html"))
    assert (rows["empty"]["count"], rows["empty"]["min"], rows["empty"]["nan"], rows["empty"]["counts"]) == (0, None, 0, [])
    assert (rows["scalar"]["shape"], rows["scalar"]["min"], rows["scalar"]["l2"]) == ("()", -2.5, 2.5)
    assert (rows["names"]["dtype"], rows["names"]["zeros"], rows["names"]["min"], rows["names"]["counts"]) == (
        "S2", 1, None, [])
    assert (rows["mask"]["mean"], rows["mask"]["counts"]) == (0.75, [1, 3])
