"""Flattens an unpickled torch object into dotted tensor names and JSON leaves, within a budget, refusing cycles.

A pickle can make a container that contains itself (one memo GET) or a
chain of containers each holding the next twice (2**n names from n
opcodes). So the object graph is first walked once, each container by its
id, with no recursion: a cycle is refused, and whether a list or tuple holds
a tensor is computed once per container. The names are then made in a
second walk that counts every item it visits and every character of every
name against a budget proportional to the pickle's size (capped at
MAX_ITEMS and MAX_NAME_CHARS), so shared children are allowed (torch shares
an optimizer's `betas` tuple between param groups) but cannot multiply
beyond what the file could have spelled out. Knows nothing about storages,
bytes or files.
"""

from __future__ import annotations

import math
from typing import Any

from varstore.formats._restricted_pickle import DType, TensorRef
from varstore.errors import CorruptCheckpointError, UnsafeCheckpointError

__all__ = ["flatten", "MAX_ITEMS", "MAX_NAME_CHARS", "MAX_NAME_LENGTH", "MAX_DEPTH"]

#: The most items (names, leaves and the elements of leaves) one pickle may flatten to. A real state dict
#: holds thousands to a few hundred thousand tensors; each item also needs at least one pickle byte.
MAX_ITEMS = 10_000_000
#: The most characters all names of one pickle may add up to (characters).
MAX_NAME_CHARS = 1 << 28
#: The deepest containers may nest (levels); Python's own recursion limit is 1000.
MAX_DEPTH = 1000
#: The longest one dotted name may be (characters); torch's are under a few hundred.
MAX_NAME_LENGTH = 1 << 16
_CONTAINERS = (dict, list, tuple, set, frozenset)
_SCALAR_KEYS = (str, int, float, bool, type(None))


class _Budget:
    """Counts items and name characters; raises UnsafeCheckpointError naming `label` when one runs out."""

    def __init__(self, label: str, pickle_bytes: int) -> None:
        self.label = label
        self.items_left = min(MAX_ITEMS, 4 * max(pickle_bytes, 1024))
        self.chars_left = min(MAX_NAME_CHARS, 64 * max(pickle_bytes, 1 << 14))
        self._items, self._chars = self.items_left, self.chars_left

    def item(self, count: int = 1) -> None:
        self.items_left -= count
        if self.items_left < 0:
            raise UnsafeCheckpointError(
                f"{self.label}: its pickle flattens to more than {self._items} names and values (its containers "
                f"share children many times over, or it is not a state dict); refused before building them")

    def name(self, name: str) -> str:
        self.chars_left -= len(name)
        if len(name) > MAX_NAME_LENGTH or self.chars_left < 0:
            raise UnsafeCheckpointError(
                f"{self.label}: its pickle's dotted names grow past {MAX_NAME_LENGTH} characters each or "
                f"{self._chars} in all (containers nested or shared without end); refused")
        return name


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return list(value)


def _holds_tensor_table(obj: Any, label: str) -> dict[int, bool]:
    """{id(container): holds a TensorRef or dict below it}, each container walked once; refuses cycles."""
    holds: dict[int, bool] = {}
    on_path: set[int] = set()
    if not isinstance(obj, _CONTAINERS):
        return holds
    stack: list[tuple[Any, bool]] = [(obj, False)]
    while stack:
        value, leaving = stack.pop()
        key = id(value)
        if leaving:
            on_path.discard(key)
            holds[key] = any(isinstance(c, (TensorRef, dict)) or (isinstance(c, _CONTAINERS) and holds[id(c)])
                             for c in _children(value))
            continue
        if key in holds:
            continue
        if key in on_path:
            raise UnsafeCheckpointError(
                f"{label}: a pickled {type(value).__name__} contains itself (a cycle); a state dict never does, "
                f"so the file is refused")
        on_path.add(key)
        if len(on_path) > MAX_DEPTH:
            raise CorruptCheckpointError(f"{label}: its containers nest too deeply (more than {MAX_DEPTH} levels)")
        stack.append((value, True))
        for child in _children(value):
            if isinstance(child, _CONTAINERS) and id(child) not in holds:
                if id(child) in on_path:
                    raise UnsafeCheckpointError(
                        f"{label}: a pickled {type(child).__name__} contains itself (a cycle); a state dict never "
                        f"does, so the file is refused")
                stack.append((child, False))
    return holds


