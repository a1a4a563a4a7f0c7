"""The import graph of varstore/ and cli/, read with ast: every import, wherever and however it is written.

Used by tests/test_layering.py (cycles, upward imports, third-party rules) and
tests/test_architecture_doc.py (the doc's module list and arrow line). Sees
module-level imports, imports inside functions and classes, imports under
`if TYPE_CHECKING:`, `importlib.import_module("...")` and `__import__("...")`
with a string literal; a dynamic import whose name is not a literal is
recorded with `target=None` so the tests can refuse it (the graph would not
see it).

An edge goes to the module named by the import: `from varstore.checkpoint
import atomic` is an edge to `varstore.checkpoint.publish.atomic` (a submodule);
`from varstore.checkpoint import save` is an edge to `varstore.checkpoint`
(the package's `__init__`). The implicit import of a parent package that
Python performs before a submodule is not an edge: otherwise every package
whose `__init__` re-exports its submodules would be a cycle by construction.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import deque
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: (source folder, import name of that folder) for each importable tree we check.
TREES = ((ROOT / "varstore", "varstore"), (ROOT / "cli" / "varstore_cli", "varstore_cli"))
INTERNAL = ("varstore", "varstore_cli")


@dataclasses.dataclass(frozen=True)
class Import:
    """One import statement or call.

    Attributes:
      source: the importing module, e.g. "varstore.checkpoint.write.writer".
      target: the imported module as written and resolved (internal modules
        resolve to the module or package that exists), None for a dynamic
        import whose name is not a string literal.
      path: the importing file, relative to the repository root.
      line: line number of the import.
      kind: "module", "function" (inside a def or lambda), "type-checking"
        (under `if TYPE_CHECKING:`), "importlib" or "__import__".
    """

    source: str
    target: str | None
    path: str
    line: int
    kind: str

    @property
    def top(self) -> str:
        """The top-level package of the target ("h5py" for "h5py.h5f")."""
        return (self.target or "").split(".")[0]

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def modules(trees: tuple[tuple[Path, str], ...] = TREES) -> dict[str, Path]:
    """Every module of varstore/ and cli/: dotted name -> file ("varstore.checkpoint" -> .../__init__.py)."""
    found: dict[str, Path] = {}
    for folder, package in trees:
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(name: str, known: dict[str, Path]) -> str:
    """The longest prefix of `name` that is a known internal module (`name` itself for third-party ones)."""
    if name.split(".")[0] not in INTERNAL:
        return name
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.AST, str]]:
    """Every node under `node` with the kind of place it sits in (module, function, type-checking)."""
    for child in ast.iter_child_nodes(node):
        child_kind = kind
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            child_kind = "function"
        yield child, child_kind
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for statement in child.body:
                yield statement, "type-checking"
                yield from _walk(statement, "type-checking")
            for statement in child.orelse:
                yield statement, child_kind
                yield from _walk(statement, child_kind)
            continue
        yield from _walk(child, child_kind)


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def imports_of(module: str, path: Path, known: dict[str, Path], root: Path = ROOT) -> list[Import]:
    """Every import in one file (see the module docstring for what counts); paths relative to `root`."""
    relative = str(path.relative_to(root))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def add(target: str | None, line: int, kind: str) -> None:
        found.append(Import(module, None if target is None else _resolve(target, known), relative, line, kind))

    for node, kind in _walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), "module"):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, kind)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                parent = ".".join(base + ([node.module] if node.module else []))
            else:
                parent = node.module or ""
            for alias in node.names:
                submodule = f"{parent}.{alias.name}"
                add(submodule if submodule in known else parent, node.lineno, kind)
        elif isinstance(node, ast.Call) and _call_name(node) in ("import_module", "__import__"):
            call_kind = "importlib" if _call_name(node) == "import_module" else "__import__"
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str) \
                    and not argument.value.startswith("."):
                add(argument.value, node.lineno, call_kind)
            else:
                add(None, node.lineno, call_kind)
    return found


def all_imports(trees: tuple[tuple[Path, str], ...] = TREES, root: Path = ROOT) -> list[Import]:
    """Every import in varstore/ and cli/ (or in `trees`), third-party ones included."""
    known = modules(trees)
    return [item for name, path in known.items() for item in imports_of(name, path, known, root)]


def internal_edges(imports: list[Import] | None = None) -> dict[tuple[str, str], list[Import]]:
    """(importer, imported) -> the imports that make the edge, for imports between varstore/cli modules."""
    edges: dict[tuple[str, str], list[Import]] = {}
    for item in all_imports() if imports is None else imports:
        if item.target is not None and item.top in INTERNAL and item.target != item.source:
            edges.setdefault((item.source, item.target), []).append(item)
    return edges


def strongly_connected(nodes: set[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    successors: dict[str, list[str]] = {node: [] for node in nodes}
    for source, target in sorted(edges):
        successors.setdefault(source, []).append(target)
        successors.setdefault(target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in sorted(successors):
        if root in index:
            continue
        work = [(root, iter(successors[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors[child])))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def cycle_path(component: list[str], edges: set[tuple[str, str]]) -> list[str]:
    """A shortest cycle through the first module of `component`: [a, b, ..., a]."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for source, target in sorted(edges):
            if source != node or target not in members:
                continue
            if target == start:
                chain = [node]  # node, its BFS parent, ..., start
                while chain[-1] != start:
                    chain.append(previous[chain[-1]])
                return [*reversed(chain), start]
            if target not in previous:
                previous[target] = node
                queue.append(target)
    raise AssertionError(f"no cycle through {start} in {component}")


