"""HDF5 backend: named arrays and attributes in one HDF5 file, through h5py.

Arrays are contiguous, uncompressed datasets allocated at creation
(`H5D_ALLOC_TIME_EARLY`, fill value never written, no timestamps), so each
has a fixed byte offset in the file that the checkpoint layer writes and
reads with pwrite/preadv. Files are created with libver=("v110", "latest"): the HDF5 1.10 file
format as the lower bound, so HDF5 1.10 tools (Debian 12's h5dump 1.10.8) read every dataset and
attribute; nothing varstore writes needs a newer object format.
Every h5py exception is turned into a varstore error naming the file.
Knows nothing about variables, manifests, checksums or atomic renames.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from varstore.backends.base import RawExtent
from varstore._limits import check_manifest_size
from varstore.storage._local_errors import is_permission_error, permission_denied
from varstore.errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    MissingDependencyError,
    NotACheckpointError,
)
from varstore.storage.special_files import check_regular_file

class _LazyH5py:
    """Stands for the h5py module until first used, then is replaced by it (a global of this module).

    Reading a varstore HDF5 file through its index header never touches
    HDF5, so `open_checkpoint(path)[name]` in a fresh process skips h5py's
    ~30 ms import (issue 11); everything else imports it on first use.
    """

    def __getattr__(self, name: str) -> Any:
        global h5py
        try:
            import h5py as module
        except ImportError as err:  # pragma: no cover - h5py is a core dependency
            raise MissingDependencyError("HDF5 checkpoints need h5py: pip install h5py") from err
        h5py = module  # type: ignore[assignment]
        return getattr(module, name)


if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only (~1 ms at import)
    import h5py

    from varstore.storage.protocol import Storage
else:
    h5py = _LazyH5py()

__all__ = ["Hdf5Backend", "Hdf5Writer", "Hdf5Reader", "BACKEND", "HDF5_MAGIC"]

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def _attr_value(value: Any) -> Any:
    """JSON-compatible value -> something h5py stores well (lists/dicts become JSON strings)."""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return value


_SCALAR_SPACE: Any = None
_ATTR_TYPES: dict[Any, Any] = {}
#: (type, value) -> the 0-d array h5py would write for a repeated attribute value ("float32", "[]", True)
_ATTR_ARRAYS: dict[tuple[type, Any], Any] = {}
#: Attributes whose values repeat across variables (a checksum or a name never does)
_SHARED_ATTRS = frozenset({"trainable", "collections", "dtype", "device"})


def _set_attrs(obj: Any, attrs: dict[str, Any], fresh: bool = False) -> None:
    """Writes attributes as h5py's `obj.attrs[key] = value` would (same HDF5 types), ~2x faster.

    Strings (variable-length UTF-8) and bools/ints go through h5py's low-level
    h5a calls with cached type and scalar space ids (and cached arrays of the
    values most variables share); anything else through `obj.attrs`. A
    variable's five attributes were most of a per-variable save. `obj` is an
    h5py object or its low-level id; `fresh`: `obj` was just created, so no
    attribute exists yet (no lookup before each create).
    """
    global _SCALAR_SPACE
    if _SCALAR_SPACE is None:
        _SCALAR_SPACE = h5py.h5s.create(h5py.h5s.SCALAR)
    oid = obj.id if hasattr(obj, "attrs") else obj
    for key, value in attrs.items():
        value = _attr_value(value)
        cache_key = (type(value), value)
        shared = key in _SHARED_ATTRS
        array = _ATTR_ARRAYS.get(cache_key) if shared else None
        if array is None:
            if isinstance(value, str):
                array = np.array(value, dtype=h5py.string_dtype())
            elif isinstance(value, (bool, int)) and not isinstance(value, np.generic):
                array = np.asarray(value)
            else:
                (obj if hasattr(obj, "attrs") else h5py.Dataset(oid)).attrs[key] = value
                continue
            if shared and len(_ATTR_ARRAYS) < 1024:
                _ATTR_ARRAYS[cache_key] = array
        kind = (array.dtype, array.dtype.metadata is not None)
        type_id = _ATTR_TYPES.get(kind)
        if type_id is None:
            type_id = _ATTR_TYPES[kind] = h5py.h5t.py_create(array.dtype, logical=True)
        name = key.encode("utf-8")
        if not fresh and h5py.h5a.exists(oid, name):
            h5py.h5a.delete(oid, name)
        h5py.h5a.create(oid, name, type_id, _SCALAR_SPACE).write(array)


def _plain(value: Any) -> Any:
    """h5py attribute value -> plain Python (bytes decoded, numpy scalars unwrapped)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _capped_attrs(attrs: Any) -> dict[str, Any]:
    """Every attribute as plain Python; one over ATTRIBUTE_CAP_BYTES is its listing instead (walker.over_cap)."""
    from varstore.backends.hdf5.walker import over_cap  # imports h5py, already imported when attrs exist

    return {key: over_cap(attrs, key) or _plain(attrs[key]) for key in attrs}


