"""Small undamaged checkpoints of every format varstore reads, and where their data bytes lie.

Each source is a directory holding one checkpoint, so workers can copy it
whole before damaging one file of it. varstore's own .h5 and .zarr are
written here (a mix of own arrays, packed small variables, bfloat16,
strings, a scalar); the foreign files are copied from fixtures/.
`data_regions` says which byte ranges of which file hold variable values
(the bit-flip tests damage those to test checksums, and everything else
to test metadata handling).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"


@dataclass(frozen=True)
class Source:
    """One checkpoint to damage.

    Attributes:
      label: figure label ("varstore .h5", "TF .index", ...).
      src: directory copied per case.
      open: path inside `src` to open ("" = `src` itself, a Zarr directory).
      files: files inside `src` to damage (relative paths).
      own: True for varstore's own formats (restore and `varstore verify` apply).
    """

    label: str
    src: Path
    open: str
    files: tuple[str, ...]
    own: bool = False


def own_values() -> dict[str, np.ndarray]:
    """The variables of the own-format sources: own arrays and packed ones, several dtypes."""
    from varstore import dtypes

    rng = np.random.default_rng(7)
    return {
        "dense/kernel": rng.standard_normal((8, 16)).astype(np.float32),
        "dense/bias": rng.standard_normal(16).astype(np.float32),
        "embedding/table": rng.standard_normal((6, 24)).astype(np.float32).astype(dtypes.as_dtype("bfloat16")),
        "global_step": np.array(1234, dtype=np.int64),
        "mask": rng.random(40) > 0.5,
        "vocab": np.array([b"ab", b"cde", b"f"], dtype="S3"),
        "counts": np.arange(64, dtype=np.uint16),
    }


def write_own(directory: Path, fmt: str) -> Path:
    """Writes the own-format checkpoint `model.h5` or `model.zarr` in `directory` (small packing threshold,
    so there are own arrays and a packed blob while the file stays a few KB)."""
    from varstore import save

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ("model.h5" if fmt == "h5" else "model.zarr")
    save(path, own_values(), step=1234, metadata={"run": "reliability"}, pack_threshold_bytes=100,
         layout="packed")
    return path


def plant_zarr_manifest(path: Path, raw: bytes) -> None:
    """Stores `raw` as the manifest of the Zarr checkpoint `path`, with its array shape and root crc32c updated.

    Builders of hostile manifests use it so that the reader's deeper checks, not the manifest's
    own checksum (root attribute varstore_manifest_crc32c), are what refuses them.
    """
    from varstore.checkpoint.format.checksum import crc32c_raw

    (path / "_varstore/manifest/0").write_bytes(raw)
    meta_file = path / "_varstore/manifest/zarr.json"
    meta = json.loads(meta_file.read_text())
    meta["shape"] = [len(raw)]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [len(raw)]
    meta_file.write_text(json.dumps(meta))
    root = json.loads((path / "zarr.json").read_text())
    root["attributes"]["varstore_manifest_crc32c"] = crc32c_raw(raw)
    (path / "zarr.json").write_text(json.dumps(root))


def _relative_files(root: Path) -> tuple[str, ...]:
    return tuple(sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()))


def make_sources(workdir: Path) -> list[Source]:
    """Builds every source under `workdir`; returns them in figure order."""
    sources = []
    h5_dir = workdir / "own_h5"
    write_own(h5_dir, "h5")
    sources.append(Source("varstore .h5", h5_dir, "model.h5", ("model.h5",), own=True))
    zarr_dir = workdir / "own_zarr"
    path = write_own(zarr_dir, "zarr")
    sources.append(Source("varstore .zarr", path, "", _relative_files(path), own=True))
    tf_dir = workdir / "tf"
    tf_dir.mkdir()
    for name in ("model.ckpt.index", "model.ckpt.data-00000-of-00001"):
        shutil.copyfile(FIXTURES / "tf1_scopes" / name, tf_dir / name)
    sources.append(Source("TF .index", tf_dir, "model.ckpt", ("model.ckpt.index",)))
    sources.append(Source("TF .data", tf_dir, "model.ckpt", ("model.ckpt.data-00000-of-00001",)))
    for label, sub, name in (("safetensors", "safetensors", "mixed_numpy.safetensors"),
                             ("npz", "npz", "arrays.npz"),
                             ("npz (deflated)", "npz", "arrays_compressed.npz"),
                             ("Keras .weights.h5", "keras3", "model.weights.h5"),
                             ("PyTorch .pt (zip)", "torch_zip", "state_dict_mixed.pt"),
                             ("PyTorch .pt (legacy)", "torch_zip", "legacy_format.pt"),
                             ("GGUF", "gguf", "mini.gguf")):
        directory = workdir / name.replace(".", "_")
        directory.mkdir(exist_ok=True)
        shutil.copyfile(FIXTURES / sub / name, directory / name)
        sources.append(Source(label, directory, name, (name,)))
    return sources


def data_regions(source: Source) -> dict[str, list[tuple[int, int, str]]]:
    """{file: [(start, stop, variable name)]}: the bytes holding each variable's value.

    Known for the own formats (from the manifest and the backend's raw
    extents) and for TF bundles (each entry's offset and size in the .data
    shard). Empty for the formats without a checksum of their own.
    """
    regions: dict[str, list[tuple[int, int, str]]] = {}
    if source.own:
        from varstore.checkpoint import open_varstore as open_checkpoint
        from varstore.checkpoint.format.manifest import storage_layout

        path = source.src / source.open if source.open else source.src
        root = source.src
        with open_checkpoint(path) as reader:
            packed = reader._packed  # noqa: SLF001 - test introspection of the layout
            fmt_h5 = reader.format == "varstore-hdf5"
            blob = None
            if packed.get("nbytes"):
                blob = reader._extent_of(packed["path"], np.dtype("u1"), (int(packed["nbytes"]),))  # noqa: SLF001
            for name in reader.keys():
                record = reader.record(name)
                if not record.nbytes:
                    continue
                if record.path is None:
                    extent = blob
                    start = extent.offset + int(record.offset)
                else:
                    dtype, shape = storage_layout(record.numpy_dtype, record.shape, fmt_h5)
                    extent = reader._extent_of(record.path, dtype, shape)  # noqa: SLF001
                    start = extent.offset
                rel = str(Path(extent.file).relative_to(root))
                regions.setdefault(rel, []).append((start, start + record.nbytes, name))
    elif source.label == "TF .data":
        from varstore.formats.tensorflow import _bundle_format as fmt

        index = (source.src / "model.ckpt.index").read_bytes()
        for key, value in fmt.read_table(index, "index"):
            if not key:
                continue
            entry = fmt.parse_entry(key, value, "index")
            if not entry.size:
                continue
            regions.setdefault(source.files[0], []).append(
                (int(entry.offset), int(entry.offset) + int(entry.size), key.decode("utf-8", "replace")))
    elif source.label == "safetensors":
        raw = (source.src / source.open).read_bytes()
        length = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + length])
        for name, spec in header.items():
            if name != "__metadata__" and spec["data_offsets"][1] > spec["data_offsets"][0]:
                begin, end = spec["data_offsets"]
                regions.setdefault(source.open, []).append((8 + length + begin, 8 + length + end, name))
    elif source.label == "Keras .weights.h5":
        import h5py  # tests may use h5py to locate bytes (STYLE.md)

        with h5py.File(source.src / source.open, "r") as handle:
            def visit(name: str, obj: object) -> None:
                if isinstance(obj, h5py.Dataset) and obj.id.get_offset() is not None and obj.nbytes:
                    start = int(obj.id.get_offset())
                    regions.setdefault(source.open, []).append((start, start + int(obj.nbytes), name))
            handle.visititems(visit)
    return regions


#: Formats whose value bytes carry a checksum varstore checks (data flips must be detected).
CHECKSUMMED = {"varstore .h5", "varstore .zarr", "TF .data"}


def describe(sources: list[Source]) -> str:
    """A JSON line per source: label and file sizes (for the figures report)."""
    lines = []
    for s in sources:
        sizes = {f: (s.src / f).stat().st_size for f in s.files}
        lines.append(json.dumps({"label": s.label, "bytes": sum(sizes.values()), "files": len(sizes)}))
    return "\n".join(lines)
