"""Nested framework state <-> checkpoint names and a JSON skeleton; shared by varstore.torch and varstore.jax.

Turns a tree of containers (dicts, lists, tuples) whose leaves are arrays or
JSON scalars into (a) one checkpoint name per array leaf, the path of keys
joined by "/" ("optimizer/state/0/exp_avg"), and (b) the skeleton: a small
JSON description of the containers, the keys' types and the scalar leaves,
recorded in the checkpoint metadata under TREE_KEY so that a load rebuilds
the same structure. Also owns the other reserved metadata key, ALIASES_KEY
(names saved once because they share storage). Imports no framework and
never touches files; the framework modules classify their own leaves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Union

from varstore.store._naming import validate_name
from varstore.checkpoint.format.entry import SaveEntry
from varstore.checkpoint.read.reader import VarstoreReader, open_varstore
from varstore.errors import InvalidMetadataError, InvalidNameError

__all__ = [
    "save_flat",
    "TREE_KEY",
    "ALIASES_KEY",
    "RESERVED_PREFIX",
    "Node",
    "Flat",
    "flatten",
    "unflatten",
    "nest",
    "check_user_metadata",
]

#: Metadata key of the skeleton (a Node, see docs/checkpoint-format.md section 12).
TREE_KEY = "varstore.tree"
#: Metadata key of {alias name: saved name} for leaves that share storage (tied weights).
ALIASES_KEY = "varstore.aliases"
#: User metadata keys starting with this are refused: varstore.torch / varstore.jax own them.
RESERVED_PREFIX = "varstore."

#: A skeleton node: {"dict": [[key, node], ...]}, {"list": [node, ...]}, {"tuple": [node, ...]},
#: {"array": true}, {"value": json scalar} or {"float": float.hex() of inf/nan}.
Node = dict[str, Any]

Key = Union[str, int]

#: What a framework says a value is: ("array",), ("value",) or ("node", kind, [(key, child), ...]).
Classified = tuple[Any, ...]


class Flat:
    """The result of `flatten`.

    Attributes:
      arrays: checkpoint name -> array leaf, in tree order.
      skeleton: the root Node.
      is_plain: True when the tree is nested non-empty dicts with "/"-free str keys
        and array leaves only (a state dict, {"model": sd}, flax params): `nest`
        rebuilds it from the names alone, so no skeleton needs recording.
    """

    def __init__(self, arrays: dict[str, Any], skeleton: Node, is_plain: bool) -> None:
        self.arrays = arrays
        self.skeleton = skeleton
        self.is_plain = is_plain


def _segment(key: Any, path: str) -> tuple[str, Key]:
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise InvalidNameError(
            f"cannot save the key {key!r} under '{path or '<root>'}': keys must be str or int "
            f"(they become checkpoint names)")
    return str(key), key


def _value_node(value: Any, path: str) -> Node:
    if value is None or isinstance(value, (bool, str)):
        return {"value": value}
    if isinstance(value, int):
        return {"value": int(value)}
    if isinstance(value, float):
        return {"value": value} if math.isfinite(value) else {"float": value.hex()}
    raise InvalidMetadataError(
        f"cannot save '{path or '<root>'}' of type {type(value).__name__}: a state holds arrays, "
        f"dicts, lists, tuples and JSON scalars (str, int, float, bool, None); convert it first")


def flatten(tree: Any, classify: Callable[[Any], Classified]) -> Flat:
    """Names every array leaf of `tree` and describes the rest as a skeleton.

    Args:
      tree: the state; its root must be a container.
      classify: the framework's view of one value (see `Classified`).

    Returns:
      Flat with the arrays by name and the skeleton.

    Raises:
      InvalidNameError: a key that is not str/int, an invalid name, or two paths
        giving the same name ({"a/b": x} next to {"a": {"b": y}}).
      InvalidMetadataError: a leaf that is neither an array nor a JSON scalar.
    """
    arrays: dict[str, Any] = {}
    origin: dict[str, str] = {}

    def visit(value: Any, path: str, shown: str) -> Node:
        kind = classify(value)
        if kind[0] == "array":
            if not path:
                raise InvalidNameError("the state's root must be a dict, list or tuple, not one array")
            validate_name(path, "checkpoint name")
            if path in arrays:
                raise InvalidNameError(
                    f"two entries map to the checkpoint name '{path}': {origin[path]} and {shown}; "
                    f"rename one (a '/' inside a key is also a scope separator)")
            arrays[path] = value
            origin[path] = shown
            return {"array": True}
        if kind[0] == "value":
            return _value_node(value, shown)
        container, items = kind[1], kind[2]
        children = []
        for key, child in items:
            segment, json_key = _segment(key, shown)
            child_path = f"{path}/{segment}" if path else segment
            node = visit(child, child_path, f"{shown}[{key!r}]")
            children.append([json_key, node] if container == "dict" else node)
        return {container: children}

    skeleton = visit(tree, "", "")
    if "dict" not in skeleton:
        if not any(key in skeleton for key in ("list", "tuple")):
            raise InvalidNameError("the state's root must be a dict, list or tuple")
    return Flat(arrays, skeleton, _is_plain(skeleton))


def _is_plain(node: Node) -> bool:
    """Non-empty dicts with "/"-free str keys all the way down to array leaves: `nest` rebuilds these."""
    items = node.get("dict") or []
    return bool(items) and all(isinstance(key, str) and "/" not in key and ("array" in child or _is_plain(child))
                               for key, child in items)


def _walk(node: Node, path: str) -> Iterator[str]:
    if "array" in node:
        yield path
    for kind in ("dict", "list", "tuple"):
        if kind in node:
            for index, child in enumerate(node[kind]):
                key, sub = (child[0], child[1]) if kind == "dict" else (index, child)
                yield from _walk(sub, f"{path}/{key}" if path else str(key))


def unflatten(skeleton: Node, array: Callable[[str], Any], where: str) -> Any:
    """Rebuilds the structure a skeleton describes, asking `array(name)` for each array leaf.

    Raises:
      CorruptCheckpointError: the skeleton is malformed (names `where`).
    """
    from varstore.errors import CorruptCheckpointError

    def build(node: Any, path: str) -> Any:
        if not isinstance(node, dict) or len(node) != 1:
            raise CorruptCheckpointError(f"'{where}': malformed {TREE_KEY} node at '{path}': {node!r}")
        (kind, body), = node.items()
        if kind == "array":
            return array(path)
        if kind == "value":
            return body
        if kind == "float":
            return float.fromhex(body)
        if kind == "dict":
            out = {}
            for key, child in body:
                out[key] = build(child, f"{path}/{key}" if path else str(key))
            return out
        if kind in ("list", "tuple"):
            items = [build(child, f"{path}/{i}" if path else str(i)) for i, child in enumerate(body)]
            return items if kind == "list" else tuple(items)
        raise CorruptCheckpointError(f"'{where}': unknown {TREE_KEY} node kind {kind!r} at '{path}'")

    return build(skeleton, "")


def array_names(skeleton: Node) -> list[str]:
    """The checkpoint names of a skeleton's array leaves, in tree order."""
    return list(_walk(skeleton, ""))


