"""The walk of one restore: which varstore modules a `varstore.restore` passes through, and how often it
comes back to one it already left (issue 42, item 3: "a restore's walk visits each module once per level").

The metric, exactly:

1. `sys.setprofile` records every Python "call" and "return" in the restoring thread; only frames whose code
   lies in a module under `varstore/` are kept (a call through NumPy, h5py or the standard library is
   skipped, and the varstore frames it calls hang under the nearest varstore caller).
2. The kept frames form a call tree. Nested frames of the same module are merged into one node (a module
   calling its own functions is one visit), and so are consecutive siblings of the same module under one
   parent (a loop calling the same module N times is one visit; their children are concatenated and merged
   again). A run of siblings repeating the same sequence of modules (a loop body calling A then B, N times)
   is folded into one pass the same way, and a generator resumed (a context manager's exit, its body
   after `yield`) continues the visit that started it. What is left is the *walk*: a tree of module visits,
   independent of how many variables a loop handles as long as it calls the same modules in the same order.
3. `steps`: the nodes of the walk (visits). `modules`: the distinct modules among them.
   `returns`: for every node, its children's modules in order; each child whose module already appeared
   among that node's earlier children (with another module in between, else it would have been merged) is
   one return "to a module already left at the same call depth". A walk in which every module is entered
   once per level has returns == 0.

Run as a script (`python tests/checkpoint/_walk_trace.py [--show]`) it prints the numbers for an HDF5 and
a Zarr restore of the same small checkpoint (three small packed variables, two stored at their own path,
one of them over read_engine.THREADED_CHECK_BYTES) into Variables that hold memory; `--show` prints the walk.
"""

from __future__ import annotations

import gc
import inspect
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
PACKAGE = str(Path(__file__).resolve().parents[2] / "varstore")


@dataclass
class Visit:
    """One node of the walk: a module and the visits it made, in order."""

    module: str
    children: list[Visit] = field(default_factory=list)


@dataclass
class Walk:
    """The numbers of a walk (see the module docstring) and its tree."""

    steps: int
    modules: int
    returns: int
    root: Visit
    returned_to: list[tuple[str, str]]  # (parent module, module returned to)

    def visits_of(self, module: str) -> list[Visit]:
        """Every visit of `module`, in walk order."""
        found: list[Visit] = []

        def look(node: Visit) -> None:
            if node.module == module:
                found.append(node)
            for child in node.children:
                look(child)

        look(self.root)
        return found

    def render(self) -> str:
        lines: list[str] = []

        def show(node: Visit, depth: int) -> None:
            lines.append("  " * depth + node.module)
            for child in node.children:
                show(child, depth + 1)

        for child in self.root.children:
            show(child, 0)
        return "\n".join(lines)


def _module_of(filename: str) -> str | None:
    if not filename.startswith(PACKAGE):
        return None
    return "varstore" + filename[len(PACKAGE):].replace("\\", "/")


def trace(call: Any) -> Walk:
    """Runs `call()` under sys.setprofile and returns its walk (see the module docstring)."""
    root = Visit("<root>")
    stack: list[tuple[Any, Visit]] = []  # (frame, node) of varstore frames only
    resumed: dict[Any, Visit] = {}  # generator frames: a resumption continues the visit that started them

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            module = _module_of(frame.f_code.co_filename)
            if module is None:
                return
            parent = stack[-1][1] if stack else root
            node = resumed.get(frame)
            if node is None:
                if parent.module == module:
                    node = parent
                else:
                    node = Visit(module)
                    parent.children.append(node)
                if frame.f_code.co_flags & GENERATOR_FLAGS:
                    resumed[frame] = node
            stack.append((frame, node))
        elif event == "return":
            if stack and stack[-1][0] is frame:
                stack.pop()

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
    _merge(root)
    steps, names = _count(root)
    returned: list[tuple[str, str]] = []
    _returns(root, returned)
    return Walk(steps, len(names), len(returned), root, returned)


def _merge(node: Visit) -> None:
    children = node.children
    changed = True
    while changed:  # fold repeated runs: blocks of 1, 2, ... siblings followed by the same modules again
        changed = False
        for length in range(1, len(children) // 2 + 1):
            i = 0
            while i + 2 * length <= len(children):
                first, second = children[i:i + length], children[i + length:i + 2 * length]
                if [c.module for c in first] == [c.module for c in second]:
                    for kept, folded in zip(first, second):
                        kept.children.extend(folded.children)
                    del children[i + length:i + 2 * length]
                    changed = True
                else:
                    i += 1
    for child in children:
        _merge(child)


def _count(node: Visit) -> tuple[int, set[str]]:
    steps, names = 0, set()
    for child in node.children:
        sub_steps, sub_names = _count(child)
        steps += 1 + sub_steps
        names |= sub_names | {child.module}
    return steps, names


def returns_under(node: Visit) -> list[tuple[str, str]]:
    """The returns (see the module docstring) inside the subtree of `node`."""
    out: list[tuple[str, str]] = []
    _returns(node, out)
    return out


def modules_under(node: Visit) -> set[str]:
    """The modules visited inside the subtree of `node` (not counting itself)."""
    return _count(node)[1]


def _returns(node: Visit, out: list[tuple[str, str]]) -> None:
    seen: set[str] = set()
    for child in node.children:
        if child.module in seen:
            out.append((node.module, child.module))
        seen.add(child.module)
        _returns(child, out)


def restore_walk(directory: Path, suffix: str) -> Walk:
    """The walk of `varstore.restore` of a small checkpoint (`suffix` ".h5" or ".zarr") into a store whose
    Variables hold memory; the values restored are checked."""
    import varstore as vs
    from varstore.store.scopes import VariableStore

    rng = np.random.default_rng(0)
    values = {"small/a": rng.standard_normal((4,)).astype(np.float32),
              "small/b": rng.standard_normal((3, 2)).astype(np.float32),
              "small/c": np.arange(5, dtype=np.int64),
              "big/w": rng.standard_normal((64, 128)).astype(np.float32),   # 32 KiB: own path
              "big/x": rng.standard_normal((512, 600)).astype(np.float32)}  # 1.2 MB: checked off-thread

    def store_of(fill: bool) -> Any:
        store = VariableStore()
        for name, value in values.items():
            store.get_variable(name, shape=value.shape, dtype=value.dtype,
                               initializer=np.zeros).assign(value if fill else np.zeros_like(value))
        return store

    path = vs.save(directory / f"walk{suffix}", store_of(True))
    target = store_of(False)
    vs.restore(path, target)  # warm: imports and first-use caches are not the walk
    target = store_of(False)
    gc.collect()  # what the warm-up left is not collected (closed) inside the walk
    walk = trace(lambda: vs.restore(path, target))
    for name, value in values.items():
        np.testing.assert_array_equal(target.get_variable_by_name(name).numpy(), value)
    return walk


def main(argv: list[str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        for suffix in (".h5", ".zarr"):
            walk = restore_walk(Path(directory), suffix)
            print(f"{suffix}: steps {walk.steps}, modules {walk.modules}, returns {walk.returns}")
            if "--show" in argv:
                print(walk.render())
                print("returns:", walk.returned_to)


if __name__ == "__main__":
    main(sys.argv[1:])
