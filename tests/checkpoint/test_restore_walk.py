"""A restore plans once and reads once (issue 42, item 3): traced with sys.setprofile (tests/checkpoint/_walk_trace.py
defines the walk, its steps, modules and returns), a restore visits each module once per level.

Before (main at 0dde382, the same tool and checkpoint): HDF5 86 steps / 34 modules / 11 returns, Zarr 110 / 35 / 13;
after the plan (206f11f): 77 / 34 / 4 and 92 / 35 / 5, all in opening and closing. Now the open asks the storage once
(path_pin.pin_local: pin, LocalStorage, the file kept open), detection once (detection.open_own: container, index
header read through index_header.read_index_header, manifest checked) and restoration holds the reader with one
context manager (CheckpointReader.held: its names on entry, its close on exit): HDF5 72 / 34 / 0, Zarr 86 / 35 / 1.

The one return left (Zarr) is structural: reading an array of a Zarr directory (the manifest) opens its zarr.json,
parses it (_limits.load_json) and locates its chunk (base.RawExtent), then opens the chunk file that zarr.json
names; both opens go through storage/special_files.open_for_reading (never blocks on a FIFO), so
backends/zarr3/reader.py enters special_files, leaves it, and enters it again. Only moving the parse below the open
(or the second open elsewhere) would remove it, for a return that costs nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoint._walk_trace import modules_under, restore_walk, returns_under

READER = "varstore/checkpoint/read/reader.py"
ENGINE = "varstore/checkpoint/read/read_engine.py"
PLAN = "varstore/checkpoint/read/read_plan.py"
RESTORATION = "varstore/checkpoint/read/restoration.py"
READER_API = "varstore/checkpoint/read/reader_api.py"
DETECTION = "varstore/checkpoint/read/detection.py"
STORAGE = "varstore/storage/__init__.py"
PIN = "varstore/storage/path_pin.py"


ZARR_CHUNK_OPEN = ("varstore/backends/zarr3/reader.py", "varstore/storage/special_files.py")  # see the docstring


@pytest.mark.parametrize(("suffix", "left"), [(".h5", []), (".zarr", [ZARR_CHUNK_OPEN])])
def test_a_restore_walks_down_once(tmp_path: Path, suffix: str, left: list[tuple[str, str]]) -> None:
    walk = restore_walk(tmp_path, suffix)
    assert walk.returned_to == left, walk.render()
    (engine,) = walk.visits_of(ENGINE)
    assert returns_under(engine) == [], walk.render()  # the read: every module once per level
    plans = [child for child in engine.children if child.module == PLAN]
    assert len(plans) == 1 and engine.children[0] is plans[0]  # planned first, once
    for child in engine.children[1:]:  # executing the plan never reaches the reader
        assert child.module != READER and READER not in modules_under(child), walk.render()
    opened, restoration = (child for child in walk.root.children[0].children if child.module in (READER, RESTORATION))
    assert [child.module for child in opened.children][:4] == [STORAGE, READER_API, PIN, DETECTION]  # each once
    held = [child.module for child in restoration.children]
    assert READER not in held and held.count(READER_API) == 1  # the names and the close: one hold of the reader


def test_the_walk_counts_returns_to_a_module_at_the_same_depth() -> None:
    from tests.checkpoint import _walk_trace as tool

    root = tool.Visit("<root>", [tool.Visit("a", [tool.Visit("x"), tool.Visit("y"), tool.Visit("x")]),
                                 tool.Visit("b"), tool.Visit("a"), tool.Visit("b"), tool.Visit("c"),
                                 tool.Visit("a")])
    tool._merge(root)  # noqa: SLF001 - the folding rule: "a b a b" is one loop body
    assert [child.module for child in root.children] == ["a", "b", "c", "a"]
    assert [child.module for child in root.children[0].children] == ["x", "y", "x"]
    assert sorted(tool.returns_under(root)) == [("<root>", "a"), ("a", "x")]
