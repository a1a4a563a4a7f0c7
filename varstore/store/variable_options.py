"""The TF variable arguments varstore accepts and keeps: synchronization, aggregation, trainable's default, constraint.

As tf.VariableSynchronization / tf.VariableAggregation (the same member
names and values) and TF's `validate_synchronization_aggregation_trainable`
(python/ops/variables.py): trainable=None means True, unless
synchronization=ON_READ makes it False. varstore has no distribution
strategy: synchronization and aggregation are stored on the variable and
read back, nothing more. A constraint is checked to be callable here and
applied by `_assignment.py` after each update. Holds no variables; never
does file I/O.
"""

from __future__ import annotations

import enum

import numpy as np
from collections.abc import Callable
from typing import Any, TypeVar

from varstore.errors import VariableArgumentError

__all__ = ["Constraint", "VariableAggregation", "VariableOptions", "VariableSynchronization", "check_constraint",
           "resolve_options"]

#: A projection applied to a variable's value after each update: array -> array of the same shape.
Constraint = Callable[[Any], Any]


class VariableSynchronization(enum.Enum):
    """When a distributed variable is synchronized, as tf.VariableSynchronization (stored only: no strategies here).

    AUTO: the strategy decides. NONE: one copy. ON_WRITE: synchronized on every
    write. ON_READ: aggregated when read (a variable's default `trainable` is then False).
    """

    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


class VariableAggregation(enum.Enum):
    """How replica updates combine, as tf.compat.v1.VariableAggregation (stored only: no strategies here).

    NONE, SUM, MEAN, ONLY_FIRST_REPLICA (ONLY_FIRST_TOWER: its deprecated alias, as in TF).
    """

    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3
    ONLY_FIRST_TOWER = 3  # an alias of ONLY_FIRST_REPLICA, as TF's


def resolve_options(constraint: Any, synchronization: Any, aggregation: Any, trainable: bool | None, name: str
                    ) -> tuple[tuple[Constraint | None, VariableSynchronization, VariableAggregation], bool]:
    """((constraint, synchronization, aggregation), trainable) with TF's defaults and checks, as
    validate_synchronization_aggregation_trainable.

    Args:
      constraint: None or a callable (`check_constraint`).
      synchronization: a VariableSynchronization, its value (0..3), or None (AUTO).
      aggregation: a VariableAggregation, its value (0..3), or None (NONE).
      trainable: True, False, or None: True unless synchronization is ON_READ.
      name: the variable's name, for the message.

    Raises:
      VariableArgumentError: an unknown synchronization or aggregation (TF raises ValueError), a constraint
        that is not callable.
    """
    sync = _mode(VariableSynchronization, synchronization, VariableSynchronization.AUTO, "synchronization", name)
    agg = _mode(VariableAggregation, aggregation, VariableAggregation.NONE, "aggregation", name)
    if trainable is None:
        trainable = sync is not VariableSynchronization.ON_READ
    return (check_constraint(constraint, name), sync, agg), bool(trainable)


_Mode = TypeVar("_Mode", bound=enum.Enum)


def _mode(kind: type[_Mode], value: Any, default: _Mode, what: str, name: str) -> _Mode:
    """`value` as a member of `kind` (a member of any enum with the same value, or that value), `default` for None.

    Raises:
      VariableArgumentError: no member of `kind` has that value (TF raises ValueError).
    """
    if value is None:
        return default
    try:
        return kind(value.value if isinstance(value, enum.Enum) else value)
    except ValueError as err:
        raise VariableArgumentError(f"invalid variable {what} mode {value!r} for variable '{name}': use a "
                                    f"varstore.{kind.__name__} member") from err


def check_constraint(constraint: Any, name: str) -> Constraint | None:
    """`constraint` when it is None or callable, as tf.Variable checks it.

    Raises:
      VariableArgumentError: it is not callable (TF: "The `constraint` argument must be a callable").
    """
    if constraint is not None and not callable(constraint):
        raise VariableArgumentError(f"the constraint of variable '{name}' must be a callable (array -> array "
                                    f"of the same shape), got {type(constraint).__name__}")
    return constraint


class VariableOptions:
    """A mixin of `Variable`: the TF arguments it keeps (constraint, synchronization, aggregation), its initial value and get_shape."""

    _shape: tuple[int, ...]
    _constraint: Constraint | None
    _synchronization: VariableSynchronization
    _aggregation: VariableAggregation
    _initial: Any  # Variable(value)'s converted value; None for get_variable's variables

    def _initializer_value(self) -> Any:  # pragma: no cover - implemented by Variable
        raise NotImplementedError

    @property
    def constraint(self) -> Constraint | None:
        """The projection applied after each assign (see the class), or None, as tf.Variable.constraint."""
        return self._constraint

    @property
    def synchronization(self) -> VariableSynchronization:
        """As tf.Variable.synchronization: AUTO unless given (stored only)."""
        return self._synchronization

    @property
    def aggregation(self) -> VariableAggregation:
        """As tf.Variable.aggregation: NONE unless given (stored only)."""
        return self._aggregation

    @property
    def initial_value(self) -> Any:
        """The value the variable was made from, read-only, as TF1's v.initial_value (TF2 eager raises here).

        Variable(value): that value (converted to the variable's dtype). A
        get_variable variable: its initializer's value, computed again (a
        seeded initializer gives the first value again: initializers.py seeds
        from (seed, name)); an uninitialized variable without one raises
        InitializerError, as reading it does.
        """
        value = self._initial
        if value is None:
            value = self._initializer_value()
        view = value.view() if isinstance(value, np.ndarray) else value
        if isinstance(view, np.ndarray):
            view.setflags(write=False)
        return view

    def get_shape(self) -> tuple[int, ...]:
        """The shape, as tf.Variable.get_shape (a tuple of ints here, not a TensorShape)."""
        return self._shape
