"""The scope tree of a checkpoint's variable names, with per-scope totals (`varstore ls --tree`).

A name that is both a variable and a scope ("a" next to "a/b") is kept as both.
The tree is at most MAX_DEPTH levels deep: the parts of a name past that level
stay joined as one node's name ("p31/p32/p33"), so building, printing and
JSON of a tree are linear in the names' length, never quadratic in their depth.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator
from typing import Any

from varstore.checkpoint.read.reader_api import VariableInfo

__all__ = ['ScopeNode', 'scope_tree', 'MAX_DEPTH']

#: The deepest level of a scope tree (levels below the root); deeper parts of a name form one node's name.
MAX_DEPTH = 32


@dataclasses.dataclass(frozen=True)
class ScopeNode:
    """One scope of a checkpoint's names, with totals over everything below it.

    Attributes:
      name: the last part of the path ("kernel"); "" for the root.
      path: the full scope path ("encoder/dense"); "" for the root.
      is_variable: a variable is stored at exactly this path (a name can be
        both a variable and a scope: "a" and "a/b").
      variable: that variable's VariableInfo, or None (not a variable, or the
        tree was built from bare names).
      children: sub-scopes and variables, sorted by name.
      variables: number of variables at and below this node.
      nbytes: total bytes of those variables (0 when built from bare names).
      elements: total elements of those variables (0 when built from bare names).
    """

    name: str
    path: str
    is_variable: bool = False
    variable: VariableInfo | None = None
    children: tuple["ScopeNode", ...] = ()
    variables: int = 0
    nbytes: int = 0
    elements: int = 0

    def walk(self) -> Iterator[tuple[int, "ScopeNode"]]:
        """(depth, node) for this node and every descendant, depth-first; the root has depth 0."""
        stack: list[tuple[int, ScopeNode]] = [(0, self)]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, child) for child in reversed(node.children))

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (the "tree" object of `varstore ls --tree --json`)."""
        return {
            "name": self.name,
            "path": self.path,
            "is_variable": self.is_variable,
            "variables": self.variables,
            "nbytes": self.nbytes,
            "elements": self.elements,
            "variable": self.variable.to_json() if self.variable is not None else None,
            "children": [child.to_json() for child in self.children],
        }


def scope_tree(variables: Iterable[VariableInfo | str]) -> ScopeNode:
    """Builds the tree of scopes ("/"-separated name parts) over a checkpoint's variables.

    Args:
      variables: VariableInfos (for per-scope byte and element totals) or bare
        names (totals count variables only). Empty name parts (as in "a//b" or
        a leading "/") are dropped; parts past level MAX_DEPTH stay joined by "/".

    Returns:
      The root ScopeNode (name "" and path ""); children sorted by name.
    """
    root: dict[str, Any] = {"children": {}, "is_variable": False, "info": None}
    for item in variables:
        info = item if isinstance(item, VariableInfo) else None
        name = item.name if isinstance(item, VariableInfo) else str(item)
        node = root
        parts = [p for p in name.split("/") if p]
        if len(parts) > MAX_DEPTH:
            parts[MAX_DEPTH - 1:] = ["/".join(parts[MAX_DEPTH - 1:])]
        for part in parts:
            node = node["children"].setdefault(part, {"children": {}, "is_variable": False, "info": None})
        node["is_variable"] = True
        node["info"] = info
    return _freeze("", "", root)


def _freeze(name: str, path: str, node: dict[str, Any]) -> ScopeNode:
    children = tuple(_freeze(part, f"{path}/{part}" if path else part, child)
                     for part, child in sorted(node["children"].items()))
    info: VariableInfo | None = node["info"]
    return ScopeNode(
        name=name, path=path, is_variable=node["is_variable"], variable=info, children=children,
        variables=int(node["is_variable"]) + sum(c.variables for c in children),
        nbytes=(info.nbytes if info else 0) + sum(c.nbytes for c in children),
        elements=(math.prod(info.shape) if info else 0) + sum(c.elements for c in children))
