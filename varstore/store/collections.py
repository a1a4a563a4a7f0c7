"""Collections: the standard collection names and the per-store registry of named lists.

A collection is an ordered list of objects under a string name, as a TF1
graph's collections (tf.compat.v1.get_collection / add_to_collection).
Variables not created by get_variable are held weakly, so a variable nobody
references is freed and drops out of every collection. Knows nothing about
scopes or naming rules; never does file I/O.
"""

from __future__ import annotations

import re
import threading
import weakref
from typing import Any

__all__ = [
    "GLOBAL_VARIABLES",
    "TRAINABLE_VARIABLES",
    "LOCAL_VARIABLES",
    "MODEL_VARIABLES",
    "REGULARIZATION_LOSSES",
    "CollectionRegistry",
]

#: Every non-local variable (TF's GraphKeys.GLOBAL_VARIABLES, same string).
GLOBAL_VARIABLES = "variables"
#: Variables an optimizer updates (TF's GraphKeys.TRAINABLE_VARIABLES).
TRAINABLE_VARIABLES = "trainable_variables"
#: Per-process variables kept out of GLOBAL_VARIABLES (TF's GraphKeys.LOCAL_VARIABLES).
LOCAL_VARIABLES = "local_variables"
#: Variables that make up the model (weights, moving averages), as TF's GraphKeys.MODEL_VARIABLES;
#: only what is added to it explicitly (collections=[...] or add_to_collection), as in TF.
MODEL_VARIABLES = "model_variables"
#: The losses of get_variable's regularizers (TF's GraphKeys.REGULARIZATION_LOSSES): `_getter.RegularizationLoss`
#: callables here, computed from the variable's value when called.
REGULARIZATION_LOSSES = "regularization_losses"


class _Strong:
    """A strong reference with the weakref call interface."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


def _make_ref(obj: Any, weak: bool) -> Any:
    if weak:
        try:
            return weakref.ref(obj)
        except TypeError:  # ints, strings, tuples cannot be weakly referenced
            pass
    return _Strong(obj)


class CollectionRegistry:
    """Named, ordered collections of objects for one store.

    Each collection keeps insertion order and holds an object at most once
    (adding it again is a no-op; TF appends duplicates). Objects are compared
    by identity, never with `==` (a Variable's `==` is elementwise).
    Thread-safe.
    """

    def __init__(self) -> None:
        self._collections: dict[str, dict[int, Any]] = {}
        self._lock = threading.RLock()

    def add(self, name: str, obj: Any, *, weak: bool = False) -> None:
        """Adds `obj` to collection `name` (created on first use).

        Args:
          name: any string.
          obj: any object; Variables and other weak-referenceable objects are
            held weakly when `weak` is True.
          weak: hold `obj` through a weak reference.
        """
        if not isinstance(name, str):
            raise TypeError(f"a collection name must be a string, got {name!r}")
        with self._lock:
            items = self._collections.setdefault(name, {})
            key = id(obj)
            ref = items.get(key)
            if ref is not None and ref() is obj:
                return
            if ref is not None:  # a dead object's id was reused: drop the stale entry
                del items[key]
            items[key] = _make_ref(obj, weak)
            names = getattr(obj, "_collection_names", None)
            if isinstance(names, list) and name not in names:
                names.append(name)

    def remove(self, name: str, obj: Any) -> None:
        """Removes `obj` from collection `name`; no error when it is absent."""
        with self._lock:
            items = self._collections.get(name)
            if items is None:
                return
            ref = items.get(id(obj))
            if ref is not None and ref() is obj:
                del items[id(obj)]
                names = getattr(obj, "_collection_names", None)
                if isinstance(names, list) and name in names:
                    names.remove(name)

    def get(self, name: str, scope: str | None = None) -> list[Any]:
        """A new list of the live objects in collection `name`, in insertion order.

        Args:
          name: collection name; an unknown name gives [].
          scope: when given, keep only objects with a `name` attribute that
            `re.match(scope, obj.name)` accepts (as tf.compat.v1.get_collection;
            objects without a name are left out).
        """
        with self._lock:
            items = self._collections.get(name)
            if not items:
                return []
            live = []
            dead = []
            for key, ref in items.items():
                obj = ref()
                if obj is None:
                    dead.append(key)
                else:
                    live.append(obj)
            for key in dead:
                del items[key]
        if scope is None:
            return live
        pattern = re.compile(scope)
        result = []
        for obj in live:
            obj_name = getattr(obj, "name", None)
            if isinstance(obj_name, str) and pattern.match(obj_name):
                result.append(obj)
        return result

    def contains(self, name: str, obj: Any) -> bool:
        """Whether `obj` (by identity) is in collection `name`."""
        with self._lock:
            ref = self._collections.get(name, {}).get(id(obj))
            return ref is not None and ref() is obj

    def names(self) -> list[str]:
        """Names of the collections that hold at least one live object, in creation order."""
        with self._lock:
            keys = list(self._collections)
        return [n for n in keys if self.get(n)]

    def clear(self, name: str) -> None:
        """Empties collection `name`."""
        with self._lock:
            items = self._collections.pop(name, {})
            for ref in items.values():
                obj = ref()
                names = getattr(obj, "_collection_names", None)
                if isinstance(names, list) and name in names:
                    names.remove(name)
