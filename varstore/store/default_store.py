"""The process-wide default VariableStore and the module-level TF1 functions that act on it (vs.get_variable, ...).

As tf.compat.v1's default graph: `get_variable`, `variable_scope`,
`global_variables`, ... act on the store of the innermost active scope in
this thread, else the process-wide default store; `reset_default_store`
replaces it. Installs `get_default_store` as the registry a
`Variable(...)` without `store=` joins. Holds no rules of its own: every
function forwards to a `VariableStore` method.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any, cast, overload

import numpy.typing as npt

from varstore.store import ownership, partitioners, partitioning
from varstore.store.collections import LOCAL_VARIABLES
from varstore.store.placement import DeviceSpec
from varstore.store.reuse import PartialShape
from varstore.store.scopes import VariableStore
from varstore.store._variable_scope import FRAMES, InitializerSpec, Reuse, VariableScope
from varstore.store.variables import Variable, set_default_registry

__all__ = [
    "get_default_store",
    "reset_default_store",
    "variable_scope",
    "name_scope",
    "get_variable_scope",
    "get_variable",
    "get_local_variable",
    "get_collection",
    "add_to_collection",
    "global_variables",
    "trainable_variables",
    "local_variables",
    "model_variables",
    "initialize",
    "report_uninitialized",
]

_default_store = VariableStore()
_default_lock = threading.Lock()


def get_default_store() -> VariableStore:
    """The store of the innermost active variable_scope in this thread, else the process-wide default store."""
    if FRAMES.stack:
        return cast(VariableStore, FRAMES.stack[-1][0])
    return _default_store


def reset_default_store() -> VariableStore:
    """Replaces the process-wide default store with an empty one (tf.compat.v1.reset_default_graph) and returns it."""
    global _default_store
    with _default_lock:
        _default_store = VariableStore()
        return _default_store


set_default_registry(get_default_store)  # Variable(...) without store= joins the default store


def variable_scope(name_or_scope: str | VariableScope | None, default_name: str | None = None, values: Any = None,
                   initializer: InitializerSpec = None, regularizer: Any = None, caching_device: Any = None,
                   partitioner: Any = None, custom_getter: Any = None, reuse: Reuse = None,
                   dtype: npt.DTypeLike | None = None, use_resource: bool | None = None, constraint: Any = None,
                   auxiliary_name_scope: bool = True) -> contextlib.AbstractContextManager[VariableScope]:
    """`VariableStore.variable_scope` on the default store (a scope object re-enters its own store), as
    tf.compat.v1.variable_scope (the same arguments in the same order)."""
    store = cast(VariableStore, name_or_scope.store) if isinstance(name_or_scope, VariableScope) else get_default_store()
    return store.variable_scope(name_or_scope, default_name, values, initializer, regularizer, caching_device,
                                partitioner, custom_getter, reuse, dtype, use_resource, constraint,
                                auxiliary_name_scope)


def name_scope(name: str | None, default_name: str | None = None) -> contextlib.AbstractContextManager[str]:
    """`VariableStore.name_scope` on the default store, as tf.compat.v1.name_scope: names Variable(...)s, not get_variable."""
    return get_default_store().name_scope(name, default_name)


def get_variable_scope() -> VariableScope:
    """The current scope of the default store."""
    return get_default_store().current_scope()


@overload
def get_variable(name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                 initializer: InitializerSpec = None, trainable: bool | None = None,
                 collections: Sequence[str] | None = None, device: DeviceSpec = None,
                 partitioner: None = None, **options: Any) -> Variable: ...


@overload
def get_variable(name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                 initializer: InitializerSpec = None, trainable: bool | None = None,
                 collections: Sequence[str] | None = None, device: DeviceSpec = None, *,
                 partitioner: partitioners.Partitioner, **options: Any) -> partitioning.PartitionedVariable: ...


def get_variable(name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                 initializer: InitializerSpec = None, trainable: bool | None = None,
                 collections: Sequence[str] | None = None, device: DeviceSpec = None,
                 partitioner: partitioners.Partitioner | None = None, **options: Any) -> Any:
    """`VariableStore.get_variable` on the default store (options: regularizer, constraint, custom_getter, ...)."""
    return get_default_store().get_variable(name, shape, dtype, initializer, trainable, collections, device,
                                            partitioner, **options)


def get_local_variable(name: str, shape: PartialShape = None, dtype: npt.DTypeLike | None = None,
                       initializer: InitializerSpec = None, trainable: bool | None = False,
                       collections: Sequence[str] | None = None, device: DeviceSpec = None,
                       partitioner: partitioners.Partitioner | None = None, **options: Any) -> Any:
    """get_variable for a per-process variable, as tf.compat.v1.get_local_variable: in `collections` +
    [LOCAL_VARIABLES] (not GLOBAL_VARIABLES), never trainable (TF passes trainable=False whatever is given)."""
    local = [*(collections or []), LOCAL_VARIABLES]
    return get_default_store().get_variable(name, shape, dtype, initializer, False, local, device, partitioner,
                                            **options)


def get_collection(name: str, scope: str | None = None) -> list[Any]:
    """`VariableStore.get_collection` on the default store."""
    return get_default_store().get_collection(name, scope)


def add_to_collection(name: str, value: object) -> None:
    """`VariableStore.add_to_collection` on the default store."""
    get_default_store().add_to_collection(name, value)


def global_variables(scope: str | None = None) -> list[Variable]:
    """GLOBAL_VARIABLES of the default store; with `scope`, those whose name `re.match(scope, name)` accepts (as tf.compat.v1.global_variables)."""
    return get_default_store().global_variables(scope)


def trainable_variables(scope: str | None = None) -> list[Variable]:
    """TRAINABLE_VARIABLES of the default store, filtered by `scope` as `global_variables`."""
    return get_default_store().trainable_variables(scope)


def local_variables(scope: str | None = None) -> list[Variable]:
    """LOCAL_VARIABLES of the default store, filtered by `scope` as `global_variables`."""
    return get_default_store().local_variables(scope)


def model_variables(scope: str | None = None) -> list[Variable]:
    """MODEL_VARIABLES of the default store, filtered by `scope` as `global_variables` (tf.compat.v1.model_variables)."""
    return get_default_store().model_variables(scope)


def initialize(var_list: Sequence[Variable] | None = None, comm: ownership.RankInfo | None = None) -> None:
    """`VariableStore.initialize` on the default store."""
    get_default_store().initialize(var_list, comm)


def report_uninitialized(var_list: Sequence[Variable] | None = None) -> list[str]:
    """`VariableStore.report_uninitialized` on the default store."""
    return get_default_store().report_uninitialized(var_list)
