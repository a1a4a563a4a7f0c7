"""Real legacy files made the way old tools made them, byte by byte, for the real-file suite.

    legacy_torch_py2(path, lpips_alex_v01())   # torch 0.4 under Python 2: lpips' weights/v0.1/alex.pth

A legacy (non-zip) `torch.save` file as torch 0.3/0.4 wrote it under Python 2: five pickles back to back
(magic number, protocol version 1001, sys_info, the state dict with persistent ids, the sorted storage
keys), then each storage as an int64 element count and its raw little-endian bytes (torch's
`_legacy_load` reads them the same way today). Each pickle is protocol 2 as Python 2's cPickle wrote it:
its memo numbered from 1 (`BINPUT 1` first), Python 2 `str` as SHORT_BINSTRING, `unicode` as BINUNICODE,
every string, list, dict, non-empty tuple, global and reduced object memoized, repeats as BINGET, and an
OrderedDict reduced as `OrderedDict([[key, value], ...])` with its `_metadata` set by BUILD.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

#: torch's legacy magic number and protocol version (torch/serialization.py).
MAGIC = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
_STORAGES = {np.dtype(np.float32): "FloatStorage", np.dtype(np.float64): "DoubleStorage",
             np.dtype(np.int64): "LongStorage", np.dtype(np.uint8): "ByteStorage"}


class _Py2Pickle:
    """Writes one protocol-2 pickle the way Python 2.7's cPickle did (memo from 1)."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self._next = 1  # cPickle: "Make sure memo keys are positive!"
        self._memo: dict[object, int] = {}

    def _put(self, key: object | None = None) -> None:
        index = self._next
        self._next += 1
        self.out += bytes([ord("q"), index]) if index < 256 else b"r" + struct.pack("<I", index)
        if key is not None:
            self._memo[key] = index

    def _get(self, key: object) -> bool:
        index = self._memo.get(key)
        if index is None:
            return False
        self.out += bytes([ord("h"), index]) if index < 256 else b"j" + struct.pack("<I", index)
        return True

    def raw(self, data: bytes) -> _Py2Pickle:
        self.out += data
        return self

    def str_(self, text: str) -> _Py2Pickle:
        """A Python 2 `str` (bytes): SHORT_BINSTRING, memoized; an interned literal seen before is a BINGET."""
        if not self._get(("str", text)):
            data = text.encode("ascii")
            self.out += (b"U" + bytes([len(data)]) if len(data) < 256 else b"T" + struct.pack("<i", len(data))) + data
            self._put(("str", text))
        return self

    def unicode_(self, text: str) -> _Py2Pickle:
        """A Python 2 `unicode`: BINUNICODE (UTF-8), memoized."""
        data = text.encode("utf-8")
        self.out += b"X" + struct.pack("<I", len(data)) + data
        self._put()
        return self

    def int_(self, value: int) -> _Py2Pickle:
        if 0 <= value < 256:
            self.out += b"K" + bytes([value])
        elif 0 <= value < 65536:
            self.out += b"M" + struct.pack("<H", value)
        elif -(1 << 31) <= value < (1 << 31):
            self.out += b"J" + struct.pack("<i", value)
        else:
            data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            self.out += b"\x8a" + bytes([len(data)]) + data
        return self

    def global_(self, module: str, name: str) -> _Py2Pickle:
        if not self._get(("global", module, name)):
            self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"
            self._put(("global", module, name))
        return self

    def tuple_of(self, *items: int) -> _Py2Pickle:
        """A non-empty tuple of small ints: TUPLE1-3 for up to 3 items, else MARK ... TUPLE; memoized."""
        if len(items) > 3:
            self.out += b"("
        for item in items:
            self.int_(item)
        self.out += {1: b"\x85", 2: b"\x86", 3: b"\x87"}.get(len(items), b"t") if items else b")"
        if items:
            self._put()
        return self

    def memo(self) -> _Py2Pickle:
        self._put()
        return self

    def stop(self) -> bytes:
        self.out += b"."
        return bytes(self.out)


def _header_pickles() -> bytes:
    magic = _Py2Pickle().int_(MAGIC).stop()
    version = _Py2Pickle().int_(PROTOCOL_VERSION).stop()
    info = _Py2Pickle().raw(b"}").memo().raw(b"(")
    info.str_("protocol_version").int_(PROTOCOL_VERSION).str_("little_endian").raw(b"\x88")
    info.str_("type_sizes").raw(b"}").memo().raw(b"(")
    info.str_("int").int_(4).str_("long").int_(8).str_("short").int_(2).raw(b"u")
    return magic + version + info.raw(b"u").stop()


