"""varstore: model variables and checkpoints without a framework.

The whole public API is re-exported here: the variable store (Variable,
VariableStore, variable scopes, collections, initializers, devices),
checkpoints (save, restore, load, open_checkpoint, CheckpointManager), converters
(convert, open_checkpoint for foreign formats), inspection (variable_stats,
diff_checkpoints) and every error class.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from varstore import _core_api, dtypes, errors
from varstore._version import __version__
from varstore._core_api import *  # noqa: F401,F403
from varstore.errors import *  # noqa: F401,F403

if TYPE_CHECKING:
    from varstore.checkpoint import RestoreResult, SaveHandle
    from varstore.distributed.api import CheckpointManager, restore, save  # comm=: one process or every rank
    from varstore.checkpoint.reader_api import CheckpointReader, SkippedEntry, VariableInfo
    from varstore.convert import ConvertReport, convert, detect_format, open_checkpoint
    from varstore.convert.load import load
    from varstore.convert.registry import FormatEntry, register_format, unregister_format
    from varstore.inspect import CheckpointDiff, VariableStats, diff_checkpoints, scope_tree, variable_stats


def _checkpoint() -> ModuleType:
    return importlib.import_module("varstore.checkpoint")


def _distributed_api() -> ModuleType:
    return importlib.import_module("varstore.distributed.api")


def _reader_api() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.reader_api")


def _convert() -> ModuleType:
    return importlib.import_module("varstore.convert")


def _registry() -> ModuleType:
    return importlib.import_module("varstore.convert.registry")


def _load() -> ModuleType:
    return importlib.import_module("varstore.convert.load")


def _inspect() -> ModuleType:
    return importlib.import_module("varstore.inspect")


#: Public names imported on first access (module __getattr__): `import varstore` loads the core only,
#: so a fresh process reaches its first array sooner (issue 11); `varstore.save` etc. work as before.
_LAZY: dict[str, Callable[[], ModuleType]] = {
    "save": _distributed_api, "restore": _distributed_api, "CheckpointManager": _distributed_api,
    "RestoreResult": _checkpoint, "SaveHandle": _checkpoint,
    "CheckpointReader": _reader_api, "SkippedEntry": _reader_api, "VariableInfo": _reader_api,
    "convert": _convert, "ConvertReport": _convert, "detect_format": _convert, "open_checkpoint": _convert,
    "FormatEntry": _registry, "register_format": _registry, "unregister_format": _registry,
    "load": _load,
    "CheckpointDiff": _inspect, "VariableStats": _inspect, "diff_checkpoints": _inspect,
    "scope_tree": _inspect, "variable_stats": _inspect,
}


def __getattr__(name: str) -> Any:
    loader = _LAZY.get(name)
    if loader is None:
        raise AttributeError(f"module 'varstore' has no attribute {name!r}")
    value = getattr(loader(), name)
    globals()[name] = value  # later accesses skip this function
    return value


class _Package(ModuleType):
    """The varstore package's module type: `varstore.convert` stays the public convert() function when the
    varstore.convert subpackage is imported (the import system then sets the package attribute)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "convert" and isinstance(value, ModuleType):
            value = value.convert
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = list(_core_api.__all__) + list(errors.__all__) + [
    "dtypes",
    "errors",
    "save",
    "restore",
    "load",
    "RestoreResult",
    "SaveHandle",
    "CheckpointManager",
    "open_checkpoint",
    "CheckpointReader",
    "VariableInfo",
    "SkippedEntry",
    "convert",
    "ConvertReport",
    "detect_format",
    "FormatEntry",
    "register_format",
    "unregister_format",
    "variable_stats",
    "VariableStats",
    "diff_checkpoints",
    "CheckpointDiff",
    "scope_tree",
]
