"""Benchmark methods: one small class per way of saving and loading the same variables.

Each method saves a workload (raw bytes, plain h5py, plain zarr 3, safetensors,
npz, varstore's HDF5 and Zarr, torch, safetensors.torch, varstore.torch and
tensorstore when importable), loads it
back, and reads one named variable. Every method keeps the same layout (one
array per variable, the workload's full names) so the numbers compare like for
like. Methods never time themselves, never drop caches and never spawn
processes: `_worker.py` does that around them. Optional libraries are imported
inside the methods, so a worker only imports what its method needs.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from _workloads import DTYPE, SLEEP_S, Workload

__all__ = ["METHODS", "Method", "fsync_file", "fsync_tree", "remove", "touch_pages"]

Arrays = dict[str, npt.NDArray[Any]]
PAGE = 4096


# -- durability and cleanup helpers ---------------------------------------------------------

def fsync_file(path: Path) -> None:
    """fsyncs one file's data and metadata (any fd flushes the inode's dirty pages)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, write: Any, durable: bool) -> None:
    """Opens `path` for writing, calls `write(f)`, and when durable fsyncs the file and its folder."""
    with open(path, "wb") as f:
        write(f)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    if durable:
        _fsync_dir(path.parent)


def fsync_tree(path: Path) -> None:
    """Makes `path` durable: fsyncs the file, or every file and folder under it, then its parent folder."""
    path = Path(path)
    if path.is_dir():
        for root, _dirs, files in os.walk(path):
            for name in files:
                fsync_file(Path(root) / name)
            _fsync_dir(Path(root))
    else:
        fsync_file(path)
    _fsync_dir(path.parent)


def remove(path: Path) -> None:
    """Removes a file or folder if it exists."""
    path = Path(path)
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def files_under(path: Path) -> Iterator[Path]:
    """`path` itself if a file, else every file below it."""
    path = Path(path)
    if path.is_dir():
        for root, _dirs, files in os.walk(path):
            for name in files:
                yield Path(root) / name
    elif path.exists():
        yield path


def touch_pages(arrays: Any) -> int:
    """Reads one byte per 4 KiB page of every array (so mmap-backed loads really read); returns a checksum."""
    values = arrays.values() if isinstance(arrays, dict) else [arrays]
    total = 0
    for a in values:
        flat = np.asarray(a).reshape(-1).view(np.uint8)
        total += int(flat[::PAGE].sum(dtype=np.uint64))
    return total


# -- the registry ---------------------------------------------------------------------------

class Method:
    """One way to save and load a workload. Subclasses fill in the hooks below.

    Attributes:
      name: the name used on the command line and in the table ("h5py").
      label: one line saying exactly what is done.
      modules: importable modules it needs; missing ones skip the method.
      suffix: checkpoint path suffix (".h5", ".zarr", ...).
      touches_pages: loads return memory maps, so the worker reads every page in the timed region.
      restores_in_place: has a W4 (restore into a store with expensive initializers).
      durable_option: its non-durable save differs from the durable one.
      extra_phases: (workload, phase) cells beyond save/load/read-one (issue 11's targets):
        "read-all" (every variable through the lazy reader), "vs-load" (varstore.load),
        "keys-info" (every name with its shape and dtype from the header), "process" (a fresh
        `python -c` from start to the first array in hand), "import" (a fresh `python -c` import),
        "restore" on W2 (as W4 on W1: into a new model, variables without memory whose initializers
        must not run: how a lazily built model is restored).
    """

    name = ""
    label = ""
    modules: tuple[str, ...] = ()
    suffix = ""
    touches_pages = False
    restores_in_place = False
    durable_option = True
    extra_phases: tuple[tuple[str, str], ...] = ()
    #: `python -c` code for "import" (what a user's script imports first).
    import_code = ""

    def process_code(self, path: Path, name: str) -> str:
        """`python -c` code that opens `path` and gets variable `name` as an array (W3 "process")."""
        raise NotImplementedError

    def read_all(self, workload: Workload, path: Path) -> Any:
        """Every variable through the lazy reader (W1/W2 "read-all")."""
        raise NotImplementedError

    def keys_info(self, workload: Workload, path: Path) -> Any:
        """Every name with its shape and dtype, from the header only (W2 "keys-info")."""
        raise NotImplementedError

    def unavailable(self) -> str | None:
        """None when usable, else why not (e.g. "torch is not installed")."""
        for module in self.modules:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed"
        return None

    def imports(self) -> None:
        """Imports what the method needs, before the worker's memory baseline."""
        for module in self.modules:
            importlib.import_module(module)

    def make_model(self, workload: Workload) -> Any:
        """The in-memory model to save (not timed): by default a dict of one array per variable."""
        return workload.read_arrays()

    def save(self, model: Any, path: Path, durable: bool) -> None:
        """Writes `model` to `path`; when `durable`, every written file and folder is fsynced."""
        raise NotImplementedError

    def prepare_load(self, workload: Workload, path: Path) -> Any:
        """Untimed setup for `load` (e.g. preallocated destination arrays)."""
        return None

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        """Reads every variable; returns a dict name -> array (or one flat array for raw)."""
        raise NotImplementedError

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        """Opens the checkpoint and returns one variable's value (W3: time to first array)."""
        raise NotImplementedError

    def prepare_restore(self, workload: Workload, path: Path) -> Any:
        """W4 setup: a store whose variables have initializers that sleep `SLEEP_S`."""
        raise NotImplementedError

    def restore(self, state: Any, workload: Workload, path: Path) -> tuple[Arrays, int]:
        """W4: restores into the store from `prepare_restore`; returns (values, initializer calls)."""
        raise NotImplementedError


