"""Zarr v3 backend: named arrays and attributes in one Zarr v3 directory.

Writes the v3 metadata documents (zarr.json) itself, following the Zarr v3
core specification: every group has a zarr.json with node_type "group";
every array has one chunk covering it (chunk shape = shape, zero extents
counted as 1) and only the "bytes" codec (little-endian, no compression), so
its single chunk file holds the raw C-order bytes. That file is named by the
core spec's "v2" chunk key encoding with separator ".": `<array>/0.0` (one 0
per dimension, `<array>/0` for a scalar), right in the array's directory,
so an array costs one directory, not one per dimension plus one. Arrays
written by several ranks (a chunk grid) use the default encoding
(`<array>/c/<i>/<j>`); the reader follows whichever encoding a zarr.json
names. Only core-spec data types are written (bool, int/uint 8-64,
float16/32/64, complex64/128); callers store other dtypes as views. zarr
itself is imported only to read arrays written by other tools. Knows nothing
about variables, manifests, checksums or atomic renames.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from varstore.backends.base import RawExtent
from varstore.storage._fs_types import path_in_memory
from varstore.storage._local_errors import is_permission_error, permission_denied
from varstore.errors import CorruptCheckpointError, NotACheckpointError, UnsupportedDtypeError
from varstore.storage.special_files import check_regular_file

if TYPE_CHECKING:  # annotations only: a read imports neither the thread pool (nor logging) nor numpy.typing
    from concurrent.futures import Future, ThreadPoolExecutor

    from varstore.storage.protocol import Storage

    import numpy.typing as npt

from varstore.backends.zarr3.reader import Zarr3Reader

__all__ = ["Zarr3Backend", "Zarr3Writer", "Zarr3Reader", "BACKEND", "chunk_file", "chunk_path", "NODES_ATTRIBUTE",
           "core_type_refusal"]

#: Threads writing zarr.json documents while the writer's caller goes on (0: written at once). Creating
#: a file costs a journal entry and an inode; several in flight overlap that work with the rest of a save.
#: On a tmpfs or ramfs nothing waits, so they are written at once there (W1 save: ~13 ms less CPU, issue 39).
JSON_WRITER_THREADS = 4

_CORE_TYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float16", "float32", "float64", "complex64", "complex128"}


@functools.lru_cache(maxsize=256)
def _dtype_name(dtype: np.dtype) -> str:
    """`dtype.name`, computed once per dtype (NumPy builds it in Python, ~5 us a call: twice per array of
    a save)."""
    return dtype.name


def _fill_value(dtype: np.dtype) -> Any:
    if dtype.kind == "b":
        return False
    if dtype.kind in "iu":
        return 0
    if dtype.kind == "c":
        return [0.0, 0.0]
    return 0.0


def chunk_file(array_dir: Path, ndim: int) -> Path:
    """The file of a single-chunk array as the writer names it (chunk key encoding "v2", separator "."):
    `<array>/0.0` for 2-D, `<array>/0` for 1-D and 0-d."""
    return array_dir / (".".join("0" * ndim) or "0")


def chunk_path(array_dir: Path, index: tuple[int, ...]) -> Path:
    """The file of the chunk at grid position `index` under the default "/"-separated chunk key encoding."""
    return array_dir.joinpath("c", *(str(i) for i in index))


#: The chunk key encoding of single-chunk arrays (chunk_file) and of chunk grids (chunk_path).
SINGLE_CHUNK_ENCODING: dict[str, Any] = {"name": "v2", "configuration": {"separator": "."}}
GRID_ENCODING: dict[str, Any] = {"name": "default", "configuration": {"separator": "/"}}


def core_type_refusal(dtype: np.dtype) -> str | None:
    """None when `dtype` (a stored dtype) is a Zarr v3 core data type, else why it cannot be stored."""
    if _dtype_name(dtype) in _CORE_TYPES:
        return None
    what = " (a long double: x87 80-bit extended precision on x86)" if dtype.kind == "f" else ""
    return f"Zarr v3 core has no data type for {dtype}{what}"


def array_metadata(dtype: np.dtype, shape: tuple[int, ...], attrs: dict[str, Any],
                   chunks: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The zarr.json document of an uncompressed array: one chunk (SINGLE_CHUNK_ENCODING), or a regular
    grid of `chunks` (GRID_ENCODING).

    Raises:
      UnsupportedDtypeError: `dtype` is not a Zarr v3 core data type.
    """
    refusal = core_type_refusal(dtype)
    if refusal is not None:
        raise UnsupportedDtypeError(f"{refusal}; store a view")
    codec: dict[str, Any] = {"name": "bytes"}
    if dtype.itemsize > 1 and dtype.kind != "b":
        codec["configuration"] = {"endian": "little"}
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": _dtype_name(dtype),
        "chunk_grid": {"name": "regular",
                       "configuration": {"chunk_shape": [max(1, n) for n in (chunks or shape)]}},
        "chunk_key_encoding": SINGLE_CHUNK_ENCODING if chunks is None else GRID_ENCODING,
        "fill_value": _fill_value(dtype),
        "codecs": [codec],
        "attributes": attrs,
    }


