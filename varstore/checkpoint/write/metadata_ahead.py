"""A helper thread that creates a save's arrays, in order, ahead of the caller's writes of their values.

In a blocking, uncompressed local save (write_engine.py) the caller writes
each value itself, taking its crc32c piece by piece just before each piece is
written (both read it from the CPU's cache), while this thread makes each
value's array through the backend writer (HDF5 datasets under h5py's own lock,
Zarr directories and chunk paths) in the order the caller will ask for them.
The arrays are created with `hold_attrs`: their checksum attribute is added by
the caller once the value is written. Before, the caller checksummed each
value from memory and created its array while a writer thread wrote. W1 (318
MiB in 75 values), fresh processes, alternating with the code before, median
of 3 saves each (issue 39, docs/benchmarks/README.md): on a tmpfs, HDF5 201 ->
177 and 198 -> 179 ms of CPU (wall 156 -> 157, 148 -> 158), Zarr 187 -> 157 and
186 -> 159 (wall 155 -> 147, 148 -> 151); on this VM's ext4, durable, HDF5 154
-> 146 (wall 184 -> 183), Zarr 274 -> 265 (wall 229 -> 214).

Owns its one thread and nothing else: it writes no value bytes, stops at its
first error (re-raised by `extent` for the arrays after it) or when `stop` is
called, and is joined by `stop`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from varstore.backends import RawExtent

__all__ = ["MetadataAhead"]


class MetadataAhead:
    """Creates `requests` ((array path, stored dtype, stored shape, attributes) each) with `writer.create_array`
    in a helper thread; `extent(i)` waits for the i-th."""

    def __init__(self, writer: Any, requests: list[tuple[str, np.dtype, tuple[int, ...], dict[str, Any]]]) -> None:
        self._writer = writer
        self._requests = requests
        self._extents: list[RawExtent | None] = []
        self._error: BaseException | None = None
        self._stopped = False
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="varstore-metadata", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for path, dtype, shape, attrs in self._requests:
            if self._stopped:
                return
            try:
                extent = self._writer.create_array(path, dtype, shape, attrs, hold_attrs=True)
            except BaseException as err:  # noqa: BLE001 - handed to the caller, which raises it
                with self._ready:
                    self._error = err
                    self._ready.notify_all()
                return
            with self._ready:
                self._extents.append(extent)
                self._ready.notify_all()
            # Hands the GIL over between arrays: h5py holds it through each call, and a caller back from a
            # write would otherwise wait out the 5 ms switch interval. W1 HDF5 save on a tmpfs, fresh
            # processes, 8 + 8: 162 ms of wall without this against 154 before this module; 157 with it
            # against 148-156. Kept at most 2 or 8 arrays ahead, it lost more: 179 against 151, 154 against 144.
            time.sleep(0)

    def extent(self, index: int) -> RawExtent | None:
        """The extent of the `index`-th request (None: written through `write_array`), once created.

        Raises:
          Whatever creating that array, or one before it, raised.
        """
        with self._ready:
            while len(self._extents) <= index and self._error is None:
                self._ready.wait()
            if len(self._extents) > index:
                return self._extents[index]
            assert self._error is not None
            raise self._error

    def stop(self) -> None:
        """Lets the thread finish the array it is creating, then ends it (idempotent)."""
        with self._ready:
            self._stopped = True
            self._ready.notify_all()
        self._thread.join()
