"""varstore.torch with DTensors / FSDP2 on real torch.distributed ranks (gloo on 127.0.0.1): one checkpoint, any N to any M.

One job of 4 ranks runs the checks of tests/frameworks/scripts/torch_sharded_job.py (one
job: every rank's interpreter and torch start-up cost seconds); the tests here read what
they report and the files they wrote (plain h5py, one process).
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
from tests.frameworks.scripts._sharded_values import full as _full  # noqa: E402
from tests.frameworks.torch_ranks import require_gloo, run_ranks  # noqa: E402

SCRIPT = Path(__file__).parent / "scripts" / "torch_sharded_job.py"
NAMES = ["model/b", "model/odd", "model/tiny", "model/v", "model/w", "optim/state/0/exp_avg", "optim/state/0/step"]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    require_gloo()
    directory = tmp_path_factory.mktemp("sharded")
    plain = {"model": {n.split("/")[1]: _full(n) for n in NAMES[:5]},
             "optim": {"state": {0: {"exp_avg": _full("optim/state/0/exp_avg"), "step": torch.tensor(4.0)}}}}
    vst.save(directory / "plain.h5", plain)
    four = run_ranks(SCRIPT, 4, directory, (str(directory),))
    assert four.returncodes == [0, 0, 0, -9], four.stderr  # rank 3 SIGKILLed itself mid-save, last
    return directory, four.json_lines()


def test_one_process_checkpoint_restores_onto_four_ranks_in_place(job) -> None:
    _, four = job
    for rank in four:  # model/odd: 2, 2, 1, 0 rows; model/tiny: rank 0's row, empty elsewhere
        assert rank["from_plain"] == {"restored": NAMES, "exact": True, "in_place": True, "step": 4.0}


def test_four_ranks_write_one_checkpoint_of_whole_arrays(job) -> None:
    directory, four = job
    assert [r["saved"] for r in four] == [str(directory / "four.h5")] * 4
    with h5py.File(directory / "four.h5", "r") as f:
        for name in NAMES[:6]:
            stored = f[name][()]
            expected = _full(name)
            if expected.dtype == torch.bfloat16:
                assert stored.dtype.itemsize == 2
                assert np.array_equal(stored.view(np.int16), expected.view(torch.int16).numpy())
            else:
                np.testing.assert_array_equal(stored, expected.numpy())
        assert f["optim/state/0/step"][()] == 5.0
    loaded = vst.load(directory / "four.h5")
    assert loaded["optim"]["param_groups"] == [{"lr": 0.1, "params": [0]}]
    assert torch.equal(loaded["model"]["v"], _full("model/v"))
    with vs.open_checkpoint(directory / "four.h5") as reader:
        assert reader.metadata["run"] == "four" and reader.step == 2
        writes = reader.distributed["arrays"]["model/w"]["writes"]
    # Shard(0) of 6 rows on 4 ranks: ranks 0-2 wrote 2 rows each, rank 3's shard is empty
    assert sorted((w["rank"], w["offset"], w["shape"]) for w in writes) == [
        (0, [0, 0], [2, 4]), (1, [2, 0], [2, 4]), (2, [4, 0], [2, 4])]


def test_torch_communicator_collectives(job) -> None:
    _, four = job
    for rank, result in enumerate(four):
        assert result["comm"] == {"allgather": [{"r": r} for r in range(4)],
                                  "gather": [0, 10, 20, 30] if rank == 1 else None, "bcast": "from 1",
                                  "long": [True, True, True], "sum": [6.0, 6.0], "max": 3,
                                  "split": [[1, 2], [1, 2], [0, 2], [0, 2]][rank], "as": "TorchCommunicator"}


def test_killed_rank_mid_save_leaves_the_previous_checkpoint_latest(job) -> None:
    directory, four = job
    for rank, survivor in enumerate(four[:3]):
        assert survivor["failure"]["type"] == "CollectiveError", survivor
        assert f"rank {rank} of 4" in survivor["failure"]["message"]
    manager = vs.CheckpointManager(directory / "managed")
    assert manager.latest == Path(four[0]["managed"])
    assert [Path(p).name for p in manager.checkpoints] == [Path(four[0]["managed"]).name]
    assert not [p.name for p in (directory / "managed").iterdir() if ".tmp-" in p.name]  # rank 0 removed its temporary
    with h5py.File(manager.latest, "r") as f:
        np.testing.assert_array_equal(f["model/w"][()], _full("model/w").numpy())


def test_four_rank_checkpoint_restores_onto_a_2x2_mesh_and_other_placements(job) -> None:
    _, four = job
    for result in four:
        assert result["from_four_2x2"] == {"restored": 7, "exact": True, "step": 5.0}
        assert result["from_four_shard1"] == {"exact": True, "local": [6, 1]}


def test_fsdp2_state_saved_on_four_ranks_restores_onto_hsdp_and_one_process(job) -> None:
    directory, four = job
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


def test_four_rank_and_one_process_checkpoints_restore_onto_two_ranks(job) -> None:
    """4 -> 2 and 1 -> 2: a world of two ranks restores both checkpoints in place, bit-exactly."""
    directory, _ = job
    two = run_ranks(Path(__file__).parent / "scripts" / "torch_two_ranks_job.py", 2, directory, (str(directory),))
    assert two.returncodes == [0, 0], two.stderr
    for rank in two.json_lines():
        steps = {"four.h5": 5.0, "plain.h5": 4.0}
        for source in ("four.h5", "plain.h5"):  # model/w: Shard(1) of 4 columns -> 2 columns per rank
            assert rank[source] == {"restored": 7, "exact": True, "in_place": True, "local_w": [6, 2],
                                    "step": steps[source]}, (source, rank)
