"""Behaviors 6 and 10: GLOBAL/TRAINABLE/LOCAL collections, custom collections, scope filters."""

from __future__ import annotations

from varstore.store.collections import GLOBAL_VARIABLES, LOCAL_VARIABLES, TRAINABLE_VARIABLES
from varstore.store.variables import Variable


def _names(items):
    return [x.name for x in items]


def test_collection_names_are_tf_graph_keys():
    assert (GLOBAL_VARIABLES, TRAINABLE_VARIABLES, LOCAL_VARIABLES) == (
        "variables", "trainable_variables", "local_variables")


def test_trainable_false_keeps_a_variable_out_of_trainable(store):
    w = store.get_variable("w", [2])
    step = store.get_variable("step", [], dtype="int64", trainable=False)
    v = Variable(1.0, name="v", store=store)
    count = Variable(1, name="count", trainable=False, store=store)
    assert _names(store.get_collection(GLOBAL_VARIABLES)) == ["w", "step", "v", "count"]
    assert _names(store.get_collection(TRAINABLE_VARIABLES)) == ["w", "v"]
    assert w.collections == (GLOBAL_VARIABLES, TRAINABLE_VARIABLES)
    assert step.collections == (GLOBAL_VARIABLES,) and count.collections == (GLOBAL_VARIABLES,)
    assert _names(store.trainable_variables()) == ["w", "v"] and v.trainable


def test_local_variables_stay_out_of_global(store):
    local = store.get_variable("counter", [], dtype="int32", trainable=False, collections=[LOCAL_VARIABLES])
    store.get_variable("w", [1])
    assert _names(store.get_collection(LOCAL_VARIABLES)) == ["counter"]
    assert _names(store.global_variables()) == ["w"]
    assert local.collections == (LOCAL_VARIABLES,)
    assert _names(store.variables()) == ["counter", "w"]


def test_explicit_collections_replace_the_default_and_trainable_adds_itself(store):
    v = store.get_variable("v", [1], collections=["mine"])  # trainable=True: TF1 adds TRAINABLE_VARIABLES
    assert v.collections == ("mine", TRAINABLE_VARIABLES)
    assert store.get_collection(GLOBAL_VARIABLES) == []
    u = store.get_variable("u", [1], collections=[TRAINABLE_VARIABLES, GLOBAL_VARIABLES])
    assert u.collections == (TRAINABLE_VARIABLES, GLOBAL_VARIABLES)


def test_custom_collections_hold_any_value_once(store):
    w = store.get_variable("w", [2])
    store.add_to_collection("my_collection_name", w)
    store.add_to_collection("my_collection_name", w)  # once
    store.add_to_collection("my_collection_name", 0.5)
    store.add_to_collection("losses", "l2")
    items = store.get_collection("my_collection_name")
    assert items[0] is w and items[1] == 0.5
    assert len(store.get_collection("my_collection_name")) == 2
    assert w.collections == (GLOBAL_VARIABLES, TRAINABLE_VARIABLES, "my_collection_name")
    assert store.get_collection("unknown") == []
    assert store.get_all_collection_keys() == [GLOBAL_VARIABLES, TRAINABLE_VARIABLES, "my_collection_name", "losses"]
    store.clear_collection("losses")
    assert store.get_collection("losses") == []


def test_get_collection_returns_a_new_list(store):
    store.get_variable("w", [1])
    listing = store.get_collection(GLOBAL_VARIABLES)
    listing.clear()
    assert len(store.get_collection(GLOBAL_VARIABLES)) == 1


def test_scope_filter_is_re_match_on_the_name(store):
    with store.variable_scope("conv1"):
        store.get_variable("weights", [1])
    with store.variable_scope("conv10"):
        store.get_variable("weights", [1])
    with store.variable_scope("net"):
        with store.variable_scope("conv1"):
            store.get_variable("weights", [1])
    store.add_to_collection(GLOBAL_VARIABLES + "_extra", 3.0)
    assert _names(store.get_collection(GLOBAL_VARIABLES, scope="conv1")) == ["conv1/weights", "conv10/weights"]
    assert _names(store.get_collection(GLOBAL_VARIABLES, scope="conv1/")) == ["conv1/weights"]
    assert _names(store.get_collection(GLOBAL_VARIABLES, scope=".*conv1/")) == ["conv1/weights", "net/conv1/weights"]
    # objects without a name are left out when filtering, as TF1
    assert store.get_collection(GLOBAL_VARIABLES + "_extra", scope=".*") == []


def test_module_level_functions_use_the_default_store():
    import varstore as vs

    with vs.variable_scope("conv1"):
        w = vs.get_variable("weights", [2])
    vs.add_to_collection("mine", w)
    assert vs.get_collection("mine")[0] is w
    assert _names(vs.get_collection(vs.GLOBAL_VARIABLES, scope="conv1")) == ["conv1/weights"]
    assert _names(vs.global_variables()) == ["conv1/weights"] and _names(vs.trainable_variables()) == ["conv1/weights"]
    assert vs.local_variables() == []
    assert vs.get_default_store().get_variable_by_name("conv1/weights") is w