#: Root attribute of a Zarr checkpoint saved to an object store: {node path: its zarr.json document,
#: exactly as in its own file}, so a reader of the bucket gets every array's and group's metadata with
#: the commit object instead of one GET each (checkpoint-format.md section 8). An attribute, not
#: zarr-python's consolidated metadata, which zarr-python would trust over the nodes' own files.
NODES_ATTRIBUTE = "varstore_zarr_nodes"


def document_text(document: dict[str, Any]) -> str:
    """A zarr.json document as varstore writes it (so a copy in NODES_ATTRIBUTE can be compared by size)."""
    return json.dumps(document, ensure_ascii=False, allow_nan=False)


def _write_json(path: Path, document: dict[str, Any]) -> None:
    _write_text(path, document_text(document))


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


class Zarr3Writer:
    """Creates one new Zarr v3 directory; see BackendWriter."""

    native_bytes_strings = False

    def __init__(self, path: Path, storage: Storage | None = None) -> None:
        self.path = Path(path)
        self._storage = storage
        try:
            self.path.mkdir(parents=False, exist_ok=False)
        except OSError as err:
            if is_permission_error(err):
                raise permission_denied(self.path.parent, "write into") from err
            raise CorruptCheckpointError(f"cannot create Zarr directory '{self.path}': {err}") from err
        self._groups: set[str] = {""}
        self._written: list[Path] = [self.path]
        self._root_attrs: dict[str, Any] = {}
        # with a storage that uploads every file it is given whole (a bucket): the node directories,
        # known without being made, and every node's zarr.json for NODES_ATTRIBUTE; None otherwise
        uploads = getattr(storage, "uploads", False)
        self._directories: set[Path] | None = set() if uploads else None
        self._documents: dict[str, dict[str, Any]] | None = {} if uploads else None
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []
        self._in_memory = not uploads and path_in_memory(str(self.path))  # documents written at once
        self._held: dict[str, dict[str, Any]] = {}  # zarr.json documents waiting for add_attrs, by array path

    def _write_json_soon(self, node: str, document: dict[str, Any]) -> None:
        """Writes a zarr.json from a helper thread (JSON_WRITER_THREADS); encoding errors raise here,
        write errors at close()."""
        text = document_text(document)
        path = self.path / node / "zarr.json"
        if self._documents is not None:
            self._documents[node] = document
        write = _write_text if self._storage is None else self._write_through_storage
        if JSON_WRITER_THREADS <= 0 or self._in_memory:
            write(path, text)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(JSON_WRITER_THREADS, thread_name_prefix="varstore-zarr-json")
        self._pending.append(self._pool.submit(write, path, text))

    def _write_through_storage(self, path: Path, text: str) -> None:
        """One document in one whole write through the storage (which may upload it at once)."""
        assert self._storage is not None
        writer = self._storage.writer(str(path))
        try:
            writer.write_at(0, text.encode("utf-8"))
        except BaseException:
            writer.abort()
            raise
        writer.finish()

    def _wait_for_writes(self) -> BaseException | None:
        """Waits for every zarr.json handed to the helper threads and ends them; the first error, or None."""
        pending, self._pending = self._pending, []
        first: BaseException | None = None
        for future in pending:
            error = future.exception()
            first = first or error
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        return first

    def _make_directory(self, directory: Path) -> None:
        """Creates a node's directory (a second node at the same path fails here, as mkdir does); with a
        storage that uploads, only remembers it: files written there go to objects, and the storage
        makes a local directory itself for any file it keeps (storage/staged_upload.py)."""
        if self._directories is None:
            directory.mkdir()
        elif directory in self._directories:
            raise FileExistsError(17, "File exists", str(directory))
        else:
            self._directories.add(directory)

    def _ensure_group(self, group: str) -> None:
        if group in self._groups:
            return
        parent = group.rpartition("/")[0]
        self._ensure_group(parent)
        directory = self.path / group
        self._make_directory(directory)
        self._write_json_soon(group, {"zarr_format": 3, "node_type": "group", "attributes": {}})
        self._groups.add(group)
        self._written += [directory, directory / "zarr.json"]

    def create_array(self, path: str, dtype: np.dtype, shape: tuple[int, ...],
                     attrs: dict[str, Any], chunks: tuple[int, ...] | None = None,
                     compression: str | None = None, *, hold_attrs: bool = False) -> RawExtent | None:
        """See BackendWriter; `chunks` (a multi-writer save) gives a regular grid whose chunk
        files the writers create (chunk_path: `<array>/c/...` directories made here when the grid
        is one chunk), and no extent is returned for a grid of several. `compression` ("zstd") records
        the codec chain of codecs.py: the caller writes the encoded chunk at the extent's file (its
        `nbytes` is the decoded size)."""
        self._ensure_group(path.rpartition("/")[0])
        directory = self.path / path
        self._make_directory(directory)
        whole = chunks is None or tuple(max(1, n) for n in chunks) == tuple(max(1, n) for n in shape)
        document = array_metadata(dtype, shape, attrs, chunks)
        if compression is not None:
            from varstore.backends.zarr3.codecs import compression_codecs

            document["codecs"] = compression_codecs(compression, dtype)
        if hold_attrs:  # its zarr.json waits for add_attrs (written at close at the latest)
            self._held[path] = document
        else:
            self._write_json_soon(path, document)
        self._written += [directory, directory / "zarr.json"]
        nbytes = int(math.prod(shape)) * dtype.itemsize  # math.prod: 0.1 us a call, np.prod 3.3
        if nbytes == 0 or not whole:
            return None
        if chunks is None:
            chunk = chunk_file(directory, len(shape))
        else:
            chunk = chunk_path(directory, (0,) * len(shape))
            if shape and self._directories is None:
                chunk.parent.mkdir(parents=True)
                self._written += [directory.joinpath("c", *(["0"] * i)) for i in range(len(shape))]
        self._written.append(chunk)
        return RawExtent(chunk, 0, nbytes)

    def add_attrs(self, path: str, attrs: dict[str, Any]) -> None:
        """Adds `attrs` to the array at `path` created with `hold_attrs`, and writes its zarr.json."""
        document = self._held.pop(path)
        document["attributes"] = {**document.get("attributes", {}), **attrs}
        self._write_json_soon(path, document)

    def write_array(self, path: str, value: npt.NDArray[Any]) -> None:
        if value.size:  # pragma: no cover - every non-empty array has an extent
            raise CorruptCheckpointError(f"array '{path}' must be written through its extent")

    def set_root_attrs(self, attrs: dict[str, Any]) -> None:
        self._root_attrs.update({k: v for k, v in attrs.items() if v is not None})

    def close(self) -> list[Path]:
        """Waits for the zarr.json documents being written, then writes the root's; see BackendWriter.

        Raises:
          OSError: a document could not be written (the first such error).
        """
        held, self._held = self._held, {}
        for path, document in held.items():  # arrays whose attributes never came: written as they are
            self._write_json_soon(path, document)
        error = self._wait_for_writes()
        if error is not None:
            raise error
        attrs = self._root_attrs
        if self._documents:  # a bucket's reader: see NODES_ATTRIBUTE
            nodes = {path: self._documents[path] for path in sorted(self._documents)}
            attrs = {**attrs, NODES_ATTRIBUTE: nodes}
        _write_json(self.path / "zarr.json", {"zarr_format": 3, "node_type": "group", "attributes": attrs})
        return self._written + [self.path / "zarr.json"]

    def abort(self) -> None:
        """Waits for the zarr.json documents being written, errors ignored (the caller then removes the
        directory, so nothing is written into it afterwards)."""
        self._wait_for_writes()


