"""Hypothesis fuzzing of every parser varstore owns; only VarstoreError may escape.

Targets: the TF tensor-bundle table and BundleEntryProto decoder, the
safetensors header, npz members (.npy headers inside a zip), and
varstore's own manifest (decoded alone, and planted in a real Zarr
checkpoint that is then opened and read). Each target gets arbitrary bytes
and structured-but-wrong documents: offsets out of range, shape x itemsize
!= byte count, duplicate names, unknown dtype codes, huge lengths.
`campaign` runs one target for N examples and counts cases and untyped
exceptions (the goal is 0) instead of stopping at the first.
"""

from __future__ import annotations

import atexit
import io
import json
import shutil
import struct
import tempfile
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from varstore.errors import VarstoreError

from ._sources import FIXTURES, plant_zarr_manifest, write_own

_HUGE = st.sampled_from([-1, 2**31, 2**32 + 7, 10**15, 2**63 - 1, 2**64 + 5])
_SIZE = st.one_of(st.integers(0, 64), _HUGE)


# ------------------------------------------------------------------ TF
def _tf_table(data: bytes) -> None:
    from varstore.formats.tensorflow import _bundle_format as fmt

    for key, value in fmt.read_table(data, "fuzz"):
        if key == b"":
            fmt.parse_header(value, "fuzz")
        else:
            fmt.parse_entry(key, value, "fuzz")


def _tf_entry(data: bytes) -> None:
    from varstore.formats.tensorflow import _bundle_format as fmt

    fmt.parse_entry(b"fuzz/var", data, "fuzz")


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, bytes):
        return _varint(number << 3 | 2) + _varint(len(value)) + value
    return _varint(number << 3) + _varint(value)


@st.composite
def tf_entries(draw: Any) -> bytes:
    """BundleEntryProtos with wrong-but-well-formed fields (unknown dtype codes, huge sizes, bad slices)."""
    dims = draw(st.lists(st.one_of(st.integers(0, 8), _HUGE), max_size=4))
    shape = b"".join(_field(2, _field(1, d)) for d in dims)
    fields = [_field(1, draw(st.one_of(st.integers(0, 30), st.integers(100, 130), _HUGE))), _field(2, shape),
              _field(3, draw(_SIZE)), _field(4, draw(_SIZE)), _field(5, draw(_SIZE)),
              _field(6, draw(st.integers(0, 2**32 - 1)))]
    if draw(st.booleans()):
        extents = b"".join(_field(1, _field(1, draw(_SIZE)) + _field(2, draw(_SIZE)))
                           for _ in range(draw(st.integers(0, 5))))
        fields.append(_field(7, extents))
    return b"".join(draw(st.permutations(fields)))