def _tensor(p: _Py2Pickle, key: str, value: np.ndarray, rebuild: str) -> None:
    """One tensor as torch 0.4 (`_rebuild_tensor_v2`, 6 args) or 0.3 (`_rebuild_tensor`, 4 args) reduced it."""
    p.global_("torch._utils", "_rebuild_tensor_v2" if rebuild == "v2" else "_rebuild_tensor")
    p.raw(b"(")  # the argument tuple (more than 3 items: MARK ... TUPLE)
    p.raw(b"(").str_("storage").global_("torch", _STORAGES[value.dtype]).str_(key).str_("cpu")
    p.int_(value.size).raw(b"N").raw(b"t").memo().raw(b"Q")  # persistent id, its tuple memoized; BINPERSID
    p.int_(0).tuple_of(*value.shape)
    strides = tuple(int(np.prod(value.shape[i + 1:], dtype=np.int64)) for i in range(value.ndim))
    p.tuple_of(*strides)
    if rebuild == "v2":
        p.raw(b"\x89")  # requires_grad False
        p.global_("collections", "OrderedDict").raw(b"]").memo().raw(b"\x85").memo().raw(b"R").memo()  # hooks
    p.raw(b"t").memo().raw(b"R").memo()


def _state_dict_pickle(tensors: dict[str, np.ndarray], keys: list[str], rebuild: str,
                       unicode_names: frozenset[str]) -> bytes:
    p = _Py2Pickle()
    p.global_("collections", "OrderedDict").raw(b"]").memo().raw(b"(" if len(tensors) > 1 else b"")
    for (name, value), key in zip(tensors.items(), keys):
        p.raw(b"]").memo().raw(b"(")
        if name in unicode_names:
            p.unicode_(name)
        else:
            p.str_(name)
        _tensor(p, key, value, rebuild)
        p.raw(b"e")  # APPENDS: [name, tensor]
    p.raw(b"e" if len(tensors) > 1 else b"a").raw(b"\x85").memo().raw(b"R").memo()
    # torch 0.4's state_dict() sets `_metadata` (module prefix -> {"version": 1}); pickled as the BUILD state
    prefixes = sorted({""} | {name.rsplit(".", 1)[0] for name in tensors if "." in name})
    p.raw(b"}").memo().str_("_metadata").global_("collections", "OrderedDict").raw(b"]").memo()
    p.raw(b"(" if len(prefixes) > 1 else b"")
    for prefix in prefixes:
        p.raw(b"]").memo().raw(b"(").str_(prefix).raw(b"}").memo().str_("version").int_(1).raw(b"se")
    p.raw(b"e" if len(prefixes) > 1 else b"a").raw(b"\x85").memo().raw(b"R").memo().raw(b"s")
    return p.raw(b"b").stop()


def legacy_torch_py2(path: Path, tensors: dict[str, np.ndarray], *, rebuild: str = "v2",
                     unicode_names: frozenset[str] = frozenset()) -> Path:
    """Writes `tensors` (float32/float64/int64/uint8, C-ordered) as torch 0.4 (rebuild="v2") or 0.3 ("v1")
    wrote `torch.save(state_dict, path)` under Python 2; names in `unicode_names` are pickled as `unicode`."""
    keys = [str(94_000_000_000_000 + 48 * i) for i in range(len(tensors))]  # str(storage._cdata), as torch did
    body = _header_pickles() + _state_dict_pickle(tensors, keys, rebuild, unicode_names)
    listed = _Py2Pickle().raw(b"]").memo().raw(b"(" if len(keys) > 1 else b"")
    for key in sorted(keys):
        listed.str_(key)
    body += listed.raw(b"e" if len(keys) > 1 else b"a").stop()
    for key in sorted(keys):
        value = tensors[[name for name, k in zip(tensors, keys) if k == key][0]]
        body += struct.pack("<q", value.size) + np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
    path.write_bytes(body)
    return path


def lpips_alex_v01() -> dict[str, np.ndarray]:
    """The variables of lpips' `weights/v0.1/alex.pth` (five 1x1 convs, float32), with seeded values."""
    rng = np.random.default_rng(36)
    return {f"lin{i}.model.1.weight": rng.random((1, channels, 1, 1), dtype=np.float32) / 10
            for i, channels in enumerate((64, 192, 384, 256, 256))}