#: HDF5 format bounds of every file varstore writes: (low, high) as h5py's `libver`.
LIBVER = ("v110", "latest")
#: Every object of ALIGN_THRESHOLD_BYTES and more (each value's data) starts on a multiple of
#: DATA_ALIGNMENT_BYTES (H5Pset_alignment; relative to the user block, itself a multiple). Reads into
#: page-aligned arrays (store/host_arrays.py) then copy aligned: the kernel's copy out of the page cache
#: costs up to ~40% more across a misalignment, and one value of an odd size (a bias of 50,257 floats)
#: would otherwise shift every value after it. Costs at most 63 bytes per value; must stay below the
#: 512-byte user block (HDF5 refuses a larger alignment with one).
DATA_ALIGNMENT_BYTES = 64
ALIGN_THRESHOLD_BYTES = 4096
#: Dataset ids a writer keeps open for add_attrs at most: each holds ~11 KiB of HDF5's state while open
#: (4,096 held: 75 MiB of RSS against 29 MiB), so at most ~11 MiB. W1's 75 checksum attributes added
#: through kept ids: 2.6 ms of CPU against 5.3 ms opening each dataset by its path again.
HELD_DATASETS = 1024


def _dataset_dcpl() -> Any:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.CONTIGUOUS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    dcpl.set_obj_track_times(False)
    dcpl.set_attr_creation_order(0)  # h5py's create_dataset sets it (track_order off)
    return dcpl


class Hdf5Writer:
    """Creates one new HDF5 file; see BackendWriter."""

    native_bytes_strings = True

    def __init__(self, path: Path, header_bytes: int = 0) -> None:
        self.path = Path(path)
        #: Bytes at the file's start left to the caller (an HDF5 user block; 0 or a power of 2 >= 512).
        self.header_bytes = header_bytes
        try:
            self._file = h5py.File(self.path, "w-", libver=LIBVER, track_order=False,
                                   userblock_size=header_bytes or None, alignment_threshold=ALIGN_THRESHOLD_BYTES,
                                   alignment_interval=DATA_ALIGNMENT_BYTES)
        except (OSError, ValueError) as err:
            if is_permission_error(err):  # h5py keeps the errno (13), not the class
                raise permission_denied(self.path.parent, "write into") from err
            raise CorruptCheckpointError(f"cannot create HDF5 file '{self.path}': {err}") from err
        self._dcpl = _dataset_dcpl()
        self._groups: dict[str, Any] = {"": self._file.id}  # low-level ids of the groups made so far, by path
        self._gcpl: Any = None  # h5py's group creation list (no timestamps), made on first use
        self._types: dict[np.dtype, Any] = {}  # dtype -> its HDF5 type id (h5t.py_create, logical)
        self._held: dict[str, Any] = {}  # array path -> its dataset id, kept for add_attrs (hold_attrs)

    def _group(self, path: str) -> Any:
        """The group at `path` ("" for the root), created with its parents on first use.

        h5py's create_dataset("a/b/c") looks every parent up in the file again
        (one H5Lexists walk per variable); variables of one scope share their group here,
        made with the calls h5py's create_group makes (same link and group properties) without
        its Python. Returns the group's low-level id.
        """
        group = self._groups.get(path)
        if group is None:
            parent, _, leaf = path.rpartition("/")
            if self._gcpl is None:
                self._gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
                self._gcpl.set_obj_track_times(False)
            name, lcpl = self._file._e(leaf, lcpl=True)  # the name's encoding, as create_group sets it
            group = self._groups[path] = h5py.h5g.create(self._group(parent), name, lcpl=lcpl, gcpl=self._gcpl)
        return group

    def create_array(self, path: str, dtype: np.dtype, shape: tuple[int, ...],
                     attrs: dict[str, Any], *, hold_attrs: bool = False) -> RawExtent | None:
        """See BackendWriter. HDF5 writes `attrs` now; with `hold_attrs` it keeps the dataset's id (up to
        HELD_DATASETS of them) for `add_attrs`, which then skips opening the dataset by its path again."""
        parent, _, leaf = path.rpartition("/")
        if shape:  # h5py's create_dataset without its Python (make_new_dset's calls, the type id cached)
            type_id = self._types.get(dtype)
            if type_id is None:
                type_id = self._types[dtype] = h5py.h5t.py_create(dtype, logical=1)
            dataset = h5py.h5d.create(self._group(parent), leaf.encode("utf-8"), type_id,
                                      h5py.h5s.create_simple(shape), dcpl=self._dcpl)
        else:  # a scalar: h5py gives it a default property list (late allocation), kept as it is
            dataset = h5py.Group(self._group(parent)).create_dataset(leaf, shape=shape, dtype=dtype,
                                                                      dcpl=self._dcpl).id
        _set_attrs(dataset, attrs, fresh=True)
        if hold_attrs and len(self._held) < HELD_DATASETS:
            self._held[path] = dataset
        nbytes = int(math.prod(shape)) * dtype.itemsize  # math.prod: 0.1 us a call, np.prod 3.3
        offset = dataset.get_offset() if nbytes else None
        # HDF5 reports an unallocated address (scalars) as None, or as user block size - 1 with one.
        if offset is None or offset < self.header_bytes:
            return None
        return RawExtent(self.path, int(offset), nbytes)

    def add_attrs(self, path: str, attrs: dict[str, Any]) -> None:
        """Adds attributes the array at `path` does not have yet (a checksum known once its bytes are written)."""
        dataset = self._held.pop(path, None)
        if dataset is None:
            dataset = h5py.h5d.open(self._file.id, path.encode("utf-8"))
        _set_attrs(dataset, attrs, fresh=True)

    def write_array(self, path: str, value: npt.NDArray[Any]) -> None:
        dataset = self._file[path]
        if value.size:
            dataset[...] = value

    def set_root_attrs(self, attrs: dict[str, Any]) -> None:
        for key, value in attrs.items():
            if value is None:
                continue
            self._file.attrs[key] = _attr_value(value)

    def close(self) -> list[Path]:
        self._held.clear()
        self._file.close()
        return [self.path]

    def abort(self) -> None:
        """Closes without caring about errors (the caller removes the file)."""
        self._held.clear()
        try:
            self._file.close()
        except Exception:  # noqa: BLE001 - best effort on an already failing path
            pass


