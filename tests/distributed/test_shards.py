"""distributed/shards.py: every rank's shard boxes become one structure; save/restore_collective write each box once and fill views in place."""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore.distributed import SingleProcess, restore_collective, save_collective
from varstore.distributed.shards import LocalShard, describe_shards, sharded_state


class Gathered(SingleProcess):
    """Rank `rank` of a job whose other ranks' shard descriptions are given (one process plays all).

    sharded_state gathers [outcome, digest, description] per rank (agree.agree_all); the others succeeded.
    """

    def __init__(self, rank: int, others: dict[int, object], size: int) -> None:
        self.rank, self.size, self._others = rank, size, others

    def allgather(self, message):  # type: ignore[override]
        return [message if r == self.rank else [None, None, self._others[r]] for r in range(self.size)]


def test_single_process_round_trip_writes_whole_arrays_and_fills_views_in_place(tmp_path) -> None:
    h5py = pytest.importorskip("h5py")
    full = np.arange(24, dtype=np.float32).reshape(6, 4)
    shards = [LocalShard("w", (6, 4), (0, 0), full[:4]), LocalShard("w", (6, 4), (4, 0), full[4:]),
              LocalShard("b", (3,), (0,), np.array([1, 2, 3], dtype=np.int64))]
    state = sharded_state(shards, SingleProcess())
    assert [(p.name, p.array, p.owner_rank, p.holders) for p in state.variables()] == [
        ("b", "b", None, (0,)), ("w/part_0", "w", None, (0,)), ("w/part_1", "w", None, (0,))]
    save_collective(tmp_path / "c.h5", state)
    with h5py.File(tmp_path / "c.h5", "r") as f:
        np.testing.assert_array_equal(f["w"][()], full)
    into = np.zeros((6, 4), dtype=np.float32)
    columns = [LocalShard("w", (6, 4), (0, 0), into[:, :1]), LocalShard("w", (6, 4), (0, 1), into[:, 1:])]
    result = restore_collective(tmp_path / "c.h5", sharded_state(columns, SingleProcess()), strict=False)
    np.testing.assert_array_equal(into, full)  # strided views of one buffer, filled in place
    assert sorted(result.restored) == ["w/part_0", "w/part_1"] and result.unexpected == ["b"]


def test_replicas_are_one_part_written_by_the_least_loaded_holder() -> None:
    block = np.zeros((2, 2), dtype=np.float32)
    # 3 ranks: "a" rows 0-1 on ranks 0 and 1, rows 2-3 on rank 2; "r" on every rank; "s" on ranks 1 and 2
    mine = [LocalShard("a", (4, 2), (0, 0), block), LocalShard("r", (2,), (0,), np.zeros(2, np.float32))]
    others = {1: describe_shards(mine) + [["s", [8], "float32", [0], [8]]],
              2: [["a", [4, 2], "float32", [2, 0], [2, 2]], ["r", [2], "float32", [0], [2]], ["s", [8], "float32", [0], [8]]]}
    state = sharded_state(mine, Gathered(0, others, 3))
    parts = {p.name: p for p in state.variables()}
    assert [(n, p.owner_rank, p.holders, p.is_owned) for n, p in parts.items()] == [
        ("a/part_0", 0, (0, 1), True), ("a/part_1", 2, (2,), False), ("r", None, (0, 1, 2), True), ("s", 1, (1, 2), False)]
    assert parts["a/part_0"].save_slice_info.var_offset == (0, 0) and parts["s"].save_slice_info is None
    with pytest.raises(vs.NotOwnedError, match="held by ranks \\[2\\]"):
        parts["a/part_1"].host_view()
    assert parts["a/part_0"].restore_buffer() is block and parts["a/part_0"].restore_buffer().flags.writeable
    with pytest.raises(vs.NotOwnedError, match="'a/part_1' of 'a' is not held by this rank"):
        parts["a/part_1"].restore_buffer()


class Peers(SingleProcess):
    """Rank 0 of 3 whose peers sent the given agree_all messages ([outcome, digest, result])."""

    size = 3

    def __init__(self, peers: list[list]) -> None:
        self._peers = peers

    def allgather(self, message):  # type: ignore[override]
        return [message, *self._peers]


def test_agree_all_returns_every_result_and_checks_a_value_is_the_same_everywhere() -> None:
    from varstore.distributed.agree import agree_all

    assert agree_all(SingleProcess(), lambda: {"x": 1}, same=("names", ["a"])) == [{"x": 1}]
    sent: list = []
    echo = Peers([])
    echo.allgather = lambda message: sent.append(message) or [message] * 3  # type: ignore[method-assign]
    assert agree_all(echo, lambda: 7, same=("names", ["a"])) == [7, 7, 7]
    digest = sent[0][1]  # what rank 0 sent: [outcome, sha256 of the value, result]
    assert sent[0][0] is None and len(digest) == 64 and sent[0][2] == 7
    with pytest.raises(vs.DistributedMismatchError, match="3 ranks disagree about names: ranks \\[2\\] differ"):
        agree_all(Peers([[None, digest, 7], [None, "0" * 64, 7]]), lambda: 7, same=("names", ["a"]))
    failed = [["ShapeMismatchError", "box outside"], None, None]
    with pytest.raises(vs.ShapeMismatchError, match="rank 1 of 3: box outside"):
        agree_all(Peers([failed, [None, None, 1]]), lambda: 7)


def test_ranks_that_disagree_about_an_array_or_a_shard_outside_it_are_refused() -> None:
    mine = [LocalShard("a", (4,), (0,), np.zeros(2, np.float32))]
    with pytest.raises(vs.DistributedMismatchError, match="'a'.*ranks \\[1\\]: shape and dtype \\(5,\\) float32"):
        sharded_state(mine, Gathered(0, {1: [["a", [5], "float32", [2], [2]]]}, 2))
    with pytest.raises(vs.ShapeMismatchError, match="does not lie inside its global shape \\[4\\]"):
        sharded_state([LocalShard("a", (4,), (3,), np.zeros(2, np.float32))], SingleProcess())