def nest(names: list[str], array: Callable[[str], Any], where: str) -> dict[str, Any]:
    """Nested dicts from "/"-separated names ("params/encoder/kernel" -> d["params"]["encoder"]["kernel"]).

    Raises:
      InvalidNameError: a name is also the scope of another ("a" next to "a/b"); names `where`.
    """
    root: dict[str, Any] = {}
    for name in names:
        parts = name.split("/")
        node = root
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidNameError(
                    f"'{where}': '{name}' lies under the variable '{part}', so it cannot be nested; "
                    f"load it flat with vs.open_checkpoint")
            node = child
        if parts[-1] in node:
            raise InvalidNameError(
                f"'{where}': '{name}' is both a variable and a scope, so it cannot be nested; "
                f"load it flat with vs.open_checkpoint")
        node[parts[-1]] = array(name)
    return root


def check_user_metadata(metadata: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """A copy of the caller's metadata, refusing the reserved "varstore." keys.

    Raises:
      InvalidMetadataError: a key starts with RESERVED_PREFIX (names it and `where`).
    """
    out = dict(metadata or {})
    for key in out:
        if isinstance(key, str) and key.startswith(RESERVED_PREFIX):
            raise InvalidMetadataError(
                f"metadata for '{where}': the key {key!r} is reserved for varstore (keys starting "
                f"with {RESERVED_PREFIX!r}); choose another name")
    return out


def save_flat(path: Any, flat: Flat, metadata: dict[str, Any], *, alias_key: Callable[[Any], Any],
              entry: Callable[[str, Any], SaveEntry], step: int | None, format: str | None,
              checksum: bool, pack_threshold_bytes: int | None, overwrite: bool = False,
              layout: str | None = None, durable: bool = True,
              storage_options: Mapping[str, object] | None = None) -> Any:
    """Saves a flattened tree with varstore.checkpoint.save_entries: each storage once, structure in metadata.

    Shared by varstore.torch.save and varstore.jax.save. A leaf whose
    `alias_key(value)` (None: never an alias) equals an earlier leaf's is not
    written again; `metadata[ALIASES_KEY]` maps its name to the first name. A
    tree that is not plain string-keyed dicts records its skeleton under
    TREE_KEY. Returns what save_entries returns (the final path or URL).
    """
    from varstore.checkpoint import save_entries

    entries: list[SaveEntry] = []
    aliases: dict[str, str] = {}
    first: dict[Any, str] = {}
    for name, value in flat.arrays.items():
        key = alias_key(value)
        if key is not None and key in first:
            aliases[name] = first[key]
            continue
        if key is not None:
            first[key] = name
        entries.append(entry(name, value))
    if not flat.is_plain:
        metadata[TREE_KEY] = flat.skeleton
    if aliases:
        metadata[ALIASES_KEY] = aliases
    options: dict[str, Any] = {}
    if pack_threshold_bytes is not None:
        options["pack_threshold_bytes"] = pack_threshold_bytes
    return save_entries(path, entries, step=step, metadata=metadata, format=format, checksum=checksum,
                        overwrite=overwrite, layout=layout, durable=durable, storage_options=storage_options,
                        **options)


def open_reader(path: Any, format: str | None,
                storage_options: Mapping[str, object] | None) -> tuple[VarstoreReader, bool]:
    """(reader, owned): `path` itself when it is an open VarstoreReader (owned False: the caller's to close),
    else a reader opened on it (owned True). Shared by the adapters' restore and load."""
    if isinstance(path, VarstoreReader):
        return path, False
    return open_varstore(path, format, storage_options=storage_options), True


def source_of(reader: VarstoreReader, name: str) -> str | None:
    """The stored name whose value `name` takes: `name` itself, or the name it aliases (a tied tensor saved
    once, ALIASES_KEY in the metadata); None when neither is in the checkpoint."""
    if name in reader:
        return name
    target = (reader.metadata.get(ALIASES_KEY) or {}).get(name)
    return target if isinstance(target, str) and target in reader else None
