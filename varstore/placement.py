"""Placement: the `device(...)` context stack, device functions and `replica_device_setter`.

Decides WHICH device label a new variable gets and which device a mixed-device
computation runs on; `devices.py` does the array work. Knows nothing about
variables or stores: it sees a `PlacementRequest` (name, shape, dtype, nbytes).
The stack is thread-local (a new thread starts with no device context).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Union

import numpy as np

from varstore import devices
from varstore.errors import DeviceError

__all__ = [
    "PlacementRequest",
    "DeviceFunction",
    "DeviceSpec",
    "device",
    "requested_device",
    "compute_device",
    "replica_device_setter",
    "split_task",
    "task_index",
]

# "/job:ps/task:3", "/job:worker/replica:0/task:1", optionally followed by a device ("/device:CPU:0", "/cpu:0").
_TASK_RE = re.compile(r"^/job:([A-Za-z_][A-Za-z0-9_]*)(?:/replica:\d+)?(?:/task:(\d+))?(/.*)?$")


def split_task(spec: str) -> tuple[str | None, str | None]:
    """Splits a TF device string into its task part and its device part, as tf.DeviceSpec reads them.

    "/job:ps/task:1" -> ("/job:ps/task:1", None); "/job:ps/task:1/device:CPU:0" ->
    ("/job:ps/task:1", "cpu:0"); "gpu:0" -> (None, "gpu:0"). A job without a
    task ("/job:ps") names no task: (None, device part).

    Raises:
      DeviceError: a malformed device part.
    """
    match = _TASK_RE.match(spec.strip()) if isinstance(spec, str) else None
    if match is None:
        return None, devices.parse_device(spec)
    rest = match.group(3)
    label = devices.parse_device(rest) if rest else None
    if match.group(2) is None:
        return None, label
    return f"/job:{match.group(1)}/task:{int(match.group(2))}", label


def task_index(task: str | None) -> int | None:
    """K of "/job:NAME/task:K" (the rank that owns the variable under a communicator), None for None."""
    if task is None:
        return None
    return int(task.rsplit(":", 1)[1])


def _normalize(spec: str) -> str:
    """A device string with its task part kept: "/job:ps/task:1", "/job:ps/task:1/cpu:0" or "cpu:0"."""
    task, label = split_task(spec)
    if task is None:
        return label if label is not None else "cpu:0"
    return task if label is None else f"{task}/{label}"


@dataclasses.dataclass(frozen=True)
class PlacementRequest:
    """What a device function sees about a variable being placed.

    Attributes:
      name: full variable name ("conv1/weights").
      shape: tuple of ints.
      dtype: NumPy dtype.
      nbytes: bytes the value will take (prod(shape) * itemsize).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int


#: A callable mapping a PlacementRequest to a device name, or None to defer to outer contexts.
DeviceFunction = Callable[[PlacementRequest], Union[str, None]]

#: What a device argument accepts: a device name ("cpu:0", "/device:GPU:0"), a device function, or None.
DeviceSpec = Union[str, DeviceFunction, None]

_CLEAR = object()  # device(None): ignore every outer context, as tf.device(None)


class _Stack(threading.local):
    def __init__(self) -> None:
        self.entries: list[Any] = []


_stack = _Stack()


@contextlib.contextmanager
def device(spec: DeviceSpec) -> Iterator[None]:
    """Places variables created inside on a device, as tf.device.

    Contexts nest; the innermost one that gives an answer wins. A string
    ("cpu:0", "/device:GPU:0", "gpu:1") names the device; a callable such as
    `replica_device_setter(...)` receives a `PlacementRequest` for each new
    variable and returns a device name (or None to ask the outer context).
    None clears every outer context (default placement inside). A GPU request
    without a GPU falls back to cpu:0 while soft placement is on.

    Mixed-device arithmetic inside a string context runs on that device.

    Raises:
      DeviceError: `spec` is a malformed device name (raised on entry).
    """
    entry: Any
    if spec is None:
        entry = _CLEAR
    elif isinstance(spec, str):
        entry = _normalize(spec)
    elif callable(spec):
        entry = spec
    else:
        raise DeviceError(f"device() takes a device name, a device function or None, got {spec!r}")
    _stack.entries.append(entry)
    try:
        yield
    finally:
        _stack.entries.pop()


