"""VariableInfo and SkippedEntry: what a checkpoint reader reports about a stored object without reading it.

Public through `varstore.VariableInfo` / `varstore.SkippedEntry` and
`varstore.checkpoint.read.reader_api` (which imports this module on first use, so
that a fresh process that opens a checkpoint and reads one array loads
neither these dataclasses nor `dataclasses` itself). Types only: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["VariableInfo", "SkippedEntry", "can_be_trained"]


#: Prefixes of the logical dtype names a gradient can flow through (float16/32/64, bfloat16, float8_*, complex).
_TRAINABLE_KINDS = ("float", "bfloat", "complex")


def can_be_trained(dtype: str) -> bool:
    """False for a logical dtype name no gradient flows through ("int64", "bool", "S5"); True for floats."""
    return str(dtype).startswith(_TRAINABLE_KINDS)


@dataclasses.dataclass(frozen=True)
class VariableInfo:
    """What a checkpoint records about one variable, read from metadata only.

    Attributes:
      name: full name as the source tool reports it ("conv1/weights",
        "layers/dense/vars/0", "dense/kernel:0").
      shape: tuple of ints; () for a scalar.
      dtype: logical dtype name (see varstore.dtypes.dtype_name): "float32",
        "bfloat16", "S5", ...
      nbytes: bytes of the value (prod(shape) * itemsize).
      trainable: the trainable flag as the checkpoint records it, or None (unknown) where the format has
        none; never invented: a variable of a non-floating dtype (integers, bool, strings) whose format
        records no flag is False, since it cannot be trained.
      collections: collection names, () where the format has none.
      checksum: "crc32c:<8 hex digits>" (or the format's own, e.g. TF's
        masked crc32c "tf-crc32c-masked:<hex>"), or None.
      device: device the variable lived on when saved ("cpu:0"), or None.
      attributes: any other per-variable attributes, JSON-compatible.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    trainable: bool | None = None
    collections: tuple[str, ...] = ()
    checksum: str | None = None
    device: str | None = None
    attributes: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.trainable is None and not can_be_trained(self.dtype):
            object.__setattr__(self, "trainable", False)

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (the schema of `varstore ls --json` entries)."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "nbytes": self.nbytes,
            "trainable": self.trainable,
            "collections": list(self.collections),
            "checksum": self.checksum,
            "device": self.device,
        }


@dataclasses.dataclass(frozen=True)
class SkippedEntry:
    """An object of a foreign file that is not a variable, and why (e.g. a compound dataset)."""

    name: str
    reason: str
