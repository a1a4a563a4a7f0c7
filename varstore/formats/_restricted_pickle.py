"""The one restricted unpickler: reads PyTorch and DCP pickles into inert records, never runs their code.

As `torch.load(weights_only=True)` does, without torch: `find_class` maps a
fixed allow-list of globals (the tensor rebuild functions, the
`torch.*Storage` types, torch dtypes, `collections.OrderedDict`, the numeric
and container builtins, the DCP metadata dataclasses) to inert stand-ins
defined here, and raises UnsafeFormatError naming any other global, so no
reduce outside the list is ever called and nothing is imported. Before the
unpickler runs, the opcode stream is walked with `pickletools.genops` so
every length is checked against the bytes actually there and every memo
index against the entries stored before it (no allocation is sized by a
number the file claims). Persistent ids (torch storages) become
`StorageRef` records; the caller reads their bytes. This module opens no
files and never imports torch.
"""

from __future__ import annotations

import collections
import io
import pickle
import pickletools
from collections.abc import Callable
from types import FunctionType
from typing import Any, cast

from varstore.errors import CorruptCheckpointError, UnsafeCheckpointError, UnsafeFormatError, VarstoreError

__all__ = ["StorageRef", "TensorRef", "Record", "DType", "unpickle", "scan_pickle", "STATE_DICT_ADVICE"]

#: What to tell a user whose file pickles a whole module instead of a state dict.
STATE_DICT_ADVICE = ("save the weights instead: `torch.save(model.state_dict(), path)` (a state dict of tensors "
                     "is read without running any code)")

#: torch storage class name -> logical dtype name.
_STORAGE_DTYPES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
    "UntypedStorage": "uint8", "Float8_e4m3fnStorage": "float8_e4m3fn", "Float8_e5m2Storage": "float8_e5m2",
}
#: torch dtype attribute name -> logical dtype name.
_TORCH_DTYPES = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int64": "int64", "long": "int64",
    "int32": "int32", "int": "int32", "int16": "int16", "short": "int16", "int8": "int8", "uint8": "uint8",
    "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "bool": "bool",
    "complex64": "complex64", "cfloat": "complex64", "complex128": "complex128", "cdouble": "complex128",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MEMO_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
#: How far past the count of memo stores an index may be: Python 2's cPickle numbers entries from 1.
_MEMO_SLACK = 1
_MAX_BYTEARRAY = 1 << 20  # a bytearray a state dict may hold (bytes of the pickle itself bound it too)
_DANGEROUS_MODULES = ("os", "posix", "nt", "subprocess", "builtins", "__builtin__", "sys", "shutil", "socket",
                      "importlib", "runpy", "pty", "code", "ctypes", "webbrowser", "pickle", "_pickle", "marshal",
                      "types", "functools", "operator", "io", "codecs", "commands", "platform")


