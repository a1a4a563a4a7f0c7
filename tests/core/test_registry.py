"""The VariableRegistry protocol: how a Variable gets its name and joins a store, with no import of scopes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from varstore.store import default_store
from varstore.store import variables
from varstore.errors import ScopeError
from varstore.store.default_store import get_default_store, variable_scope
from varstore.store.scopes import VariableStore
from varstore.store.variables import Variable, VariableRegistry, default_registry, lazy_variable, set_default_registry


class RecordingRegistry:
    """A registry that is not a VariableStore: names variables "r<N>/<name>" and records what it tracks."""

    def __init__(self) -> None:
        self.claimed: list[str | None] = []
        self.tracked: list[tuple[str, tuple[str, ...] | None, bool, bool]] = []

    def claim_name(self, name: str | None) -> str:
        self.claimed.append(name)
        return f"r{len(self.claimed)}/{name or 'Variable'}"

    def track_variable(self, variable: Variable, collections: Sequence[str] | str | None, trainable: bool,
                       *, weak: bool) -> None:
        self.tracked.append((variable.name, None if collections is None else tuple(collections), trainable, weak))


@pytest.fixture
def restore_default_registry() -> Iterator[None]:
    provider = variables._registry_provider
    yield
    set_default_registry(provider if provider is not None else get_default_store)


def test_a_variable_asks_the_registry_it_is_given_for_its_name_and_registers_there() -> None:
    registry = RecordingRegistry()
    a = Variable([1.0, 2.0], name="w", store=registry, collections=["mine"], trainable=False)
    b = Variable(3, store=registry)
    assert (a.name, b.name) == ("r1/w", "r2/Variable")
    assert registry.claimed == ["w", None]
    assert registry.tracked == [("r1/w", ("mine",), False, True), ("r2/Variable", None, True, True)]
    np.testing.assert_array_equal(a.numpy(), np.array([1.0, 2.0], dtype=np.float32))
    assert b.dtype == np.int32 and int(b.numpy()) == 3


def test_variable_store_is_a_variable_registry(store: VariableStore) -> None:
    registry: VariableRegistry = store  # checked by mypy (strict for scopes and variables)
    name = registry.claim_name("k")
    variable = lazy_variable(name, (2,), np.dtype(np.float32), np.zeros(2, np.float32), True, None)
    registry.track_variable(variable, None, True, weak=False)
    assert store.get_variable_by_name("k") is variable
    assert store.global_variables() == [variable] and store.trainable_variables() == [variable]
    assert store.claim_name("k") == "k_1"


def test_the_default_registry_is_the_store_of_the_active_scope() -> None:
    inner = VariableStore()
    assert default_registry() is get_default_store()
    with inner.variable_scope("enc"):
        assert default_registry() is inner
        v = Variable(1.0)
    assert v.name == "enc/Variable" and inner.get_variable_by_name("enc/Variable") is v
    with variable_scope("dec"):
        w = Variable(2.0)
    assert w.name == "dec/Variable" and get_default_store().get_variable_by_name("dec/Variable") is w


def test_set_default_registry_installs_another_provider(restore_default_registry: None) -> None:
    registry = RecordingRegistry()
    set_default_registry(lambda: registry)
    v = Variable(np.arange(3, dtype=np.int64), name="n")
    assert v.name == "r1/n" and registry.tracked == [("r1/n", None, True, True)]
    assert default_store.get_default_store().get_variable_by_name("n") is None


def test_without_a_provider_variable_raises_scope_error(restore_default_registry: None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variables, "_registry_provider", None)
    with pytest.raises(ScopeError, match="no default VariableStore is installed"):
        Variable(1.0)
    assert Variable(1.0, store=RecordingRegistry()).name == "r1/Variable"  # an explicit store still works


def test_lazy_variable_allocates_nothing_and_is_not_tracked(store: VariableStore) -> None:
    calls: list[tuple[tuple[int, ...], np.dtype]] = []

    def ones(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        calls.append((shape, dtype))
        return np.ones(shape, dtype)

    v = lazy_variable("lazy/w", (2, 3), np.dtype(np.float64), ones, False, "cpu:0")
    assert not v.is_initialized and calls == [] and store.variables() == []
    assert (v.name, v.shape, v.dtype, v.trainable, v.device) == ("lazy/w", (2, 3), np.float64, False, "cpu:0")
    np.testing.assert_array_equal(v.numpy(), np.ones((2, 3)))
    assert calls == [((2, 3), np.dtype(np.float64))]