class Zarr3Backend:
    """The "zarr" format: one Zarr v3 directory."""

    name = "zarr"
    description = "Zarr v3 directory"
    native_bytes_strings = False
    suffixes: tuple[str, ...] = (".zarr",)
    is_directory = True

    def documents_from_root(self, root: bytes) -> dict[str, bytes]:
        """{relative file ("layer_0/kernel/zarr.json"): its exact bytes} of the nodes whose zarr.json
        documents the root zarr.json `root` carries (NODES_ATTRIBUTE; {} when none, or when `root` is
        not JSON): what a reader of an object store would otherwise fetch one object at a time.
        A copy that differs from the node's own file is caught by its size (see checkpoint/publish/remote.py)."""
        try:
            document = json.loads(root)
            nodes = document["attributes"][NODES_ATTRIBUTE]
        except (ValueError, KeyError, TypeError, RecursionError):
            return {}
        if not isinstance(nodes, dict):
            return {}
        return {f"{path}/zarr.json": document_text(node).encode("utf-8") for path, node in nodes.items()
                if isinstance(path, str) and isinstance(node, dict) and path and ".." not in path.split("/")}

    def sniff(self, path: Path) -> bool:
        """True when `path` is a directory holding a zarr.json that says zarr_format 3.

        Raises:
          CheckpointPermissionError: the zarr.json may not be read.
        """
        try:
            check_regular_file(Path(path) / "zarr.json")  # a FIFO is never opened (an OSError: not Zarr)
            with open(Path(path) / "zarr.json", "rb") as handle:
                return json.loads(handle.read()).get("zarr_format") == 3
        except PermissionError as err:
            raise permission_denied(Path(path) / "zarr.json") from err
        except (OSError, ValueError, AttributeError, RecursionError):
            return False

    def open_writer(self, path: Path, header_bytes: int = 0, storage: Storage | None = None) -> Zarr3Writer:
        """Creates the directory; `header_bytes` is ignored (a directory has no file header); arrays' and
        groups' zarr.json go through `storage` when given (see Backend.open_writer)."""
        return Zarr3Writer(path, storage)

    def open_reader(self, path: Path, source: BinaryIO | Mapping[str, bytes] | None = None) -> Zarr3Reader:
        if source is None or isinstance(source, Mapping):
            return Zarr3Reader(path, source)
        raise NotACheckpointError(f"'{path}': a Zarr directory cannot be read from a single file object")


BACKEND = Zarr3Backend()

