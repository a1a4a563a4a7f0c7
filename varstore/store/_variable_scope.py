"""VariableScope: the defaults of one variable scope (name, reuse mode, initializer, dtype, ...) and the per-thread scope stack.

As tf.compat.v1.VariableScope and AUTO_REUSE. Opening and closing scopes
(`VariableStore.variable_scope`) and naming variables belong to the store;
this module only holds what a scope is and which scopes are open in this
thread. Never does file I/O.
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Union

import numpy.typing as npt

from varstore import dtypes
from varstore.initializers import Initializer, InitializerFunction
from varstore.store.variables import Variable

__all__ = ["AUTO_REUSE", "FRAMES", "InitializerSpec", "Reuse", "VariableScope"]


class _ReuseMode(enum.Enum):
    AUTO_REUSE = 1

    def __repr__(self) -> str:
        return "AUTO_REUSE"


#: reuse mode: get_variable returns the existing variable or creates it (tf.compat.v1.AUTO_REUSE).
AUTO_REUSE = _ReuseMode.AUTO_REUSE

#: A reuse mode: False/None (create only), True (reuse only) or AUTO_REUSE.
Reuse = Union[bool, _ReuseMode, None]
#: What get_variable accepts as initializer: an Initializer (or its class), any
#: callable (shape, dtype) -> array, or the value itself (array, Variable, Python value).
InitializerSpec = Union[Variable, Initializer, "type[Initializer]", InitializerFunction, npt.ArrayLike, None]


class VariableScope:
    """The defaults of one variable scope, as tf.compat.v1.VariableScope.

    Attributes:
      name: full scope name ("" for the root, "image_filters/conv1").
      reuse: False, True or AUTO_REUSE.
      initializer: default initializer for get_variable, or None.
      dtype: default dtype for get_variable, or None (float32).
      original_name_scope: the name scope opened when this scope was first
        entered, with a trailing "/": "foo/" the first time variable_scope("foo")
        opens, "foo_1/" the second time (as TF1); "" for the root.
      regularizer, partitioner, constraint, use_resource: get_variable's defaults inside (None: none).
      custom_getter: the getter get_variable calls inside (sub-scopes' getters wrap it), or None.
    """

    regularizer: Any = None
    partitioner: Any = None
    custom_getter: Any = None
    constraint: Any = None
    use_resource: bool | None = None

    def __init__(self, store: object, name: str, reuse: Reuse = False,
                 initializer: InitializerSpec = None, dtype: npt.DTypeLike | None = None,
                 original_name_scope: str | None = None, **defaults: Any) -> None:
        self._store = store
        self._name = name
        self._original_name_scope = f"{name}/" if original_name_scope is None and name else (original_name_scope or "")
        self._reuse: Reuse = reuse if reuse else False
        self.initializer = initializer
        self.dtype = None if dtype is None else dtypes.as_dtype(dtype)
        for key, value in defaults.items():  # regularizer, partitioner, custom_getter, constraint, use_resource
            if key not in ("regularizer", "partitioner", "custom_getter", "constraint", "use_resource"):
                raise TypeError(f"VariableScope got an unexpected keyword argument {key!r}")
            setattr(self, key, value)

    @property
    def store(self) -> object:
        """The VariableStore this scope belongs to."""
        return self._store

    @property
    def name(self) -> str:
        return self._name

    @property
    def original_name_scope(self) -> str:
        return self._original_name_scope

    @property
    def reuse(self) -> Reuse:
        return self._reuse

    def reuse_variables(self) -> None:
        """Makes get_variable in this scope (and scopes opened inside it from now on) reuse, as TF1."""
        self._reuse = True

    def set_initializer(self, initializer: InitializerSpec) -> None:
        """Sets the default initializer."""
        self.initializer = initializer

    def set_dtype(self, dtype: npt.DTypeLike) -> None:
        """Sets the default dtype."""
        self.dtype = dtypes.as_dtype(dtype)

    def set_regularizer(self, regularizer: Any) -> None:
        """Sets the default regularizer, as tf.compat.v1.VariableScope.set_regularizer."""
        self.regularizer = regularizer

    def set_partitioner(self, partitioner: Any) -> None:
        """Sets the default partitioner."""
        self.partitioner = partitioner

    def set_custom_getter(self, custom_getter: Any) -> None:
        """Sets the custom getter (replacing, not wrapping, the one there)."""
        self.custom_getter = custom_getter

    def __repr__(self) -> str:
        return f"<VariableScope {self._name!r} reuse={self._reuse!r}>"


class _Frames(threading.local):
    def __init__(self) -> None:
        self.stack: list[tuple[object, VariableScope, str]] = []  # (store, scope, name scope), innermost last


#: The scopes open in this thread, innermost last, each with its store and its name scope
#: ("" at the root, "foo_1" without the trailing "/"): Variable(...) names follow the name scope,
#: get_variable names the variable scope (TF1's two stacks).
FRAMES = _Frames()
