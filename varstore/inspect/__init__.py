"""Inspect checkpoints: per-variable statistics, checkpoint diffs, the scope tree.

The library side of `varstore show`, `varstore diff` and `varstore ls --tree`: it returns
frozen dataclasses with `to_json()` and never prints, never exits, never imports click.
"""

from __future__ import annotations

from varstore.inspect.diff import CheckpointDiff, DtypeChange, ShapeChange, ValueDifference, diff_checkpoints
from varstore.inspect.stats import DEFAULT_CHUNK_ELEMENTS, VariableStats, variable_stats
from varstore.inspect.tree import ScopeNode, scope_tree

__all__ = [
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
