"""The default store and the module-level TF1 functions (varstore/store/default_store.py)."""

from __future__ import annotations

import varstore as vs
from varstore.store import default_store


def test_module_level_variable_scope_and_scope_object():
    with vs.variable_scope("m") as scope:
        v = vs.get_variable("v", [1])
        assert vs.get_variable_scope() is scope
    with vs.variable_scope(scope, reuse=True):
        assert vs.get_variable("v") is v


def test_reset_default_store_replaces_the_store_module_functions_use():
    old = vs.get_default_store()
    vs.get_variable("kept", [1])
    new = default_store.reset_default_store()
    assert new is not old and vs.get_default_store() is new
    assert [v.name for v in vs.global_variables()] == []
    assert [v.name for v in old.global_variables()] == ["kept"]
