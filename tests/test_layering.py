"""The import rules of STYLE.md hold: each third-party library in its one module, no upward imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = sorted((ROOT / "varstore").rglob("*.py"))
CLI = sorted((ROOT / "cli").rglob("*.py"))

# third-party module -> the only places (prefixes of repo-relative paths) allowed to import it
ALLOWED = {
    "h5py": ("varstore/backends/hdf5/",),
    "zarr": ("varstore/backends/zarr3/",),
    "numcodecs": ("varstore/backends/zarr3/",),
    "cupy": ("varstore/devices.py",),
    "ml_dtypes": ("varstore/dtypes.py",),
    "safetensors": ("varstore/convert/safetensors.py",),
    "click": ("cli/",),
    "tqdm": ("cli/",),
    "pickle": ("varstore/convert/_restricted_pickle.py",),  # the one restricted Unpickler subclass
    "pickletools": ("varstore/convert/_restricted_pickle.py",),
    "tensorstore": ("varstore/convert/orbax.py",),
    "gguf": (),  # the GGUF reader follows the spec itself
}
CORE = {"variables", "scopes", "initializers", "collections", "devices", "placement", "_naming",
        "_array_interop", "dtypes", "errors"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", LIBRARY + CLI, ids=lambda p: str(p.relative_to(ROOT)))
def test_third_party_libraries_are_imported_only_where_allowed(path: Path) -> None:
    relative = str(path.relative_to(ROOT))
    for name in _imports(path):
        top = name.split(".")[0]
        if top in ALLOWED:
            assert relative.startswith(ALLOWED[top]), f"{relative} imports {top}"


@pytest.mark.parametrize("path", [p for p in LIBRARY if p.stem in CORE and p.parent.name == "varstore"],
                         ids=lambda p: p.name)
def test_core_never_imports_checkpoint_backends_or_convert(path: Path) -> None:
    for name in _imports(path):
        assert not name.startswith(("varstore.checkpoint", "varstore.backends", "varstore.convert",
                                    "varstore.inspect")), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_library_never_imports_the_cli(path: Path) -> None:
    assert not any(n.split(".")[0] in ("varstore_cli", "click") for n in _imports(path))


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_lower_layers_never_import_upper_ones(path: Path) -> None:
    relative = str(path.relative_to(ROOT))
    forbidden: tuple[str, ...] = ()
    if relative.startswith("varstore/backends/"):
        forbidden = ("varstore.checkpoint.writer", "varstore.checkpoint.restore", "varstore.checkpoint.manager",
                     "varstore.convert", "varstore.inspect", "varstore.scopes", "varstore.variables")
    elif relative.startswith("varstore/checkpoint/"):
        forbidden = ("varstore.convert", "varstore.inspect")
    for name in _imports(path):
        assert not name.startswith(forbidden), f"{relative} imports {name}"