class Raw(Method):
    name = "raw"
    label = ("one ndarray.tofile of all bytes (+ fsync); np.fromfile back; the disk limit; "
             "W3 import: `python -c 'import numpy'`")
    suffix = ".bin"
    extra_phases = (("W3", "import"),)
    import_code = "import numpy"

    def make_model(self, workload: Workload) -> Any:
        return workload.read_flat()

    def save(self, model: Any, path: Path, durable: bool) -> None:
        _write_file(path, lambda f: model.tofile(f), durable)

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        return np.fromfile(path, dtype=DTYPE)

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        spec = workload.by_name(name)
        with open(path, "rb") as f:
            f.seek(spec.offset)
            return np.fromfile(f, dtype=DTYPE, count=spec.size).reshape(spec.shape)


class H5py(Method):
    extra_phases = (("W3", "process"),)

    def process_code(self, path: Path, name: str) -> str:
        return f"import h5py\nwith h5py.File({str(path)!r}, 'r') as f:\n    a = f[{name!r}][()]"

    name = "h5py"
    label = ("plain h5py, one dataset per variable (defaults); read_direct into preallocated, "
             "zero-filled arrays")
    modules = ("h5py",)
    suffix = ".h5"

    def save(self, model: Arrays, path: Path, durable: bool) -> None:
        import h5py

        with h5py.File(path, "w") as f:
            for name, value in model.items():
                f.create_dataset(name, data=value)
        if durable:
            fsync_tree(path)

    def prepare_load(self, workload: Workload, path: Path) -> Any:
        # Existing arrays, already resident (as a model's weights are): zero-filled before the timer.
        arrays = {v.name: np.empty(v.shape, DTYPE) for v in workload.variables}
        for a in arrays.values():
            a.fill(0)
        return arrays

    def load(self, state: Arrays, workload: Workload, path: Path) -> Any:
        import h5py

        with h5py.File(path, "r") as f:
            for name, out in state.items():
                f[name].read_direct(out)
        return state

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        import h5py

        with h5py.File(path, "r") as f:
            return f[name][()]


class Zarr3(Method):
    name = "zarr3"
    label = "plain zarr 3, one array per variable, default chunks and codecs (zstd)"
    modules = ("zarr",)
    suffix = ".zarr"
    compressors: Any = "auto"

    def save(self, model: Arrays, path: Path, durable: bool) -> None:
        import zarr

        group = zarr.open_group(path, mode="w")
        for name, value in model.items():
            group.create_array(name, data=value, compressors=self.compressors)
        if durable:
            fsync_tree(path)

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        import zarr

        group = zarr.open_group(path, mode="r")
        return {v.name: group[v.name][...] for v in workload.variables}

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        import zarr

        return zarr.open_group(path, mode="r")[name][...]