def _key_text(key: Any) -> str:
    if isinstance(key, _SCALAR_KEYS):
        return str(key)
    if isinstance(key, (bytes, bytearray)):
        return bytes(key[:MAX_NAME_LENGTH]).decode("latin1")
    if isinstance(key, tuple) and len(key) <= 16 and all(isinstance(k, _SCALAR_KEYS) for k in key):
        return str(key)
    return f"<{type(key).__name__}>"


def _json_leaf(value: Any, budget: _Budget) -> Any:
    """A JSON-compatible copy of a non-tensor leaf (tuples become lists, odd values a short description).

    Iterative; every element converted counts against `budget` (the graph has no cycles by now).
    """
    result: list[Any] = [None]
    stack: list[tuple[Any, list[Any] | dict[str, Any], str]] = [(value, result, "0")]
    while stack:
        item, into, key = stack.pop()
        budget.item()
        if item is None or isinstance(item, (bool, int, str)):
            converted: Any = item
        elif isinstance(item, float):
            converted = item if math.isfinite(item) else repr(item)
        elif isinstance(item, (bytes, bytearray)):
            converted = bytes(item).decode("latin1")
        elif isinstance(item, (DType, complex)):
            converted = repr(item)
        elif isinstance(item, dict):
            converted = {}
            for k, v in reversed(list(item.items())):
                stack.append((v, converted, _key_text(k)))
        elif isinstance(item, (list, tuple, set, frozenset)):
            members = list(item)
            if isinstance(item, (set, frozenset)) and all(isinstance(v, _SCALAR_KEYS + (bytes,)) for v in members):
                members.sort(key=repr)
            converted = [None] * len(members)
            for index in range(len(members) - 1, -1, -1):
                stack.append((members[index], converted, str(index)))
        else:
            converted = f"<{type(item).__name__}>"
        if isinstance(into, dict):
            into[key] = converted
        else:
            into[int(key)] = converted
    return result[0]


def flatten(obj: Any, label: str = "the pickle", pickle_bytes: int = 0) -> tuple[dict[str, TensorRef], dict[str, Any]]:
    """Splits an unpickled object into {dotted name: TensorRef} and {dotted name: JSON leaf}.

    The rule torch users see: dicts are walked (keys via str()); lists and
    tuples only when they hold a tensor or dict (by index); anything else is
    a leaf. A lone tensor is named "tensor". A tensor reached by two paths
    (one tensor object saved under two keys) appears under both names.

    Args:
      obj: what the restricted unpickler returned.
      label: names the file in errors.
      pickle_bytes: the pickle's length (bytes); the item budget is 4 per
        byte (at least 4096, at most MAX_ITEMS) and the name budget 64
        characters per byte (at most MAX_NAME_CHARS).

    Raises:
      UnsafeCheckpointError: a container that contains itself, or more names,
        values or name characters than the budget allows.
      CorruptCheckpointError: containers nested more than MAX_DEPTH levels.
    """
    holds = _holds_tensor_table(obj, label)
    budget = _Budget(label, pickle_bytes)
    tensors: dict[str, TensorRef] = {}
    leaves: dict[str, Any] = {}
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        prefix, value = stack.pop()
        budget.item()
        if isinstance(value, TensorRef):
            tensors[prefix or "tensor"] = value
        elif isinstance(value, dict) or (isinstance(value, (list, tuple)) and holds.get(id(value), False)):
            items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
            budget.item(len(items))
            for key, item in reversed(items):
                text = _key_text(key)
                stack.append((budget.name(f"{prefix}.{text}" if prefix else text), item))
        else:
            leaves[prefix or "value"] = _json_leaf(value, budget)
    return tensors, leaves
