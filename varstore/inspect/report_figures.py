"""The report's figures drawn by matplotlib as self-contained SVG data URLs; the only importer of matplotlib.

Histograms (linear or log counts), horizontal bar charts (the relative change
by scope). Figures are made with matplotlib's object API
(`matplotlib.figure.Figure` on the SVG canvas: no pyplot, no global state,
no display) and returned as "data:image/svg+xml;base64,..." strings for an
<img>, so each is its own document (no id clashes, no script, no fetch).
Knows nothing of checkpoints or HTML.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import Any

from varstore.errors import MissingDependencyError

__all__ = ["histogram_figure", "bar_figure"]

_STYLE = {"svg.fonttype": "none", "svg.hashsalt": "varstore-report", "font.size": 8.0,
          "axes.spines.top": False, "axes.spines.right": False}
_BLUE = "#3b6ea8"
_RED = "#c0392b"


def _matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib import ticker
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError as err:
        raise MissingDependencyError(
            "the HTML report draws its figures with matplotlib: pip install 'varstore[report]'") from err
    return matplotlib, Figure, FigureCanvasSVG, ticker


def _data_url(figure: Any, canvas_type: Any) -> str:
    buffer = io.BytesIO()
    canvas_type(figure).print_svg(buffer, metadata={"Date": None, "Creator": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def histogram_figure(edges: Sequence[float], counts: Sequence[int], *, log_counts: bool = False,
                     width_in: float = 4.2, height_in: float = 1.9) -> str:
    """A histogram (bars over `edges`, heights `counts`) as an SVG data URL.

    Args:
      edges: bin edges, len(counts) + 1 increasing floats (the variable's units).
      counts: elements per bin.
      log_counts: a log-scale count axis (empty bins left out).
      width_in, height_in: figure size in inches (96 px each in a browser).

    Raises:
      MissingDependencyError: matplotlib is not installed (the [report] extra).
    """
    matplotlib, figure_type, canvas_type, ticker = _matplotlib()
    with matplotlib.rc_context(_STYLE):  # fixed margins and plain tick labels: layout engines and mathtext cost 2/3
        figure = figure_type(figsize=(width_in, height_in))
        figure.subplots_adjust(left=0.2, right=0.97, bottom=0.14, top=0.95)
        axes = figure.add_subplot()
        axes.stairs(list(counts), list(edges), fill=True, color=_BLUE)
        axes.xaxis.set_major_locator(ticker.MaxNLocator(6))
        axes.xaxis.set_major_formatter(ticker.FuncFormatter(_tick))
        if log_counts and any(counts):
            axes.set_yscale("log")
            axes.yaxis.set_major_locator(ticker.LogLocator(numticks=5))
            axes.yaxis.set_minor_locator(ticker.NullLocator())
        else:
            axes.yaxis.set_major_locator(ticker.MaxNLocator(5, integer=True))
        axes.yaxis.set_major_formatter(ticker.FuncFormatter(_tick))
        axes.set_ylabel("count (log)" if log_counts else "count")
        return _data_url(figure, canvas_type)


def _tick(value: float, _position: Any = None) -> str:
    """A tick label as plain text ("0.25", "1e+04"): no mathtext."""
    return f"{value:.4g}"


def bar_figure(labels: Sequence[str], values: Sequence[float], *, xlabel: str, log_scale: bool = False,
               highlight: Sequence[bool] | None = None, width_in: float = 6.5) -> str:
    """Horizontal bars, one per label (top to bottom in the order given), as an SVG data URL.

    Args:
      labels: bar labels (shown as text; long ones shortened from the left with "...").
      values: bar lengths (finite; non-finite ones are drawn at the largest finite value and marked red).
      xlabel: the value axis' label (with its unit).
      log_scale: a log value axis (non-positive values left out).
      highlight: bars and their labels drawn red (e.g. NaN/Inf appeared; a bar of length 0 shows by its label).

    Raises:
      MissingDependencyError: matplotlib is not installed (the [report] extra).
    """
    matplotlib, figure_type, canvas_type, ticker = _matplotlib()
    finite = [v for v in values if math.isfinite(v)]
    top = max(finite) if finite else 1.0
    shown = [v if math.isfinite(v) else top for v in values]
    red = [(not math.isfinite(v)) or bool(highlight and highlight[i]) for i, v in enumerate(values)]
    short = [label if len(label) <= 48 else "..." + label[-45:] for label in labels]
    with matplotlib.rc_context(_STYLE):
        figure = figure_type(figsize=(width_in, 0.6 + 0.19 * max(1, len(labels))), layout="constrained")
        axes = figure.add_subplot()
        positions = list(range(len(labels)))
        axes.barh(positions, shown, color=[_RED if r else _BLUE for r in red], linewidth=0)
        axes.set_yticks(positions, short)
        for label, marked in zip(axes.get_yticklabels(), red):
            if marked:
                label.set_color(_RED)
        axes.invert_yaxis()
        if log_scale and any(v > 0 for v in shown):
            axes.set_xscale("log")
            axes.xaxis.set_minor_locator(ticker.NullLocator())
        axes.xaxis.set_major_formatter(ticker.FuncFormatter(_tick))
        axes.set_xlabel(xlabel)
        return _data_url(figure, canvas_type)