class Zarr3NoCompression(Zarr3):
    name = "zarr3-nocomp"
    label = "plain zarr 3, one array per variable, default chunks, no compressor"
    compressors = None


class Safetensors(Method):
    name = "safetensors"
    label = ("safetensors.numpy save_file / load_file; safe_open + get_tensor for W3; keys-info: "
             "safe_open + keys() + get_slice(k).get_shape()/get_dtype() (the header parse)")
    modules = ("safetensors",)
    suffix = ".safetensors"
    extra_phases = (("W3", "process"), ("W2", "keys-info"))

    def process_code(self, path: Path, name: str) -> str:
        return (f"from safetensors import safe_open\nwith safe_open({str(path)!r}, framework='np') as f:\n"
                f"    a = f.get_tensor({name!r})")

    def keys_info(self, workload: Workload, path: Path) -> Any:
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as f:
            return {k: (tuple(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}

    def save(self, model: Arrays, path: Path, durable: bool) -> None:
        from safetensors.numpy import save_file

        save_file(model, str(path))
        if durable:
            fsync_tree(path)

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        from safetensors.numpy import load_file

        return load_file(str(path))

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as f:
            return f.get_tensor(name)


class Npz(Method):
    name = "npz"
    label = "numpy savez (uncompressed) / np.load(allow_pickle=False)"
    suffix = ".npz"

    def save(self, model: Arrays, path: Path, durable: bool) -> None:
        _write_file(path, lambda f: np.savez(f, **model), durable)

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        with np.load(path, allow_pickle=False) as z:
            return {name: z[name] for name in z.files}

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        with np.load(path, allow_pickle=False) as z:
            return z[name]


class Torch(Method):
    name = "torch"
    label = "torch.save of a dict of tensors / torch.load(mmap=True, weights_only=True), pages touched"
    modules = ("torch",)
    suffix = ".pt"
    touches_pages = True

    def make_model(self, workload: Workload) -> Any:
        import torch

        return {k: torch.from_numpy(v) for k, v in workload.read_arrays().items()}

    def save(self, model: Any, path: Path, durable: bool) -> None:
        import torch

        _write_file(path, lambda f: torch.save(model, f), durable)

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        import torch

        loaded = torch.load(str(path), mmap=True, weights_only=True)
        return {k: t.numpy() for k, t in loaded.items()}

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        import torch

        return torch.load(str(path), mmap=True, weights_only=True)[name].numpy()


class SafetensorsTorch(Method):
    name = "safetensors-torch"
    label = "safetensors.torch save_file / load_file of a dict of CPU tensors; safe_open(framework='pt') for W3"
    modules = ("safetensors", "torch")
    suffix = ".safetensors"

    def make_model(self, workload: Workload) -> Any:
        import torch

        return {k: torch.from_numpy(v) for k, v in workload.read_arrays().items()}

    def save(self, model: Any, path: Path, durable: bool) -> None:
        from safetensors.torch import save_file

        save_file(model, str(path))
        if durable:
            fsync_tree(path)

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        from safetensors.torch import load_file

        return {k: t.numpy() for k, t in load_file(str(path)).items()}

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return f.get_tensor(name).numpy()


class VarstoreTorch(Method):
    """varstore.torch: a torch state dict saved as it is, restored in place into existing tensors.

    As for `varstore-h5`, `save-nofsync` is `save(..., durable=False)` (no fsync, no early write-back).
    """

    name = "varstore-torch"
    label = ("varstore.torch.save(path, state_dict) / varstore.torch.restore(path, state_dict) into existing "
             "CPU tensors (in place); W3: open_varstore(path)[name]; HDF5")
    modules = ("varstore", "torch")
    suffix = ".h5"

    def unavailable(self) -> str | None:
        reason = super().unavailable()
        if reason:
            return reason
        if importlib.util.find_spec("varstore.torch") is None:
            return "varstore.torch is not in this varstore"
        return None

    def imports(self) -> None:
        # As varstore-h5: every varstore module before the timer (torch.save's torch is imported by then
        # too). Importing only varstore.torch left the writer, the engine and the HDF5 backend to load
        # inside the timed save: 0.5-1.5 s more per save in a worker, from source where the environment
        # sets PYTHONDONTWRITEBYTECODE.
        import varstore.torch  # noqa: F401  (imports torch)

        _import_every_varstore_module()

    def make_model(self, workload: Workload) -> Any:
        import torch

        return {k: torch.from_numpy(v) for k, v in workload.read_arrays().items()}

    def save(self, model: Any, path: Path, durable: bool) -> None:
        import varstore.torch as vst

        vst.save(path, model, durable=durable)

    def prepare_load(self, workload: Workload, path: Path) -> Any:
        import torch

        # Existing tensors whose pages are resident (zeros are written), as a model's parameters are.
        return {v.name: torch.zeros(v.shape, dtype=torch.float32) for v in workload.variables}

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        import varstore.torch as vst

        vst.restore(path, state)
        return {k: t.numpy() for k, t in state.items()}

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        from varstore.checkpoint import open_varstore

        with open_varstore(path) as reader:
            return reader[name]


class Tensorstore(Method):
    name = "tensorstore"
    label = "tensorstore zarr3 driver, one array per variable, all writes/reads issued concurrently"
    modules = ("tensorstore",)
    suffix = ".ts"

    @staticmethod
    def _spec(path: Path, name: str, shape: tuple[int, ...] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path / name)}}
        if shape is not None:
            spec.update(metadata={"shape": list(shape), "data_type": "float32"}, create=True,
                        delete_existing=True)
        return spec

    def save(self, model: Arrays, path: Path, durable: bool) -> None:
        import tensorstore as ts

        stores = [(ts.open(self._spec(path, k, v.shape)), v) for k, v in model.items()]
        writes = [store.result().write(value) for store, value in stores]
        for w in writes:
            w.result()
        if durable:
            fsync_tree(path)

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        import tensorstore as ts

        opened = {v.name: ts.open(self._spec(path, v.name)) for v in workload.variables}
        reads = {k: f.result().read() for k, f in opened.items()}
        return {k: r.result() for k, r in reads.items()}

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        import tensorstore as ts

        return ts.open(self._spec(path, name)).result().read().result()