def _tf_bundle(entry: bytes) -> None:
    """A real bundle whose first variable's entry is replaced, opened and read whole."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "convert"))
    try:
        from tf_bundle_writer import table  # the test helper that writes LevelDB tables
    finally:
        sys.path.pop(0)
    from varstore.formats.tensorflow import _bundle_format as fmt
    from varstore.formats.tensorflow.reader import TFCheckpointReader

    pairs = fmt.read_table((FIXTURES / "tf1_scopes/model.ckpt.index").read_bytes(), "fixture")
    pairs = [(k, entry if i == 1 else v) for i, (k, v) in enumerate(pairs)]
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "model.ckpt"
        Path(f"{prefix}.index").write_bytes(table(pairs))
        shutil.copyfile(FIXTURES / "tf1_scopes/model.ckpt.data-00000-of-00001",
                        f"{prefix}.data-00000-of-00001")
        _read_everything(TFCheckpointReader(prefix))


# --------------------------------------------------------- safetensors
_ST_DTYPES = ["F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64", "U8", "BOOL", "F8_E4M3", "C64", "XX", "", "F32 "]


@st.composite
def safetensors_files(draw: Any) -> bytes:
    """Headers with unknown dtypes, shape x itemsize != byte count, offsets out of range, huge lengths."""
    count = draw(st.integers(0, 4))
    names = draw(st.lists(st.sampled_from(["a", "b", "a/b", "__metadata__", "x" * 300, "../b"]),
                          min_size=count, max_size=count))
    body = draw(st.binary(max_size=64))
    header_items = []
    for name in names:  # duplicates are possible: JSON objects with repeated keys
        spec = {"dtype": draw(st.sampled_from(_ST_DTYPES)),
                "shape": draw(st.lists(st.one_of(st.integers(0, 6), _HUGE), max_size=3)),
                "data_offsets": [draw(st.one_of(st.integers(0, 80), _HUGE)),
                                 draw(st.one_of(st.integers(0, 80), _HUGE))]}
        if draw(st.booleans()):
            spec = draw(st.sampled_from([[], "x", None, {"dtype": "F32"}, {"shape": [1]}]))
        header_items.append(f"{json.dumps(name)}: {json.dumps(spec)}")
    header = ("{" + ", ".join(header_items) + "}").encode()
    length = draw(st.one_of(st.just(len(header)), _HUGE.map(lambda v: v & (2**64 - 1)), st.integers(0, 200)))
    return struct.pack("<Q", length) + header + body


def _safetensors(data: bytes) -> None:
    from varstore.formats.safetensors.single import SafetensorsReader

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.safetensors"
        path.write_bytes(data)
        _read_everything(SafetensorsReader(path))


# ------------------------------------------------------------------ npz
@st.composite
def npz_files(draw: Any) -> bytes:
    """Zips of .npy members with wrong headers: unknown dtype codes, huge shapes, short data, duplicates."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))) as zf:
        for _ in range(draw(st.integers(0, 3))):
            descr = draw(st.sampled_from(["<f4", "<i8", "|b1", "<c8", "|O", "<U3", "|V4", "zz", "<f4 ", "[('a','<f4')]"]))
            shape = tuple(draw(st.lists(st.one_of(st.integers(0, 5), _HUGE), max_size=3)))
            fortran = draw(st.booleans())
            header = ("{'descr': %r, 'fortran_order': %r, 'shape': %r, }" % (descr, fortran, shape))
            header = header.ljust(118) + "\n"
            member = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")
            member += draw(st.binary(max_size=48))
            zf.writestr(draw(st.sampled_from(["a.npy", "b.npy", "a.npy", "dir/c.npy", "../d.npy", "e.txt"])), member)
    return buffer.getvalue()


def _npz(data: bytes) -> None:
    from varstore.formats.plain.npz import NpzReader

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.npz"
        path.write_bytes(data)
        _read_everything(NpzReader(path))


# ------------------------------------------------------------ manifest
def _manifest_bytes(data: bytes) -> None:
    from varstore.checkpoint.format.manifest import decode_manifest

    decode_manifest(data, "fuzz")


_MANIFEST_TEMPLATE: dict[str, Any] = {}


def _template() -> tuple[Path, dict[str, Any]]:
    if not _MANIFEST_TEMPLATE:
        directory = Path(tempfile.mkdtemp(prefix="varstore-fuzz-"))
        atexit.register(shutil.rmtree, directory, True)  # one template per process, removed when it ends
        path = write_own(directory, "zarr")
        document = json.loads((path / "_varstore/manifest/0").read_bytes())
        _MANIFEST_TEMPLATE.update(path=path, document=document)
    return _MANIFEST_TEMPLATE["path"], _MANIFEST_TEMPLATE["document"]


_COLUMNS = ["name", "shape", "dtype", "nbytes", "path", "offset", "checksum", "trainable", "collections", "device"]


