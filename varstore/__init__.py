"""varstore: model variables and checkpoints without a framework.

The whole public API is re-exported here: the variable store (Variable,
VariableStore, variable scopes, collections, initializers, devices),
checkpoints (save, restore, load, open_checkpoint, CheckpointManager), converters
(convert, open_checkpoint for foreign formats), inspection (variable_stats,
diff_checkpoints) and every error class.
"""

from __future__ import annotations

from varstore import _core_api, dtypes, errors
from varstore._version import __version__
from varstore._core_api import *  # noqa: F401,F403
from varstore.checkpoint import RestoreResult, SaveHandle
from varstore.distributed.api import CheckpointManager, restore, save  # comm=: one process or every rank
from varstore.checkpoint.reader_api import CheckpointReader, SkippedEntry, VariableInfo
from varstore.convert import ConvertReport, convert, detect_format, open_checkpoint
from varstore.convert.registry import FormatEntry, register_format, unregister_format
from varstore.convert.load import load
from varstore.errors import *  # noqa: F401,F403
from varstore.inspect import CheckpointDiff, VariableStats, diff_checkpoints, scope_tree, variable_stats


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
