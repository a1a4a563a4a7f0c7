"""Communicators: the few collective operations varstore needs, behind one small typed interface.

`Communicator` is the Protocol (rank, size, barrier, bcast, allgather,
gather, allreduce, split); `MPICommunicator` implements it over ANY mpi4py
communicator (COMM_WORLD, a Split() sub-communicator, ...), `SingleProcess`
for one process. Framework adapters register their own (varstore.torch:
a torch.distributed process group) with `register_communicator`, so
`as_communicator` takes their objects without this layer importing them.

Messages are JSON-compatible values (None, bool, int, float, str, lists, dicts
with str keys) sent as UTF-8 bytes through MPI's buffer operations: nothing is
ever pickled or unpickled. The only module that imports mpi4py (lazily, on
first use of MPICommunicator). Knows nothing about variables or checkpoints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar, Union, runtime_checkable

import numpy as np
import numpy.typing as npt

from varstore.errors import CollectiveError, CommunicatorError, MissingDependencyError

__all__ = ["Message", "ReduceOp", "Communicator", "SingleProcess", "MPICommunicator", "FrameworkCommunicator", "as_communicator",
           "register_communicator", "encode_message", "decode_message"]

#: A JSON-compatible value: what bcast / allgather / gather carry.
Message = Union[None, bool, int, float, str, list, dict]  # type: ignore[type-arg]
#: allreduce's operation.
ReduceOp = Literal["sum", "max", "min"]
#: allreduce's operand: a number or a NumPy array (reduced element-wise).
Reducible = Union[int, float, npt.NDArray[Any]]


@runtime_checkable
class Communicator(Protocol):
    """The collective operations varstore uses; every rank of the group must make the same calls in the same order."""

    @property
    def rank(self) -> int:
        """This process's rank, 0 <= rank < size."""

    @property
    def size(self) -> int:
        """The number of processes in the group."""

    def barrier(self) -> None:
        """Returns once every rank has called it."""

    def bcast(self, message: Message, root: int = 0) -> Message:
        """Rank `root`'s message, on every rank (the others' argument is ignored)."""

    def allgather(self, message: Message) -> list[Message]:
        """Every rank's message, indexed by rank, on every rank."""

    def gather(self, message: Message, root: int = 0) -> list[Message] | None:
        """Every rank's message on rank `root` (indexed by rank); None on the others."""

    def allreduce(self, value: Reducible, op: ReduceOp = "sum") -> Reducible:
        """`value` combined over ranks with `op` ("sum", "max", "min"), on every rank (arrays element-wise)."""

    def split(self, color: int, key: int = 0) -> Communicator:
        """A communicator of the ranks that passed the same `color`, ordered by (`key`, rank), as MPI_Comm_split."""


def encode_message(message: Message) -> bytes:
    """`message` as UTF-8 JSON, what every communicator sends (never a pickle).

    Raises:
      CommunicatorError: the message is not JSON-compatible.
    """
    try:
        return json.dumps(message, separators=(",", ":"), allow_nan=True).encode("utf-8")
    except (TypeError, ValueError) as err:
        raise CommunicatorError(
            f"a collective message must be JSON-compatible (None, bool, int, float, str, list, dict with "
            f"str keys), got {type(message).__name__}: convert arrays with .tolist() first") from err


def decode_message(data: bytes) -> Message:
    """The message `encode_message` made (empty bytes: None)."""
    return json.loads(data.decode("utf-8")) if data else None


def _check_op(op: str) -> None:
    if op not in ("sum", "max", "min"):
        raise CommunicatorError(f"allreduce op must be 'sum', 'max' or 'min', got {op!r}")


_T = TypeVar("_T")


class FrameworkCommunicator:
    """Shared by communicators over a framework's collectives (torch.distributed, JAX's processes):
    rank and size, and every transport failure as one CollectiveError naming the operation and member.

    Subclasses set `_rank`, `_size` and the three class attributes that word the error.
    """

    _rank: int
    _size: int
    #: the transport as messages name it ("torch.distributed", "JAX's processes")
    transport = "the collectives"
    #: what one member is called ("rank", "process")
    member = "rank"
    #: what a failure usually means and what to do
    failure_hint = "a peer died"

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    def _run(self, operation: str, call: Callable[[], _T]) -> _T:
        """`call()`, its RuntimeError or ValueError (a dead peer, a timeout) as CollectiveError."""
        try:
            return call()
        except (RuntimeError, ValueError) as err:
            raise CollectiveError(f"{operation} over {self.transport} failed on {self.member} {self._rank} of "
                                  f"{self._size}: {err}; {self.failure_hint}") from err


class SingleProcess:
    """A communicator of one process (rank 0 of size 1): every collective returns at once.

    Messages still go through the JSON encoding, so code tested here sends
    only what MPICommunicator can send.
    """

    rank = 0
    size = 1

    def barrier(self) -> None:
        """Nothing to wait for."""

    def bcast(self, message: Message, root: int = 0) -> Message:
        """`message` (a copy)."""
        self._check_root(root)
        return decode_message(encode_message(message))

    def allgather(self, message: Message) -> list[Message]:
        """[`message`] (a copy)."""
        return [decode_message(encode_message(message))]

    def gather(self, message: Message, root: int = 0) -> list[Message] | None:
        """[`message`] (a copy)."""
        self._check_root(root)
        return [decode_message(encode_message(message))]

    def allreduce(self, value: Reducible, op: ReduceOp = "sum") -> Reducible:
        """`value` (a copy for arrays)."""
        _check_op(op)
        return np.array(value, copy=True) if isinstance(value, np.ndarray) else value

    def split(self, color: int, key: int = 0) -> Communicator:
        """Another single-process communicator."""
        return SingleProcess()

    def _check_root(self, root: int) -> None:
        if root != 0:
            raise CommunicatorError(f"root {root} is not a rank of a single-process communicator (only 0)")

    def __repr__(self) -> str:
        return "SingleProcess()"


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise MissingDependencyError(
            "multi-process checkpoints need mpi4py and an MPI library: pip install 'varstore[mpi]'") from err
    return MPI