def requested_device(request: PlacementRequest) -> str | None:
    """The device the active contexts ask for `request` (innermost answer wins), None when none does.

    Device functions are called innermost first and only until one answers.
    """
    for entry in reversed(_stack.entries):
        if entry is _CLEAR:
            return None
        if isinstance(entry, str):
            return entry
        answer = entry(request)
        if answer is not None:
            return _normalize(answer)
    return None


def compute_device(default: str) -> str:
    """The device mixed-device operations run on: the innermost string `device(...)` context, else `default`.

    Device functions do not choose a compute device (they place variables only).
    A GPU context without a usable GPU computes on cpu:0.
    """
    label = default
    for entry in reversed(_stack.entries):
        if entry is _CLEAR:
            break
        if isinstance(entry, str):
            label = split_task(entry)[1] or default
            break
    if devices.is_gpu(label) and int(label.split(":")[1]) >= devices.gpu_count():
        return "cpu:0"
    return label


class _ReplicaDeviceSetter:
    """Device function returned by `replica_device_setter` (stateful: counts placements / bytes)."""

    def __init__(self, ps_devices: Sequence[str], strategy: str | Callable[[PlacementRequest], int]) -> None:
        self.ps_devices = [_normalize(d) for d in ps_devices]
        if not self.ps_devices:
            raise DeviceError("replica_device_setter needs at least one parameter-server device in ps_devices")
        if isinstance(strategy, str) and strategy not in ("round_robin", "greedy"):
            raise DeviceError(f"unknown replica_device_setter strategy {strategy!r}: use 'round_robin', 'greedy' or a callable")
        self.strategy = strategy
        self.loads = [0] * len(self.ps_devices)  # bytes placed on each device so far
        self._next = 0
        self._lock = threading.Lock()

    def __call__(self, request: PlacementRequest) -> str:
        with self._lock:
            if self.strategy == "round_robin":
                index = self._next
                self._next = (self._next + 1) % len(self.ps_devices)
            elif self.strategy == "greedy":
                index = min(range(len(self.loads)), key=self.loads.__getitem__)  # ties: lowest index
            else:
                index = int(self.strategy(request))  # type: ignore[operator]
                if not 0 <= index < len(self.ps_devices):
                    raise DeviceError(
                        f"replica_device_setter strategy returned {index} for '{request.name}', "
                        f"expected 0..{len(self.ps_devices) - 1}")
            self.loads[index] += int(request.nbytes)
            return self.ps_devices[index]

    def __repr__(self) -> str:
        return f"replica_device_setter(ps_devices={self.ps_devices!r}, strategy={self.strategy!r})"


def replica_device_setter(ps_devices: Sequence[str] | None = None,
                          strategy: str | Callable[[PlacementRequest], int] = "round_robin", *,
                          ps_tasks: int = 0, ps_device: str = "/job:ps") -> DeviceFunction:
    """A device function spreading variables over parameter-server devices, as tf.compat.v1.train.replica_device_setter.

    Use it with `device(...)`. Only newly created variables consult it (a
    reused get_variable does not).

    Args:
      ps_devices: device names, e.g. ["cpu:0", "cpu:1", "cpu:2"] ("cpu:N" are
        placement labels in host memory), or task names ["/job:ps/task:0", ...]:
        under a communicator (varstore.distributed) task K is owned by rank K.
      ps_tasks: as TF's argument: when > 0 and `ps_devices` is None, the
        devices are f"{ps_device}/task:{k}" for k in range(ps_tasks).
      ps_device: job prefix for `ps_tasks`, default "/job:ps" (TF's default).
      strategy: "round_robin" (TF's default: devices in turn, in creation
        order), "greedy" (TF's GreedyLoadBalancingStrategy with its byte-size
        load function: the device with the fewest bytes so far, ties to the
        lowest index), or a callable PlacementRequest -> device index (TF's ps_strategy).

    Returns:
      A callable PlacementRequest -> device name with attribute `loads`
      (bytes placed per device).

    Raises:
      DeviceError: empty or malformed `ps_devices`, or an unknown strategy.
    """
    if ps_devices is None:
        if int(ps_tasks) < 1:
            raise DeviceError("replica_device_setter needs ps_devices=[...] or ps_tasks >= 1")
        ps_devices = [f"{ps_device}/task:{k}" for k in range(int(ps_tasks))]
    return _ReplicaDeviceSetter(ps_devices, strategy)
