"""varstore.jax: pytrees saved by key path, restore(like=) into the template's structure, dtypes and devices."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

import varstore as vs  # noqa: E402
import varstore.jax as vsj  # noqa: E402
from varstore import dtypes  # noqa: E402

DTYPES = ["bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "complex64",
          "bfloat16", "float8_e4m3fn", "float8_e5m2"]


class AdamState(NamedTuple):
    count: "jax.Array"
    mu: dict
    nu: dict


@dataclasses.dataclass
class TrainState:
    step: int
    params: dict


def _random(shape: tuple[int, ...], name: str, seed: int) -> np.ndarray:
    dtype = dtypes.as_dtype(name)
    raw = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    if name == "bool":
        raw %= 2
    return raw.view(dtype).reshape(shape)


def _params(seed: int = 0) -> dict:
    k = jax.random.PRNGKey(seed)
    return {"encoder": {"kernel": jax.random.normal(k, (4, 3), jnp.bfloat16), "bias": jnp.arange(3.0)},
            "head": [jnp.ones((3,)), jnp.full((2,), 7, jnp.int32)]}


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
def test_names_follow_the_key_path_and_bfloat16_round_trips_bit_exactly(tmp_path, suffix):
    params = _params()
    path = vsj.save(tmp_path / f"p{suffix}", {"params": params}, step=5)
    with vs.open_checkpoint(path) as reader:
        assert reader.keys() == ["params/encoder/kernel", "params/encoder/bias", "params/head/0", "params/head/1"]
        assert reader.info("params/encoder/kernel").dtype == "bfloat16" and reader.step == 5
        assert reader["params/encoder/kernel"].tobytes() == np.asarray(params["encoder"]["kernel"]).tobytes()
    back = vsj.restore(path, like={"params": _params(1)})
    assert isinstance(back["params"]["head"], list)
    kernel = back["params"]["encoder"]["kernel"]
    assert isinstance(kernel, jax.Array) and kernel.dtype == jnp.bfloat16
    assert np.asarray(kernel).tobytes() == np.asarray(params["encoder"]["kernel"]).tobytes()
    assert back["params"]["head"][1].tolist() == [7, 7]


def test_named_tuples_dataclasses_and_scalars(tmp_path):
    params = {"w": jnp.arange(4.0)}
    opt = AdamState(jnp.array(3, jnp.int32), {"w": jnp.full(4, 0.5)}, {"w": jnp.full(4, 0.25)})
    state = {"train": TrainState(12, params), "opt": (opt,), "lr": 0.001}
    path = vsj.save(tmp_path / "s.zarr", state)
    with vs.open_checkpoint(path) as reader:
        assert reader.keys() == ["train/params/w", "opt/0/count", "opt/0/mu/w", "opt/0/nu/w"]
    like = {"train": TrainState(0, {"w": jnp.zeros(4)}),
            "opt": (AdamState(jnp.zeros((), jnp.int32), {"w": jnp.zeros(4)}, {"w": jnp.zeros(4)}),), "lr": 1.0}
    back = vsj.restore(path, like=like)
    assert isinstance(back["train"], TrainState) and back["train"].step == 12
    assert isinstance(back["opt"], tuple) and isinstance(back["opt"][0], AdamState)
    assert int(back["opt"][0].count) == 3 and back["opt"][0].nu["w"].tolist() == [0.25] * 4
    assert back["lr"] == 0.001 and back["train"].params["w"].tolist() == [0, 1, 2, 3]
    loaded = vsj.load(path)  # nested dicts: NamedTuples and dataclasses become dicts
    assert loaded["train"] == {"step": 12, "params": {"w": loaded["train"]["params"]["w"]}}
    assert loaded["opt"][0]["mu"]["w"].tolist() == [0.5] * 4 and loaded["lr"] == 0.001


def test_restore_keeps_the_template_devices_shardings_and_dtypes(tmp_path):
    path = vsj.save(tmp_path / "p.h5", {"w": jnp.arange(6.0).reshape(2, 3), "n": np.arange(3, dtype=np.int64)})
    device = jax.devices("cpu")[-1]
    sharding = jax.sharding.SingleDeviceSharding(device)
    like = {"w": jax.ShapeDtypeStruct((2, 3), jnp.bfloat16, sharding=sharding), "n": np.zeros(3, np.int64)}
    back = vsj.restore(path, like=like)
    assert back["w"].dtype == jnp.bfloat16 and back["w"].sharding == sharding
    assert back["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert isinstance(back["n"], np.ndarray) and back["n"].tolist() == [0, 1, 2]
    shapes = jax.eval_shape(lambda: {"w": jnp.zeros((2, 3)), "n": jnp.zeros(3, jnp.int32)})
    back = vsj.restore(path, like=shapes)
    assert back["n"].dtype == jnp.int32 and back["n"].tolist() == [0, 1, 2]


def test_restore_errors_name_the_leaf_and_the_file(tmp_path):
    path = vsj.save(tmp_path / "p.h5", {"w": jnp.zeros((2, 3)), "extra": jnp.zeros(1)})
    with pytest.raises(vs.RestoreError, match=r"no value for: \['gone'\].*no leaf takes: \['extra'\]"):
        vsj.restore(path, like={"w": jnp.zeros((2, 3)), "gone": jnp.zeros(1)})
    with pytest.raises(vs.ShapeMismatchError, match=r"'w' from 'w' in '.*p\.h5'.*\(2, 3\).*\(3, 2\)"):
        vsj.restore(path, like={"w": jnp.zeros((3, 2))}, strict=False)
    with pytest.raises(vs.DtypeMismatchError, match="'w'.*float32.*int32"):
        vsj.restore(path, like={"w": jnp.zeros((2, 3), jnp.int32)}, strict=False)
    assert list(vsj.restore(path, like={"w": jnp.ones((2, 3))}, strict=False)) == ["w"]


def test_load_nests_scopes_and_shares_aliases(tmp_path):
    shared = jnp.arange(3.0)
    path = vsj.save(tmp_path / "a.zarr", {"embed": {"table": shared}, "head": {"kernel": shared}})
    with vs.open_checkpoint(path) as reader:
        assert reader.keys() == ["embed/table"]
        assert reader.metadata == {"varstore.aliases": {"head/kernel": "embed/table"}}
    loaded = vsj.load(path)
    assert loaded["head"]["kernel"] is loaded["embed"]["table"]
    assert loaded["embed"]["table"].tolist() == [0, 1, 2]


@given(name=st.sampled_from(DTYPES), shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
       seed=st.integers(0, 2**16))
def test_any_dtype_and_shape_round_trips_bit_exactly(tmp_path_factory, name, shape, seed):
    value = jnp.asarray(_random(shape, name, seed))
    path = vsj.save(tmp_path_factory.mktemp("j") / "t.h5", {"x": value})
    back = vsj.load(path)["x"]
    assert back.dtype == value.dtype and back.shape == value.shape
    assert np.asarray(back).tobytes() == np.asarray(value).tobytes()
    again = vsj.restore(path, like={"x": jnp.zeros_like(value)})["x"]
    assert np.asarray(again).tobytes() == np.asarray(value).tobytes()


def test_save_refuses_what_it_cannot_store(tmp_path):
    with pytest.raises(vs.InvalidMetadataError, match=r"\['f'\].*function"):
        vsj.save(tmp_path / "x.h5", {"w": jnp.zeros(1), "f": len})
    with pytest.raises(vs.InvalidNameError, match="root"):
        vsj.save(tmp_path / "x.h5", jnp.zeros(1))
    assert not (tmp_path / "x.h5").exists()


def test_load_refuses_string_variables_by_name(tmp_path):
    vs.save(tmp_path / "s.h5", {"label": np.array([b"ab"]), "w": np.ones(2, np.float32)})
    with pytest.raises(vs.UnsupportedDtypeError, match="'label'.*S2"):
        vsj.load(tmp_path / "s.h5")
