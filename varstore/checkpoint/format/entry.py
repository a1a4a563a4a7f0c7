"""SaveEntry: one variable to be written, with its value fetched only when written.

Lets `save_entries` stream a model (or a foreign checkpoint being converted)
variable by variable, so memory stays near the largest variable.
`SnapshotEntry` is the same for async saves: its value is a copy handed over
from the caller's thread. No I/O here.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from varstore.errors import ConversionError

__all__ = ["SaveEntry", "SnapshotEntry"]


@dataclasses.dataclass(frozen=True)
class SaveEntry:
    """One variable to write.

    Attributes:
      name: full variable name ("conv1/weights"); validated by the writer.
      shape: tuple of ints.
      dtype: NumPy dtype of the value (logical dtype: bfloat16 stays bfloat16).
      get: returns the value as a host NumPy array of `shape` and `dtype`
        (C-contiguous or not); called once, when this entry is written.
      trainable: the trainable flag to record; None records "unknown" (a converted file's format had none).
      collections: collection names to record.
      device: device the value came from ("cpu:0"), or None.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    get: Callable[[], npt.NDArray[Any]]
    trainable: bool | None = True
    collections: tuple[str, ...] = ()
    device: str | None = None

    def fetch(self) -> npt.NDArray[Any]:
        """Calls `get()` once and returns the value as a C-contiguous array of `shape` and `dtype`.

        Raises:
          ConversionError: the value's shape or dtype differs from this entry's, naming the variable.
        """
        value = np.asarray(self.get(), order="C")
        if value.dtype != self.dtype or tuple(value.shape) != tuple(self.shape):
            raise ConversionError(
                f"variable '{self.name}' gave a value of shape {value.shape} and dtype {value.dtype}, "
                f"its entry says {tuple(self.shape)} and {self.dtype}")
        return value


class SnapshotEntry:
    """An entry whose value is a copy handed over from another thread (async saves): host, or device-side.

    Attributes:
      name, shape, dtype, trainable, collections, device: as the entry it copies.
    """

    __slots__ = ("name", "shape", "dtype", "trainable", "collections", "device", "_value", "_ready", "_wait")

    def __init__(self, entry: Any) -> None:
        self.name = entry.name
        self.shape = entry.shape
        self.dtype = entry.dtype
        self.trainable = entry.trainable
        self.collections = entry.collections
        self.device = entry.device
        self._value: Any = None
        self._ready = threading.Event()
        self._wait: Callable[[], None] | None = None

    def put(self, value: Any, wait: Callable[[], None] | None = None) -> None:
        """Hands over the copy (or the exception taking it raised).

        Args:
          value: a host array, a CuPy array (a device-side copy) or an exception.
          wait: called by `get()` before it returns the value: waits until a
            device-side copy, queued on the caller's stream, is complete.
        """
        self._value = value
        self._wait = wait
        self._ready.set()

    def ready(self) -> bool:
        """True once the copy was handed over (get() will not block)."""
        return self._ready.is_set()

    def get(self) -> npt.NDArray[Any]:
        """Waits for the copy and returns it once (raises what taking it raised)."""
        self._ready.wait()
        value, self._value = self._value, None
        if isinstance(value, BaseException):
            raise value
        if self._wait is not None:
            self._wait()
        return value  # type: ignore[no-any-return]
