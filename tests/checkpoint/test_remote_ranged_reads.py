"""HDF5 restores on a bucket: planned ranges coalesced into few GETs, partial reads stay partial, large values split."""

from __future__ import annotations

import numpy as np
import pytest

import varstore as vs
from tests._s3server import S3TestServer
from varstore.checkpoint import open_varstore
from varstore.storage import object_storage

KiB = 1024


def _layers(count: int, nbytes: int) -> dict[str, np.ndarray]:
    return {f"layer{i}/w": np.full(nbytes // 4, i, dtype=np.float32) for i in range(count)}


def _extents(url: str, names: list[str]) -> dict[str, tuple[int, int]]:
    with open_varstore(url) as reader:
        _, extents = reader.direct_extents(names)
    return dict(zip(names, extents))


def _variable_gets(server: S3TestServer, name: str) -> list[tuple[int, int]]:
    """(first byte, bytes) of every ranged GET after the index header and the manifest."""
    gets = [r for r in server.log.matching("GET", path_contains=name) if r.range]
    assert gets[0].range == "bytes=0-4095"  # opening: size, ETag and the index header in one GET
    spans = []
    for request in gets[2:]:
        first, last = (int(v) for v in request.range.split("=")[1].split("-"))
        assert request.bytes_out == last - first + 1
        spans.append((first, last - first + 1))
    return sorted(spans)


def test_a_partial_restore_reads_only_the_requested_variables_and_the_small_gaps_between(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(object_storage, "MERGE_GAP_BYTES", 160 * KiB)  # wider than one variable, not two
    values = _layers(6, 128 * KiB)
    url = f"{s3_prefix}/m.h5"
    vs.save(url, values)
    where = _extents(url, list(values))
    s3_server.log.clear()
    wanted = ["layer0/w", "layer2/w", "layer5/w"]  # 0 and 2: one variable apart; 5: three apart
    targets = {name: np.zeros_like(values[name]) for name in wanted}
    vs.restore(url, targets)
    assert all(np.array_equal(targets[name], values[name]) for name in wanted)
    first = where["layer0/w"][0]
    merged_end = where["layer2/w"][0] + where["layer2/w"][1]
    assert _variable_gets(s3_server, "m.h5") == [(first, merged_end - first), where["layer5/w"]]
    assert merged_end - first < 3 * 128 * KiB + 8 * KiB  # layer1 came along (the gap), layers 3 and 4 did not


def test_a_variable_larger_than_a_range_is_read_in_concurrent_pieces_straight_into_its_target(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(object_storage, "RANGE_BYTES", 64 * KiB)
    values = {"big": np.arange(40 * KiB, dtype=np.float32), "small": np.arange(10, dtype=np.float32)}  # 160 KiB
    url = f"{s3_prefix}/m.h5"
    vs.save(url, values)
    offset, nbytes = _extents(url, ["big"])["big"]
    s3_server.log.clear()
    targets = {"big": np.zeros_like(values["big"])}
    vs.restore(url, targets)
    np.testing.assert_array_equal(targets["big"], values["big"])
    assert _variable_gets(s3_server, "m.h5") == [(offset, 64 * KiB), (offset + 64 * KiB, 64 * KiB),
                                                  (offset + 128 * KiB, 32 * KiB)]
    s3_server.log.clear()
    with vs.open_checkpoint(url) as reader:  # a single read (no read-ahead) is split the same way
        np.testing.assert_array_equal(reader.read("big"), values["big"])
    assert _variable_gets(s3_server, "m.h5") == [(offset, 64 * KiB), (offset + 64 * KiB, 64 * KiB),
                                                  (offset + 128 * KiB, 32 * KiB)]


def test_a_restore_of_many_variables_takes_a_number_of_gets_set_by_their_bytes_not_their_count(
        s3_env: dict[str, str], s3_server: S3TestServer, s3_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(object_storage, "RANGE_BYTES", 256 * KiB)
    values = _layers(40, 32 * KiB)  # 1.25 MiB in 40 variables, per-variable layout
    url = f"{s3_prefix}/m.h5"
    vs.save(url, values, layout="per-variable")
    where = _extents(url, list(values))
    s3_server.log.clear()
    targets = {name: np.zeros_like(value) for name, value in values.items()}
    vs.restore(url, targets)
    assert all(np.array_equal(targets[name], values[name]) for name in values)
    spans = _variable_gets(s3_server, "m.h5")
    assert len(spans) == 5  # 8 variables of 32 KiB (+ small gaps) fill a 256 KiB range
    assert spans[0][0] == min(o for o, _ in where.values())
    assert spans[-1][0] + spans[-1][1] == max(o + n for o, n in where.values())
    assert sum(n for _, n in spans) < 40 * 32 * KiB + 40 * 8 * KiB  # the variables and the headers between
    assert len(s3_server.log.matching("HEAD")) == 0  # the opening GET brought the size
