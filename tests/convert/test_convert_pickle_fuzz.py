"""Fuzz the restricted unpickler and the PyTorch reader: only typed errors, no marker, bounded memory.

Inputs: arbitrary bytes, mutations of a real data.pkl, mutations of real
zip and legacy torch.save files, and hand-made hostile pickles (huge claimed
lengths, deep nesting, globals reached every way pickle allows).
"""

from __future__ import annotations

import io
import pickle
import struct
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from varstore.formats._restricted_pickle import TensorRef, unpickle
from varstore.formats.pytorch.reader import TorchReader
from varstore.errors import CorruptCheckpointError, UnsafeFormatError, ValueTooLargeError, VarstoreError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
MARKERS = (Path("/tmp/varstore_pwned_marker"), Path("/tmp/varstore_pwned_marker2"))
_BEFORE = tuple(m.exists() for m in MARKERS)
MEMORY_BOUND = 64 << 20  # bytes of Python allocations one example may peak at


def _data_pkl() -> bytes:
    with zipfile.ZipFile(FIXTURES / "torch_zip/state_dict_mixed.pt") as archive:
        return archive.read("state_dict_mixed/data.pkl")


DATA_PKL = _data_pkl()
ZIP_FILE = (FIXTURES / "torch_zip/state_dict_mixed.pt").read_bytes()
LEGACY_FILE = (FIXTURES / "torch_zip/legacy_format.pt").read_bytes()


def _bounded(call):  # type: ignore[no-untyped-def]
    tracemalloc.start()
    try:
        return call()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < MEMORY_BOUND, peak
        assert tuple(m.exists() for m in MARKERS) == _BEFORE


def _mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, position, value in edits:
        if not out:
            break
        at = position % len(out)
        if kind == 0:
            out[at] = value
        elif kind == 1:
            out.insert(at, value)
        elif kind == 2:
            del out[at]
        else:
            del out[at:]
    return bytes(out)


EDITS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=6)


def test_the_real_data_pkl_unpickles_to_tensor_records() -> None:
    result = unpickle(DATA_PKL, "data.pkl", {})
    assert isinstance(result["head.cache.v"], TensorRef)
    assert result["head.cache.v"].offset == 8 and result["head.cache.v"].shape == (2, 3)


@given(st.binary(max_size=512))
def test_arbitrary_bytes_give_only_typed_errors(data: bytes) -> None:
    def attempt() -> None:
        try:
            unpickle(data, "fuzz", {})
        except VarstoreError:
            pass
    _bounded(attempt)


@given(EDITS)
def test_mutated_data_pkl_gives_only_typed_errors(edits: list[tuple[int, int, int]]) -> None:
    def attempt() -> None:
        try:
            unpickle(_mutate(DATA_PKL, edits), "fuzz", {})
        except VarstoreError:
            pass
    _bounded(attempt)


