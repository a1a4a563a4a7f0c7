"""The report's HTML: one self-contained page (inline style, script, figures, JSON data) from computed summaries.

`render_page(content)` returns the page as text. Every name, path, dtype and
metadata value from a checkpoint reaches the page escaped: in the markup
through html.escape, in the JSON data island with "<", ">" and "&" as \\u
escapes (so `</script>` in a name stays text), and the script writes names
with textContent. A Content-Security-Policy allows nothing but inline style,
inline script and data: images, so an opened page makes no request.
Computes no statistic, draws no figure, writes no file.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections import Counter
from typing import Any

from varstore.checkpoint.read.reader_api import VariableInfo
from varstore.inspect.report_assets import PAGE_ROWS, SCRIPT, STYLE
from varstore.inspect.report_stats import VariableChange, VariableSummary
from varstore.inspect.stats import _json_number
from varstore.inspect.tree import ScopeNode

__all__ = ["CheckpointFacts", "DiffContent", "PageContent", "render_page", "METADATA_CHARS"]

#: Characters of a checkpoint's metadata JSON shown (GGUF vocabularies run to megabytes).
METADATA_CHARS = 20_000
#: Flagged variables listed by name at the top (the table's "NaN/Inf only" filter has them all).
FLAGS_LISTED = 100

_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "base-uri 'none'; form-action 'none'")


@dataclasses.dataclass(frozen=True)
class CheckpointFacts:
    """What the overview says about one checkpoint besides its variables."""

    location: str
    format: str
    format_version: str | None = None
    step: int | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    variables: int = 0
    parameters: int = 0
    nbytes: int = 0


@dataclasses.dataclass(frozen=True)
class DiffContent:
    """The comparison of the report's checkpoint (B) with the earlier one (A)."""

    a: CheckpointFacts
    added: tuple[VariableInfo, ...]
    removed: tuple[VariableInfo, ...]
    retyped: tuple[tuple[VariableInfo, VariableInfo], ...]
    changes: tuple[VariableChange, ...]
    scope_chart: str = ""
    scope_depth_note: str = ""


@dataclasses.dataclass(frozen=True)
class PageContent:
    """Everything one report page shows; `figures[i]` = (linear, log) histogram data URLs of summaries[i]."""

    title: str
    facts: CheckpointFacts
    summaries: tuple[VariableSummary, ...]
    tree: ScopeNode
    figures: dict[int, tuple[str, str]]
    figure_rule: str
    diff: DiffContent | None = None
    log_counts: bool = False
    version: str = ""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{nbytes} B"  # pragma: no cover


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _trainable(flag: bool | None) -> str:
    return "unknown" if flag is None else ("yes" if flag else "no")


