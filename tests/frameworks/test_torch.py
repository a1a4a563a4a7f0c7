"""varstore.torch: state dicts saved as they are, restored in place, nested state, tied weights, every dtype."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, strategies as st  # noqa: E402

import varstore as vs  # noqa: E402
import varstore.torch as vst  # noqa: E402

DTYPES = [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16,
          torch.uint32, torch.uint64, torch.float16, torch.float32, torch.float64, torch.complex64,
          torch.complex128, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]


def _bits(t: "torch.Tensor") -> bytes:
    """The tensor's bytes in C order (bit patterns, so NaN payloads and -0.0 compare exactly)."""
    t = t.contiguous()
    if t.dtype.is_complex:
        t = torch.view_as_real(t).contiguous()
    raw = t.view(torch.uint8) if t.element_size() == 1 else t.view({2: torch.int16, 4: torch.int32,
                                                                      8: torch.int64}[t.element_size()])
    return raw.numpy().tobytes()


def _random(shape: tuple[int, ...], dtype: "torch.dtype", seed: int = 0) -> "torch.Tensor":
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, shape + (torch.empty((), dtype=dtype).element_size(),), generator=g,
                        dtype=torch.uint8)
    if dtype == torch.bool:
        raw = raw % 2  # only 0 and 1 are bools
    return raw.view(dtype).reshape(shape) if shape else raw.view(dtype).reshape(())


def test_import_varstore_imports_neither_torch_nor_jax():
    code = "import sys, varstore, varstore.checkpoint, varstore.formats; print(sorted(m for m in ('torch', 'jax') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("module, extra", [("torch", "varstore[torch]"), ("jax", "varstore[jax]")])
def test_a_missing_framework_raises_missing_dependency_naming_the_extra(module, extra):
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            f"import varstore\n"
            f"try:\n    import varstore.{module}\n"
            f"except varstore.MissingDependencyError as err:\n    print(err)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert extra in done.stdout


