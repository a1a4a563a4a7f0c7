"""Inspect checkpoints: per-variable statistics, checkpoint diffs, the scope tree, the HTML report.

The library side of `varstore show`, `varstore diff`, `varstore ls --tree` and `varstore report`:
it returns frozen dataclasses with `to_json()` (`report` writes its one HTML file) and never prints,
never exits, never imports click.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from varstore.inspect.diff import CheckpointDiff, DtypeChange, ShapeChange, ValueDifference, diff_checkpoints
from varstore.inspect.stats import DEFAULT_CHUNK_ELEMENTS, VariableStats, variable_stats
from varstore.inspect.tree import ScopeNode, scope_tree

if TYPE_CHECKING:
    from varstore.inspect.html_report import ReportResult as ReportResult, report as report

__all__ = [
    "report",
    "ReportResult",
    "VariableStats",
    "variable_stats",
    "ShapeChange",
    "DtypeChange",
    "ValueDifference",
    "CheckpointDiff",
    "diff_checkpoints",
    "ScopeNode",
    "scope_tree",
    "DEFAULT_CHUNK_ELEMENTS",
]


def __getattr__(name: str) -> Any:
    """`report` and `ReportResult`, imported on first use (the report's modules are not needed by ls/show/diff)."""
    if name in ("report", "ReportResult"):
        from varstore.inspect import html_report

        value = getattr(html_report, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
