"""A restore plans once and reads once (issue 42, item 3): traced with sys.setprofile (tests/checkpoint/_walk_trace.py
defines the walk, its steps, modules and returns), the read visits each module once per level.

Before (main at 0dde382, the same tool and checkpoint): HDF5 86 steps / 34 modules / 11 returns, Zarr 110 / 35 / 13;
inside read_engine: 6 returns (read_plan x3, variables, variable_batches, and reader.py reached from the values).
Left, documented: opening the checkpoint (reader.py -> storage, detection; detection -> storage/local.py; Zarr:
path_pin, special_files) and restoration.py asking the reader for its keys before the read and closing it after.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoint._walk_trace import modules_under, restore_walk, returns_under

READER = "varstore/checkpoint/read/reader.py"
ENGINE = "varstore/checkpoint/read/read_engine.py"
PLAN = "varstore/checkpoint/read/read_plan.py"


@pytest.mark.parametrize(("suffix", "before", "now"), [(".h5", 11, 4), (".zarr", 13, 5)])
def test_a_restore_walks_down_once(tmp_path: Path, suffix: str, before: int, now: int) -> None:
    walk = restore_walk(tmp_path, suffix)
    assert walk.returns <= now < before, walk.returned_to
    (engine,) = walk.visits_of(ENGINE)
    assert returns_under(engine) == [], walk.render()  # the read: every module once per level
    plans = [child for child in engine.children if child.module == PLAN]
    assert len(plans) == 1 and engine.children[0] is plans[0]  # planned first, once
    for child in engine.children[1:]:  # executing the plan never reaches the reader
        assert child.module != READER and READER not in modules_under(child), walk.render()


def test_the_walk_counts_returns_to_a_module_at_the_same_depth() -> None:
    from tests.checkpoint import _walk_trace as tool

    root = tool.Visit("<root>", [tool.Visit("a", [tool.Visit("x"), tool.Visit("y"), tool.Visit("x")]),
                                 tool.Visit("b"), tool.Visit("a"), tool.Visit("b"), tool.Visit("c"),
                                 tool.Visit("a")])
    tool._merge(root)  # noqa: SLF001 - the folding rule: "a b a b" is one loop body
    assert [child.module for child in root.children] == ["a", "b", "c", "a"]
    assert [child.module for child in root.children[0].children] == ["x", "y", "x"]
    assert sorted(tool.returns_under(root)) == [("<root>", "a"), ("a", "x")]