class Hdf5Reader:
    """Reads one HDF5 file read-only; see BackendReader."""

    def __init__(self, path: Path, source: BinaryIO | None = None) -> None:
        self.path = Path(path)
        if source is not None:  # an object read with ranged GETs; varstore checked the commit already
            try:
                self._file = h5py.File(source, "r")
                self._userblock: int | None = None
            except (OSError, ValueError, RuntimeError) as err:
                raise CorruptCheckpointError(
                    f"cannot open HDF5 object '{path}' (truncated or damaged?): {err}") from err
            return
        if not self.path.exists():
            raise CheckpointNotFoundError(f"no checkpoint at '{self.path}'")
        if not self.path.is_file():
            raise NotACheckpointError(f"'{self.path}' is not an HDF5 file (it is a directory)")
        if not BACKEND.sniff(self.path):
            raise NotACheckpointError(
                f"'{self.path}' is not an HDF5 file (no HDF5 signature at its start)")
        try:
            self._file = h5py.File(self.path, "r", locking=False)
            self._userblock = None
        except (OSError, ValueError, RuntimeError) as err:
            raise CorruptCheckpointError(
                f"cannot open HDF5 file '{self.path}' (truncated or damaged?): {err}") from err

    def _dataset(self, path: str) -> Any:
        try:
            obj = self._file[path]
        except (KeyError, OSError, ValueError, RuntimeError) as err:
            raise CorruptCheckpointError(
                f"dataset '{path}' of '{self.path}' is missing or unreadable: {err}") from err
        if not isinstance(obj, h5py.Dataset):
            raise CorruptCheckpointError(f"'{path}' in '{self.path}' is a group, expected a dataset")
        return obj

    def root_attrs(self) -> dict[str, Any]:
        try:
            return _capped_attrs(self._file.attrs)
        except (OSError, ValueError, RuntimeError, KeyError) as err:
            raise CorruptCheckpointError(f"cannot read the attributes of '{self.path}': {err}") from err

    def array_attrs(self, path: str) -> dict[str, Any]:
        dataset = self._dataset(path)
        try:
            return _capped_attrs(dataset.attrs)
        except (OSError, ValueError, RuntimeError, KeyError) as err:
            raise CorruptCheckpointError(
                f"cannot read the attributes of '{path}' in '{self.path}': {err}") from err

    def check_groups(self, paths: list[str]) -> None:
        """Nothing to check: HDF5 checks its groups when it opens the datasets below them."""

    def raw_extent(self, path: str, dtype: np.dtype, shape: tuple[int, ...]) -> RawExtent | None:
        dataset = self._dataset(path)
        try:
            if tuple(dataset.shape) != tuple(shape) or dataset.dtype != dtype:
                raise CorruptCheckpointError(
                    f"dataset '{path}' of '{self.path}' has shape {dataset.shape} and dtype "
                    f"{dataset.dtype}, its index says {tuple(shape)} and {dtype}")
            plist = dataset.id.get_create_plist()
            if plist.get_layout() != h5py.h5d.CONTIGUOUS or plist.get_nfilters():
                return None
            offset = dataset.id.get_offset()
            if self._userblock is None:
                self._userblock = int(self._file.id.get_create_plist().get_userblock())
        except (OSError, ValueError, RuntimeError) as err:
            raise CorruptCheckpointError(f"cannot locate '{path}' in '{self.path}': {err}") from err
        # An unallocated address reads as None, or as user block size - 1 in a file with a user block.
        if offset is None or offset < self._userblock:
            return None
        nbytes = int(math.prod(shape)) * dtype.itemsize  # math.prod: 0.1 us a call, np.prod 3.3
        return RawExtent(self.path, int(offset), nbytes)

    def stored_nbytes(self, path: str) -> int | None:
        """Bytes the dataset at `path` occupies in the file, or None when it is filtered (compressed).

        Lets a reader compare a claimed size with what is really stored before allocating.

        Raises:
          CorruptCheckpointError: no such dataset, or HDF5 cannot tell.
        """
        dataset = self._dataset(path)
        try:
            if dataset.id.get_create_plist().get_nfilters():
                return None
            return int(dataset.id.get_storage_size())
        except (OSError, ValueError, RuntimeError) as err:
            raise CorruptCheckpointError(f"cannot locate '{path}' in '{self.path}': {err}") from err

    def read_bytes(self, path: str) -> bytes:
        """The bytes of a 1-D uint8 dataset (the manifest), its declared size checked against its stored
        size first (varstore._limits.check_manifest_size: a compressed dataset may not expand 1000x).

        Raises:
          CorruptCheckpointError: missing, unreadable, or declaring more than its stored bytes can back.
        """
        dataset = self._dataset(path)
        try:
            declared = int(np.prod(dataset.shape, dtype=object)) * dataset.dtype.itemsize
            stored = int(dataset.id.get_storage_size())
        except (OSError, ValueError, RuntimeError, TypeError) as err:
            raise CorruptCheckpointError(f"cannot locate '{path}' in '{self.path}': {err}") from err
        check_manifest_size(f"dataset '{path}' of '{self.path}'", declared, stored)
        try:
            return dataset[()].tobytes()
        except (OSError, ValueError, RuntimeError, TypeError) as err:
            raise CorruptCheckpointError(
                f"cannot read dataset '{path}' of '{self.path}' (truncated or damaged?): {err}") from err

    def read_array(self, path: str, out: npt.NDArray[Any]) -> None:
        dataset = self._dataset(path)
        try:
            if out.size:
                dataset.read_direct(out)
        except (OSError, ValueError, RuntimeError, TypeError) as err:
            raise CorruptCheckpointError(
                f"cannot read dataset '{path}' of '{self.path}' (truncated or damaged?): {err}") from err

    def close(self) -> None:
        try:
            self._file.close()
        except Exception:  # noqa: BLE001 - closing a damaged file must not raise
            pass