@st.composite
def manifest_edits(draw: Any) -> list[tuple[str, int, Any]]:
    """Edits of a real manifest's columns: (column, row, new value)."""
    values = st.one_of(st.integers(-3, 300), _HUGE, st.none(), st.text(max_size=8),
                       st.sampled_from(["float32", "bfloat16", "S3", "U2", "object", "V8", "float99", "<f4", "O",
                                        "../outside", "dense/kernel", "_varstore/packed", "/etc"]),
                       st.lists(st.one_of(st.integers(-1, 8), _HUGE), max_size=3), st.booleans())
    return draw(st.lists(st.tuples(st.sampled_from(_COLUMNS + ["packed.nbytes", "packed.path", "drop", "dup"]),
                                   st.integers(0, 6), values), min_size=1, max_size=4))


def _manifest_in_checkpoint(edits: list[tuple[str, int, Any]]) -> None:
    """Plants an edited manifest in a copy of a real Zarr checkpoint, then opens and reads it whole."""
    from varstore.checkpoint import open_varstore as open_checkpoint

    source, document = _template()
    document = json.loads(json.dumps(document))
    columns = document["variables"]
    for column, row, value in edits:
        if column == "packed.nbytes":
            document["packed"]["nbytes"] = value
        elif column == "packed.path":
            document["packed"]["path"] = value
        elif column == "drop":
            dropped = columns[_COLUMNS[row % len(_COLUMNS)]]
            if dropped:
                dropped.pop(row % len(dropped))
        elif column == "dup":
            if columns["name"]:
                columns["name"][row % len(columns["name"])] = columns["name"][(row + 1) % len(columns["name"])]
        elif columns[column]:
            columns[column][row % len(columns[column])] = value
    raw = json.dumps(document).encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.zarr"
        shutil.copytree(source, path)
        plant_zarr_manifest(path, raw)  # with its crc32c, so the column checks are what is fuzzed
        _read_everything(open_checkpoint(path))


def _read_everything(reader: Any) -> None:
    with reader:
        for name in reader.keys():
            reader.info(name)
            reader.read(name)


#: name -> (strategy, check). The TF table and entry decoder come first, as the issue asks.
TARGETS: dict[str, tuple[Any, Callable[[Any], None]]] = {
    "TF table (arbitrary bytes)": (st.binary(max_size=600), _tf_table),
    "TF entry (arbitrary bytes)": (st.binary(max_size=200), _tf_entry),
    "TF entry (wrong fields) in a real bundle": (tf_entries(), _tf_bundle),
    "safetensors (arbitrary bytes)": (st.binary(max_size=300), _safetensors),
    "safetensors (wrong headers)": (safetensors_files(), _safetensors),
    "npz (arbitrary bytes)": (st.binary(max_size=300), _npz),
    "npz (wrong .npy headers)": (npz_files(), _npz),
    "manifest (arbitrary bytes)": (st.binary(max_size=400), _manifest_bytes),
    "manifest (wrong columns) in a real checkpoint": (manifest_edits(), _manifest_in_checkpoint),
}


#: Untyped exceptions of a known, reported bug (strict xfail tests name it), counted apart as "known_bug".
#: Empty: the last one (the reader allocated a manifest's claimed shape before comparing it with the
#: file size) is fixed, so such errors count as untyped again.
KNOWN_BUGS: dict[str, Callable[[BaseException], bool]] = {}


def campaign(name: str, examples: int) -> dict[str, Any]:
    """Runs one target for `examples` hypothesis examples; counts cases and untyped exceptions."""
    strategy, check = TARGETS[name]
    stats: dict[str, Any] = {"target": name, "cases": 0, "untyped": 0, "examples": []}

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(value: Any) -> None:
        stats["cases"] += 1
        try:
            check(value)
        except VarstoreError:
            pass
        except Exception as err:  # noqa: BLE001 - counting untyped exceptions is the point
            if name in KNOWN_BUGS and KNOWN_BUGS[name](err):
                stats["known_bug"] = stats.get("known_bug", 0) + 1
                return
            stats["untyped"] += 1
            if len(stats["examples"]) < 3:
                stats["examples"].append({"input": repr(value)[:300], "error": f"{type(err).__name__}: {err}"[:300],
                                          "where": traceback.format_exc().strip().splitlines()[-3][:200]})

    run()
    return stats
