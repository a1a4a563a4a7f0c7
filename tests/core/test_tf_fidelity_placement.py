"""Issue 27 items 1-2: device strings merge as tf.DeviceSpec.make_merged_spec; replica_device_setter with TF1's signature.

Expected strings are TF's (tensorflow/python/training/device_setter.py and
framework/device_spec.py), written in varstore's spelling: no ":0" output
suffix, "cpu:0" for "/device:CPU:0", and no replica field.
"""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore.store import devices
from varstore.store import placement
from varstore.errors import DeviceError
from varstore.store.variables import Variable


@pytest.fixture
def no_gpu():
    devices._set_gpu_count_override(0)
    yield
    devices._set_gpu_count_override(None)


class _ClusterSpec:
    """Stands in for tf.train.ClusterSpec: only as_dict() is read."""

    def __init__(self, jobs: dict[str, list[str]]) -> None:
        self._jobs = jobs

    def as_dict(self) -> dict[str, list[str]]:
        return dict(self._jobs)


def test_inner_device_keeps_the_outer_job_and_task(store, no_gpu):
    with vs.device("/job:ps/task:1"):
        with vs.device("/gpu:0"):
            v = store.get_variable("v", [2])
        with vs.device("/cpu:0"):
            w = store.get_variable("w", [2])
        with vs.device("/job:worker"):  # the job changes, the task is kept (field by field)
            x = store.get_variable("x", [2])
    assert (v.task, v.device) == ("/job:ps/task:1", "cpu:0")  # gpu:0 fell back to the CPU (soft placement)
    assert (w.task, w.device) == ("/job:ps/task:1", "cpu:0")
    assert x.task == "/job:worker/task:1"


@pytest.mark.parametrize(("outer", "inner", "merged"), [
    ("/job:ps/task:1", "/gpu:0", "/job:ps/task:1/gpu:0"),
    ("/job:ps/task:1/cpu:0", "gpu:1", "/job:ps/task:1/gpu:1"),
    ("/job:ps/task:1", "/job:ps/task:3", "/job:ps/task:3"),
    ("/job:ps/replica:0/task:2/device:CPU:0", "/task:5", "/job:ps/task:5/cpu:0"),
    ("/gpu:1", "/job:ps/task:0", "/job:ps/task:0/gpu:1"),
    ("/gpu:1", "/device:GPU:*", "gpu:1"),  # "*" leaves the index to the outer spec
    ("/job:ps/task:0", None, "/job:ps/task:0"),
])
def test_merged_device_follows_make_merged_spec(outer, inner, merged):
    assert placement.merged_device(outer, inner) == merged


def test_malformed_device_strings_are_refused():
    with pytest.raises(DeviceError, match="'/job:ps/bogus:1'.*'bogus:1'"):
        placement.merged_device("/job:ps/bogus:1", None)
    with pytest.raises(DeviceError, match="'device:TPU:0' is not"):
        placement.split_task("/job:ps/task:0/device:TPU:0")


def test_inner_cpu_inside_the_setter_keeps_the_ps_task_and_the_round_robin(store):
    with vs.device(vs.replica_device_setter(ps_tasks=2)):
        a = store.get_variable("a", [1])
        with vs.device("/cpu:0"):
            b = store.get_variable("b", [1])
        c = store.get_variable("c", [1])
    assert [v.task for v in (a, b, c)] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]
    assert [v.owner_rank for v in (a, b, c)] == [0, 1, 0]  # under MPI b lives on rank 1, not on every rank


def test_round_robin_sequence_over_three_tasks(store):
    with vs.device(vs.replica_device_setter(3)):  # ps_tasks is TF's first positional argument
        tasks = [Variable(0.0, store=store).task for _ in range(7)]
    assert tasks == [f"/job:ps/task:{k}" for k in (0, 1, 2, 0, 1, 2, 0)]


def test_full_ps_device_spec_gets_the_task_inserted(store):
    setter = vs.replica_device_setter(ps_tasks=2, ps_device="/job:ps/device:CPU:0")
    assert setter.ps_devices == ["/job:ps/task:0/cpu:0", "/job:ps/task:1/cpu:0"]
    with vs.device(setter):
        v = store.get_variable("v", [1])
    assert (v.task, v.device) == ("/job:ps/task:0", "cpu:0")


