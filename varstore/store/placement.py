"""Placement: the `device(...)` context stack, device functions and `replica_device_setter`.

Decides WHICH device label a new variable gets and which device a mixed-device
computation runs on; `devices.py` does the array work. Device strings are read
and merged field by field as tf.DeviceSpec (job, replica, task, device); the
result keeps the "/job:NAME/task:K" part that ownership.py maps to ranks. Knows nothing about
variables or stores: it sees a `PlacementRequest` (name, shape, dtype, nbytes).
The stack is thread-local (a new thread starts with no device context).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Union

import numpy as np

from varstore.store import devices
from varstore.errors import DeviceError

__all__ = [
    "PlacementRequest",
    "DeviceFunction",
    "DeviceSpec",
    "device",
    "requested_device",
    "compute_device",
    "replica_device_setter",
    "GreedyLoadBalancingStrategy",
    "byte_size_load_fn",
    "merged_device",
    "split_task",
    "task_index",
]

_PART_RE = re.compile(r"^(job|replica|task):(.*)$")
_DEVICE_PART_RE = re.compile(r"^(?:device:)?([A-Za-z]+)(?::(\d+|\*))?$")


@dataclasses.dataclass(frozen=True)
class _Spec:
    """The fields of a TF device string, each None when unset (tf.DeviceSpec's job/replica/task/device_type/device_index)."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None  # "cpu" or "gpu"
    device_index: int | None = None

    def merged_onto(self, inner: _Spec | None) -> _Spec:
        """`self` with every field `inner` sets replaced by inner's, as tf.DeviceSpec.make_merged_spec(inner)."""
        if inner is None:
            return self
        return _Spec(*(mine if theirs is None else theirs
                       for mine, theirs in zip(dataclasses.astuple(self), dataclasses.astuple(inner))))

    @property
    def task_part(self) -> str | None:
        """"/job:NAME/task:K" when both are set (the part ownership reads), else None."""
        if self.job is None or self.task is None:
            return None
        return f"/job:{self.job}/task:{self.task}"

    @property
    def label(self) -> str | None:
        """"cpu:N" / "gpu:N" when a device type is set (index 0 when unset), else None."""
        if self.device_type is None:
            return None
        return f"{self.device_type}:{self.device_index or 0}"

    def to_string(self) -> str:
        """The varstore spelling: "/job:ps/task:1/cpu:0", "/job:ps/task:1", "cpu:0", "/job:worker/cpu:0" or ""."""
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
            if self.task is not None:
                parts.append(f"/task:{self.task}")
        label = self.label
        if label is not None:
            parts.append(f"/{label}" if parts else label)
        return "".join(parts)


def _parse(spec: str) -> _Spec:
    """Reads a TF device string ("/job:ps/replica:0/task:1/device:CPU:0", "/cpu:0", "gpu:1", "CPU") as tf.DeviceSpec.from_string.

    Raises:
      DeviceError: not a string, an unknown field, or a device other than CPU/GPU.
    """
    if not isinstance(spec, str):
        raise DeviceError(f"a device name must be a string like 'cpu:0' or '/job:ps/task:0', got {spec!r}")
    fields: dict[str, Any] = {}
    for part in spec.strip().split("/"):
        if not part:
            continue
        match = _PART_RE.match(part)
        try:
            if match is not None and match.group(1) == "job":
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", match.group(2)):
                    raise ValueError(part)
                fields["job"] = match.group(2)
            elif match is not None:
                fields[match.group(1)] = int(match.group(2))
            else:
                device_match = _DEVICE_PART_RE.match(part)
                if device_match is None:
                    raise ValueError(part)
                index = device_match.group(2)
                label = devices.parse_device(f"{device_match.group(1)}:{0 if index in (None, '*') else index}")
                fields["device_type"] = label.split(":")[0]
                fields["device_index"] = None if index in (None, "*") else int(index)
        except (ValueError, DeviceError):
            raise DeviceError(
                f"cannot parse device {spec!r}: {part!r} is not job:NAME, replica:N, task:N, cpu:N or gpu:N "
                f"(TF spellings such as '/job:ps/task:0/device:CPU:0' are accepted)") from None
    return _Spec(**fields)


def merged_device(outer: str, inner: str | None) -> str:
    """The device `inner` names with the fields it leaves unset taken from `outer`, as tf.DeviceSpec.make_merged_spec.

    merged_device("/job:ps/task:1", "/gpu:0") == "/job:ps/task:1/gpu:0";
    merged_device("/job:ps/task:1/cpu:0", "gpu:1") == "/job:ps/task:1/gpu:1".
    A replica field is read and merged but not written out (see to_string).

    Raises:
      DeviceError: a malformed device string.
    """
    return _parse(outer).merged_onto(None if inner is None else _parse(inner)).to_string()


def split_task(spec: str) -> tuple[str | None, str | None]:
    """Splits a TF device string into its task part and its device part, as tf.DeviceSpec reads them.

    "/job:ps/task:1" -> ("/job:ps/task:1", None); "/job:ps/task:1/device:CPU:0" ->
    ("/job:ps/task:1", "cpu:0"); "gpu:0" -> (None, "gpu:0"). A job without a
    task ("/job:ps") names no task: (None, device part).

    Raises:
      DeviceError: a malformed device string.
    """
    parsed = _parse(spec)
    return parsed.task_part, parsed.label


def task_index(task: str | None) -> int | None:
    """K of "/job:NAME/task:K" (the rank that owns the variable under a communicator), None for None."""
    if task is None:
        return None
    return int(task.rsplit(":", 1)[1])


@dataclasses.dataclass(frozen=True)
class PlacementRequest:
    """What a device function sees about a variable being placed (TF hands device functions the op).

    Attributes:
      name: full variable name ("conv1/weights").
      shape: tuple of ints.
      dtype: NumPy dtype.
      nbytes: bytes the value will take (prod(shape) * itemsize).
      device: the device the `device(...)` contexts inside this one chose so
        far ("/job:ps/task:1", "cpu:0"), None when none did (TF's op.device).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    device: str | None = None


#: A callable mapping a PlacementRequest to a device name, or None to keep what inner contexts chose.
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
    """Places variables created inside on a device, as tf.compat.v1.device in a graph.

    Contexts nest and merge as TF's: the innermost context decides first, then
    each outer one in turn; an outer device string fills only the fields the
    inner result leaves unset (tf.DeviceSpec.make_merged_spec), so "/gpu:0"
    inside "/job:ps/task:1" is "/job:ps/task:1/gpu:0". A callable such as
    `replica_device_setter(...)` receives a `PlacementRequest` (its `device`
    is what inner contexts chose) and returns a device name, or None to keep
    it. None clears every outer context (default placement inside). A GPU
    request without a GPU falls back to cpu:0 while soft placement is on.

    Mixed-device arithmetic inside a string context runs on that device.

    Raises:
      DeviceError: `spec` is a malformed device name (raised on entry).
    """
    entry: Any
    if spec is None:
        entry = _CLEAR
    elif isinstance(spec, str):
        entry = _parse(spec)
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
    """The device the active contexts give `request`, merged innermost first as TF's device stack; None when none does.

    Device functions see what the contexts inside them chose in `request.device`.
    """
    current: _Spec | None = None
    for entry in reversed(_stack.entries):
        if entry is _CLEAR:
            break
        if isinstance(entry, _Spec):
            current = entry.merged_onto(current)
            continue
        seen = None if current is None else current.to_string() or None
        answer = entry(dataclasses.replace(request, device=seen))
        if answer is not None:
            current = _parse(answer)
    if current is None:
        return None
    return current.to_string() or None


def compute_device(default: str) -> str:
    """The device mixed-device operations run on: the innermost string `device(...)` context naming a device, else `default`.

    Device functions do not choose a compute device (they place variables only).
    A GPU context without a usable GPU computes on cpu:0.
    """
    label = default
    for entry in reversed(_stack.entries):
        if entry is _CLEAR:
            break
        if isinstance(entry, _Spec):
            label = entry.label or default
            break
    if devices.is_gpu(label) and int(label.split(":")[1]) >= devices.gpu_count():
        return "cpu:0"
    return label


# TF's op types that replica_device_setter sends to parameter servers and that are variables
# (STANDARD_PS_OPS minus the hash tables); every object varstore places is a variable.
_VARIABLE_OPS = frozenset({"Variable", "VariableV2", "AutoReloadVariable", "VarHandleOp"})


def byte_size_load_fn(request: PlacementRequest) -> int:
    """The bytes `request`'s value takes, as tf.contrib.training.byte_size_load_fn (elements * dtype size)."""
    return int(request.nbytes)


class GreedyLoadBalancingStrategy:
    """Places each variable on the task with the least load so far, as tf.contrib.training.GreedyLoadBalancingStrategy.

    Ties go to the lowest task index (np.argmin). Pass as `ps_strategy`.

    Args:
      num_tasks: number of ps tasks (devices).
      load_fn: PlacementRequest -> load; TF's example is `byte_size_load_fn`.
    """

    def __init__(self, num_tasks: int, load_fn: Callable[[PlacementRequest], float]) -> None:
        self._num_tasks = int(num_tasks)
        self._load_fn = load_fn
        self._ps_loads = np.zeros(self._num_tasks)

    def __call__(self, request: PlacementRequest) -> int:
        task = int(np.argmin(self._ps_loads))
        self._ps_loads[task] += self._load_fn(request)
        return task


class _RoundRobinStrategy:
    """Tasks in turn, in creation order, as TF's _RoundRobinStrategy (replica_device_setter's default)."""

    def __init__(self, num_tasks: int) -> None:
        self._num_tasks = num_tasks
        self._next_task = 0

    def __call__(self, request: PlacementRequest) -> int:
        task = self._next_task
        self._next_task = (self._next_task + 1) % self._num_tasks
        return task


class _ReplicaDeviceChooser:
    """Device function returned by `replica_device_setter`, as TF's _ReplicaDeviceChooser.device_function.

    Stateful: the strategy counts placements; `loads` counts bytes per ps device.
    """

    def __init__(self, ps_devices: list[_Spec], worker_device: _Spec, merge_devices: bool, places_variables: bool,
                 strategy: Callable[[PlacementRequest], int], replace_task: bool) -> None:
        self._ps_specs = ps_devices
        self.ps_devices = [spec.to_string() for spec in ps_devices]
        self._worker = worker_device
        self._merge_devices = merge_devices
        self._places_variables = places_variables
        self._strategy = strategy
        self._replace_task = replace_task  # ps_tasks form: the strategy's index is the task of the ps job
        self.loads = [0] * len(ps_devices)  # bytes placed on each ps device so far
        self._lock = threading.Lock()

    def __call__(self, request: PlacementRequest) -> str:
        if not self._merge_devices and request.device:
            return request.device
        current = None if request.device is None else _parse(request.device)
        if not self._places_variables:
            return self._worker.merged_onto(current).to_string()
        ps_job = self._ps_specs[0].job
        if self._replace_task and not (ps_job and (current is None or current.job in (None, ps_job))):
            return self._ps_specs[0].merged_onto(current).to_string()  # another job: no task from the strategy
        with self._lock:
            index = int(self._strategy(request))
            if not 0 <= index < len(self._ps_specs):
                raise DeviceError(f"replica_device_setter strategy returned {index} for '{request.name}', "
                                  f"expected 0..{len(self._ps_specs) - 1}")
            self.loads[index] += int(request.nbytes)
        return self._ps_specs[index].merged_onto(current).to_string()

    def __repr__(self) -> str:
        return f"replica_device_setter(ps_devices={self.ps_devices!r})"


def _cluster_tasks(cluster: Any, job: str | None) -> int | None:
    """Number of tasks of `job` in a cluster dict or ClusterSpec-like object (`as_dict()`), None when it has none."""
    spec = cluster.as_dict() if hasattr(cluster, "as_dict") else cluster
    if not isinstance(spec, Mapping):
        raise DeviceError(f"replica_device_setter cluster must be a dict of job name -> tasks or have as_dict(), "
                          f"got {type(cluster).__name__}")
    tasks = spec.get(job)
    return None if tasks is None else len(tasks)


def replica_device_setter(ps_tasks: int = 0, ps_device: str = "/job:ps", worker_device: str = "/job:worker",
                          merge_devices: bool = True, cluster: Any = None, ps_ops: Sequence[str] | None = None,
                          ps_strategy: str | Callable[[PlacementRequest], int] | None = None, *,
                          ps_devices: Sequence[str] | None = None) -> DeviceFunction | None:
    """A device function spreading variables over parameter servers, as tf.compat.v1.train.replica_device_setter.

    Use it with `device(...)`; only newly created variables consult it (a
    reused get_variable does not). Each variable goes to
    `ps_device` with "task:K" chosen by `ps_strategy`, merged with the device
    the inner contexts chose: `device("/cpu:0")` inside gives
    "/job:ps/task:K/cpu:0". Under a communicator (varstore.distributed) task K
    is owned by rank K.

    Args:
      ps_tasks: number of ps tasks; 0 (and no `cluster`, no `ps_devices`) returns None.
      ps_device: the ps job, possibly with a device: "/job:ps/device:CPU:0"
        gives "/job:ps/task:K/cpu:0". The strategy's task is used only when the
        inner device names no job or the same job (TF's rule).
      worker_device: where variables go when `ps_ops` excludes variables.
      merge_devices: False keeps an inner context's device untouched (TF's
        deprecated mode); True merges as above.
      cluster: a dict {"ps": [...], "worker": [...]} or an object with
        `as_dict()` (tf.train.ClusterSpec); `ps_tasks` becomes the size of the
        ps job; None is returned when the cluster has no such job.
      ps_ops: TF op types placed on ps. Every object varstore places is a
        variable: None (TF's STANDARD_PS_OPS) or a list naming "Variable",
        "VariableV2", "VarHandleOp" or "AutoReloadVariable" sends variables to
        ps; any other list sends them to `worker_device`.
      ps_strategy: PlacementRequest -> task index; default round robin in
        creation order (TF's); `GreedyLoadBalancingStrategy(n, byte_size_load_fn)`
        for the fewest bytes. The strings "round_robin" and "greedy" name these two.
      ps_devices: varstore extension: an explicit list of devices (e.g.
        ["cpu:0", "cpu:1"]) the strategy's index chooses from, instead of
        `ps_device` + task.

    Returns:
      A callable PlacementRequest -> device name with attributes `ps_devices`
      and `loads` (bytes placed per ps device), or None when there is no ps
      job (ps_tasks == 0): `device(None)` then places as without a setter.

    Raises:
      DeviceError: an empty `ps_devices`, a malformed device, a cluster of the
        wrong type, or an unknown or non-callable strategy.
    """
    ps_spec = _parse(ps_device)
    if ps_devices is not None:
        specs = [_parse(d) for d in ps_devices]
        if not specs:
            raise DeviceError("replica_device_setter needs at least one parameter-server device in ps_devices")
    else:
        if cluster is not None:
            found = _cluster_tasks(cluster, ps_spec.job)
            if found is None:
                return None
            ps_tasks = found
        if int(ps_tasks) == 0:
            return None
        specs = [dataclasses.replace(ps_spec, task=k) if ps_spec.job else ps_spec for k in range(int(ps_tasks))]
    strategy: Callable[[PlacementRequest], int]
    if ps_strategy is None or ps_strategy == "round_robin":
        strategy = _RoundRobinStrategy(len(specs))
    elif ps_strategy == "greedy":
        strategy = GreedyLoadBalancingStrategy(len(specs), byte_size_load_fn)
    elif callable(ps_strategy):
        strategy = ps_strategy
    else:
        raise DeviceError(f"unknown replica_device_setter ps_strategy {ps_strategy!r}: use a callable "
                          f"(request -> task index), 'round_robin' or 'greedy'")
    places_variables = ps_ops is None or bool(_VARIABLE_OPS.intersection(ps_ops))
    return _ReplicaDeviceChooser(specs, _parse(worker_device), merge_devices, places_variables, strategy,
                                 replace_task=ps_devices is None)
