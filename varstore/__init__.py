"""varstore: model variables and checkpoints without a framework.

The whole public API is re-exported here: the variable store (Variable,
VariableStore, variable scopes, collections, initializers, devices),
checkpoints (save, restore, load, open_checkpoint, CheckpointManager), converters
(convert, open_checkpoint for foreign formats), inspection (variable_stats,
diff_checkpoints, report) and every error class.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from varstore import dtypes, errors
from varstore._version import __version__ as __version__
from varstore.errors import *  # noqa: F401,F403

if TYPE_CHECKING:
    from varstore import initializers as initializers
    from varstore._core_api import *  # noqa: F401,F403
    from varstore.checkpoint.read.restore_result import RestoreResult as RestoreResult
    from varstore.checkpoint.write.snapshot import SaveHandle as SaveHandle
    from varstore.distributed.api import CheckpointManager as CheckpointManager, restore as restore, save as save  # comm=: one process or every rank
    from varstore.checkpoint.read.reader_api import CheckpointReader as CheckpointReader, SkippedEntry as SkippedEntry, VariableInfo as VariableInfo, select_names as select_names
    from varstore._open import latest_checkpoint as latest_checkpoint, open_checkpoint as open_checkpoint
    from varstore.formats import ConvertReport as ConvertReport, convert as convert, detect_format as detect_format
    from varstore.formats.load import load as load
    from varstore.formats.registry import FormatEntry as FormatEntry, format_entry as format_entry, register_format as register_format, unregister_format as unregister_format
    from varstore.inspect import CheckpointDiff as CheckpointDiff, ScopeNode as ScopeNode, VariableStats as VariableStats, diff_checkpoints as diff_checkpoints, scope_tree as scope_tree, variable_stats as variable_stats
    from varstore.inspect import ReportResult as ReportResult, report as report
    from varstore.checkpoint.manage.managed import is_manager_directory as is_manager_directory, list_checkpoints as list_checkpoints
    from varstore.checkpoint.manage.incremental_manager import incremental_steps as incremental_steps
    from varstore.formats.format_entry import parse_write_options as parse_write_options
    from varstore.formats.registry import read_format_names as read_format_names, write_format_names as write_format_names
    from varstore.formats.rename import parse_rename_rule as parse_rename_rule
    from varstore.storage import is_url as is_url, parse_storage_options as parse_storage_options


def _core() -> ModuleType:
    return importlib.import_module("varstore._core_api")


#: The core's public names (varstore/_core_api.py's __all__; tests/core/test_lazy_imports.py checks they
#: agree). Loaded together on first access: a process that only reads a checkpoint never imports the
#: variable store, scopes, initializers or devices (issue 11, target 6).
_CORE_NAMES = (
    "Variable", "ValueSource", "check_restorable", "VariableStore", "VariableScope", "AUTO_REUSE",
    "variable_scope", "get_variable_scope", "get_variable", "get_collection", "add_to_collection",
    "get_default_store", "reset_default_store", "global_variables", "trainable_variables",
    "local_variables", "initialize", "report_uninitialized", "GLOBAL_VARIABLES", "TRAINABLE_VARIABLES",
    "LOCAL_VARIABLES", "initializers", "set_random_seed", "get_random_seed", "device", "PlacementRequest",
    "replica_device_setter", "set_log_device_placement", "get_log_device_placement",
    "set_soft_device_placement", "get_soft_device_placement", "PartitionedVariable", "SaveSliceInfo",
    "fixed_size_partitioner", "min_max_variable_partitioner", "variable_axis_size_partitioner",
    "name_scope", "model_variables", "MODEL_VARIABLES", "initializers_v1", "zeros_initializer", "ones_initializer",
    "constant_initializer", "random_normal_initializer", "truncated_normal_initializer", "random_uniform_initializer",
    "variance_scaling_initializer", "glorot_uniform_initializer", "glorot_normal_initializer", "orthogonal_initializer",
    "GreedyLoadBalancingStrategy", "byte_size_load_fn",
    "VariableSynchronization", "VariableAggregation", "RegularizationLoss", "REGULARIZATION_LOSSES",
    "get_local_variable", "assign", "assign_add", "assign_sub", "scatter_update",
)


def _restore_result() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.read.restore_result")


def _snapshot() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.write.snapshot")


def _distributed_api() -> ModuleType:
    return importlib.import_module("varstore.distributed.api")


def _reader_api() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.read.reader_api")


def _convert() -> ModuleType:
    return importlib.import_module("varstore.formats")


def _open() -> ModuleType:
    return importlib.import_module("varstore._open")


def _registry() -> ModuleType:
    return importlib.import_module("varstore.formats.registry")


def _load() -> ModuleType:
    return importlib.import_module("varstore.formats.load")


def _inspect() -> ModuleType:
    return importlib.import_module("varstore.inspect")


def _managed() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.manage.managed")


def _incremental() -> ModuleType:
    return importlib.import_module("varstore.checkpoint.manage.incremental_manager")


def _rename() -> ModuleType:
    return importlib.import_module("varstore.formats.rename")


def _format_entry() -> ModuleType:
    return importlib.import_module("varstore.formats.format_entry")


def _storage() -> ModuleType:
    return importlib.import_module("varstore.storage")




#: Public names imported on first access (module __getattr__): `import varstore` loads the core only,
#: so a fresh process reaches its first array sooner (issue 11); `varstore.save` etc. work as before.
_LAZY: dict[str, Callable[[], ModuleType]] = {
    "save": _distributed_api, "restore": _distributed_api, "CheckpointManager": _distributed_api,
    "RestoreResult": _restore_result, "SaveHandle": _snapshot,
    "CheckpointReader": _reader_api, "SkippedEntry": _reader_api, "VariableInfo": _reader_api,
    "select_names": _reader_api,
    "convert": _convert, "ConvertReport": _convert, "detect_format": _convert,
    "open_checkpoint": _open,  # own checkpoints without the converter registry; others through convert
    "FormatEntry": _registry, "format_entry": _registry, "register_format": _registry, "unregister_format": _registry,
    "load": _load,
    "CheckpointDiff": _inspect, "VariableStats": _inspect, "diff_checkpoints": _inspect,
    "scope_tree": _inspect, "variable_stats": _inspect, "ScopeNode": _inspect,
    "report": _inspect, "ReportResult": _inspect,
    "latest_checkpoint": _open, "list_checkpoints": _managed, "is_manager_directory": _managed,
    "incremental_steps": _incremental,
    "read_format_names": _registry, "write_format_names": _registry, "parse_rename_rule": _rename,
    "parse_write_options": _format_entry, "parse_storage_options": _storage, "is_url": _storage,
    **{name: _core for name in _CORE_NAMES},
}


def __getattr__(name: str) -> Any:
    loader = _LAZY.get(name)
    if loader is None:
        raise AttributeError(f"module 'varstore' has no attribute {name!r}")
    module = loader()
    if loader is _core:  # all core names at once
        globals().update({core_name: getattr(module, core_name) for core_name in _CORE_NAMES})
        return globals()[name]
    value = getattr(module, name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = list(_CORE_NAMES) + list(errors.__all__) + [
    "format_entry", "ScopeNode", "latest_checkpoint", "list_checkpoints", "is_manager_directory", "read_format_names",
    "incremental_steps",
    "write_format_names", "parse_rename_rule", "parse_write_options", "parse_storage_options", "is_url",
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
    "select_names",
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
