"""The manifest (checkpoint/format/manifest.py): decoding refuses inconsistent columns on open, naming the variable."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from tests.checkpoint.damage import manifest_bytes, rewrite_zarr_manifest, VALUES
from varstore import save
from varstore.checkpoint import open_varstore as open_checkpoint
from varstore.checkpoint.format.manifest import decode_manifest_columns
from varstore.errors import CorruptCheckpointError

def test_nbytes_disagreeing_with_shape_and_dtype_is_refused_on_open(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES)

    def edit(document: dict) -> None:
        columns = document["variables"]
        columns["nbytes"][columns["name"].index("dense/bias")] = 60

    rewrite_zarr_manifest(path, edit)
    with pytest.raises(CorruptCheckpointError, match=r"'dense/bias' has nbytes 60.*\[16\].*float32 make 64"):
        open_checkpoint(path)


def test_unknown_dtype_is_refused_on_open(tmp_path: Path) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES)

    def edit(document: dict) -> None:
        columns = document["variables"]
        columns["dtype"][columns["name"].index("dense/bias")] = "float99"

    rewrite_zarr_manifest(path, edit)
    with pytest.raises(CorruptCheckpointError, match="'dense/bias' has an unknown dtype 'float99'"):
        open_checkpoint(path)


@pytest.mark.parametrize("column, row, value, message", [
    ("shape", "dense/bias", [16.0], "a shape is not a list of ints"),   # 16.0 == 16: must not merge with [16]
    ("shape", "dense/bias", [True], "a shape is not a list of ints"),   # True == 1 likewise
    ("shape", "dense/bias", [-16], "a shape has a negative dimension"),
    ("path", "dense/bias", None, "each variable needs exactly one of path and offset"),  # neither
    ("offset", "dense/kernel", 0, "each variable needs exactly one of path and offset"),  # both
])
def test_damaged_columns_are_refused_by_the_column_checks(tmp_path: Path, column: str, row: str, value: object,
                                                         message: str) -> None:
    path = tmp_path / "model.zarr"
    save(path, VALUES, layout="per-variable")

    def edit(document: dict) -> None:
        columns = document["variables"]
        columns[column][columns["name"].index(row)] = value

    rewrite_zarr_manifest(path, edit)
    with pytest.raises(CorruptCheckpointError, match=f"manifest of '.*model.zarr' is damaged: {message}"):
        open_checkpoint(path)


def test_decoded_shapes_are_one_shared_tuple_per_distinct_shape(tmp_path: Path) -> None:
    values = {f"s/v{i}": np.full((2, 3), i, np.float32) for i in range(40)}
    values["t/odd"] = np.zeros(5, np.int8)
    data = manifest_bytes(save(tmp_path / "ck.h5", values, layout="packed"))
    header, columns = decode_manifest_columns(data, "ck.h5")
    shapes = columns.columns["shape"]
    assert shapes[:3] == [(2, 3)] * 3 and shapes[-1] == (5,)
    assert len({id(shape) for shape in shapes}) == 2  # 40 variables of one shape hold one tuple
    assert columns.record(7).shape == (2, 3) and header["layout"] == "packed"


@pytest.mark.parametrize("enabled", [True, False])
def test_decoding_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path, enabled: bool) -> None:
    data = manifest_bytes(save(tmp_path / "ck.h5", VALUES))
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        decode_manifest_columns(data, "ck.h5")
        assert gc.isenabled() is enabled
        with pytest.raises(CorruptCheckpointError):
            decode_manifest_columns(b"{not json", "ck.h5")
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