# -- varstore -------------------------------------------------------------------------------

class _SleepyInitializer:
    """An initializer that sleeps `SLEEP_S` and counts its calls (W4 must see 0)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, shape: Any, dtype: Any = DTYPE, *args: Any, **kwargs: Any) -> npt.NDArray[Any]:
        self.calls += 1
        time.sleep(SLEEP_S)
        return np.zeros(shape, dtype=dtype)


def _resident_zeros(shape: Any, dtype: Any = DTYPE) -> npt.NDArray[Any]:
    """Zeros whose pages are touched now (np.zeros' pages are only mapped on first write)."""
    array = np.empty(shape, dtype=dtype)
    array.fill(0)
    return array


#: varstore modules that import a framework (torch, jax): skipped by _import_every_varstore_module, as
#: importing torch and jax cost each varstore worker ~3 s of start-up for nothing it times.
_FRAMEWORK_ADAPTERS = ("torch", "jax")  # the packages varstore/torch/, varstore/jax/


def _import_every_varstore_module() -> None:
    """Imports every varstore module now (backends, converters the format sniffer loads on first use), as
    h5py/zarr/torch are imported before the timer for the peers."""
    import pkgutil

    import varstore
    import varstore.checkpoint
    import varstore.store.scopes

    def walk(path: list[str], prefix: str) -> Any:  # pkgutil.walk_packages would import the adapters to walk them
        for module in pkgutil.iter_modules(path, prefix):
            if module.name.split(".")[1] in _FRAMEWORK_ADAPTERS:
                continue  # never loaded by varstore itself (varstore-torch imports varstore.torch on its own)
            yield module.name
            if module.ispkg:
                yield from walk([str(Path(module.module_finder.path) / module.name.rsplit(".", 1)[1])],  # type: ignore[union-attr]
                                module.name + ".")

    for name in walk(list(varstore.__path__), "varstore."):
        try:
            importlib.import_module(name)
        except Exception:  # an optional dependency is missing (cupy): not needed here
            pass


class Varstore(Method):
    """varstore's own checkpoints: save a VariableStore, restore into an existing one.

    `save-nofsync` is `save(..., durable=False)` (no fsync, no early write-back; issue 11).
    """

    name = "varstore-h5"
    label = ("varstore.save(path, store) / restore(path, store) into existing, materialized "
             "variables; W3: open_checkpoint(path)[name]; HDF5")
    modules = ("varstore",)
    suffix = ".h5"
    restores_in_place = True
    extra_phases = (("W1", "read-all"), ("W1", "vs-load"), ("W3", "process"), ("W3", "import"),
                    ("W2", "read-all"), ("W2", "vs-load"), ("W2", "keys-info"), ("W2", "restore"))
    import_code = "import varstore"

    def unavailable(self) -> str | None:
        reason = super().unavailable()
        if reason:
            return reason
        try:
            from varstore import restore, save  # noqa: F401
            from varstore.store.scopes import VariableStore  # noqa: F401
        except ImportError as err:
            return f"varstore checkpoint layer not importable yet ({err})"
        return None

    def imports(self) -> None:
        _import_every_varstore_module()

    @staticmethod
    def _open_checkpoint() -> Any:
        import varstore

        if hasattr(varstore, "open_checkpoint"):
            return varstore.open_checkpoint
        from varstore.checkpoint import open_varstore as open_checkpoint

        return open_checkpoint

    def make_model(self, workload: Workload) -> Any:
        from varstore.store.scopes import VariableStore

        store = VariableStore()
        # One variable at a time, so the peak stays at the model plus one variable.
        with open(workload.source, "rb") as f:
            for v in workload.variables:
                f.seek(v.offset)
                value = np.fromfile(f, dtype=DTYPE, count=v.size).reshape(v.shape)
                store.get_variable(v.name, shape=v.shape, dtype=DTYPE).assign(value)
        return store

    def save(self, model: Any, path: Path, durable: bool) -> None:
        from varstore import save

        save(path, model, durable=durable)

    def process_code(self, path: Path, name: str) -> str:
        return f"import varstore as vs\na = vs.open_checkpoint({str(path)!r})[{name!r}]"

    def read_all(self, workload: Workload, path: Path) -> Any:
        with self._open_checkpoint()(path) as reader:
            return {name: reader[name] for name in reader.keys()}

    def vs_load(self, workload: Workload, path: Path) -> Any:
        import varstore

        return varstore.load(path)

    def keys_info(self, workload: Workload, path: Path) -> Any:
        with self._open_checkpoint()(path) as reader:
            return {name: (info.shape, info.dtype) for name, info in
                    ((name, reader.info(name)) for name in reader.keys())}

    def prepare_load(self, workload: Workload, path: Path) -> Any:
        from varstore.store.scopes import VariableStore

        store = VariableStore()
        for v in workload.variables:
            store.get_variable(v.name, shape=v.shape, dtype=DTYPE, initializer=_resident_zeros)
        # Existing, materialized variables whose pages are resident (as h5py's destinations are):
        # restore fills their buffers in place.
        store.initialize()
        return store

    def load(self, state: Any, workload: Workload, path: Path) -> Any:
        from varstore import restore

        restore(path, state)
        return {v.name: v.host_view() for v in state.variables()}

    def read_one(self, workload: Workload, path: Path, name: str) -> npt.NDArray[Any]:
        with self._open_checkpoint()(path) as reader:
            return reader[name]

    def prepare_restore(self, workload: Workload, path: Path) -> Any:
        from varstore.store.scopes import VariableStore

        store = VariableStore()
        initializer = _SleepyInitializer()
        for v in workload.variables:
            store.get_variable(v.name, shape=v.shape, dtype=DTYPE, initializer=initializer)
        return store, initializer

    def restore(self, state: Any, workload: Workload, path: Path) -> tuple[Arrays, int]:
        from varstore import restore

        store, initializer = state
        restore(path, store)
        # Timed until every value is readable: a deferred restore reads here.
        values = {v.name: v.host_view() for v in store.variables()}
        return values, initializer.calls


class VarstoreZarr(Varstore):
    name = "varstore-zarr"
    label = Varstore.label.replace("HDF5", "Zarr v3")
    suffix = ".zarr"


METHODS: dict[str, Method] = {
    m.name: m
    for m in (Raw(), H5py(), Zarr3(), Zarr3NoCompression(), Safetensors(), Npz(),
              Varstore(), VarstoreZarr(), Torch(), SafetensorsTorch(), VarstoreTorch(), Tensorstore())
}
