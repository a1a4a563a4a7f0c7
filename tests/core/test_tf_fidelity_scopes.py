"""Issue 27 items 3, 5, 6: TF1 name scopes, values that do not fit their dtype, collections filtered by scope.

Expected names are what a TF1 graph gives (tf.compat.v1.variable_scope /
name_scope, without TF's ":0" output suffix).
"""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from varstore.errors import DtypeMismatchError, ValueOutOfRangeError
from varstore.store.variables import Variable


def test_reopened_variable_scope_opens_a_new_name_scope(store):
    with store.variable_scope("foo") as first:
        a = Variable(1.0, store=store)
        v = store.get_variable("v", [1])
    with store.variable_scope("foo") as second:
        b = Variable(1.0, store=store)
        w = store.get_variable("w", [1])
    with store.variable_scope(first) as third:  # by object: a new name scope too
        c = Variable(1.0, store=store)
        x = store.get_variable("x", [1])
    assert [a.name, b.name, c.name] == ["foo/Variable", "foo_1/Variable", "foo_2/Variable"]
    assert [v.name, w.name, x.name] == ["foo/v", "foo/w", "foo/x"]
    assert [s.original_name_scope for s in (first, second, third)] == ["foo/", "foo_1/", "foo/"]


def test_nested_scopes_inside_a_reopened_scope(store):
    with store.variable_scope("foo"):
        pass
    with store.variable_scope("foo"):
        with store.variable_scope("bar") as bar:
            u = Variable(1.0, name="u", store=store)
            g = store.get_variable("g", [1])
    assert (u.name, g.name, bar.name, bar.original_name_scope) == ("foo_1/bar/u", "foo/bar/g", "foo/bar", "foo_1/bar/")


def test_name_scope_names_variables_not_get_variable(store):
    with store.name_scope("ns") as ns:
        a = Variable(1.0, store=store)
        g = store.get_variable("g", [1])
        with store.variable_scope("vs"):
            b = Variable(1.0, store=store)
            h = store.get_variable("h", [1])
    with store.name_scope("ns") as again:
        c = Variable(1.0, store=store)
    assert (ns, again) == ("ns/", "ns_1/")
    assert [a.name, b.name, c.name] == ["ns/Variable", "ns/vs/Variable", "ns_1/Variable"]
    assert [g.name, h.name] == ["g", "vs/h"]


def test_name_scope_reentry_root_and_default_name(store):
    with store.variable_scope("foo") as foo:
        pass
    with store.name_scope(foo.original_name_scope) as same:  # a name ending in "/" is re-entered as is
        a = Variable(1.0, store=store)
    with store.name_scope("outer"):
        with store.name_scope(None) as root:  # None resets to the root, as tf.name_scope(None)
            b = Variable(1.0, store=store)
        with store.name_scope(None, default_name="block") as block:
            c = Variable(1.0, store=store)
    assert (same, root, block) == ("foo/", "", "outer/block/")
    assert [a.name, b.name, c.name] == ["foo/Variable", "Variable", "outer/block/Variable"]
    with store.name_scope("Variable") as taken:  # names and name scopes share one namespace, as a TF graph
        pass
    assert taken == "Variable_1/"


def test_module_level_name_scope_acts_on_the_default_store():
    with vs.variable_scope("m"):
        pass
    with vs.variable_scope("m"):
        with vs.name_scope("inner"):
            v = vs.Variable(1.0)
    assert v.name == "m_1/inner/Variable"


@pytest.mark.parametrize(("value", "dtype"), [(1e40, None), ([1.0, -1e39], None), (1e40, np.float32),
                                              (70000.0, np.float16), (2**40, np.int32)])
def test_values_that_do_not_fit_raise_as_tf(store, value, dtype):
    with pytest.raises(ValueOutOfRangeError, match="'big'") as raised:
        Variable(value, dtype=dtype, name="big", store=store)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, DtypeMismatchError)


def test_values_that_fit_or_are_already_infinite_are_kept(store):
    assert Variable(1e40, dtype=np.float64, store=store).numpy() == 1e40
    assert Variable(float("inf"), store=store).numpy() == np.inf
    assert Variable(3.4e38, store=store).numpy() == np.float32(3.4e38)


def test_model_variables_and_scope_filters_use_re_match(store):
    with store.variable_scope("enc"):
        w = store.get_variable("w", [1], collections=[vs.GLOBAL_VARIABLES, vs.MODEL_VARIABLES])
        local = store.get_variable("step", [1], collections=[vs.LOCAL_VARIABLES], trainable=False)
    with store.variable_scope("dec"):
        d = store.get_variable("w", [1])
    with store.variable_scope("xenc"):
        x = store.get_variable("w", [1])
    assert vs.MODEL_VARIABLES == "model_variables"
    assert store.model_variables() == [w]
    assert store.global_variables(scope="enc") == [w]  # re.match: anchored at the start, "xenc" is not matched
    assert store.global_variables(".*enc") == [w, x]
    assert store.trainable_variables("dec") == [d]
    assert store.local_variables("enc") == [local] and store.local_variables("dec") == []
    assert store.model_variables("dec") == []


def test_module_level_collection_functions_take_scope():
    with vs.variable_scope("a"):
        a = vs.get_variable("w", [1], collections=[vs.GLOBAL_VARIABLES, vs.MODEL_VARIABLES])
    b = vs.get_variable("b", [1])
    assert vs.global_variables("a/") == [a] and vs.global_variables() == [a, b]
    assert vs.trainable_variables("b") == [b] and vs.model_variables() == [a] and vs.local_variables("a") == []
