"""Which library computes varstore's crc32c (checkpoint/format/checksum.py): crc32c-rs when it imports and
agrees with the crc32c package on the self-check, else the crc32c package; the two give the same value on
every length, alignment and continuation."""

from __future__ import annotations

import sys
import types

import crc32c
import numpy as np
import pytest

from varstore.checkpoint.format import checksum


def test_crc32c_rs_computes_the_checksum_and_matches_rfc_3720() -> None:
    assert checksum.IMPLEMENTATION == "crc32c-rs"  # a base dependency
    assert checksum.crc32c_raw(b"123456789") == 0xE3069283
    assert checksum.crc32c_raw(bytes(32)) == 0x8A9136AA
    assert checksum.crc32c_of(np.zeros(8, np.float32)) == 0x8A9136AA


@pytest.mark.parametrize("length", [0, 1, 3, 7, 8, 15, 16, 31, 63, 64, 65, 127, 128, 255, 256, 257, 1023, 4096,
                                    4099, 65_537, (1 << 20) + 7])
def test_every_length_alignment_and_continuation_matches_the_crc32c_package(length: int) -> None:
    data = np.random.default_rng(length).integers(0, 256, length + 8, dtype=np.uint8)
    for start in (0, 1, 3, 5):
        piece = memoryview(data)[start:start + length]
        expected = crc32c.crc32c(piece)
        assert checksum.crc32c_raw(piece) == expected
        cut = length // 3
        assert checksum.crc32c_raw(piece[cut:], checksum.crc32c_raw(piece[:cut])) == expected
        assert checksum.crc32c_of(piece[cut:], crc32c.crc32c(piece[:cut])) == expected


def test_an_array_view_is_checksummed_as_its_bytes() -> None:
    value = np.arange(1000, dtype=np.float32).reshape(10, 100)
    assert checksum.crc32c_of(value) == crc32c.crc32c(value.tobytes())
    assert checksum.crc32c_of(value[3:]) == crc32c.crc32c(value[3:].tobytes())


def test_a_candidate_that_disagrees_or_is_missing_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    reference = crc32c.crc32c
    wrong = types.ModuleType("crc32c_rs")
    wrong.crc32c = lambda data, value=0: reference(data, value) ^ 1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "crc32c_rs", wrong)
    assert checksum._fast_crc32c(reference) is None

    # right on RFC 3720's short vectors, wrong past 16 KiB (a broken folding kernel)
    def long_wrong(data: bytes, value: int = 0) -> int:
        return reference(data, value) ^ (1 if len(memoryview(data)) > 16_384 else 0)

    wrong.crc32c = long_wrong  # type: ignore[attr-defined]
    assert checksum._fast_crc32c(reference) is None
    wrong.crc32c = lambda data: reference(data)  # type: ignore[attr-defined]  # no continuation argument
    assert checksum._fast_crc32c(reference) is None
    monkeypatch.setitem(sys.modules, "crc32c_rs", None)  # not installed: import raises ImportError
    assert checksum._fast_crc32c(reference) is None
    monkeypatch.undo()
    assert checksum._fast_crc32c(reference) is not None