def test_cluster_dict_and_cluster_spec_give_the_ps_job_size(store):
    cluster = {"ps": ["ps0:2222", "ps1:2222"], "worker": ["worker0:2222", "worker1:2222", "worker2:2222"]}
    with vs.device(vs.replica_device_setter(cluster=cluster)):  # the TF1 guide's example
        tasks = [store.get_variable(f"v{i}", [1]).task for i in range(3)]
    assert tasks == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]
    assert vs.replica_device_setter(cluster=_ClusterSpec({"ps": ["a", "b", "c"]})).ps_devices == [
        "/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:2"]
    with pytest.raises(DeviceError, match="cluster"):
        vs.replica_device_setter(cluster=["ps0:2222"])


def test_no_ps_job_returns_none_and_places_as_without_a_setter(store):
    assert vs.replica_device_setter(ps_tasks=0) is None
    assert vs.replica_device_setter(cluster={"worker": ["w0:2222"]}) is None
    with vs.device("/job:ps/task:1"):
        with vs.device(vs.replica_device_setter(cluster={"worker": ["w0:2222"]})):
            v = store.get_variable("v", [1])
    assert (v.task, v.device) == (None, "cpu:0")  # device(None) clears the outer context, as tf.device(None)


def test_inner_job_other_than_ps_keeps_its_job_and_skips_the_strategy(store):
    with vs.device(vs.replica_device_setter(ps_tasks=2)):
        with vs.device("/job:worker/task:3"):
            w = store.get_variable("w", [1])
        a = store.get_variable("a", [1])
    assert w.task == "/job:worker/task:3"
    assert a.task == "/job:ps/task:0"  # the worker variable consumed no round-robin slot


def test_merge_devices_false_keeps_the_inner_device(store):
    with vs.device(vs.replica_device_setter(ps_tasks=2, merge_devices=False)):
        with vs.device("/cpu:0"):
            inner = store.get_variable("inner", [1])
        placed = store.get_variable("placed", [1])
    assert (inner.task, inner.device) == (None, "cpu:0")
    assert placed.task == "/job:ps/task:0"


def test_ps_ops_without_variable_types_send_variables_to_the_worker_device(store):
    with vs.device(vs.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:1",
                                            ps_ops=["MutableHashTable"])):
        v = store.get_variable("v", [1])
    with vs.device(vs.replica_device_setter(ps_tasks=2, ps_ops=["VariableV2"])):
        w = store.get_variable("w", [1])
    assert v.task == "/job:worker/task:1" and w.task == "/job:ps/task:0"


def test_greedy_load_balancing_with_byte_size_load_fn(store):
    strategy = vs.GreedyLoadBalancingStrategy(3, vs.byte_size_load_fn)
    setter = vs.replica_device_setter(ps_tasks=3, ps_strategy=strategy)
    sizes = [100, 10, 10, 30, 5, 200]  # float32 elements
    with vs.device(setter):
        tasks = [Variable(np.zeros(n, np.float32), store=store).owner_rank for n in sizes]
    # TF: np.argmin of the byte loads [0,0,0] -> 0; [400,0,0] -> 1; [400,40,0] -> 2; [400,40,40] -> 1;
    # [400,160,40] -> 2; [400,160,60] -> 2
    assert tasks == [0, 1, 2, 1, 2, 2]
    assert setter.loads == [400, 160, 860]
    request = placement.PlacementRequest("w", (3, 4), np.dtype(np.float64), 96)
    assert vs.byte_size_load_fn(request) == 96


def test_a_custom_ps_strategy_out_of_range_and_a_non_callable_are_refused(store):
    with vs.device(vs.replica_device_setter(ps_tasks=2, ps_strategy=lambda request: 5)):
        with pytest.raises(DeviceError, match="returned 5 for 'v', expected 0..1"):
            store.get_variable("v", [1])
    with pytest.raises(DeviceError, match="ps_strategy 42"):
        vs.replica_device_setter(ps_tasks=2, ps_strategy=42)  # type: ignore[arg-type]


def test_device_functions_see_what_inner_contexts_chose(store):
    seen = []

    def record(request):
        seen.append(request.device)
        return None

    with vs.device(record):
        with vs.device("/job:ps/task:2"):
            store.get_variable("a", [1])
        store.get_variable("b", [1])
    assert seen == ["/job:ps/task:2", None]


class _Rank:
    """A communicator as ownership sees it: rank and size only."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size


def test_under_a_communicator_the_inner_cpu_variable_lives_on_its_ps_rank_only(store):
    with vs.device(vs.replica_device_setter(ps_tasks=2)):
        a = store.get_variable("a", [3])
        with vs.device("/cpu:0"):
            b = store.get_variable("b", [3])
    store.initialize(comm=_Rank(0, 2))
    assert (a.is_owned, b.is_owned) == (True, False)  # b is rank 1's; before issue 27 every rank held a copy
    assert store.report_uninitialized() == []
