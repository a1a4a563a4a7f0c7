"""get_variable's TF1 getter chain: the scope's defaults, custom getters composed as TF1, regularization losses.

As tf.compat.v1's VariableScope.get_variable and _VariableStore.get_variable
(python/ops/variable_scope.py): arguments left out take the scope's
(initializer, regularizer, partitioner, constraint, dtype); a custom getter
(the scope's, wrapped by get_variable's own as `_maybe_wrap_custom_getter`)
is called with `getter=` the true getter and the full name; a regularizer
runs once per new variable (per part of a partitioned one), its loss going
to REGULARIZATION_LOSSES. varstore has no graph: that loss is a
`RegularizationLoss`, computed from the variable's value each time it is
called. Creates no variable itself (the store's true getter does); never
does file I/O.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from varstore.store.collections import REGULARIZATION_LOSSES
from varstore.errors import VariableArgumentError
from varstore.store.variable_options import resolve_options

__all__ = ["CustomGetter", "RegularizationLoss", "Regularizer", "VariableExtras", "call_getters", "check_callable",
           "extras_for", "with_scope_defaults", "wrap_custom_getter", "add_regularization_loss"]

#: A regularizer: variable -> loss (a scalar array, or None for no loss), as TF1's regularizer functions.
Regularizer = Callable[[Any], Any]
#: A custom getter: (getter, name, *args, **kwargs) -> variable, as tf.compat.v1.variable_scope(custom_getter=).
CustomGetter = Callable[..., Any]


def check_callable(value: Any, what: str, name: str) -> Any:
    """`value` when None or callable.

    Raises:
      VariableArgumentError: naming `what` ("regularizer", "custom_getter") and the variable or scope.
    """
    if value is not None and not callable(value):
        raise VariableArgumentError(f"the {what} of '{name}' must be callable, got {type(value).__name__}")
    return value


def wrap_custom_getter(custom_getter: CustomGetter | None, old_getter: CustomGetter | None) -> CustomGetter | None:
    """`custom_getter` around `old_getter`, as TF1's _maybe_wrap_custom_getter: the new one is called first and
    its `getter` runs the old one with the true getter."""
    if custom_getter is None or old_getter is None:
        return custom_getter if custom_getter is not None else old_getter

    def wrapped(getter: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return custom_getter(functools.partial(old_getter, getter), *args, **kwargs)

    return wrapped


class VariableExtras:
    """What a new get_variable variable takes beyond shape, dtype and initializer: (constraint,
    synchronization, aggregation) resolved as `variable_options.resolve_options`, and the regularizer."""

    __slots__ = ("options", "regularizer")

    def __init__(self, options: tuple[Any, Any, Any], regularizer: Regularizer | None) -> None:
        self.options = options
        self.regularizer = regularizer


class RegularizationLoss:
    """`regularizer(variable)`, computed when called: what REGULARIZATION_LOSSES holds here.

    TF1 adds the tensor `regularizer(v)` to the graph collection, evaluated by
    each session.run; with no graph, varstore keeps the pair and computes the
    loss from the variable's current value on each call (a float32 scalar for
    a float32 variable, as the regularizer returns it; None when the
    regularizer returns None, as tf.compat.v1.no_regularizer).

    Attributes:
      name: "<variable name>/Regularizer" (what get_collection(scope=) matches, as TF's op names).
      variable: the regularized Variable.
    """

    def __init__(self, regularizer: Regularizer, variable: Any) -> None:
        self.regularizer = regularizer
        self.variable = variable
        self.name = f"{variable.name}/Regularizer"

    def __call__(self) -> Any:
        return self.regularizer(self.variable)

    def __repr__(self) -> str:
        return f"<varstore.RegularizationLoss '{self.name}'>"


def add_regularization_loss(store: Any, regularizer: Regularizer | None, variable: Any) -> None:
    """Adds `RegularizationLoss(regularizer, variable)` to the store's REGULARIZATION_LOSSES (nothing without one)."""
    if regularizer is not None:
        store.add_to_collection(REGULARIZATION_LOSSES, RegularizationLoss(regularizer, variable))


def _takes(function: Callable[..., Any], argument: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == argument or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def call_getters(custom_getter: CustomGetter | None, true_getter: Callable[..., Any], full_name: str,
                 arguments: dict[str, Any]) -> Any:
    """true_getter(full_name, **arguments), through `custom_getter` when there is one, as TF1's get_variable.

    The custom getter gets TF's keywords (getter, name, shape, dtype, initializer,
    regularizer, reuse, trainable, collections, caching_device, partitioner,
    validate_shape, use_resource, synchronization, aggregation; constraint
    when it takes it; device when one was given) and returns what it wants
    (usually getter(name, *args, **kwargs), changed).
    """
    if custom_getter is None:
        return true_getter(full_name, **arguments)
    kwargs = dict(arguments)
    if kwargs.get("device") is None:
        kwargs.pop("device", None)
    if not _takes(custom_getter, "constraint"):
        kwargs.pop("constraint", None)
    return custom_getter(getter=true_getter, name=full_name, **kwargs)


def with_scope_defaults(scope: Any, full_name: str, custom_getter: CustomGetter | None,
                        arguments: dict[str, Any]) -> tuple[CustomGetter | None, dict[str, Any]]:
    """(custom getter, get_variable's `arguments`) with the scope's defaults, as tf.compat.v1.VariableScope.get_variable:
    dtype, initializer, regularizer, partitioner, constraint and use_resource left None take the scope's; the
    custom getter wraps the scope's.

    Raises:
      VariableArgumentError: the regularizer or custom getter is not callable.
    """
    for key in ("dtype", "initializer", "regularizer", "partitioner", "constraint", "use_resource"):
        if arguments.get(key) is None:
            arguments[key] = getattr(scope, key)
    check_callable(arguments["regularizer"], "regularizer", full_name)
    return wrap_custom_getter(check_callable(custom_getter, "custom_getter", full_name), scope.custom_getter), arguments


def extras_for(constraint: Any, synchronization: Any, aggregation: Any, trainable: bool | None,
               regularizer: Regularizer | None, name: str) -> tuple[VariableExtras, bool]:
    """(VariableExtras, trainable) of a new variable, resolved as `variable_options.resolve_options`.

    Raises:
      VariableArgumentError: as resolve_options.
    """
    options, resolved = resolve_options(constraint, synchronization, aggregation, trainable, name)
    return VariableExtras(options, regularizer), resolved