class MPICommunicator:
    """A Communicator over an mpi4py communicator (any: COMM_WORLD, Split()/Create() results, ...).

    Args:
      comm: an mpi4py.MPI.Comm (intracommunicator).

    Raises:
      MissingDependencyError: mpi4py is not installed (`pip install 'varstore[mpi]'`).
      CommunicatorError: `comm` is not an mpi4py intracommunicator.
    """

    def __init__(self, comm: Any) -> None:
        mpi = _mpi()
        if not isinstance(comm, mpi.Intracomm):
            raise CommunicatorError(f"MPICommunicator needs an mpi4py intracommunicator, got {comm!r}")
        self.comm = comm
        self._mpi = mpi

    @property
    def rank(self) -> int:
        return int(self.comm.Get_rank())

    @property
    def size(self) -> int:
        return int(self.comm.Get_size())

    def barrier(self) -> None:
        self.comm.Barrier()

    def bcast(self, message: Message, root: int = 0) -> Message:
        data = encode_message(message) if self.rank == root else b""
        length = np.array([len(data)], dtype=np.int64)
        self.comm.Bcast(length, root=root)
        buffer = np.frombuffer(data, dtype=np.uint8).copy() if self.rank == root \
            else np.empty(int(length[0]), dtype=np.uint8)
        self.comm.Bcast(buffer, root=root)
        return decode_message(buffer.tobytes())

    def _gathered(self, message: Message, root: int | None) -> list[Message] | None:
        data = np.frombuffer(encode_message(message), dtype=np.uint8)
        lengths = np.empty(self.size, dtype=np.int64)
        self.comm.Allgather(np.array([data.size], dtype=np.int64), lengths)
        counts = [int(n) for n in lengths]
        displacements = [0] * self.size
        for index in range(1, self.size):
            displacements[index] = displacements[index - 1] + counts[index - 1]
        receive = np.empty(sum(counts), dtype=np.uint8)
        spec = [receive, (counts, displacements), self._mpi.BYTE]
        if root is None:
            self.comm.Allgatherv(data, spec)
        else:
            self.comm.Gatherv(data, spec if self.rank == root else None, root=root)
            if self.rank != root:
                return None
        return [decode_message(receive[d:d + n].tobytes()) for d, n in zip(displacements, counts)]

    def allgather(self, message: Message) -> list[Message]:
        result = self._gathered(message, None)
        assert result is not None
        return result

    def gather(self, message: Message, root: int = 0) -> list[Message] | None:
        return self._gathered(message, root)

    def allreduce(self, value: Reducible, op: ReduceOp = "sum") -> Reducible:
        _check_op(op)
        mpi_op = {"sum": self._mpi.SUM, "max": self._mpi.MAX, "min": self._mpi.MIN}[op]
        if isinstance(value, np.ndarray):
            send = np.ascontiguousarray(value)
            out = np.empty_like(send)
            self.comm.Allreduce(send, out, op=mpi_op)
            return out
        kind = np.int64 if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else np.float64
        send = np.array([value], dtype=kind)
        out = np.empty_like(send)
        self.comm.Allreduce(send, out, op=mpi_op)
        return out[0].item()

    def split(self, color: int, key: int = 0) -> Communicator:
        return MPICommunicator(self.comm.Split(color, key))

    def __repr__(self) -> str:
        return f"MPICommunicator(rank={self.rank}, size={self.size})"


#: (claims, make) pairs of the framework adapters, in registration order (register_communicator).
_ADAPTERS: list[tuple[Callable[[Any], bool], Callable[[Any], Communicator]]] = []


def register_communicator(claims: Callable[[Any], bool], make: Callable[[Any], Communicator]) -> None:
    """Lets `as_communicator` accept a framework's group objects: `make(comm)` for every `comm` that `claims(comm)`.

    varstore.torch registers torch.distributed process groups on import
    (varstore/torch/_communicator.py). Registering the same pair twice is a no-op.
    """
    if (claims, make) not in _ADAPTERS:
        _ADAPTERS.append((claims, make))


def as_communicator(comm: Any) -> Communicator:
    """A Communicator for `comm`: itself when it already is one, MPICommunicator for an mpi4py communicator,
    a registered adapter's for a framework's group (a torch.distributed ProcessGroup once varstore.torch is
    imported), SingleProcess for None.

    Raises:
      CommunicatorError: anything else. MissingDependencyError: see MPICommunicator.
    """
    if comm is None:
        return SingleProcess()
    if isinstance(comm, (SingleProcess, MPICommunicator)):
        return comm
    if type(comm).__module__.startswith("mpi4py"):
        return MPICommunicator(comm)
    for claims, make in _ADAPTERS:
        if claims(comm):
            return make(comm)
    if isinstance(comm, Communicator):
        return comm
    hint = "; import varstore.torch first, which teaches varstore torch.distributed process groups" \
        if type(comm).__module__.startswith("torch") else ""
    raise CommunicatorError(
        f"comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD), a torch.distributed process group or a "
        f"varstore.distributed.Communicator, got {type(comm).__name__}{hint}")