# ------------------------------------------------------------------ layers
ARCHITECTURE_DOC = ROOT / "docs" / "architecture.md"
LAYERS_MARKER = "Layers, lowest first"


def layer_of(module: str) -> str:
    """The name a module has in the doc's arrow line.

    "varstore_cli.*" -> "cli"; "varstore" (the package `__init__`, the public
    API) -> "varstore"; "varstore.checkpoint.write.writer" -> "checkpoint" (a
    subpackage is one layer); "varstore.torch._sharded" -> "torch" (a face's
    package holds its private helpers; so do the older "varstore._torch_state"
    and "varstore._jax_arrays"); "varstore.errors" -> "errors". The variable
    store's package is the exception: each of its modules keeps its own layer,
    so the core's order stays checked ("varstore.store.scopes" -> "scopes";
    its empty `__init__` -> "store").
    """
    parts = module.split(".")
    if parts[0] == "varstore_cli":
        return "cli"
    if len(parts) == 1:
        return "varstore"
    if parts[1] == "store" and len(parts) > 2:
        return parts[2]
    for adapter in ("torch", "jax"):
        if parts[1].startswith(f"_{adapter}_"):
            return adapter
    return parts[1]


def layer_order(text: str | None = None) -> list[list[str]]:
    """The layers of docs/architecture.md's arrow line, lowest first: [["errors", "_version"], ["dtypes", ...], ...].

    The line is the paragraph after the one that starts with LAYERS_MARKER:
    "`a, b` <- `c` <- ..." (arrows read "is imported by").
    """
    text = ARCHITECTURE_DOC.read_text(encoding="utf-8") if text is None else text
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(LAYERS_MARKER)]
    if len(starts) != 1:
        raise AssertionError(f"docs/architecture.md needs exactly one paragraph starting with {LAYERS_MARKER!r}")
    index = starts[0] + 1
    while index < len(lines) and lines[index].strip() and not lines[index].lstrip().startswith(("`", "<-")):
        index += 1  # the rest of the marker paragraph
    while index < len(lines) and not lines[index].strip():
        index += 1
    chain = []
    while index < len(lines) and lines[index].strip():
        chain.append(lines[index].strip())
        index += 1
    layers = []
    for piece in " ".join(chain).split("<-"):
        piece = piece.strip().rstrip(".").strip()
        if not (piece.startswith("`") and piece.endswith("`") and piece.count("`") == 2):
            raise AssertionError(f"the arrow line in docs/architecture.md has a malformed layer {piece!r}; "
                                 f"write layers as `name, name` separated by <-")
        layers.append([name.strip() for name in piece.strip("`").split(",") if name.strip()])
    return layers


def derived_layers(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The layering the code implies: layer names ranked by the longest chain of imports below them.

    Edges inside one layer and edges of cycles are ignored (the cycle test reports those).
    """
    names = {layer_of(module) for edge in edges for module in edge}
    below: dict[str, set[str]] = {name: set() for name in names}
    for source, target in edges:
        if layer_of(source) != layer_of(target):
            below[layer_of(source)].add(layer_of(target))
    rank: dict[str, int] = {}

    def depth(name: str, seen: frozenset[str]) -> int:
        if name in rank:
            return rank[name]
        lower = [depth(other, seen | {name}) + 1 for other in below[name] if other not in seen | {name}]
        rank[name] = max(lower, default=0)
        return rank[name]

    for name in sorted(names):
        depth(name, frozenset())
    return [sorted(n for n in names if rank[n] == level) for level in range(max(rank.values(), default=-1) + 1)]
