"""JaxCommunicator: varstore's collective operations over JAX's processes (jax.distributed), through multihost_utils.

Implements varstore.distributed.Communicator with rank = jax.process_index()
and size = jax.process_count(): messages are JSON as UTF-8 bytes in uint8
arrays, padded to a power of two (so few programs are compiled), exchanged
with jax.experimental.multihost_utils.process_allgather; barrier is
sync_global_devices. On CPU, cross-process collectives need
jax.config.update("jax_cpu_collectives_implementation", "gloo") before
jax.distributed.initialize. `split` is not offered (JAX has no process
subgroups). A failure in the runtime becomes CollectiveError. Imports jax.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, cast

import jax
import numpy as np
from jax.experimental import multihost_utils

from varstore.distributed.communicator import Communicator, FrameworkCommunicator, Message, ReduceOp, Reducible
from varstore.distributed.communicator import decode_message as _decode
from varstore.distributed.communicator import encode_message as _encode
from varstore.errors import CommunicatorError

__all__ = ["JaxCommunicator"]

_barriers = itertools.count()


class JaxCommunicator(FrameworkCommunicator):
    """A varstore Communicator over the processes of a JAX job (one per host; one process: size 1)."""

    transport = "JAX's processes"
    member = "process"
    failure_hint = "a peer process died or the runtime timed out"  # XlaRuntimeError is a RuntimeError

    def __init__(self) -> None:
        self._rank = int(jax.process_index())
        self._size = int(jax.process_count())


    def _allgather_array(self, operation: str, array: np.ndarray) -> np.ndarray:
        if self._size == 1:
            return array[None].copy()
        return np.asarray(self._run(operation, lambda: multihost_utils.process_allgather(array)))

    def barrier(self) -> None:
        if self._size > 1:
            name = f"varstore-barrier-{next(_barriers)}"
            self._run("barrier", lambda: multihost_utils.sync_global_devices(name))

    def allgather(self, message: Message) -> list[Message]:
        data = _encode(message)
        lengths = self._allgather_array("allgather", np.array([len(data)], dtype=np.int64))[:, 0]
        padded = 1 << max(4, int(lengths.max()) - 1).bit_length()  # few distinct shapes, few compilations
        buffer = np.zeros(padded, dtype=np.uint8)
        buffer[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        rows = self._allgather_array("allgather", buffer)
        return [_decode(rows[r, :int(n)].tobytes()) for r, n in enumerate(lengths)]

    def bcast(self, message: Message, root: int = 0) -> Message:
        self._check_root(root)
        return self.allgather(message if self._rank == root else None)[root]

    def gather(self, message: Message, root: int = 0) -> list[Message] | None:
        self._check_root(root)
        gathered = self.allgather(message)
        return gathered if self._rank == root else None

    def allreduce(self, value: Reducible, op: ReduceOp = "sum") -> Reducible:
        reductions: dict[str, Callable[..., Any]] = {"sum": np.sum, "max": np.max, "min": np.min}
        reduce = reductions.get(op)
        if reduce is None:
            raise CommunicatorError(f"allreduce op must be 'sum', 'max' or 'min', got {op!r}")
        if isinstance(value, np.ndarray):
            return cast("np.ndarray", reduce(self._allgather_array("allreduce", np.ascontiguousarray(value)), axis=0))
        integer = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        rows = self._allgather_array("allreduce", np.array([value], dtype=np.int64 if integer else np.float64))
        return cast(Any, reduce(rows[:, 0]).item())

    def split(self, color: int, key: int = 0) -> Communicator:
        """Not offered: JAX has no subgroups of processes.

        Raises:
          CommunicatorError: always.
        """
        raise CommunicatorError("JaxCommunicator cannot split: JAX has no subgroups of processes; use an "
                                "MPI or torch.distributed communicator for sub-groups")

    def _check_root(self, root: int) -> None:
        if not 0 <= root < self._size:
            raise CommunicatorError(f"root {root} is not a process of this JAX job (0..{self._size - 1})")

    def __repr__(self) -> str:
        return f"JaxCommunicator(rank={self._rank}, size={self._size})"