class _Inert:
    """Base of the stand-ins: a pickle BUILD cannot set their attributes."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise CorruptCheckpointError(f"the pickle tries to set the state of a {type(self).__name__}")


def _refuse_change(target: Any, *args: Any) -> None:
    raise CorruptCheckpointError(
        f"the pickle tries to change varstore's stand-in for {getattr(target, '__name__', type(target).__name__)} "
        f"(a BUILD or setattr on an allowed global); stand-ins are shared by every read and never change; refused")


class _Frozen(_Inert):
    """A shared stand-in (one object for every read): BUILD, setattr and delattr are refused."""

    __slots__ = ()
    __setattr__ = _refuse_change
    __delattr__ = _refuse_change

    def __setstate__(self, state: Any) -> None:
        _refuse_change(self)


class _FrozenType(type):
    """Metaclass of the stand-in classes: a pickle cannot set or delete their attributes (BUILD's slot state)."""

    __setattr__ = _refuse_change
    __delattr__ = _refuse_change


class _FrozenCall(_Frozen):
    """An allowed function as the pickle sees it: callable, but no attribute (`__defaults__`) can change."""

    __slots__ = ("function", "__name__")
    function: Callable[..., Any]

    def __init__(self, function: Callable[..., Any]) -> None:
        object.__setattr__(self, "function", function)
        object.__setattr__(self, "__name__", function.__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


class DType(_Frozen):
    """Stand-in for a torch dtype global (`torch.float32`): only its logical name."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class _StorageType(_Frozen):
    """Stand-in for a `torch.*Storage` class: the dtype its elements have."""

    __slots__ = ("name", "dtype")
    name: str
    dtype: str

    def __init__(self, name: str, dtype: str) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)


class StorageRef(_Inert):
    """A persistent-id reference to a torch storage: its key, element dtype and element count.

    `dtype` is "uint8" for an untyped storage (then `numel` counts bytes).
    """

    __slots__ = ("key", "dtype", "numel", "location")

    def __init__(self, key: str, dtype: str, numel: int, location: str) -> None:
        self.key, self.dtype, self.numel, self.location = key, dtype, numel, location


class TensorRef(_Inert):
    """An inert record of a saved tensor: a view (offset, shape, strides, in elements) of a storage.

    Attributes:
      storage: the StorageRef viewed.
      dtype: logical dtype name (the storage's, or the one `_rebuild_tensor_v3` names).
      offset: storage offset in elements of `dtype`.
      shape, stride: tuples of ints (elements).
      requires_grad: True for parameters saved with requires_grad.
    """

    __slots__ = ("storage", "dtype", "offset", "shape", "stride", "requires_grad")

    def __init__(self, storage: StorageRef, dtype: str, offset: int, shape: tuple[int, ...],
                 stride: tuple[int, ...], requires_grad: bool) -> None:
        self.storage, self.dtype, self.offset = storage, dtype, offset
        self.shape, self.stride, self.requires_grad = shape, stride, requires_grad


class Record(metaclass=_FrozenType):
    """Inert stand-in for an allowed dataclass (DCP metadata): its qualified name and its state dict.

    Its classes are shared by every read, so they are frozen (_FrozenType); each instance is the file's own.
    """

    qualname = "Record"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.state: dict[str, Any] = {}
        self.args = args

    def __setstate__(self, state: Any) -> None:
        merged: dict[str, Any] = {}
        if isinstance(state, tuple) and not all(p is None or isinstance(p, dict) for p in state):
            self.__dict__["state"] = {"_tuple": state}  # a custom __getstate__ (TensorProperties) returns a tuple
            return
        parts = state if isinstance(state, tuple) else (state,)
        for part in parts:
            if part is None:
                continue
            if not isinstance(part, dict):
                raise CorruptCheckpointError(f"state of {self.qualname} is {type(part).__name__}, not a dict")
            merged.update({str(k): v for k, v in part.items()})
        self.__dict__["state"] = merged

    def get(self, key: str, default: Any = None) -> Any:
        return self.__dict__.get("state", {}).get(key, default)

    def __repr__(self) -> str:
        return f"{self.qualname}({self.__dict__.get('state', {})!r})"


def _record_class(qualname: str) -> type[Record]:
    return type(qualname.rsplit(".", 1)[-1], (Record,), {"qualname": qualname})


_DCP = "torch.distributed.checkpoint"
_RECORDS = {name: _record_class(name) for name in (
    f"{_DCP}.metadata.Metadata", f"{_DCP}.metadata.TensorStorageMetadata",
    f"{_DCP}.metadata.BytesStorageMetadata", f"{_DCP}.metadata.ChunkStorageMetadata",
    f"{_DCP}.metadata.TensorProperties", f"{_DCP}.metadata.MetadataIndex", f"{_DCP}.metadata.StorageMeta",
    f"{_DCP}.filesystem._StorageInfo",
)}


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                       for v in value):
        raise CorruptCheckpointError(f"{what} is not a tuple of ints: {value!r:.80}")
    return tuple(int(v) for v in value)


def _tensor(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, dtype: str | None) -> TensorRef:
    if not isinstance(storage, StorageRef):
        raise CorruptCheckpointError(f"a tensor's storage is {type(storage).__name__}, not a saved storage")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise CorruptCheckpointError(f"a tensor's storage offset is {offset!r:.40}")
    shape, strides = _ints(size, "a tensor's size"), _ints(stride, "a tensor's stride")
    if len(shape) != len(strides) or any(d < 0 for d in shape) or any(s < 0 for s in strides):
        raise CorruptCheckpointError(f"a tensor's size {shape} and stride {strides} do not fit together")
    return TensorRef(storage, dtype or storage.dtype, offset, shape, strides, bool(requires_grad))


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                       backward_hooks: Any = None, metadata: Any = None) -> TensorRef:
    return _tensor(storage, offset, size, stride, requires_grad, None)


def _rebuild_tensor_v3(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any,
                       backward_hooks: Any, dtype: Any, metadata: Any = None) -> TensorRef:
    if not isinstance(dtype, DType):
        raise CorruptCheckpointError(f"_rebuild_tensor_v3 names dtype {dtype!r:.40}, not a torch dtype")
    return _tensor(storage, offset, size, stride, requires_grad, dtype.name)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> TensorRef:
    return _tensor(storage, offset, size, stride, False, None)


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any = None, *state: Any) -> TensorRef:
    if not isinstance(data, TensorRef):
        raise CorruptCheckpointError(f"a parameter wraps {type(data).__name__}, not a tensor")
    data.requires_grad = bool(requires_grad)
    return data


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Any:
    function = func.function if isinstance(func, _FrozenCall) else None
    if function not in (_rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter) or not isinstance(args, tuple):
        raise UnsafeFormatError(f"_rebuild_from_type_v2 calls {func!r:.60}, which is not a tensor rebuild")
    if new_type not in (_TensorType, _ParameterType):
        raise UnsafeFormatError(f"_rebuild_from_type_v2 makes a {new_type!r:.60}, not a tensor")
    return func(*args)


class _TensorType(metaclass=_FrozenType):
    """Stand-in for torch.Tensor (a marker only)."""


class _ParameterType(metaclass=_FrozenType):
    """Stand-in for torch.nn.Parameter (a marker only)."""


def _size(*args: Any) -> tuple[int, ...]:
    return _ints(args[0] if args else (), "a torch.Size")


def _device(*args: Any) -> str:
    return ":".join(str(a) for a in args)


def _encode(text: Any, encoding: Any = "latin1") -> bytes:
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise CorruptCheckpointError("_codecs.encode is allowed only for protocol-2 bytes (str, 'latin1')")
    return text.encode("latin1")


def _bytearray(*args: Any) -> bytearray:
    if len(args) > 1 or (args and not isinstance(args[0], (bytes, bytearray, list, str))):
        raise CorruptCheckpointError("bytearray is allowed only from bytes or a list of ints")
    if args and len(args[0]) > _MAX_BYTEARRAY:
        raise CorruptCheckpointError(f"a bytearray of {len(args[0])} items exceeds the {_MAX_BYTEARRAY} allowed")
    if args and isinstance(args[0], str):
        return bytearray(args[0], "latin1")
    return bytearray(*args)


def _container(kind: type) -> Callable[..., Any]:
    def make(*args: Any) -> Any:
        if len(args) > 1 or (args and not isinstance(args[0], (list, tuple, set, frozenset, dict))):
            raise CorruptCheckpointError(f"{kind.__name__} is allowed only from a list or tuple")
        return kind(*args)
    make.__name__ = kind.__name__
    return make


def _complex(*args: Any) -> complex:
    if not all(isinstance(a, (int, float)) for a in args) or len(args) > 2:
        raise CorruptCheckpointError("complex is allowed only from numbers")
    return complex(*args)


def _inert_name(qualname: str) -> Callable[..., str]:
    def make(*args: Any) -> str:
        return qualname if not args else str(args[0])
    return make


def _allowed() -> dict[str, Any]:
    table: dict[str, Any] = {
        "collections.OrderedDict": collections.OrderedDict,
        "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
        "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
        "torch._utils._rebuild_tensor": _rebuild_tensor,
        "torch._utils._rebuild_parameter": _rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
        "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
        "torch.Tensor": _TensorType, "torch.nn.parameter.Parameter": _ParameterType,
        "torch.Size": _size, "torch.device": _device,
        "_codecs.encode": _encode,
        "builtins.set": _container(set), "builtins.frozenset": _container(frozenset),
        "__builtin__.set": _container(set), "__builtin__.frozenset": _container(frozenset),
        "builtins.bytearray": _bytearray, "__builtin__.bytearray": _bytearray,
        "builtins.complex": _complex, "__builtin__.complex": _complex,
        "torch.serialization._get_layout": _inert_name("torch.strided"),
        "torch.strided": "torch.strided", "torch.contiguous_format": "torch.contiguous_format",
        "torch.preserve_format": "torch.preserve_format", "torch.channels_last": "torch.channels_last",
        "pathlib.PosixPath": _inert_name(""), "pathlib.WindowsPath": _inert_name(""),
        f"{_DCP}.metadata._MEM_FORMAT_ENCODING": _inert_name("torch.contiguous_format"),
    }
    for name, dtype in _STORAGE_DTYPES.items():
        table[f"torch.{name}"] = _StorageType(name, dtype)
    # torch 2.x pickles the storage of a uint16/32/64 or float8 tensor by its defining module.
    table["torch.storage.UntypedStorage"] = _StorageType("UntypedStorage", "uint8")
    for name, dtype in _TORCH_DTYPES.items():
        table[f"torch.{name}"] = DType(dtype)
    table.update(_RECORDS)
    # every function the pickle may name is handed out frozen: a BUILD cannot set its __defaults__
    return {name: _FrozenCall(found) if isinstance(found, FunctionType) else found for name, found in table.items()}


_ALLOWED = _allowed()


class _ClampedReader:
    """A file-like view that never reads past `limit` bytes (so a claimed length cannot size a read)."""

    def __init__(self, handle: Any, limit: int) -> None:
        self._handle, self._left = handle, limit

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._handle.read(n)
        self._left -= len(data)
        return bytes(data)

    def readline(self) -> bytes:
        data = self._handle.readline(min(self._left, 1 << 16))
        self._left -= len(data)
        return bytes(data)


def scan_pickle(handle: Any, limit: int, label: str) -> int:
    """Walks one pickle's opcodes from the handle's position; returns its length in bytes.

    Every length the pickle claims is checked against the `limit` bytes
    actually available; unknown opcodes and a missing STOP are errors. A
    memo index (PUT, BINPUT, LONG_BINPUT) may be at most the number of memo
    puts before it plus _MEMO_SLACK: CPython's C unpickler grows its memo
    table to twice the index it is given, so `LONG_BINPUT 150000000` alone
    (6 bytes) would allocate 2.3 GiB. Picklers number memo entries in
    order, CPython 3 from 0 and Python 2's cPickle from 1 (the legacy torch
    files torch 0.x wrote under Python 2), so no real pickle is refused. A
    GET must name an index stored before it.

    Raises:
      UnsafeCheckpointError: a memo index beyond the entries stored so far.
      CorruptCheckpointError naming `label`: malformed or truncated bytes, or
        a GET of a memo entry never stored.
    """
    start = handle.tell()
    puts = distinct = 0  # memo stores so far (PUT, BINPUT, LONG_BINPUT, MEMOIZE); distinct indices among them
    stored = bytearray()  # stored[i] == 1: memo index i was stored (indices stay below puts + _MEMO_SLACK + 1)
    try:
        for opcode, arg, _pos in pickletools.genops(cast(Any, _ClampedReader(handle, limit))):
            name = opcode.name
            if name in _MEMO_PUTS or name == "MEMOIZE":
                index = distinct if name == "MEMOIZE" else arg  # MEMOIZE stores at the unpickler's count
                if not isinstance(index, int) or index < 0 or index > puts + _MEMO_SLACK:
                    raise UnsafeCheckpointError(
                        f"{label}: its pickle stores memo entry {index!r:.40} after only {puts} entries; a "
                        f"pickler numbers them in order (from 0, or from 1 under Python 2), and a far index "
                        f"would make the unpickler allocate a memo that large; refused")
                if index >= len(stored):
                    stored.extend(bytes(index + 1 - len(stored)))
                distinct += 1 - stored[index]
                stored[index] = 1
                puts += 1
            elif name in _MEMO_GETS and not (isinstance(arg, int) and 0 <= arg < len(stored) and stored[arg]):
                raise CorruptCheckpointError(f"{label}: its pickle reads memo entry {arg!r:.40}, which was never "
                                             f"stored ({puts} entries so far)")
            elif name == "STOP":
                return int(handle.tell() - start)
    except VarstoreError:
        raise
    except Exception as err:  # genops raises ValueError / struct.error / UnicodeDecodeError on hostile bytes
        raise CorruptCheckpointError(f"{label} is not a well-formed pickle: {err}") from err
    raise CorruptCheckpointError(f"{label}: the pickle ends without its STOP opcode (truncated)")


def _global_refusal(module: str, name: str, label: str) -> UnsafeFormatError:
    qualified = f"{module}.{name}"
    if module == "__main__" or module.startswith(("torch.nn.modules", "torch.nn.")) or (
            name[:1].isupper() and module.split(".")[0] not in _DANGEROUS_MODULES):
        return UnsafeFormatError(
            f"refusing {label}: it pickles a whole Python object (class '{qualified}'), not a state dict of "
            f"tensors; unpickling it would need that class's code. In a trusted environment, {STATE_DICT_ADVICE}")
    return UnsafeFormatError(
        f"refusing {label}: its pickle calls the global '{qualified}', which is not on varstore's allow-list "
        f"of tensor and container types (a malicious or non-weights pickle); nothing was executed")


class _Unpickler(pickle.Unpickler):
    """pickle.Unpickler whose find_class only returns the stand-ins of `_ALLOWED`."""

    def __init__(self, data: bytes, label: str, storages: dict[str, StorageRef]) -> None:
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self._label = label
        self._storages = storages

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get(f"{module}.{name}")
        if found is None:
            raise _global_refusal(str(module), str(name), self._label)
        return found

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or len(pid) not in (5, 6):
            raise CorruptCheckpointError(f"{self._label}: persistent id {pid!r:.80} is not a torch storage reference")
        typename = pid[0].decode("ascii", "replace") if isinstance(pid[0], bytes) else pid[0]
        storage_type, key, location, numel = pid[1], pid[2], pid[3], pid[4]
        if typename != "storage" or not isinstance(storage_type, _StorageType):
            raise CorruptCheckpointError(f"{self._label}: persistent id of kind {typename!r:.40} is not a storage")
        if isinstance(key, bytes):
            key = key.decode("ascii", "replace")
        if not isinstance(key, (str, int)) or not isinstance(numel, int) or isinstance(numel, bool) or numel < 0:
            raise CorruptCheckpointError(f"{self._label}: storage reference {pid[:5]!r:.80} has a bad key or size")
        key = str(key)
        if len(pid) == 6 and pid[5] is not None:
            raise UnsafeFormatError(f"{self._label}: storage '{key}' is a legacy storage view; varstore "
                                    f"reads only whole storages")
        known = self._storages.get(key)
        if known is None:
            known = StorageRef(key, storage_type.dtype, int(numel), str(location))
            self._storages[key] = known
        elif known.dtype != storage_type.dtype or known.numel != numel:
            raise CorruptCheckpointError(f"{self._label}: storage '{key}' is referenced with two different "
                                         f"dtypes or sizes")
        return known


def unpickle(data: bytes, label: str, storages: dict[str, StorageRef] | None = None) -> Any:
    """Unpickles `data` through the allow-list; tensors come back as TensorRef records.

    Args:
      data: the whole pickle (e.g. a torch zip's data.pkl).
      label: how to name the source in errors ("PyTorch file 'x.pt' (archive/data.pkl)").
      storages: persistent-id records seen so far, by key (shared across the
        pickles of one legacy file); filled in place.

    Raises:
      UnsafeFormatError: a global outside the allow-list (naming it), or a
        whole nn.Module (saying to save its state_dict()).
      CorruptCheckpointError: malformed or truncated pickle bytes.
    """
    stream = io.BytesIO(data)
    length = scan_pickle(stream, len(data), label)
    table = storages if storages is not None else {}
    try:
        return _Unpickler(data[:length], label, table).load()
    except (CorruptCheckpointError, UnsafeCheckpointError) as err:
        if str(err).startswith(label):
            raise
        raise type(err)(f"{label}: {err}") from None  # a stand-in's refusal does not know the file
    except VarstoreError:
        raise
    except RecursionError as err:
        raise CorruptCheckpointError(f"{label}: the pickle nests too deeply") from err
    except Exception as err:  # any other failure of hostile bytes inside the unpickler
        raise CorruptCheckpointError(f"{label}: cannot unpickle: {type(err).__name__}: {err}") from err
