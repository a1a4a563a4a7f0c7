"""A checkpoint written by varstore.torch reads through varstore.jax, plain varstore and the CLI, and vice versa."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from varstore_cli.main import cli  # noqa: E402

import varstore as vs  # noqa: E402
import varstore.jax as vsj  # noqa: E402
import varstore.torch as vst  # noqa: E402


def _ls(path) -> str:
    result = CliRunner().invoke(cli, ["ls", str(path)], prog_name="varstore")
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_torch_checkpoint_reads_through_jax_numpy_and_the_cli(tmp_path, suffix):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    path = vst.save(tmp_path / f"t{suffix}", {"model": model.state_dict(), "epoch": 2})
    weight = model.weight.detach().view(torch.int16).numpy().tobytes()
    # jax: nested dicts from the scopes, bf16 bits intact; restore(like=) by the same names
    loaded = vsj.load(path)
    assert loaded["epoch"] == 2 and loaded["model"]["weight"].dtype == jnp.bfloat16
    assert np.asarray(loaded["model"]["weight"]).tobytes() == weight
    like = {"model": {"weight": jnp.zeros((2, 3), jnp.bfloat16), "bias": jnp.zeros(2, jnp.bfloat16)}}
    back = vsj.restore(path, like=like)
    assert np.asarray(back["model"]["weight"]).tobytes() == weight
    # plain varstore into NumPy arrays
    target = {"model/weight": np.zeros((2, 3), vs.dtypes.bfloat16), "model/bias": np.zeros(2, vs.dtypes.bfloat16)}
    result = vs.restore(path, target)
    assert result.restored == ["model/weight", "model/bias"] and target["model/weight"].tobytes() == weight
    out = _ls(path)
    assert "model/weight" in out and "bfloat16" in out and "(2, 3)" in out.replace("[", "(").replace("]", ")")


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_jax_checkpoint_reads_through_torch_numpy_and_the_cli(tmp_path, suffix):
    params = {"params": {"encoder": {"kernel": jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3),
                                     "bias": jnp.array([1.5, -2.0])}}}
    path = vsj.save(tmp_path / f"j{suffix}", params)
    loaded = vst.load(path)  # the structure jax saved, as torch tensors
    kernel = loaded["params"]["encoder"]["kernel"]
    assert kernel.dtype == torch.bfloat16 and kernel.float().tolist() == [[0, 1, 2], [3, 4, 5]]
    nested = {"params": {"encoder": {"kernel": torch.zeros(2, 3, dtype=torch.bfloat16), "bias": torch.zeros(2)}}}
    vst.restore(path, nested)
    assert nested["params"]["encoder"]["bias"].tolist() == [1.5, -2.0]
    with vs.open_checkpoint(path) as reader:
        assert reader["params/encoder/bias"].tolist() == [1.5, -2.0]
    assert "params/encoder/kernel" in _ls(path)


def test_plain_varstore_checkpoint_loads_in_both(tmp_path):
    path = vs.save(tmp_path / "v.h5", {"conv1/weights": np.arange(4, dtype=np.float32), "step": np.int64(9)})
    assert vst.load(path)["conv1"]["weights"].tolist() == [0, 1, 2, 3]
    loaded = vsj.load(path)
    assert loaded["conv1"]["weights"].tolist() == [0, 1, 2, 3] and int(loaded["step"]) == 9
