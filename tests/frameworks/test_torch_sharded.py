"""varstore.torch with DTensors / FSDP2 on real torch.distributed ranks (gloo on 127.0.0.1): one checkpoint, any N to any M.

Two jobs (2 ranks, then 4) run the checks of tests/frameworks/scripts/torch_sharded_job.py;
the tests here read what they report and the files they wrote (plain h5py, one process).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
h5py = pytest.importorskip("h5py")

import varstore as vs  # noqa: E402
import varstore.torch as vst  # noqa: E402
from tests.frameworks.torch_ranks import require_gloo, run_ranks  # noqa: E402

SCRIPT = Path(__file__).parent / "scripts" / "torch_sharded_job.py"
NAMES = ["model/b", "model/odd", "model/tiny", "model/v", "model/w", "optim/state/0/exp_avg", "optim/state/0/step"]


def _full(name: str) -> "torch.Tensor":
    shapes = {"model/w": ((6, 4), torch.float32), "model/v": ((5, 3), torch.bfloat16), "model/b": ((4,), torch.float32),
              "model/odd": ((5,), torch.float64), "model/tiny": ((1, 3), torch.int32),
              "optim/state/0/exp_avg": ((6, 4), torch.float32)}
    shape, dtype = shapes[name]
    base = sum(map(ord, name)) % 97
    return (torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape) * 0.5 + base).to(dtype)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], list[dict]]:
    require_gloo()
    directory = tmp_path_factory.mktemp("sharded")
    plain = {"model": {n.split("/")[1]: _full(n) for n in NAMES[:5]},
             "optim": {"state": {0: {"exp_avg": _full("optim/state/0/exp_avg"), "step": torch.tensor(4.0)}}}}
    vst.save(directory / "plain.h5", plain)
    two = run_ranks(SCRIPT, 2, directory, (str(directory), "two"))
    four = run_ranks(SCRIPT, 4, directory, (str(directory), "four"))
    assert four.returncodes == [0, 0, 0, 0], four.stderr
    return directory, two.json_lines(), four.json_lines()


def test_one_process_checkpoint_restores_onto_two_ranks_in_place(jobs) -> None:
    _, two, _ = jobs
    for rank in two:
        assert rank["from_plain"] == {"restored": NAMES, "exact": True, "in_place": True, "step": 4.0}


def test_two_ranks_write_one_checkpoint_of_whole_arrays(jobs) -> None:
    directory, two, _ = jobs
    assert [r["saved"] for r in two] == [str(directory / "two.h5")] * 2
    with h5py.File(directory / "two.h5", "r") as f:
        for name in NAMES[:6]:
            stored = f[name][()]
            expected = _full(name)
            if expected.dtype == torch.bfloat16:
                assert stored.dtype.itemsize == 2
                assert np.array_equal(stored.view(np.int16), expected.view(torch.int16).numpy())
            else:
                np.testing.assert_array_equal(stored, expected.numpy())
        assert f["optim/state/0/step"][()] == 5.0
    loaded = vst.load(directory / "two.h5")
    assert loaded["optim"]["param_groups"] == [{"lr": 0.1, "params": [0]}]
    assert torch.equal(loaded["model"]["v"], _full("model/v"))
    with vs.open_checkpoint(directory / "two.h5") as reader:
        assert reader.metadata["run"] == "two" and reader.step == 2
        writes = reader.distributed["arrays"]["model/w"]["writes"]
    # Shard(0) of 6 rows: rank 0 wrote rows 0-2, rank 1 rows 3-5; the replicated bias was written once
    assert sorted((w["rank"], w["offset"], w["shape"]) for w in writes) == [(0, [0, 0], [3, 4]), (1, [3, 0], [3, 4])]


def test_torch_communicator_collectives(jobs) -> None:
    _, two, _ = jobs
    assert two[0]["comm"] == {"allgather": [{"r": 0}, {"r": 1}], "gather": None, "bcast": "from 1",
                              "sum": [1.0, 3.0], "max": 1, "split": [0, 1], "as": "TorchCommunicator"}
    assert two[1]["comm"]["gather"] == [0, 10]


def test_killed_rank_mid_save_leaves_the_previous_checkpoint_latest(jobs) -> None:
    directory, two, _ = jobs
    survivor = two[0]
    assert survivor["failure"]["type"] == "CollectiveError", survivor
    assert "rank 0 of 2" in survivor["failure"]["message"]
    manager = vs.CheckpointManager(directory / "managed")
    assert manager.latest == Path(two[0]["managed"])
    assert [Path(p).name for p in manager.checkpoints] == [Path(two[0]["managed"]).name]
    assert not [p.name for p in (directory / "managed").iterdir() if ".tmp-" in p.name]  # rank 0 removed its temporary
    with h5py.File(manager.latest, "r") as f:
        np.testing.assert_array_equal(f["model/w"][()], _full("model/w").numpy())


def test_two_rank_checkpoint_restores_onto_four_ranks_and_other_placements(jobs) -> None:
    _, _, four = jobs
    for rank in four:
        assert rank["from_two_2x2"] == {"restored": 7, "exact": True, "step": 5.0}
        assert rank["from_two_shard1"] == {"exact": True, "local": [6, 1]}


def test_fsdp2_state_saved_on_four_ranks_restores_onto_hsdp_and_one_process(jobs) -> None:
    directory, _, four = jobs
    names = four[0]["fsdp"]["names"]
    assert len(names) == 4 + 4 * 3  # 4 parameters; step, exp_avg, exp_avg_sq each
    for rank in four:
        assert rank["fsdp"]["equal_before"] == 0 and rank["fsdp"]["exact"] == names
        assert rank["fsdp"]["placements"] == "(Replicate(), Shard(dim=0))"
    expected = {k.replace("|", "/"): v for k, v in np.load(directory / "fsdp_expected.npz").items()}
    with h5py.File(directory / "fsdp.h5", "r") as f:  # whole arrays equal to the gathered tensors
        for name in names:
            np.testing.assert_array_equal(f[name][()], expected[name])
    # 4 -> 1: a plain single-process model restores from the same checkpoint
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))
    result = vst.restore(directory / "fsdp.h5", {"model": model.state_dict()}, strict=False)
    assert sorted(result.restored) == sorted(n for n in names if n.startswith("model/"))
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), expected[f"model/{key}"])