class Hdf5Backend:
    """The "h5" format: one HDF5 file."""

    name = "h5"
    description = "HDF5 file"
    native_bytes_strings = True
    suffixes: tuple[str, ...] = (".h5", ".hdf5")
    is_directory = False

    def sniff(self, path: Path) -> bool:
        """True when the file starts with the HDF5 signature (or has it at a userblock offset).

        Raises:
          CheckpointPermissionError: the file may not be read.
        """
        try:
            check_regular_file(path)  # a FIFO is never opened (SpecialFileError is an OSError: not HDF5)
            with open(path, "rb") as handle:
                for offset in (0, 512, 1024, 2048):
                    handle.seek(offset)
                    if handle.read(8) == HDF5_MAGIC:
                        return True
        except PermissionError as err:
            raise permission_denied(path) from err
        except OSError:
            return False
        return False

    def open_writer(self, path: Path, header_bytes: int = 0, storage: Storage | None = None) -> Hdf5Writer:
        """Creates the file; `header_bytes` reserves an HDF5 user block the caller may fill (bytes);
        `storage` is ignored (h5py writes the file's metadata itself)."""
        return Hdf5Writer(path, header_bytes)

    def open_reader(self, path: Path, source: BinaryIO | Mapping[str, bytes] | None = None) -> Hdf5Reader:
        """Opens `path` (or the file object `source`) read-only.

        Raises:
          SpecialFileError: a FIFO, socket, device or symlink loop at `path` (checked before opening).
          NotACheckpointError: `source` is a mapping of files (a directory's; an HDF5 file is one file).
        """
        if isinstance(source, Mapping):
            raise NotACheckpointError(f"'{path}': an HDF5 file is one file, not a mapping of files")
        if source is None:
            check_regular_file(path)
        return Hdf5Reader(path, source)


BACKEND = Hdf5Backend()
