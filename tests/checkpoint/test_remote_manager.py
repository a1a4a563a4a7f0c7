"""CheckpointManager on an object-store URL: listing, retention, "latest" by conditional writes, two writers."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import varstore as vs
from tests._bucket import Bucket
from varstore.checkpoint.manage import remote_manager


@pytest.mark.parametrize("fmt", ["h5", "zarr"])
def test_manager_on_a_url_saves_prunes_and_restores_the_latest(bucket: Bucket, fmt: str) -> None:
    prefix = bucket.prefix  # s3:// on moto, az:// on Azurite
    manager = vs.CheckpointManager(f"{prefix}/runs/a7", max_to_keep=2, format=fmt)
    store = {"w": np.zeros(4, dtype=np.float32)}
    for step in (100, 200, 300):
        store["w"][:] = step
        assert manager.save(store, step=step) == f"{prefix}/runs/a7/ckpt-{step}.{fmt}"
    assert manager.checkpoints == [f"{prefix}/runs/a7/ckpt-{s}.{fmt}" for s in (200, 300)]
    assert manager.latest == f"{prefix}/runs/a7/ckpt-300.{fmt}"
    client = bucket.client()
    assert not client.list(f"runs/a7/ckpt-100.{fmt}") and not client.exists(f"runs/a7/ckpt-100.{fmt}")  # pruned
    state = json.loads(client.get("runs/a7/latest"))
    assert state["latest"] == f"ckpt-300.{fmt}" and [c["step"] for c in state["checkpoints"]] == [200, 300]
    out = {"w": np.ones(4, dtype=np.float32)}
    assert manager.restore_latest(out) is not None and out["w"].tolist() == [300.0] * 4
    handle = manager.save(store, step=400, blocking=False)
    assert handle.wait() == handle.path == f"{prefix}/runs/a7/ckpt-400.{fmt}"
    assert manager.latest == f"{prefix}/runs/a7/ckpt-400.{fmt}"


def test_two_writers_never_lose_an_update_of_latest(bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer A reads the pointer, writer B moves it, A's If-Match write is refused by the server (moto,
    Azurite), A re-reads and applies again."""
    directory = f"{bucket.prefix}/runs"
    a = vs.CheckpointManager(directory, max_to_keep=None)
    b = vs.CheckpointManager(directory, max_to_keep=None)
    a.save({"w": np.zeros(2)}, step=1)
    original = remote_manager.RemoteDirectory.read_state
    raced = threading.Event()
    calls = []

    def read_state(self: remote_manager.RemoteDirectory, pointer: str) -> tuple[dict, str | None]:
        result = original(self, pointer)
        calls.append(result[0].get("latest"))
        if self is a._remote and not raced.is_set():
            raced.set()
            b.save({"w": np.ones(2)}, step=3)  # B wins the race between A's read and A's write
        return result

    monkeypatch.setattr(remote_manager.RemoteDirectory, "read_state", read_state)
    a.save({"w": np.full(2, 2.0)}, step=2)
    monkeypatch.undo()
    state = json.loads(bucket.client().get("runs/latest"))
    assert sorted(c["step"] for c in state["checkpoints"]) == [1, 2, 3]  # nobody's update was lost
    assert state["latest"] == "ckpt-3.h5" and state["latest_step"] == 3  # and latest never went back
    assert calls.count("ckpt-1.h5") >= 1 and "ckpt-3.h5" in calls  # A re-read after losing the race
    assert a.latest == f"{directory}/ckpt-3.h5"


def test_concurrent_writers_in_threads_keep_every_checkpoint(bucket: Bucket) -> None:
    directory = f"{bucket.prefix}/runs"
    errors: list[BaseException] = []

    def writer(first: int) -> None:
        manager = vs.CheckpointManager(directory, max_to_keep=None)
        try:
            for step in range(first, first + 6, 2):
                manager.save({"w": np.full(3, float(step))}, step=step)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(first,)) for first in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    state = json.loads(bucket.client().get("runs/latest"))
    assert sorted(c["step"] for c in state["checkpoints"]) == [1, 2, 3, 4, 5, 6]
    assert state["latest"] == "ckpt-6.h5"


def test_restore_latest_falls_back_past_a_damaged_latest_with_a_warning(bucket: Bucket) -> None:
    prefix = f"{bucket.prefix}/runs/b3"
    manager = vs.CheckpointManager(prefix, max_to_keep=3, format="h5")
    for step in (100, 200):
        manager.save({"w": np.full(3, step, dtype=np.float32)}, step=step)
    bucket.client().put("runs/b3/ckpt-200.h5", b"\x89HDF\r\n\x1a\n" + b"\0" * 56)  # a torn upload's bytes
    out = {"w": np.zeros(3, dtype=np.float32)}
    with pytest.warns(RuntimeWarning, match=r"skipped 1 damaged checkpoint\(s\) .*'"
                      + f"{prefix}/ckpt-200.h5".replace(".", r"\.") + r"' \(.*restoring '.*ckpt-100\.h5'"):
        result = vs.CheckpointManager(prefix, format="h5").restore_latest(out)
    assert result is not None and out["w"].tolist() == [100.0] * 3
