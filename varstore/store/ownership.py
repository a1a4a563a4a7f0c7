"""Ownership: which process holds which variable once a store is bound to a communicator.

Rule (the parameter-server story of tf.compat.v1.train.replica_device_setter
played by real processes): a variable placed on "/job:NAME/task:K" is owned
by rank K of the communicator; a variable without a task is replicated (every
rank holds a copy). Non-owned variables keep their name, shape and dtype but
never allocate. Without a binding every variable is held (one process).

Knows only a store's variables and a communicator's `rank` / `size`; never
imports mpi4py or the distributed layer (any object with `rank` and `size`
works: an mpi4py communicator, a varstore.distributed.Communicator).
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from varstore.errors import DeviceError, NotOwnedError
from varstore.store.placement import task_index

__all__ = ["RankInfo", "Binding", "UNBOUND", "binding_of", "attach", "bind", "unbind", "bound_rank",
           "check_holds", "check_task_in_range"]


class RankInfo(Protocol):
    """What ownership needs from a communicator: this process's rank and the number of ranks."""

    @property
    def rank(self) -> int: ...

    @property
    def size(self) -> int: ...


class Binding:
    """A store's rank binding, shared by all its variables: unbound (one process) or (rank, size)."""

    def __init__(self) -> None:
        self.rank: int | None = None
        self.size: int | None = None

    def holds(self, task: str | None) -> bool:
        """Whether this process holds a variable placed on `task` (always when unbound or replicated)."""
        return task is None or self.rank is None or task_index(task) == self.rank


#: The binding of variables that joined no store (never bound).
UNBOUND = Binding()

# store -> its Binding; weak so a dropped store leaves no trace.
_bindings: weakref.WeakKeyDictionary[Any, Binding] = weakref.WeakKeyDictionary()


def binding_of(store: Any) -> Binding:
    """The Binding of `store` (made unbound on first use)."""
    binding = _bindings.get(store)
    if binding is None:
        binding = _bindings[store] = Binding()
    return binding


def bound_rank(store: Any) -> tuple[int, int] | None:
    """(rank, size) the store is bound to, or None (one process: every variable is held)."""
    binding = _bindings.get(store)
    if binding is None or binding.rank is None or binding.size is None:
        return None
    return binding.rank, binding.size


def _release(variable: Any) -> None:
    variable._state.release()


def attach(store: Any, variable: Any) -> None:
    """Gives a variable that joins `store` the store's binding; a value of another rank's variable is dropped.

    Raises:
      DeviceError: the store is bound and the variable names a task K >= size.
    """
    binding = binding_of(store)
    variable._binding = binding
    if binding.size is not None:
        check_task_in_range(variable, binding.size)
    if not binding.holds(variable.task):
        _release(variable)


def check_task_in_range(variable: Any, size: int) -> None:
    """Raises DeviceError when `variable` names task K >= `size` (there is no rank K to own it)."""
    owner = variable.owner_rank
    if owner is not None and owner >= size:
        raise DeviceError(
            f"variable '{variable.name}' is placed on '{variable.task}', but the communicator has only "
            f"{size} rank(s) (0..{size - 1}); task K is owned by rank K: launch at least {owner + 1} "
            f"processes or place it on a task below {size}")


def bind(store: Any, comm: RankInfo) -> None:
    """Binds `store` to this process's rank of `comm`: from now on it holds only what it owns.

    Values already allocated for variables owned by other ranks are released.

    Raises:
      DeviceError: a variable names a task K >= comm.size (names the variable and the task).
    """
    rank, size = int(comm.rank), int(comm.size)
    variables = store.variables()
    for variable in variables:
        check_task_in_range(variable, size)
    binding = binding_of(store)
    binding.rank, binding.size = rank, size
    for variable in variables:
        variable._binding = binding
        if not binding.holds(variable.task):
            _release(variable)


def unbind(store: Any) -> None:
    """Returns `store` to one-process behavior (every variable held; values of others must be set again)."""
    binding = binding_of(store)
    binding.rank = binding.size = None


def check_holds(variable: Any, action: str) -> None:
    """Raises NotOwnedError when this process does not hold `variable` (`action`: "read", "assign to")."""
    binding = variable._binding
    if binding.rank is None or binding.size is None:
        return
    check_task_in_range(variable, binding.size)
    if variable.owner_rank != binding.rank:
        raise NotOwnedError(
            f"cannot {action} variable '{variable.name}' on rank {binding.rank}: it is placed on "
            f"'{variable.task}' and owned by rank {variable.owner_rank}, so this rank holds only its "
            f"name, shape {variable.shape} and dtype {variable.dtype.name}; read it on rank "
            f"{variable.owner_rank}, or place it without a task to replicate it on every rank")