def _data_island(document: dict[str, Any]) -> str:
    text = json.dumps(document, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _variable_json(summary: VariableSummary, figure: int) -> dict[str, Any]:
    info, stats = summary.info, summary.stats
    return {
        "name": info.name, "shape": _shape(tuple(info.shape)), "dtype": info.dtype,
        "device": info.device or "", "trainable": _trainable(info.trainable),
        "count": stats.count, "nbytes": info.nbytes, "min": _json_number(stats.min),
        "max": _json_number(stats.max), "mean": _json_number(stats.mean), "std": _json_number(stats.std),
        "l2": _json_number(summary.l2_norm), "nan": stats.nan_count, "inf": stats.inf_count, "zeros": stats.zeros,
        "figure": figure, "note": summary.note, "counts": list(summary.counts),
        "edges": [summary.edges[0], summary.edges[-1]] if summary.edges else [],
    }


def _change_row(change: VariableChange) -> list[Any]:
    return [change.name, _json_number(change.relative_change), _json_number(change.max_abs_diff),
            change.share_changed, change.changed, change.nan_inf_appeared]


def _cards(items: list[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(f'<div class="card"><b>{_e(v)}</b>{_e(k)}</div>' for k, v in items) + "</div>"


def _facts_cards(facts: CheckpointFacts) -> str:
    items = [("format", facts.format + (f" {facts.format_version}" if facts.format_version else "")),
             ("variables", f"{facts.variables:,}"), ("parameters", f"{facts.parameters:,}"),
             ("bytes", _size(facts.nbytes))]
    if facts.step is not None:
        items.append(("step", f"{facts.step:,}"))
    return _cards(items)


def _overview(content: PageContent) -> str:
    facts, summaries = content.facts, content.summaries
    by_dtype: Counter[str] = Counter()
    params_by_dtype: Counter[str] = Counter()
    trainable: Counter[str] = Counter()
    trainable_params: Counter[str] = Counter()
    for s in summaries:
        by_dtype[s.info.dtype] += s.info.nbytes
        params_by_dtype[s.info.dtype] += s.stats.count
        trainable[_trainable(s.info.trainable)] += 1
        trainable_params[_trainable(s.info.trainable)] += s.stats.count
    parts = [f'<section id="overview"><h2>Overview</h2>{_facts_cards(facts)}']
    parts.append('<h3>Bytes by dtype</h3><table id="dtypes"><tr><th>dtype</th><th>bytes</th><th>parameters</th></tr>')
    parts += [f'<tr><td>{_e(d)}</td><td class="n">{_e(_size(n))}</td><td class="n">{params_by_dtype[d]:,}</td></tr>'
              for d, n in by_dtype.most_common()]
    parts.append("</table>")
    parts.append('<h3>Trainable</h3><table id="trainable"><tr><th>trainable</th><th>variables</th><th>parameters</th></tr>')
    parts += [f'<tr><td>{_e(k)}</td><td class="n">{trainable[k]:,}</td><td class="n">{trainable_params[k]:,}</td></tr>'
              for k in ("yes", "no", "unknown") if trainable[k]]
    parts.append("</table>")
    if any(s.info.trainable is None for s in summaries):
        parts.append('<p class="sub">"unknown": the format records no trainable flag.</p>')
    for note in facts.notes:
        parts.append(f'<p class="note">{_e(note)}</p>')
    if facts.metadata:
        text = json.dumps(facts.metadata, indent=1, ensure_ascii=False, default=str)
        cut = len(text) > METADATA_CHARS
        text = text[:METADATA_CHARS] + (f"\n... ({len(text) - METADATA_CHARS:,} more characters)" if cut else "")
        parts.append(f'<details><summary>Metadata</summary><pre class="meta">{_e(text)}</pre></details>')
    parts.append(f"<h3>Scopes</h3>{_tree(content.tree)}</section>")
    return "".join(parts)


def _tree(root: ScopeNode) -> str:
    def node(n: ScopeNode, depth: int) -> str:
        label = f'{_e(n.name or "/")} <span class="size">{n.variables:,} var · {_e(_size(n.nbytes))} · {n.elements:,} params</span>'
        if not n.children:
            return f"<li>{label}</li>"
        inner = "".join(node(c, depth + 1) for c in n.children)
        opened = " open" if depth == 0 else ""
        own = f"<li>{_e(n.name)} (variable)</li>" if n.is_variable and depth else ""
        return f'<details class="tree"{opened}><summary>{label}</summary><ul>{own}{inner}</ul></details>'
    return f'<div id="tree">{node(root, 0)}</div>'


def _flags(content: PageContent) -> str:
    bad = [s for s in content.summaries if s.flagged]
    appeared = [c for c in content.diff.changes if c.nan_inf_appeared] if content.diff else []
    if not bad and not appeared:
        return '<section id="flags" class="ok">No NaN or Inf in any variable.</section>'
    parts = ['<section id="flags" class="flags">']
    if bad:
        parts.append(f"<h2>{len(bad):,} variable{'s' if len(bad) != 1 else ''} with NaN/Inf</h2><ul>")
        parts += [f'<li><code class="flag">{_e(s.info.name)}</code>: {s.stats.nan_count or 0:,} NaN, '
                  f"{s.stats.inf_count or 0:,} Inf of {s.stats.count:,}</li>" for s in bad[:FLAGS_LISTED]]
        if len(bad) > FLAGS_LISTED:
            parts.append(f"<li>... and {len(bad) - FLAGS_LISTED:,} more (tick \"NaN/Inf only\" in the table)</li>")
        parts.append("</ul>")
    if appeared:
        parts.append(f"<h2>NaN/Inf appeared since A in {len(appeared):,} variable{'s' if len(appeared) != 1 else ''}</h2><ul>")
        parts += [f'<li><code class="appeared">{_e(c.name)}</code>: {c.nan_inf_appeared:,} element'
                  f"{'s' if c.nan_inf_appeared != 1 else ''} finite in A, NaN/Inf in B</li>" for c in appeared[:FLAGS_LISTED]]
        parts.append("</ul>")
    return "".join(parts) + "</section>"


def _diff_section(diff: DiffContent) -> str:
    a = diff.a
    moved = sum(1 for c in diff.changes if c.changed)
    cards = _cards([("added", f"{len(diff.added):,}"), ("removed", f"{len(diff.removed):,}"),
                    ("shape or dtype changed", f"{len(diff.retyped):,}"), ("values changed", f"{moved:,}"),
                    ("unchanged", f"{len(diff.changes) - moved:,}")])
    parts = [f'<section id="diff"><h2>Changes from A</h2><p class="sub">A: <code>{_e(a.location)}</code> '
             f"({_e(a.format)}, {a.variables:,} variables, {a.parameters:,} parameters). Relative change "
             "= ||b \u2212 a|| / ||a|| over the elements finite on both sides.</p>", cards]
    if diff.scope_chart:
        parts.append(f'<h3>Relative change by scope</h3><p class="sub">{_e(diff.scope_depth_note)}</p>'
                     f'<img id="scope-chart" alt="relative change by scope" src="{diff.scope_chart}">')
    parts.append('<h3>Variables in both</h3><div id="changed"></div>'
                 '<h3>Added (in B only)</h3><div id="added"></div>'
                 '<h3>Removed (in A only)</h3><div id="removed"></div>'
                 '<h3>Shape or dtype changed</h3><div id="retyped"></div></section>')
    return "".join(parts)


def _gallery(content: PageContent) -> str:
    if not content.figures:
        return ""
    items = "".join(f'<div class="fig"><div class="cap">{_e(content.summaries[i].info.name)}</div>'
                    f'<img alt="histogram" data-figure="{slot}"></div>' for slot, i in enumerate(content.figures))
    return (f'<section id="figures"><h2>Histograms</h2><p class="sub">{_e(content.figure_rule)}; '
            f"every other variable's bin counts are in its row (click a row).</p>"
            f'<div class="gallery">{items}</div></section>')


def render_page(content: PageContent) -> str:
    """The whole page, as text (UTF-8 when written)."""
    order = list(content.figures)
    slot = {index: k for k, index in enumerate(order)}
    document: dict[str, Any] = {
        "variables": [_variable_json(s, slot.get(i, -1)) for i, s in enumerate(content.summaries)],
        "figures": [list(content.figures[i]) for i in order],
        "figure_rule": content.figure_rule,
        "diff": None,
    }
    if content.diff is not None:
        d = content.diff
        document["diff"] = {
            "changed": [_change_row(c) for c in d.changes],
            "added": [[i.name, _shape(tuple(i.shape)), i.dtype] for i in d.added],
            "removed": [[i.name, _shape(tuple(i.shape)), i.dtype] for i in d.removed],
            "retyped": [[a.name, _shape(tuple(a.shape)), _shape(tuple(b.shape)), a.dtype, b.dtype] for a, b in d.retyped],
        }
    checked = " checked" if content.log_counts else ""
    facts = content.facts
    body = [
        f"<h1>{_e(content.title)}</h1>",
        f'<p class="sub"><code>{_e(facts.location)}</code> \u00b7 report by varstore {_e(content.version)}</p>',
        _flags(content),
        _overview(content),
        _diff_section(content.diff) if content.diff is not None else "",
        f'<section><h2>Variables</h2><div class="tools"><label><input type="checkbox" id="log-counts"{checked}> '
        f"log counts in histograms</label></div><div id=\"variables\"></div></section>",
        _gallery(content),
    ]
    script = SCRIPT % {"page_rows": PAGE_ROWS}
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{_e(content.title)}</title><style>{STYLE}</style></head><body>"
            + "".join(body)
            + f'<script type="application/json" id="report-data">{_data_island(document)}</script>'
            + f"<script>{script}</script></body></html>\n")
