"""Behavior 5: unique default names, TF1-style renaming of duplicates, name validation, weak references."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from varstore.store.collections import GLOBAL_VARIABLES, TRAINABLE_VARIABLES
from varstore.errors import InvalidNameError, VariableExistsError
from varstore.store.variables import Variable


def test_unnamed_variables_get_unique_default_names(store):
    names = [Variable([1.0], store=store).name for _ in range(3)]
    assert names == ["Variable", "Variable_1", "Variable_2"]


def test_default_names_are_unique_within_each_scope(store):
    with store.variable_scope("enc"):
        inner = [Variable(0.0, store=store).name for _ in range(2)]
    outer = Variable(0.0, store=store).name
    assert inner == ["enc/Variable", "enc/Variable_1"] and outer == "Variable"


def test_duplicate_names_stay_distinct_variables(store):
    a = Variable([1.0, 2.0], name="Mark", store=store)
    b = Variable([3.0, 4.0], name="Mark", store=store)
    c = Variable([5.0], name="Mark", store=store)
    assert (a.name, b.name, c.name) == ("Mark", "Mark_1", "Mark_2")
    assert a is not b and a.numpy().tolist() == [1, 2] and b.numpy().tolist() == [3, 4]
    assert store.get_variable_by_name("Mark_1") is b


def test_renaming_skips_names_already_taken(store):
    Variable(0.0, name="x_1", store=store)
    Variable(0.0, name="x", store=store)
    assert Variable(0.0, name="x", store=store).name == "x_2"


def test_get_variable_names_are_not_made_unique(store):
    w = store.get_variable("w", [2])
    assert w.name == "w"
    with pytest.raises(VariableExistsError, match="'w'"):
        store.get_variable("w", [2])
    assert Variable(0.0, name="w", store=store).name == "w_1"  # a plain Variable is renamed instead
    plain = Variable(0.0, name="plain", store=store)  # noqa: F841 (kept alive)
    with pytest.raises(VariableExistsError, match="'plain'.*Variable"):
        store.get_variable("plain", [1])


@pytest.mark.parametrize("bad", ["", "/a", "a/", "a//b", "a/../b", "..", "./a", "a\x00b", "tab\there", "\n"])
def test_invalid_names_are_rejected(store, bad):
    with pytest.raises(InvalidNameError):
        Variable(0.0, name=bad, store=store)
    with pytest.raises(InvalidNameError):
        store.get_variable(bad, [1])
    with pytest.raises(InvalidNameError):
        with store.variable_scope(bad):
            pass


def test_unicode_names_are_fine(store):
    assert store.get_variable("größe/重み", [1]).name == "größe/重み"
    assert Variable(0.0, name="ünïcode.v2:0", store=store).name == "ünïcode.v2:0"


def test_an_unreferenced_variable_is_freed_and_leaves_collections(store):
    v = Variable(np.zeros(1000), name="temp", store=store)
    ref = weakref.ref(v)
    store.add_to_collection("mine", v)
    assert [x.name for x in store.get_collection(GLOBAL_VARIABLES)] == ["temp"]
    del v
    gc.collect()
    assert ref() is None
    assert store.get_collection(GLOBAL_VARIABLES) == []
    assert store.get_collection(TRAINABLE_VARIABLES) == []
    assert store.get_collection("mine") == []
    assert store.variables() == [] and store.get_variable_by_name("temp") is None
    # the name stays claimed, as in a TF1 graph
    assert Variable(0.0, name="temp", store=store).name == "temp_1"


def test_get_variable_variables_are_kept_alive_by_the_store(store):
    ref = weakref.ref(store.get_variable("kept", [3]))
    gc.collect()
    assert ref() is not None and store.get_variable_by_name("kept") is ref()


# ------------------------------------------------ one name rule for the core and the manifest
BAD_NAMES = ["", "/a", "a/", "a//b", "a/./b", "../a", "a/..", ".", "a\x00b", "tab\there", "new\nline", 3, None]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_the_store_and_the_manifest_reject_the_same_names(name, store):
    from varstore.checkpoint.format import manifest

    with pytest.raises(InvalidNameError):
        store.get_variable(name, shape=(1,))
    with pytest.raises(InvalidNameError):
        manifest.validate_name(name)
    with pytest.raises(InvalidNameError):
        manifest.validate_names(["ok", name])


@pytest.mark.parametrize("name", ["a", "enc/dense/kernel", "é/日本/x y", "a.b/c-d_1", "...x"])
def test_the_store_and_the_manifest_accept_the_same_names(name, store):
    from varstore.checkpoint.format import manifest

    assert store.get_variable(name, shape=(1,)).name == name
    assert manifest.validate_name(name) == name
    manifest.validate_names(["other", name])  # no error


def test_the_manifest_uses_the_core_name_rule():
    from varstore.store import _naming
    from varstore.checkpoint.format import manifest

    assert manifest.validate_name is _naming.validate_name
    with pytest.raises(InvalidNameError, match="control character '\\\\x07'"):
        manifest.validate_name("bell\x07")
