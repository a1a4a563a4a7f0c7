"""TorchCommunicator: varstore's collective operations over a torch.distributed process group (gloo, NCCL).

Implements varstore.distributed.Communicator: messages are JSON as UTF-8
bytes in uint8 tensors, never pickles (torch's *_object collectives pickle;
they are not used). Each message travels in a fixed-size first frame (its
length, then its first bytes): a message that fits takes one collective, a
longer one a second collective for the rest, padded to the longest (each
collective costs milliseconds on a busy host; a save or restore makes a dozen). A failure in the transport (a peer died, the group's timeout passed)
becomes CollectiveError naming the operation and the rank; the timeout is
the process group's (init_process_group(timeout=...)). Registered with
`as_communicator` by varstore.torch, so comm=dist.group.WORLD works.
Knows nothing about checkpoints. Imports torch.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist

from varstore.distributed.communicator import Communicator, FrameworkCommunicator, Message, ReduceOp, Reducible
from varstore.distributed.communicator import decode_message as _decode
from varstore.distributed.communicator import encode_message as _encode
from varstore.errors import CommunicatorError, MissingDependencyError

__all__ = ["TorchCommunicator", "is_process_group"]

#: Bytes of the first frame of every message: 8 bytes of length, then the message's first bytes.
_FRAME = 2048
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def is_process_group(value: Any) -> bool:
    """True for a torch.distributed ProcessGroup (dist.group.WORLD, new_group(...), a DeviceMesh's get_group())."""
    return isinstance(value, dist.ProcessGroup)


class TorchCommunicator(FrameworkCommunicator):
    """A varstore Communicator over a torch.distributed process group.

    Args:
      group: a ProcessGroup; None is the default group (dist.group.WORLD).
        Ranks are the group's ranks (0..size-1), as dist.get_rank(group).

    Raises:
      MissingDependencyError: torch.distributed is not available in this build.
      CommunicatorError: the default process group is not initialized, or
        this process is not a member of `group`.
    """

    transport = "torch.distributed"
    member = "rank"
    #: DistBackendError and DistNetworkError are RuntimeErrors
    failure_hint = "a peer rank died or the process group's timeout passed (init_process_group(timeout=...))"

    def __init__(self, group: Any = None) -> None:
        if not dist.is_available():
            raise MissingDependencyError("this PyTorch build has no torch.distributed; install one that does")
        if not dist.is_initialized():
            raise CommunicatorError("torch.distributed is not initialized: call torch.distributed.init_process_group "
                                    "(backend 'gloo' on CPU, 'nccl' on GPUs) on every rank first")
        self.group: Any = group if group is not None else dist.group.WORLD
        rank = dist.get_rank(self.group)
        if rank < 0:
            raise CommunicatorError("this process is not a member of the process group it was given")
        self._rank = int(rank)
        self._size = int(dist.get_world_size(self.group))
        backend = str(dist.get_backend(self.group))
        self._device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


    def _bytes(self, data: bytes, length: int) -> torch.Tensor:
        buffer = torch.zeros(length, dtype=torch.uint8)
        if data:
            buffer[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return buffer.to(self._device)

    def _frame(self, data: bytes) -> torch.Tensor:
        """The first frame of `data`: its length (8 bytes, little-endian), then up to _FRAME - 8 of its bytes."""
        return self._bytes(len(data).to_bytes(8, "little") + data[:_FRAME - 8], _FRAME)

    @staticmethod
    def _unframe(frame: torch.Tensor) -> tuple[int, bytes]:
        raw = frame.cpu().numpy().tobytes()
        return int.from_bytes(raw[:8], "little"), raw[8:]

    def barrier(self) -> None:
        self._run("barrier", lambda: dist.barrier(group=self.group))

    def bcast(self, message: Message, root: int = 0) -> Message:
        self._check_root(root)
        data = _encode(message) if self._rank == root else b""
        frame = self._frame(data)
        self._run("bcast", lambda: dist.broadcast(frame, group=self.group, group_src=root))
        length, head = self._unframe(frame)
        if length <= _FRAME - 8:
            return _decode(head[:length])
        rest = self._bytes(data[_FRAME - 8:], length - (_FRAME - 8))
        self._run("bcast", lambda: dist.broadcast(rest, group=self.group, group_src=root))
        return _decode(head + rest.cpu().numpy().tobytes())

    def _first_frames(self, operation: str, data: bytes) -> tuple[list[int], list[bytes]]:
        """All-gathers every rank's first frame: (lengths, first bytes) per rank."""
        frames = [torch.empty(_FRAME, dtype=torch.uint8, device=self._device) for _ in range(self._size)]
        mine = self._frame(data)
        self._run(operation, lambda: dist.all_gather(frames, mine, group=self.group))
        unframed = [self._unframe(f) for f in frames]
        return [n for n, _ in unframed], [head for _, head in unframed]

    def allgather(self, message: Message) -> list[Message]:
        data = _encode(message)
        lengths, heads = self._first_frames("allgather", data)
        longest = max(lengths) - (_FRAME - 8)
        if longest <= 0:
            return [_decode(head[:n]) for head, n in zip(heads, lengths)]
        received = [torch.empty(longest, dtype=torch.uint8, device=self._device) for _ in range(self._size)]
        rest = self._bytes(data[_FRAME - 8:], longest)
        self._run("allgather", lambda: dist.all_gather(received, rest, group=self.group))
        return [_decode((head + r.cpu().numpy().tobytes())[:n]) for head, r, n in zip(heads, received, lengths)]

    def gather(self, message: Message, root: int = 0) -> list[Message] | None:
        self._check_root(root)
        data = _encode(message)
        lengths, heads = self._first_frames("gather", data)
        longest = max(lengths) - (_FRAME - 8)
        if longest <= 0:
            return [_decode(head[:n]) for head, n in zip(heads, lengths)] if self._rank == root else None
        received = [torch.empty(longest, dtype=torch.uint8, device=self._device) for _ in range(self._size)] \
            if self._rank == root else None
        rest = self._bytes(data[_FRAME - 8:], longest)
        self._run("gather", lambda: dist.gather(rest, received, group=self.group, group_dst=root))
        if received is None:
            return None
        return [_decode((head + r.cpu().numpy().tobytes())[:n]) for head, r, n in zip(heads, received, lengths)]

    def allreduce(self, value: Reducible, op: ReduceOp = "sum") -> Reducible:
        if op not in _OPS:
            raise CommunicatorError(f"allreduce op must be 'sum', 'max' or 'min', got {op!r}")
        if isinstance(value, np.ndarray):
            tensor = torch.from_numpy(np.array(value, copy=True)).to(self._device)
            self._run("allreduce", lambda: dist.all_reduce(tensor, op=_OPS[op], group=self.group))
            return tensor.cpu().numpy()
        integer = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        tensor = torch.tensor([value], dtype=torch.int64 if integer else torch.float64, device=self._device)
        self._run("allreduce", lambda: dist.all_reduce(tensor, op=_OPS[op], group=self.group))
        return tensor.item()

    def split(self, color: int, key: int = 0) -> Communicator:
        """A communicator of the ranks with the same `color`, ordered by (`key`, rank), as MPI_Comm_split.

        Every rank of this group calls it; each new group is made by its members only
        (dist.new_group(use_local_synchronization=True)).
        """
        chosen = cast("list[list[int]]", self.allgather([int(color), int(key)]))
        members = sorted((int(k), rank) for rank, (c, k) in enumerate(chosen) if c == color)
        ranks = [dist.get_global_rank(self.group, rank) for _, rank in members]
        group = self._run("split", lambda: dist.new_group(ranks=ranks, use_local_synchronization=True,
                                                            sort_ranks=False))
        return TorchCommunicator(group)

    def _check_root(self, root: int) -> None:
        if not 0 <= root < self._size:
            raise CommunicatorError(f"root {root} is not a rank of this process group (0..{self._size - 1})")

    def __repr__(self) -> str:
        return f"TorchCommunicator(rank={self._rank}, size={self._size})"
