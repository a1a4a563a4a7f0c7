"""VariableInfo of a varstore checkpoint's variables, made on demand straight from the manifest's columns.

`keys()` then `info(name)` for every key is how `varstore ls`, `diff` and
users' scripts walk a checkpoint; with 50,000 variables the per-key Python
work is the whole cost (issue 11, target 3). `InfoColumns` builds one
VariableInfo from the columns `ManifestColumns` already validated at open
(types, ranges, nbytes), without a Record in between and without the
dataclass' field-by-field frozen __init__. The object is the same
VariableInfo the slow path makes (tests compare them field by field for
every dtype). No I/O; never reads a variable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from varstore.checkpoint.format.manifest import ManifestColumns

if TYPE_CHECKING:
    from varstore.checkpoint.format.variable_info import VariableInfo

__all__ = ["InfoColumns"]

_new = object.__new__
_set = object.__setattr__
#: VariableInfo, imported at the first info() (a reader that reads arrays only never loads the dataclass).
_info_class: type[VariableInfo] | None = None


def _variable_info() -> type[VariableInfo]:
    global _info_class
    from varstore.checkpoint.format.variable_info import VariableInfo

    _info_class = VariableInfo
    return VariableInfo


class InfoColumns:
    """Makes `VariableInfo`s from one checkpoint's manifest columns (by manifest position).

    The columns must have passed `ManifestColumns.check()` (decode_manifest_columns
    runs it), so no per-variable validation is repeated here.
    """

    __slots__ = ("_names", "_shapes", "_dtypes", "_nbytes", "_trainable", "_collections", "_devices",
                 "_checksums", "_paths", "_sets", "_device_names")

    def __init__(self, columns: ManifestColumns) -> None:
        c = columns.columns
        self._names: list[str] = columns.names
        self._shapes: list[tuple[int, ...]] = c["shape"]  # tuples after check(), shared: handed out as they are
        self._dtypes: list[str] = c["dtype"]
        self._nbytes: list[int] = c["nbytes"]
        self._trainable: list[bool | None] = c["trainable"]
        self._collections: list[int] = c["collections"]
        self._devices: list[int] = c["device"]
        self._checksums: list[int | None] = c["checksum"]
        self._paths: list[str | None] = c["path"]
        self._sets: list[tuple[str, ...]] = columns.sets
        self._device_names: list[Any] = columns.devices

    def info(self, i: int) -> VariableInfo:
        """The VariableInfo of the variable at manifest position `i` (attributes: {"storage": path or "packed"})."""
        checksum = self._checksums[i]
        path = self._paths[i]
        info = _new(_info_class or _variable_info())
        # The fields VariableInfo's generated __init__ sets, set at once (the class has no __post_init__).
        _set(info, "__dict__", {
            "name": self._names[i], "shape": self._shapes[i], "dtype": self._dtypes[i],
            "nbytes": self._nbytes[i], "trainable": self._trainable[i],
            "collections": self._sets[self._collections[i]], "checksum":
            None if checksum is None else "crc32c:%08x" % checksum,
            "device": self._device_names[self._devices[i]],
            "attributes": {"storage": "packed" if path is None else path}})
        return info

    def infos(self) -> list[VariableInfo]:
        """`info(i)` for every variable, in manifest order."""
        info = self.info
        return [info(i) for i in range(len(self._names))]
