"""save(..., compression="zstd"): a standard Zarr v3 codec chain (bytes + blosc zstd, bit shuffle) that
plain zarr decodes; crc32c recorded over the decoded bytes and checked on read; raw stays the default."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import varstore as vs
from varstore.errors import ChecksumError, InvalidMetadataError, UnsupportedFormatError

zarr = pytest.importorskip("zarr")


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"dense/kernel": rng.standard_normal((256, 256)).astype(np.float32),
            "dense/bf16": rng.standard_normal((256, 128)).astype(vs.dtypes.bfloat16),
            "step": np.array(seed, np.int64), "mask": rng.integers(0, 2, 300).astype(bool)}


def test_zstd_chunks_are_standard_zarr_and_smaller(tmp_path: Path) -> None:
    weights = _weights(1)
    vs.save(tmp_path / "raw.zarr", weights)
    vs.save(tmp_path / "zstd.zarr", weights, compression="zstd", layout="per-variable")
    document = json.loads((tmp_path / "zstd.zarr" / "dense" / "bf16" / "zarr.json").read_text())
    assert [c["name"] for c in document["codecs"]] == ["bytes", "blosc"]
    assert document["codecs"][1]["configuration"] == {"cname": "zstd", "clevel": 5, "shuffle": "bitshuffle",
                                                      "typesize": 2, "blocksize": 0}
    raw_default = json.loads((tmp_path / "raw.zarr" / "dense" / "kernel" / "zarr.json").read_text())
    assert [c["name"] for c in raw_default["codecs"]] == ["bytes"]  # raw stays the default
    stored = (tmp_path / "zstd.zarr" / "dense" / "bf16" / "0.0").stat().st_size
    assert stored < 0.85 * weights["dense/bf16"].nbytes  # bf16 weights: the exponent bytes compress
    group = zarr.open_group(str(tmp_path / "zstd.zarr"), mode="r")  # plain zarr decodes every chunk
    assert group["dense/kernel"][...].tobytes() == weights["dense/kernel"].tobytes()
    assert group["dense/bf16"][...].view(vs.dtypes.bfloat16).tobytes() == weights["dense/bf16"].tobytes()
    loaded = vs.load(tmp_path / "zstd.zarr")
    assert all(loaded[n].tobytes() == v.tobytes() for n, v in weights.items())
    targets = {n: np.zeros_like(v) for n, v in weights.items()}
    vs.restore(tmp_path / "zstd.zarr", targets)
    assert all(targets[n].tobytes() == v.tobytes() for n, v in weights.items())
    with vs.open_checkpoint(tmp_path / "zstd.zarr") as reader, vs.open_checkpoint(tmp_path / "raw.zarr") as raw:
        assert [reader.info(n).checksum for n in reader.keys()] == [raw.info(n).checksum for n in raw.keys()]
        reader.verify()


def test_a_swapped_compressed_chunk_fails_its_crc32c(tmp_path: Path) -> None:
    vs.save(tmp_path / "a.zarr", _weights(1), compression="zstd", layout="per-variable")
    vs.save(tmp_path / "b.zarr", _weights(2), compression="zstd", layout="per-variable")
    shutil.copyfile(tmp_path / "b.zarr" / "dense" / "kernel" / "0.0", tmp_path / "a.zarr" / "dense" / "kernel" / "0.0")
    with pytest.raises(ChecksumError):
        vs.load(tmp_path / "a.zarr")


def test_compression_is_refused_where_it_cannot_apply(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFormatError, match="compression is for Zarr"):
        vs.save(tmp_path / "a.h5", _weights(1), compression="zstd")
    with pytest.raises(InvalidMetadataError, match="unknown compression"):
        vs.save(tmp_path / "a.zarr", _weights(1), compression="brotli")
    assert not (tmp_path / "a.h5").exists() and not (tmp_path / "a.zarr").exists()
