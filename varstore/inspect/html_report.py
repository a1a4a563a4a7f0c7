"""varstore.inspect.report: one self-contained HTML page describing a checkpoint, or what changed between two.

Opens the checkpoint(s), streams every variable through report_stats.py
(statistics, L2 norm, histogram; with OTHER the change from A), has
report_figures.py draw the histograms of the flagged and largest variables and
the change by scope, report_page.py assemble the page, and writes it through
a temporary sibling renamed into place (checkpoint/publish/atomic.py), so a
failure leaves no page. Never prints.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from varstore._version import __version__
from varstore.checkpoint.read.reader_api import CheckpointReader, VariableInfo
from varstore.inspect.diff import _open
from varstore.inspect.report_page import CheckpointFacts, DiffContent, PageContent, render_page
from varstore.inspect.report_stats import DEFAULT_BINS, VariableChange, VariableSummary, compare, summarize
from varstore.inspect.stats import DEFAULT_CHUNK_ELEMENTS
from varstore.inspect.tree import scope_tree

__all__ = ["ReportResult", "report", "DEFAULT_FIGURES", "SCOPE_BARS"]

#: Variables whose histograms are drawn as figures by default (flagged first, then the largest).
DEFAULT_FIGURES = 24
#: Most bars in the change-by-scope chart.
SCOPE_BARS = 40

Checkpoint = CheckpointReader | os.PathLike[str] | str


@dataclasses.dataclass(frozen=True)
class ReportResult:
    """What `report` wrote.

    Attributes:
      path: the HTML file.
      nbytes: its size in bytes.
      variables: variables described (B's with `other`).
      flagged: names of the variables holding NaN or Inf, in checkpoint order.
      figures: names whose histograms were drawn as figures.
      changed: with `other`: names in both whose values differ; () otherwise.
      added, removed: with `other`: names only in B / only in A; () otherwise.
    """

    path: Path
    nbytes: int
    variables: int
    flagged: tuple[str, ...]
    figures: tuple[str, ...]
    changed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


def report(source: Checkpoint, other: Checkpoint | None = None, output: os.PathLike[str] | str = "report.html", *,
           title: str | None = None, figures: int = DEFAULT_FIGURES, figure_names: Iterable[str] = (),
           bins: int = DEFAULT_BINS, log_counts: bool = False, rtol: float = 0.0, atol: float = 0.0,
           chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
           progress: Callable[[int, int, str], None] | None = None) -> ReportResult:
    """Writes one self-contained HTML page about a checkpoint (`varstore report`).

    The page (no request when opened: style, script and figures inline) shows the
    format, variable and parameter counts, bytes by dtype, trainable vs not ("unknown"
    where the format has no flag), metadata and the scope tree; the variables with
    NaN/Inf at the top; and per variable its shape, dtype, device, trainable flag,
    min / max / mean / std / L2 norm, NaN / Inf / zero counts and a histogram of the
    finite values (`bins` bins over [min, max]). Values are read chunk by chunk
    (`chunk_elements` at a time: region reads for varstore's own checkpoints, slices
    of one read for other formats). GGUF quantized tensors are described by their
    dequantized float32 values, with a note saying so.

    With `other`, `source` is A (before) and `other` is B (after), as
    `varstore diff A B`: the overview and the variable table describe B, and a
    section lists the variables added, removed, with shape or dtype changed and,
    for the rest, the relative change ||b - a|| / ||a||, the largest |b - a|, the
    share of elements changed (|a - b| > atol + rtol * max(|a|, |b|)) and the NaN/Inf
    that appeared, with a bar chart of the relative change by scope.

    Histogram figures (matplotlib) are drawn for at most `figures` variables: the
    flagged ones first, then those matching `figure_names` (globs), then the largest;
    the others' bin counts are in the page as numbers.

    Args:
      source: a CheckpointReader or a path / URL opened with varstore.open_checkpoint.
      other: the checkpoint to compare with (B), or None.
      output: the HTML file to write (replaced if present).
      title: the page title (default: the checkpoint's location).
      figures: most histograms drawn as figures (>= 0).
      figure_names: globs of variables to draw figures for within `figures`.
      bins: histogram bins (>= 1).
      log_counts: show the histograms with a log count axis first (the page toggles).
      rtol, atol: the tolerance for "changed" (diff_checkpoints' rule; >= 0).
      chunk_elements: elements read and reduced at once (peak memory about 16 bytes each).
      progress: called as progress(done_bytes, total_bytes, name) after each variable (bytes read),
        and once with (0, total_bytes, "") first; the CLI draws its bar from it.

    Returns:
      ReportResult.

    Raises:
      ValueError: a negative `figures` or tolerance, `bins` < 1.
      CheckpointNotFoundError, NotACheckpointError, CorruptCheckpointError, ChecksumError: as
        open_checkpoint and read; the page is then not written (nor left half-written).
      MissingDependencyError: matplotlib is missing (pip install 'varstore[report]').
      CheckpointError: `output`'s directory cannot be written.
    """
    if figures < 0 or bins < 1 or not (rtol >= 0 and atol >= 0):
        raise ValueError(f"report needs figures >= 0, bins >= 1 and tolerances >= 0, got figures={figures}, "
                         f"bins={bins}, rtol={rtol}, atol={atol}")
    opened: list[CheckpointReader] = []
    try:
        first = _opened(source, opened)
        second = _opened(other, opened) if other is not None else None
        b, a = (second, first) if second is not None else (first, None)
        content, result = _build(a, b, title, figures, tuple(figure_names), bins, log_counts, rtol, atol,
                                 chunk_elements, progress)
        return _write(Path(output), render_page(content), result)
    finally:
        for reader in reversed(opened):
            reader.close()


def _opened(checkpoint: Checkpoint, opened: list[CheckpointReader]) -> CheckpointReader:
    reader, owned = _open(checkpoint)
    if owned:
        opened.append(reader)
    if reader.format == "gguf" and not getattr(reader, "dequantize", True) and reader.location == str(reader.path):
        from varstore._open import open_checkpoint

        reader = open_checkpoint(reader.path, format="gguf", dequantize=True)  # quantized: dequantized values
        opened.append(reader)
    return reader


def _note(info: VariableInfo) -> str:
    ggml = info.attributes.get("ggml_type")
    if ggml is None or "raw_blocks" not in info.attributes:
        return ""
    if info.attributes["raw_blocks"]:
        return f"quantized ({ggml}), no dequantizer here: statistics of the raw block bytes (uint8)"
    return f"quantized ({ggml}): statistics of the dequantized float32 values"


def _facts(reader: CheckpointReader, infos: Sequence[VariableInfo]) -> CheckpointFacts:
    return CheckpointFacts(location=reader.location, format=reader.format, format_version=reader.format_version,
                           step=reader.step, metadata=dict(reader.metadata or {}), notes=tuple(reader.notes),
                           variables=len(infos), parameters=sum(math.prod(i.shape) for i in infos),
                           nbytes=sum(i.nbytes for i in infos))


def _build(a: CheckpointReader | None, b: CheckpointReader, title: str | None, figures: int,
           figure_names: tuple[str, ...], bins: int, log_counts: bool, rtol: float, atol: float,
           chunk_elements: int, progress: Callable[[int, int, str], None] | None
           ) -> tuple[PageContent, ReportResult]:
    from varstore.inspect import report_figures

    infos_b = b.infos()
    infos_a = a.infos() if a is not None else []
    by_name_a = {i.name: i for i in infos_a}
    names_b = {i.name for i in infos_b}
    common = [(by_name_a[i.name], i) for i in infos_b if i.name in by_name_a]
    same_shape = [(x, y) for x, y in common if tuple(x.shape) == tuple(y.shape)]
    total = sum(i.nbytes for i in infos_b) + sum(x.nbytes + y.nbytes for x, y in same_shape)
    done = 0
    if progress is not None:
        progress(0, total, "")
    changes: list[VariableChange] = []
    if a is not None:
        for x, y in same_shape:
            changes.append(compare(a, b, y.name, rtol=rtol, atol=atol, chunk_elements=chunk_elements))
            done += x.nbytes + y.nbytes
            if progress is not None:
                progress(done, total, y.name)
    summaries: list[VariableSummary] = []
    for info in infos_b:
        summaries.append(summarize(b, info.name, bins=bins, chunk_elements=chunk_elements, note=_note(info)))
        done += info.nbytes
        if progress is not None:
            progress(done, total, info.name)
    chosen = _figure_choice(summaries, figures, figure_names)
    drawn = {i: (report_figures.histogram_figure(summaries[i].edges, summaries[i].counts),
                 report_figures.histogram_figure(summaries[i].edges, summaries[i].counts, log_counts=True))
             for i in chosen}
    rule = (f"figures for the {len(chosen)} flagged{', named' if figure_names else ''} and largest variables "
            f"(at most {figures}; --figures N and --figure NAME draw others)")
    diff = None
    if a is not None:
        chart, note = _scope_chart(changes, report_figures.bar_figure)
        diff = DiffContent(
            a=_facts(a, infos_a), added=tuple(i for i in infos_b if i.name not in by_name_a),
            removed=tuple(i for i in infos_a if i.name not in names_b),
            retyped=tuple((x, y) for x, y in common if tuple(x.shape) != tuple(y.shape) or x.dtype != y.dtype),
            changes=tuple(changes), scope_chart=chart, scope_depth_note=note)
    facts = _facts(b, infos_b)
    quantized = [s for s in summaries if s.note]
    if quantized:
        facts = dataclasses.replace(facts, notes=facts.notes + (
            f"{len(quantized):,} quantized tensor{'s' if len(quantized) != 1 else ''} "
            f"({', '.join(sorted({str(s.info.attributes.get('ggml_type')) for s in quantized}))}): "
            "statistics and histograms of the dequantized float32 values (see each row's note)",))
    content = PageContent(
        title=title or (f"{a.location} \u2192 {b.location}" if a is not None else b.location),
        facts=facts, summaries=tuple(summaries), tree=scope_tree(infos_b), figures=drawn,
        figure_rule=rule, diff=diff, log_counts=log_counts, version=__version__)
    result = ReportResult(
        path=Path(), nbytes=0, variables=len(summaries),
        flagged=tuple(s.info.name for s in summaries if s.flagged),
        figures=tuple(summaries[i].info.name for i in chosen),
        changed=tuple(c.name for c in changes if c.changed),
        added=tuple(i.name for i in diff.added) if diff else (),
        removed=tuple(i.name for i in diff.removed) if diff else ())
    return content, result


def _figure_choice(summaries: Sequence[VariableSummary], limit: int, patterns: tuple[str, ...]) -> list[int]:
    """Indices of the variables drawn: flagged (largest first), then named by a glob, then the largest."""
    drawable = [i for i, s in enumerate(summaries) if s.counts]
    size = {i: summaries[i].info.nbytes for i in drawable}
    flagged = sorted((i for i in drawable if summaries[i].flagged), key=lambda i: -size[i])
    named = [i for i in drawable if any(fnmatch.fnmatchcase(summaries[i].info.name, p) for p in patterns)]
    largest = sorted(drawable, key=lambda i: -size[i])
    chosen: list[int] = []
    for i in flagged + named + largest:
        if len(chosen) >= limit:
            break
        if i not in chosen:
            chosen.append(i)
    return sorted(chosen)


def scope_key(name: str, separator: str, depth: int) -> str:
    """The first `depth` parts of a variable's scope (its name without the last part); "(top)" for none."""
    parts = [p for p in name.split(separator) if p][:-1]
    return separator.join(parts[:depth]) or "(top)"


def _scope_chart(changes: Sequence[VariableChange], bar_figure: Callable[..., str]) -> tuple[str, str]:
    """The bar chart of the relative change by scope, and a line on how scopes were grouped."""
    numeric = [c for c in changes if c.relative_change is not None]
    if not numeric:
        return "", ""
    separator = "/" if any("/" in c.name for c in numeric) else "."
    deepest = max(len([p for p in c.name.split(separator) if p]) - 1 for c in numeric)
    depth = max(deepest, 1)
    groups: dict[str, list[VariableChange]] = {}
    while True:
        groups = {}
        for c in numeric:
            groups.setdefault(scope_key(c.name, separator, depth), []).append(c)
        if len(groups) <= SCOPE_BARS or depth <= 1:
            break
        depth -= 1
    rows = []
    for scope, members in sorted(groups.items()):
        norm_a = math.sqrt(sum(c.norm_a ** 2 for c in members))
        norm_d = math.sqrt(sum(c.norm_diff ** 2 for c in members))
        relative = norm_d / norm_a if norm_a > 0 else (math.inf if norm_d > 0 else 0.0)
        rows.append((scope, relative, any(c.nan_inf_appeared for c in members)))
    note = f"scopes: the first {depth} '{separator}'-separated part{'s' if depth != 1 else ''} of each name"
    if len(rows) > SCOPE_BARS:
        rows = sorted(sorted(rows, key=lambda r: -r[1])[:SCOPE_BARS])
        note += f"; the {SCOPE_BARS} scopes of largest change of {len(groups):,}"
    note += "; red, marked (NaN/Inf): NaN/Inf appeared there"
    values = [r[1] for r in rows]
    positive = [v for v in values if 0 < v < math.inf]
    log_scale = bool(positive) and max(positive) / min(positive) > 100
    chart = bar_figure([f"{r[0]} (NaN/Inf)" if r[2] else r[0] for r in rows], values, xlabel="relative change ||b - a|| / ||a||",
                       log_scale=log_scale, highlight=[r[2] for r in rows])
    return chart, note


def _write(path: Path, page: str, result: ReportResult) -> ReportResult:
    from varstore.checkpoint.publish.atomic import atomic_path

    data = page.encode("utf-8", errors="replace")
    with atomic_path(path, durable=False) as temporary:
        temporary.write_bytes(data)
    return dataclasses.replace(result, path=path, nbytes=len(data))