@pytest.mark.parametrize("suffix", [".h5", ".zarr"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bit_exactly(tmp_path, dtype, suffix):
    sd = {"w": _random((3, 5), dtype, 1), "scalar": _random((), dtype, 2), "empty": _random((0, 4), dtype),
          "strided": _random((4, 6), dtype, 3)[:, ::2], "big": _random((64, 80), dtype, 4)}
    assert not sd["strided"].is_contiguous()
    path = vst.save(tmp_path / f"m{suffix}", sd)
    loaded = vst.load(path)
    assert list(loaded) == list(sd)
    for name, tensor in sd.items():
        assert loaded[name].dtype == dtype and loaded[name].shape == tensor.shape, name
        assert _bits(loaded[name]) == _bits(tensor), name
    with vs.open_checkpoint(path) as reader:
        assert reader.info("w").dtype == str(dtype).replace("torch.", "")
    # ... and in place, into tensors of the same layout (one of them non-contiguous)
    target = {name: torch.zeros_like(t) if t.is_contiguous() else torch.zeros(4, 6, dtype=dtype)[:, ::2]
              for name, t in sd.items()}
    pointers = {name: t.data_ptr() for name, t in target.items()}
    vst.restore(path, target)
    for name, tensor in sd.items():
        assert target[name].data_ptr() == pointers[name]
        assert _bits(target[name]) == _bits(tensor), name


@given(dtype=st.sampled_from(DTYPES), shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
       transpose=st.booleans(), seed=st.integers(0, 2**16))
def test_any_dtype_and_shape_round_trips(tmp_path_factory, dtype, shape, transpose, seed):
    tensor = _random(shape, dtype, seed)
    if transpose and tensor.dim() >= 2:
        tensor = tensor.transpose(0, 1)
    path = vst.save(tmp_path_factory.mktemp("h") / "t.h5", {"x": tensor})
    assert _bits(vst.load(path)["x"]) == _bits(tensor)
    target = torch.zeros_like(tensor)
    vst.restore(path, {"x": target})
    assert _bits(target) == _bits(tensor)


def test_module_state_dict_restores_in_place_with_the_same_data_pointers(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to(torch.bfloat16)
    model[1].running_mean.fill_(0.5)
    path = vst.save(tmp_path / "m.h5", model.state_dict(), step=100)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to(torch.bfloat16)
    pointers = {k: v.data_ptr() for k, v in fresh.state_dict().items()}
    result = vst.restore(path, fresh)
    assert result.restored == ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                               "1.num_batches_tracked"]
    assert result.missing == [] and result.unexpected == []
    for name, value in fresh.state_dict().items():
        assert value.data_ptr() == pointers[name]
        assert torch.equal(value, model.state_dict()[name]), name
    assert fresh[1].running_mean.tolist() == [0.5, 0.5, 0.5]
    with vs.open_checkpoint(path) as reader:
        assert reader.step == 100 and reader.keys()[0] == "0.weight" and reader.metadata == {}


def test_wrong_shape_names_the_tensor_and_the_file_and_changes_nothing(tmp_path):
    path = vst.save(tmp_path / "m.h5", {"a": torch.ones(2), "b": torch.ones(3, 4)})
    target = {"a": torch.zeros(2), "b": torch.zeros(4, 3)}
    with pytest.raises(vs.ShapeMismatchError, match=r"'b' from 'b' in '.*m\.h5'.*\(3, 4\).*\(4, 3\)"):
        vst.restore(path, target)
    assert target["a"].tolist() == [0.0, 0.0]  # validated before anything was written


def test_wrong_dtype_names_the_tensor_and_changes_nothing(tmp_path):
    path = vst.save(tmp_path / "m.h5", {"a": torch.ones(2), "b": torch.full((2,), 1.5)})
    target = {"a": torch.zeros(2), "b": torch.zeros(2, dtype=torch.int32)}
    with pytest.raises(vs.DtypeMismatchError, match=r"tensor 'b' .*float32.*torch.int32"):
        vst.restore(path, target)
    assert target["a"].tolist() == [0.0, 0.0]


def test_same_kind_cast_into_a_float32_tensor(tmp_path):
    path = vst.save(tmp_path / "m.h5", {"w": torch.tensor([1.5, -2.25], dtype=torch.bfloat16)})
    target = torch.zeros(2)
    vst.restore(path, {"w": target})
    assert target.tolist() == [1.5, -2.25]


def test_strict_lists_missing_and_unexpected_and_changes_nothing(tmp_path):
    path = vst.save(tmp_path / "m.h5", {"a": torch.ones(2), "extra": torch.ones(1)})
    target = {"a": torch.zeros(2), "gone": torch.zeros(1)}
    with pytest.raises(vs.RestoreError, match="gone.*extra") as info:
        vst.restore(path, target)
    assert info.value.missing == ["gone"] and info.value.unexpected == ["extra"]
    assert target["a"].tolist() == [0.0, 0.0]
    result = vst.restore(path, target, strict=False)
    assert result.restored == ["a"] and target["a"].tolist() == [1.0, 1.0]


class _Tied(torch.nn.Module):
    def __init__(self, tie: bool = True) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.lm_head = torch.nn.Linear(3, 5, bias=False)
        if tie:
            self.lm_head.weight = self.embed.weight


def test_tied_weights_are_saved_once_and_restored_into_both(tmp_path):
    torch.manual_seed(1)
    model = _Tied()
    path = vst.save(tmp_path / "tied.h5", model)
    with vs.open_checkpoint(path) as reader:
        assert reader.keys() == ["embed.weight"]
        assert reader.metadata == {"varstore.aliases": {"lm_head.weight": "embed.weight"}}
    loaded = vst.load(path)
    assert list(loaded) == ["embed.weight", "lm_head.weight"]
    assert loaded["lm_head.weight"] is loaded["embed.weight"]  # tied again, as torch.load gives
    for tie in (True, False):
        fresh = _Tied(tie)
        vst.restore(path, fresh)
        assert torch.equal(fresh.embed.weight, model.embed.weight)
        assert torch.equal(fresh.lm_head.weight, model.embed.weight)
        assert (fresh.lm_head.weight.data_ptr() == fresh.embed.weight.data_ptr()) is tie


def test_views_sharing_storage_are_restored_into_the_shared_storage(tmp_path):
    base = torch.arange(12, dtype=torch.float32)
    sd = {"all": base.view(3, 4), "rows": base.view(3, 4)[1:], "cols": base.view(3, 4)[:, ::2]}
    path = vst.save(tmp_path / "v.zarr", sd)
    target_base = torch.zeros(12)
    target = {"all": target_base.view(3, 4), "rows": target_base.view(3, 4)[1:],
              "cols": target_base.view(3, 4)[:, ::2]}
    vst.restore(path, target)
    assert target_base.tolist() == list(range(12))
    assert vst.load(path)["cols"].tolist() == [[0, 2], [4, 6], [8, 10]]


def _train(model, opt, steps: int) -> list[float]:
    g = torch.Generator().manual_seed(7)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 4, generator=g)
        y = torch.randn(8, 2, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_model_and_adam_state_continue_training_bit_identically(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.95))
    _train(model, opt, 3)
    path = vst.save(tmp_path / "train.h5", {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3},
                    step=3)
    with vs.open_checkpoint(path) as reader:
        assert reader.keys() == ["model/weight", "model/bias", "optimizer/state/0/step",
                                 "optimizer/state/0/exp_avg", "optimizer/state/0/exp_avg_sq",
                                 "optimizer/state/1/step", "optimizer/state/1/exp_avg",
                                 "optimizer/state/1/exp_avg_sq"]
        assert reader.info("optimizer/state/0/step").shape == ()
    fresh = torch.nn.Linear(4, 2)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.5)
    state = vst.load(path)
    assert state["epoch"] == 3
    assert state["optimizer"]["param_groups"][0]["betas"] == (0.8, 0.95)
    assert list(state["optimizer"]["state"]) == [0, 1]  # int keys come back as ints
    fresh.load_state_dict(state["model"])
    fresh_opt.load_state_dict(state["optimizer"])
    assert fresh_opt.param_groups[0]["lr"] == 0.01
    expected = _train(model, opt, 1)
    got = _train(fresh, fresh_opt, 1)
    assert np.float32(got[0]).tobytes() == np.float32(expected[0]).tobytes()
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)


