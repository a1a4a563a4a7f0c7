"""Reads Keras weights: Keras 3 `.weights.h5` and `.keras` archives, and legacy Keras 2 `.h5` files.

Keras 3 stores each object's variables as datasets "<object path>/vars/<i>"
("layers/dense/vars/0", "optimizer/vars/3"); those dataset paths are the
variable names. Keras 2 lists its layers in a `layer_names` attribute (on the
root, or on the "model_weights" group of a whole-model save) and each
layer's weights in a `weight_names` attribute; the weight names
("dense/kernel:0") are the variable names. HDF5 access goes through
varstore.backends.hdf5.walker; this module never imports h5py. A `.keras`
zip is read in place when its weights member is stored uncompressed, else
extracted (bounded by its declared size, its compressed size times the
expansion factor, and the free space) to a temporary file that close(), or
any failure to open it, removes.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
import zipfile
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from varstore._limits import check_expansion, load_json
from varstore.backends.hdf5.walker import HDF5Walker
from varstore.formats.keras._config import CONFIG_MEMBER, not_trainable, read_config
from varstore.formats._zip_members import ZIP_ERRORS, bounded_chunks, check_method, read_member, stored_data_start
from varstore.formats.plain.generic import WalkerReader
from varstore.checkpoint.read.reader_api import SkippedEntry
from varstore.errors import (CorruptCheckpointError, NotACheckpointError, UnsafeCheckpointError, ValueTooLargeError,
                             VarstoreError)

if TYPE_CHECKING:
    from varstore.formats.probe import Probe

__all__ = ["Keras3Reader", "Keras2Reader", "keras_layout", "open_keras", "KERAS_WEIGHTS_MEMBER",
           "open_keras3", "open_keras2", "open_reader"]

#: The weights member of a `.keras` archive.
KERAS_WEIGHTS_MEMBER = "model.weights.h5"
_MAX_METADATA = 4 << 20  # bytes of a .keras archive's metadata.json (Keras writes a few hundred)
_MAX_DEFLATE_RATIO = 1032  # deflate cannot expand data more than about 1032:1
_FREE_MARGIN = 64 << 20  # bytes left free in the temporary directory after extracting
_VARS_RE = re.compile(r"(^|/)vars/\d+$")
#: Top-level groups of Keras 3 weights files (Keras 3.0 named the layer list "_layer_checkpoint_dependencies").
_KERAS3_TOP = {"layers", "vars", "_layer_checkpoint_dependencies"}


def keras_layout(walker: HDF5Walker) -> str | None:
    """"keras3", "keras2" or None (a plain HDF5 file) for a walked HDF5 file.

    Keras 2: a `layer_names` attribute on the root or on "model_weights".
    Keras 3: a top-level "layers", "vars" or "_layer_checkpoint_dependencies"
    group, and every dataset under a ".../vars/<i>" path.
    """
    if "layer_names" in walker.root_attrs:
        return "keras2"
    model_weights = walker.group_attrs("model_weights")
    if model_weights is not None and "layer_names" in model_weights:
        return "keras2"
    top = {g.path for g in walker.groups if g.path and "/" not in g.path}
    if top & _KERAS3_TOP and all(_VARS_RE.search(d.path) for d in walker.datasets):
        return "keras3"
    return None


def _names_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


class _Window:
    """A read-only file object over bytes [start, start + size) of another file (a stored zip member)."""

    def __init__(self, path: Path, start: int, size: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 (closed in close())
        self._start, self._size, self._pos = start, size, 0
        self.name = f"{path}!{KERAS_WEIGHTS_MEMBER}"

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        count = max(0, min(len(view), self._size - self._pos))
        self._file.seek(self._start + self._pos)
        got = self._file.readinto(view[:count]) if count else 0
        self._pos += got
        return got

    def read(self, size: int = -1) -> bytes:
        size = self._size - self._pos if size is None or size < 0 else size
        buffer = bytearray(max(0, min(size, self._size - self._pos)))
        got = self.readinto(buffer)
        return bytes(buffer[:got])

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._file.close()


def _extract_weights(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, label: str) -> Path:
    """Inflates a deflated weights member into a new temporary file, bounded by its declared size.

    The declared size must be one deflate can produce from the stored bytes
    (at most _MAX_DEFLATE_RATIO times them), at most the stored bytes times
    the expansion factor plus 64 MiB (VARSTORE_MAX_EXPANSION, see
    varstore/_limits.py: a few-KB archive never writes GBs to $TMPDIR), and
    must fit in the temporary directory's free space; the copy stops one byte
    past it. The temporary file is removed on any error, KeyboardInterrupt included.

    Raises:
      UnsafeCheckpointError: a declared size deflate cannot reach, or more bytes than declared.
      ValueTooLargeError: the declared size is over the expansion bound, or does not fit in the temporary
        directory.
    """
    declared = info.file_size
    if declared > info.compress_size * _MAX_DEFLATE_RATIO + (1 << 20):
        raise UnsafeCheckpointError(f"{label}: zip member '{info.filename}' declares {declared} bytes from "
                                    f"{info.compress_size} compressed, more than deflate can produce")
    check_expansion(info.filename, str(path), declared, info.compress_size)  # before a byte is written
    folder = tempfile.gettempdir()
    free = shutil.disk_usage(folder).free
    if declared + _FREE_MARGIN > free:
        raise ValueTooLargeError(
            f"{label}: zip member '{info.filename}' inflates to {declared} bytes, and the temporary directory "
            f"'{folder}' has {free} bytes free; set TMPDIR to a larger disk, or unzip the archive and open "
            f"{KERAS_WEIGHTS_MEMBER} itself")
    handle, temp_name = tempfile.mkstemp(suffix=".weights.h5", prefix="varstore-keras-")
    temp = Path(temp_name)
    try:
        written = 0
        with os.fdopen(handle, "wb") as out, archive.open(info) as member:
            for chunk in bounded_chunks(member, declared):
                out.write(chunk)
                written += len(chunk)
        if written != declared:
            raise UnsafeCheckpointError(f"{label}: zip member '{info.filename}' inflates to "
                                        f"{'more than' if written > declared else 'only'} {min(written, declared)} "
                                        f"bytes, its directory entry declares {declared}")
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


def _open_archive_member(path: Path) -> tuple[IO[bytes] | _Window | Path, Path | None, dict[str, Any]]:
    """(source for HDF5Walker, temporary file to remove or None, metadata.json) of a `.keras` zip.

    Raises:
      NotACheckpointError: no weights member.
      UnsafeCheckpointError, ValueTooLargeError: as _extract_weights and read_member.
      CorruptCheckpointError: a damaged zip.
    """
    label = f"Keras archive '{path}'"
    try:
        with zipfile.ZipFile(path) as archive:
            try:
                info = archive.getinfo(KERAS_WEIGHTS_MEMBER)
            except KeyError:
                raise NotACheckpointError(
                    f"'{path}' is a zip file without '{KERAS_WEIGHTS_MEMBER}': not a Keras 3 "
                    f".keras archive") from None
            check_method(info, label)
            metadata: dict[str, Any] = {}
            meta_info = next((i for i in archive.infolist() if i.filename == "metadata.json"), None)
            if meta_info is not None:
                try:
                    loaded = load_json(read_member(archive, meta_info, _MAX_METADATA, label).decode("utf-8"),
                                       f"{label} (metadata.json)")
                    metadata = loaded if isinstance(loaded, dict) else {}
                except (ValueError, UnicodeDecodeError):
                    metadata = {}
            if info.compress_type == zipfile.ZIP_STORED:
                with open(path, "rb") as raw:
                    start = stored_data_start(raw, info, 0, os.fstat(raw.fileno()).st_size, label)
                return _Window(path, start, info.file_size), None, metadata
            temp = _extract_weights(archive, info, path, label)
            return temp, temp, metadata
    except VarstoreError:
        raise
    except ZIP_ERRORS as err:
        raise CorruptCheckpointError(f"cannot read Keras archive '{path}': {err}") from err


class Keras3Reader(WalkerReader):
    """Keras 3 `.weights.h5` file or `.keras` archive; names are dataset paths ("layers/dense/vars/0").

    `metadata` holds the archive's metadata.json (keras_version, date_saved)
    for `.keras` files, and "layer_names": {"layers/dense/vars": "dense_hidden"}
    from the vars groups' `name` attributes. Keras stores no per-weight trainable flag: False for
    optimizer state and, in a `.keras` archive, every weight of a layer its config.json saves with
    `"trainable": false`; None (unknown) otherwise (_config.py). A config.json that cannot be used
    is listed in `skipped`.
    """

    format = "keras3"

    def __init__(self, path: os.PathLike[str] | str, walker: HDF5Walker | None = None,
                 archive_metadata: dict[str, Any] | None = None, config: dict[str, Any] | None = None) -> None:
        """Opens a `.weights.h5` file (or uses an already walked one); `config`: a `.keras` archive's config.json.

        Raises:
          NotACheckpointError: the HDF5 layout is not Keras 3's.
          CorruptCheckpointError: h5py cannot open the file.
        """
        walker = walker or HDF5Walker(path)
        if keras_layout(walker) != "keras3":
            walker.close()
            raise NotACheckpointError(f"'{path}' is not a Keras 3 weights file (no layers/.../vars/<i> layout)")
        names = {d.path: d.path for d in walker.datasets}
        layer_names = {g.path: g.attrs["name"] for g in walker.groups
                       if g.path.endswith("vars") and isinstance(g.attrs.get("name"), str)}
        super().__init__(Path(path), walker, names, not_trainable(names, layer_names, config))
        self.metadata = dict(archive_metadata or {})
        if layer_names:
            self.metadata["layer_names"] = layer_names
        if isinstance(self.metadata.get("keras_version"), str):
            self.format_version = f"keras-{self.metadata['keras_version']}"
        self.skipped = [SkippedEntry(s.path, s.reason) for s in walker.skipped]
        self._temp: Path | None = None
        self._finalizer: weakref.finalize | None = None

    def close(self) -> None:
        super().close()
        if self._finalizer is not None:
            self._finalizer()


class Keras2Reader(WalkerReader):
    """Legacy Keras 2 `.h5` (save_weights or whole-model save); names are weight names ("dense/kernel:0").

    Optimizer weights of a whole-model save (the "optimizer_weights" group)
    are listed too, under their weight names. Datasets that no `weight_names`
    attribute lists are skipped with a reason. `metadata` holds keras_version
    and backend.
    """

    format = "keras2"

    def __init__(self, path: os.PathLike[str] | str, walker: HDF5Walker | None = None) -> None:
        """Raises NotACheckpointError when the file has no Keras 2 layer_names attribute."""
        walker = walker or HDF5Walker(path)
        if keras_layout(walker) != "keras2":
            walker.close()
            raise NotACheckpointError(f"'{path}' is not a Keras 2 weights file (no layer_names attribute)")
        root = "" if "layer_names" in walker.root_attrs else "model_weights"
        root_attrs = walker.group_attrs(root) or {}
        names: dict[str, str] = {}
        trainable: dict[str, bool] = {}
        groups = [(root, layer, True) for layer in _names_list(root_attrs.get("layer_names"))]
        if walker.group_attrs("optimizer_weights") is not None:
            groups.append(("", "optimizer_weights", False))
        for parent, layer, is_layer in groups:
            group = f"{parent}/{layer}" if parent else layer
            attrs = walker.group_attrs(group)
            if attrs is None:
                raise CorruptCheckpointError(f"Keras 2 file '{path}' lists layer '{layer}' but has no group for it")
            for weight in _names_list(attrs.get("weight_names")):
                dataset = f"{group}/{weight}"
                name = weight if weight not in names else f"{layer}/{weight}"
                walker.entry(dataset)  # raises when listed but missing or unreadable
                names[name] = dataset
                if not is_layer:
                    trainable[name] = False
        super().__init__(Path(path), walker, names, trainable)
        listed = set(names.values())
        self.skipped = [SkippedEntry(s.path, s.reason) for s in walker.skipped]
        self.skipped += [SkippedEntry(d.path, "not listed in any Keras weight_names attribute")
                         for d in walker.datasets if d.path not in listed]
        self.metadata = {k: walker.root_attrs[k] for k in ("keras_version", "backend")
                         if k in walker.root_attrs}
        if isinstance(self.metadata.get("keras_version"), str):
            self.format_version = f"keras-{self.metadata['keras_version']}"


def open_keras(path: os.PathLike[str] | str) -> WalkerReader:
    """Opens a Keras file of any layout: a `.keras` zip, a Keras 3 or a Keras 2 `.h5`.

    Raises:
      NotACheckpointError: neither Keras layout.
      CorruptCheckpointError: the zip or HDF5 container is damaged.
    """
    path = Path(path)
    if zipfile.is_zipfile(path):
        source, temp, metadata = _open_archive_member(path)
        window = source if isinstance(source, _Window) else None

        def cleanup(window: _Window | None = window, temp: Path | None = temp) -> None:
            if window is not None:
                window.close()
            if temp is not None:
                temp.unlink(missing_ok=True)

        try:  # the temporary copy goes on any failure (a weights file in no Keras layout included)
            walker = HDF5Walker(source, label=f"{path}!{KERAS_WEIGHTS_MEMBER}")
            config, unused = read_config(path)
            reader = Keras3Reader(path, walker, metadata, config)
            if unused is not None:
                reader.skipped.append(SkippedEntry(CONFIG_MEMBER, unused))
            reader._finalizer = weakref.finalize(reader, cleanup)
        except BaseException:
            cleanup()
            raise
        return reader
    walker = HDF5Walker(path)
    reader = _reader_for_layout(path, walker)
    if reader is None:
        walker.close()
        raise NotACheckpointError(f"'{path}' is an HDF5 file but not in a Keras layout")
    return reader


def _reader_for_layout(path: Path, walker: HDF5Walker) -> WalkerReader | None:
    """A Keras 3 or Keras 2 reader over an open walker, or None when the file is in neither layout."""
    layout = keras_layout(walker)
    if layout == "keras3":
        return Keras3Reader(path, walker)
    if layout == "keras2":
        return Keras2Reader(path, walker)
    return None


# ------------------------------------------------------------------ the registry's entry points
def open_keras3(path: Path, *, probe: Probe | None = None, **options: Any) -> Keras3Reader:
    """The registry's open for "keras3": a `.weights.h5` (reusing the probe's HDF5 walk) or a `.keras` zip.

    Raises:
      NotACheckpointError: the file is not in the Keras 3 layout (a Keras 2 file included).
    """
    walker = probe.take_hdf5() if probe is not None else None
    if walker is not None:
        return Keras3Reader(path, walker)
    reader = open_keras(path)
    if not isinstance(reader, Keras3Reader):
        reader.close()
        return Keras3Reader(path)  # raises NotACheckpointError naming the file
    return reader


def open_keras2(path: Path, *, probe: Probe | None = None, **options: Any) -> Keras2Reader:
    """The registry's open for "keras2" (reusing the probe's HDF5 walk when there is one)."""
    return Keras2Reader(path, probe.take_hdf5() if probe is not None else None)


def open_reader(path: Path, *, probe: Probe | None = None, **options: Any) -> WalkerReader:
    """The registry's open for "keras": whichever Keras layout the file has (see open_keras)."""
    return open_keras(path)


def _keras_layout(probe: Probe) -> str | None:
    if not probe.is_file or not probe.is_hdf5:
        return None
    return keras_layout(probe.hdf5())


def sniff_keras3(probe: Probe) -> Path | None:
    """A Keras 3 `.weights.h5` (layers/.../vars/<i> layout) or a `.keras` zip (holds model.weights.h5).

    Raises:
      CorruptCheckpointError: an HDF5 signature, but h5py cannot walk the file.
    """
    names = probe.zip_names
    if names is not None:
        return probe.path if KERAS_WEIGHTS_MEMBER in names else None
    return probe.path if _keras_layout(probe) == "keras3" else None


def sniff_keras2(probe: Probe) -> Path | None:
    """A legacy Keras 2 `.h5` (a layer_names attribute on the root or on "model_weights")."""
    return probe.path if _keras_layout(probe) == "keras2" else None