@pytest.mark.parametrize("original", [ZIP_FILE, LEGACY_FILE], ids=["zip", "legacy"])
@given(edits=EDITS)
def test_mutated_torch_files_give_only_typed_errors(tmp_path_factory: pytest.TempPathFactory, original: bytes,
                                                    edits: list[tuple[int, int, int]]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "m.pt"
    path.write_bytes(_mutate(original, edits))

    def attempt() -> None:
        try:
            with TorchReader(path) as reader:
                for name in reader.keys():
                    reader.read(name)
        except VarstoreError:
            pass
    _bounded(attempt)


def _proto(body: bytes) -> bytes:
    return b"\x80\x04" + body + b"."


HOSTILE = {
    "BINBYTES8 claiming 2**60 bytes": _proto(b"\x8e" + struct.pack("<Q", 1 << 60) + b"xx"),
    "BINUNICODE8 claiming 2**62 bytes": _proto(b"\x8d" + struct.pack("<Q", 1 << 62)),
    "LONG4 claiming 2**31 bytes": b"\x80\x02\x8b" + struct.pack("<i", (1 << 31) - 1) + b".",
    "unknown opcode": b"\x80\x02\xff.",
    "no STOP": b"\x80\x02}q\x00",
    "REDUCE on a dtype stand-in": b"\x80\x02ctorch\nfloat32\n)R.",
    "BUILD on a tensor record": b"\x80\x02ctorch\nfloat32\n}b.",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hand_made_hostile_pickles(name: str) -> None:
    with pytest.raises(CorruptCheckpointError):
        _bounded(lambda: unpickle(HOSTILE[name], name, {}))


@pytest.mark.parametrize("module, global_name", [
    ("os", "system"), ("posix", "system"), ("subprocess", "Popen"), ("builtins", "eval"), ("builtins", "exec"),
    ("builtins", "getattr"), ("builtins", "__import__"), ("__builtin__", "open"), ("importlib", "import_module"),
    ("torch", "load"), ("torch.serialization", "load"), ("numpy", "load"), ("collections", "defaultdict"),
    ("pickle", "loads"), ("functools", "partial"), ("runpy", "run_path"), ("copyreg", "_reconstructor"),
])
def test_every_way_to_reach_a_global_is_refused(module: str, global_name: str) -> None:
    protocol0 = f"c{module}\n{global_name}\n(S'touch {MARKERS[1]}'\ntR.".encode()
    protocol4 = (b"\x80\x04\x8c" + bytes([len(module)]) + module.encode() + b"\x8c" + bytes([len(global_name)])
                 + global_name.encode() + b"\x93.")
    for data in (protocol0, protocol4):
        with pytest.raises(UnsafeFormatError, match=f"'{module}.{global_name}'"):
            _bounded(lambda data=data: unpickle(data, "hostile", {}))


def test_an_extension_code_goes_through_find_class_too() -> None:
    import copyreg

    copyreg.add_extension("os", "system", 0x7F_AB_CD)
    try:
        data = b"\x80\x02\x84" + struct.pack("<i", 0x7F_AB_CD) + b"."
        with pytest.raises(UnsafeFormatError, match="'os.system'"):
            unpickle(data, "ext", {})
    finally:
        copyreg.remove_extension("os", "system", 0x7F_AB_CD)


def _torch_zip(path: Path, data_pkl: bytes, storages: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        for key, data in storages.items():
            archive.writestr(f"archive/data/{key}", data)
    return path


def test_deep_nesting_and_a_huge_claimed_storage_in_a_torch_zip(tmp_path: Path) -> None:
    deep = b"\x80\x02" + b"(" * 100000 + b"l" * 100000 + b"."
    with pytest.raises(CorruptCheckpointError, match="nest too deeply"):
        _bounded(lambda: TorchReader(_torch_zip(tmp_path / "deep.pt", deep, {})))
    huge = (b"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000"
            b"X\x03\x00\x00\x00cpu\x8a\x08" + struct.pack("<q", 1 << 62) + b"tQ.")
    with pytest.raises(CorruptCheckpointError, match="'archive/data/0' holds 4 bytes"):
        _bounded(lambda: TorchReader(_torch_zip(tmp_path / "huge.pt", huge, {"0": b"\0" * 4})))


def test_a_huge_expanded_view_is_refused_before_allocating(tmp_path: Path) -> None:
    storage = b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQ"
    size, stride = b"J" + struct.pack("<i", 1 << 30) + b"\x85", b"K\x00\x85"
    body = (b"\x80\x02}(X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n(" + storage + b"K\x00" + size + stride
            + b"\x89}tRu.")
    path = tmp_path / "expanded.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("expanded/data.pkl", body)
        archive.writestr("expanded/data/0", b"\0\0\x80?")
    with pytest.raises(ValueTooLargeError, match="expanded view"):  # typed: the user may raise the limit
        _bounded(lambda: TorchReader(path))


def test_nothing_unpickled_reaches_plain_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("plain pickle.load / loads called")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    assert unpickle(io.BytesIO(DATA_PKL).read(), "data.pkl", {})["extra"]["comment"] == "nested dict with a str leaf"
