"""Orbax checkpoints written through orbax.checkpoint itself (StandardCheckpointer, OCDBT layout).

Variable names become the nested pytree Orbax users restore: "encoder/dense/kernel" is
tree["encoder"]["dense"]["kernel"], so `ocp.StandardCheckpointer().restore(path)` returns that
dict of NumPy arrays and varstore's Orbax reader lists the same names. Orbax saves one pytree in one
call, so every value is in memory at once while it writes (the one writer that does not stream). The
only module that imports orbax; without it, MissingDependencyError names the extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from varstore import dtypes as _dtypes
from varstore.errors import CheckpointError, CheckpointExistsError, ConversionError, MissingDependencyError, UnsupportedDtypeError

if TYPE_CHECKING:
    from varstore.checkpoint.entry import SaveEntry
    from varstore.convert.format_entry import WriteRequest

__all__ = ["write_orbax", "write_checkpoint", "nested_tree"]


def _orbax() -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError as err:
        raise MissingDependencyError("writing an Orbax checkpoint needs orbax-checkpoint: "
                                     "pip install 'varstore[orbax]'") from err
    return ocp


def nested_tree(names: Sequence[str]) -> dict[str, Any]:
    """The nested dict skeleton of `names` split at "/", leaves None.

    Raises:
      ConversionError: a name is both a leaf and a scope ("a" and "a/b"), naming both.
    """
    root: dict[str, Any] = {}
    for name in names:
        node = root
        parts = name.split("/")
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConversionError(f"'{'/'.join(parts[:depth + 1])}' is a variable and a scope of '{name}'; "
                                      f"an Orbax pytree cannot hold both (rename one)")
            node = child
        if parts[-1] in node:
            raise ConversionError(f"'{name}' is a variable and a scope of other variables; an Orbax pytree "
                                  f"cannot hold both (rename one)")
        node[parts[-1]] = None
    return root


def write_orbax(path: Path, entries: Sequence[SaveEntry], *, overwrite: bool = False) -> int:
    """Writes `entries` as an Orbax checkpoint that `ocp.StandardCheckpointer().restore(path)` returns exactly.

    Args:
      path: the checkpoint directory to create; replaced atomically (a temporary sibling, then rename).
      entries: the variables; names split at "/" into the nested pytree.
      overwrite: replace an existing Orbax checkpoint directory (never anything else).

    Returns:
      Bytes of array data handed to Orbax.

    Raises:
      MissingDependencyError: orbax-checkpoint is not installed.
      UnsupportedDtypeError: strings (Orbax's array handlers store numbers); nothing written.
      ConversionError: a name that is both a variable and a scope, a duplicate name, an empty array
        (Orbax refuses zero-size arrays).
      CheckpointExistsError: `path` exists (without `overwrite`) or is not an Orbax checkpoint.
    """
    ocp = _orbax()
    from varstore.checkpoint.atomic import atomic_path

    entries = list(entries)
    if len({e.name for e in entries}) != len(entries):
        raise ConversionError("two variables share one name; an Orbax pytree holds each name once")
    for entry in entries:
        if entry.dtype.kind in "SUO":
            raise UnsupportedDtypeError(f"variable '{entry.name}' has dtype {_dtypes.dtype_name(entry.dtype)}; "
                                        f"an Orbax checkpoint stores numeric arrays")
        if 0 in entry.shape:
            raise ConversionError(f"variable '{entry.name}' is empty (shape {tuple(entry.shape)}); Orbax cannot "
                                  f"save arrays with zero size (leave it out with --filter)")
    tree = nested_tree([e.name for e in entries])
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise CheckpointExistsError(f"'{path}' exists; pass overwrite=True (--force) to replace it", str(path))
        if path.is_symlink() or not (path / "_CHECKPOINT_METADATA").is_file():
            raise CheckpointExistsError(f"'{path}' is not an Orbax checkpoint directory; it is left as it is",
                                        str(path))
    written = 0
    for entry in entries:
        node = tree
        *scopes, leaf = entry.name.split("/")
        for part in scopes:
            node = node[part]
        node[leaf] = entry.fetch()
        written += node[leaf].nbytes
    with atomic_path(path) as tmp:
        checkpointer = ocp.StandardCheckpointer()
        try:
            checkpointer.save(tmp.absolute(), tree)  # Orbax refuses relative paths
            checkpointer.wait_until_finished()
        except Exception as err:  # Orbax's own errors are untyped (ValueError, OSError from its threads)
            raise CheckpointError(f"Orbax could not write '{path}': {err}") from err
        finally:
            checkpointer.close()
    return written


def write_checkpoint(path: Path, entries: Sequence[SaveEntry], request: WriteRequest) -> Sequence[str]:
    """The registry's write for "orbax": write_orbax; takes no options."""
    if request.options:
        raise ConversionError(f"the Orbax writer takes no options, got {', '.join(sorted(request.options))}")
    write_orbax(path, entries, overwrite=request.overwrite)
    return ("Orbax saves one pytree in one call: every value was in memory at once",)