def test_nested_state_keeps_scalars_keys_and_containers(tmp_path):
    state = {"epoch": 4, "best": float("inf"), "nan": float("nan"), "name": "run7", "none": None, "flag": True,
             "ids": (1, 2), "hist": [0.5, torch.tensor(2.0)], "by_int": {0: torch.arange(3), 10: "x"},
             "np": np.arange(4, dtype=np.int16)}
    path = vst.save(tmp_path / "n.zarr", state)
    with vs.open_checkpoint(path) as reader:
        assert reader.keys() == ["hist/1", "by_int/0", "np"]
        assert reader.metadata["varstore.tree"]["dict"][0] == ["epoch", {"value": 4}]
        assert reader.metadata["varstore.tree"]["dict"][1] == ["best", {"float": "inf"}]
    back = vst.load(path)
    assert back["epoch"] == 4 and back["best"] == float("inf") and back["nan"] != back["nan"]
    assert back["name"] == "run7" and back["none"] is None and back["flag"] is True and back["ids"] == (1, 2)
    assert back["hist"][0] == 0.5 and back["hist"][1].item() == 2.0
    assert list(back["by_int"]) == [0, 10] and back["by_int"][0].tolist() == [0, 1, 2]
    assert back["np"].dtype == torch.int16 and back["np"].tolist() == [0, 1, 2, 3]


def test_misuse_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(vs.UnsupportedDtypeError, match="'c'.*complex32"):
        vst.save(tmp_path / "x.h5", {"c": torch.zeros(2, dtype=torch.complex32)})
    with pytest.raises(vs.InvalidMetadataError, match=r"\['opt'\].*device"):
        vst.save(tmp_path / "x.h5", {"w": torch.zeros(1), "opt": torch.device("cpu")})
    with pytest.raises(vs.InvalidMetadataError, match="'varstore.tree' is reserved"):
        vst.save(tmp_path / "x.h5", {"w": torch.zeros(1)}, metadata={"varstore.tree": 1})
    with pytest.raises(vs.InvalidNameError, match="'a/b'"):
        vst.save(tmp_path / "x.h5", {"a/b": torch.zeros(1), "a": {"b": torch.ones(1)}})
    assert not (tmp_path / "x.h5").exists()
    vs.save(tmp_path / "s.h5", {"label": np.array([b"ab"])})
    with pytest.raises(vs.UnsupportedDtypeError, match="'label'.*S2"):
        vst.load(tmp_path / "s.h5")


def test_plain_restore_into_a_tensor_points_to_varstore_torch(tmp_path):
    path = vs.save(tmp_path / "m.h5", {"w": np.ones(2, np.float32)})
    with pytest.raises(vs.RestoreTargetError, match="got Tensor; for torch tensors use varstore.torch.restore"):
        vs.restore(path, {"w": torch.zeros(2)})
    frozen = np.zeros(2, np.float32)
    frozen.setflags(write=False)
    with pytest.raises(vs.RestoreTargetError, match="got a read-only ndarray"):
        vs.restore(path, {"w": frozen})


@pytest.mark.gpu
def test_cuda_tensors_save_restore_and_load(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device for torch")
    sd = {"w": torch.arange(6, dtype=torch.bfloat16, device="cuda").reshape(2, 3), "b": torch.ones(3, device="cuda")}
    path = vst.save(tmp_path / "g.h5", sd)
    target = {k: torch.zeros_like(v) for k, v in sd.items()}
    pointers = {k: v.data_ptr() for k, v in target.items()}
    vst.restore(path, target)
    for name in sd:
        assert target[name].device.type == "cuda" and target[name].data_ptr() == pointers[name]
        assert torch.equal(target[name], sd[name])
    loaded = vst.load(path, device="cuda:0")
    assert loaded["w"].device == torch.device("cuda:0") and torch.equal(loaded["w"], sd["w"])
