"""The import rules hold for EVERY import in varstore/ and cli/: no cycle, no upward import, third-party libraries in their one place.

The graph comes from tests/import_graph.py (module-level, function-level,
TYPE_CHECKING, `importlib.import_module("...")` and `__import__("...")`
imports alike); the layer order is the arrow line of docs/architecture.md.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests import import_graph as graph

IMPORTS = graph.all_imports()
EDGES = graph.internal_edges(IMPORTS)
MODULES = graph.modules()

# Third-party module -> the only places (prefixes of repo-relative paths) allowed to import it (COMMON.md, STYLE.md).
ALLOWED = {
    "h5py": ("varstore/backends/hdf5/",),
    "zarr": ("varstore/backends/zarr3/",),
    "numcodecs": ("varstore/backends/zarr3/",),
    "cupy": ("varstore/store/devices.py",),
    "ml_dtypes": ("varstore/dtypes.py",),
    "safetensors": ("varstore/formats/safetensors/single.py",),
    "click": ("cli/",),
    "tqdm": ("cli/",),
    "matplotlib": ("varstore/inspect/report_figures.py",),  # the HTML report's figures
    "mpi4py": ("varstore/distributed/",),
    "obstore": ("varstore/storage/",),
    "torch": ("varstore/torch/", "varstore/formats/dcp/writer.py"),
    "jax": ("varstore/jax/",),
    "jaxlib": ("varstore/jax/",),
    "pickle": ("varstore/formats/_restricted_pickle.py",),  # the one restricted Unpickler subclass
    "pickletools": ("varstore/formats/_restricted_pickle.py",),
    "tensorstore": ("varstore/formats/orbax/reader.py", "varstore/formats/orbax/writer.py"),
    "orbax": (),  # Orbax's layout is read and written through tensorstore; the tests compare with orbax
    "gguf": ("varstore/formats/gguf/writer.py", "varstore/formats/gguf/_quants.py"),  # the reader follows the spec itself; the writer and the dequantizer are gguf's
    "obstore": ("varstore/storage/",),
    "icechunk": ("varstore/storage/icechunk_repo.py",),
    "blake3": ("varstore/checkpoint/manage/snapshot_parent.py",),
    "boto3": (),     # the library signs the two S3 calls obstore lacks itself (storage/_s3_multipart.py)
    "botocore": (),
    "moto": (),      # the test server, never the library
}

# The core: never imports checkpoint/, backends/, formats/, inspect/, storage/, distributed/ (also implied by the layers).
CORE = {"variables", "scopes", "initializers", "initializers_v1", "collections", "devices", "device_transfers", "placement", "_naming",
        "_array_interop", "dtypes", "errors", "_version", "_core_api", "partitioning", "ownership",
        "values", "value_sources", "_variable_state", "variable_batches", "_assignment", "variable_options",
        "_variable_scope", "reuse", "default_store", "partitioners", "_getter"}
ABOVE_CORE = ("checkpoint", "backends", "formats", "inspect", "storage", "distributed")

# Layers the doc's arrow line may name before their package exists (other branches add them).
PLANNED_LAYERS = {"storage", "distributed", "torch", "jax"}


def _describe(edge: tuple[str, str]) -> str:
    return ", ".join(dict.fromkeys(f"{item.where()} ({item.kind})" for item in EDGES[edge]))


# ------------------------------------------------------------ third-party rules
@pytest.mark.parametrize("item", [i for i in IMPORTS if i.top in ALLOWED], ids=lambda i: f"{i.where()}-{i.top}")
def test_third_party_libraries_are_imported_only_where_allowed(item: graph.Import) -> None:
    assert item.path.startswith(ALLOWED[item.top]) and ALLOWED[item.top], (
        f"{item.where()} imports {item.target}; only {ALLOWED[item.top] or 'nothing'} may")


def test_every_import_has_a_literal_name() -> None:
    dynamic = [i.where() for i in IMPORTS if i.target is None]
    assert not dynamic, f"imports whose module name is not a string literal (the layering test cannot see them): {dynamic}"


def test_the_cli_uses_only_the_public_api() -> None:
    """cli/ is a client of `varstore` (its public names) and `varstore.errors`, never of an internal room."""
    bad = [f"{i.where()} imports {i.target}" for i in IMPORTS
           if i.path.startswith("cli/") and i.top == "varstore" and i.target not in ("varstore", "varstore.errors")]
    assert not bad, bad


def test_library_never_imports_the_cli() -> None:
    bad = [f"{i.where()} imports {i.target}" for i in IMPORTS
           if i.path.startswith("varstore/") and i.top in ("varstore_cli", "click", "tqdm")]
    assert not bad


@pytest.mark.parametrize("module", sorted(m for m in MODULES if graph.layer_of(m) in CORE))
def test_core_never_imports_upper_packages(module: str) -> None:
    bad = [f"{i.where()} imports {i.target}" for i in IMPORTS
           if i.source == module and i.target and graph.layer_of(i.target) in ABOVE_CORE
           and i.top == "varstore"]
    assert not bad


# ------------------------------------------------------------------- cycles
def test_no_import_cycles() -> None:
    edges = set(EDGES)
    components = graph.strongly_connected(set(MODULES), edges)
    report = []
    for component in components:
        path = graph.cycle_path(component, edges)
        steps = [f"{a} -> {b}  [{_describe((a, b))}]" for a, b in zip(path, path[1:])]
        report.append("cycle: " + " -> ".join(path) + "\n    " + "\n    ".join(steps))
    assert not report, ("import cycles (a function-level import that only breaks a cycle is still one; "
                        "pass a Protocol in instead):\n" + "\n".join(report))


# ----------------------------------------------------------------- layers
LAYERS = graph.layer_order()
RANK = {name: index for index, layer in enumerate(LAYERS) for name in layer}


def test_every_module_has_a_layer_in_the_doc() -> None:
    missing = sorted({f"{graph.layer_of(m)} ({m})" for m in MODULES if graph.layer_of(m) not in RANK})
    assert not missing, f"docs/architecture.md's arrow line does not place: {missing}"


def test_the_doc_names_no_layer_twice_and_no_stale_layer() -> None:
    names = [name for layer in LAYERS for name in layer]
    assert len(names) == len(set(names)), f"a layer is named twice in the arrow line: {names}"
    present = {graph.layer_of(m) for m in MODULES}
    stale = sorted(set(names) - present - PLANNED_LAYERS)
    assert not stale, f"the arrow line names layers with no module: {stale}"


def test_no_upward_imports() -> None:
    """Every edge points to the importer's own layer or one to its left in the doc's arrow line."""
    upward = []
    for (source, target), items in sorted(EDGES.items()):
        low, high = graph.layer_of(source), graph.layer_of(target)
        if low in RANK and high in RANK and RANK[high] > RANK[low]:
            upward.append(f"{source} ({low}) imports {target} ({high}) at {_describe((source, target))}")
    derived = " <- ".join("`" + ", ".join(layer) + "`" for layer in graph.derived_layers(set(EDGES)))
    assert not upward, ("upward imports, against docs/architecture.md's arrow line:\n  " + "\n  ".join(upward)
                        + f"\nthe code implies at least: {derived}")


# ------------------------------------------------------- the graph itself
def _tree(tmp_path: Path, files: dict[str, str]) -> list[graph.Import]:
    for name, text in files.items():
        path = tmp_path / "varstore" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return graph.all_imports(((tmp_path / "varstore", "varstore"),), tmp_path)


def test_the_graph_sees_function_level_importlib_and_type_checking_imports(tmp_path: Path) -> None:
    imports = _tree(tmp_path, {
        "__init__.py": "",
        "a.py": """
            import importlib
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from varstore.d import D
            def f():
                from . import b
                return importlib.import_module("varstore.c.inner")
            """,
        "b.py": "x = __import__('varstore.a')\n",
        "c/__init__.py": "from varstore.c.inner import thing\n",
        "c/inner.py": "def g(name):\n    import importlib\n    return importlib.import_module(name)\n",
        "d.py": "",
    })
    found = {(i.source, i.target, i.kind) for i in imports if i.top in ("varstore", "")}
    assert found == {
        ("varstore.a", "varstore.d", "type-checking"),
        ("varstore.a", "varstore.b", "function"),
        ("varstore.a", "varstore.c.inner", "importlib"),
        ("varstore.b", "varstore.a", "__import__"),
        ("varstore.c", "varstore.c.inner", "module"),
        ("varstore.c.inner", None, "importlib"),
    }
    edges = set(graph.internal_edges(imports))
    components = graph.strongly_connected({"varstore.a", "varstore.b"}, edges)
    assert components == [["varstore.a", "varstore.b"]]
    assert graph.cycle_path(components[0], edges) == ["varstore.a", "varstore.b", "varstore.a"]


def test_the_graph_reports_a_three_module_cycle_in_order(tmp_path: Path) -> None:
    imports = _tree(tmp_path, {
        "__init__.py": "",
        "x.py": "from varstore import y\n",
        "y.py": "import varstore.z\n",
        "z.py": "def late():\n    from varstore.x import thing\n",
    })
    edges = set(graph.internal_edges(imports))
    assert edges == {("varstore.x", "varstore.y"), ("varstore.y", "varstore.z"), ("varstore.z", "varstore.x")}
    (component,) = graph.strongly_connected(set(), edges)
    assert graph.cycle_path(component, edges) == ["varstore.x", "varstore.y", "varstore.z", "varstore.x"]


def test_layer_names_of_modules() -> None:
    assert graph.layer_of("varstore_cli.main") == "cli"
    assert graph.layer_of("varstore") == "varstore"
    assert graph.layer_of("varstore.checkpoint.write.writer") == "checkpoint"
    assert graph.layer_of("varstore._torch_state") == "torch"
    assert graph.layer_of("varstore.jax") == "jax"
    assert graph.layer_of("varstore.torch._sharded") == "torch"
    assert graph.layer_of("varstore.store._naming") == "_naming"
    assert graph.layer_of("varstore.store.scopes") == "scopes"
    assert graph.layer_of("varstore.store") == "store"
    assert graph.layer_of("varstore.dtypes") == "dtypes"


def test_arrow_line_parsing() -> None:
    text = "intro\n\nLayers, lowest first (arrows: is imported by):\n\n`a, b` <- `c`\n<- `d`.\n\nafter\n"
    assert graph.layer_order(text) == [["a", "b"], ["c"], ["d"]]
    with pytest.raises(AssertionError, match="malformed layer"):
        graph.layer_order("Layers, lowest first\n\n`a` <- c\n")
