"""crc32c of an array assembled from byte runs written by several ranks, without reading it back.

crc32c is linear over GF(2): crc(A + B) = shift(crc(A), len(B)) xor crc(B),
where shift multiplies by x^(8 len(B)) modulo the Castagnoli polynomial (the
zlib crc32_combine construction, with the reflected polynomial 0x82F63B78).
The operator for one length is a 32x32 bit matrix, built once per distinct
length and cached: the runs of one write all have the same length. No I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

__all__ = ["crc32c_combine", "crc32c_of_runs"]

_POLY = 0x82F63B78


def _times(matrix: tuple[int, ...] | list[int], vector: int) -> int:
    total = 0
    i = 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _square(matrix: list[int]) -> list[int]:
    return [_times(matrix, matrix[n]) for n in range(32)]


def _shift_slow(crc: int, nbytes: int) -> int:
    odd = [_POLY] + [1 << n for n in range(31)]  # one zero bit
    even = _square(odd)  # two zero bits
    odd = _square(even)  # four zero bits
    while True:
        even = _square(odd)
        if nbytes & 1:
            crc = _times(even, crc)
        nbytes >>= 1
        if not nbytes:
            return crc
        odd = _square(even)
        if nbytes & 1:
            crc = _times(odd, crc)
        nbytes >>= 1
        if not nbytes:
            return crc


@functools.lru_cache(maxsize=256)
def _shift_matrix(nbytes: int) -> tuple[int, ...]:
    return tuple(_shift_slow(1 << k, nbytes) for k in range(32))


def crc32c_combine(crc1: int, crc2: int, nbytes2: int) -> int:
    """crc32c of A + B from crc1 = crc32c(A), crc2 = crc32c(B) and nbytes2 = len(B) (bytes)."""
    if nbytes2 <= 0:
        return crc1
    return _times(_shift_matrix(nbytes2), crc1) ^ crc2


def crc32c_of_runs(runs: Iterable[tuple[int, int, int]], total: int) -> int | None:
    """crc32c of `total` bytes given (start, length, crc32c) runs that tile them; None when they do not."""
    crc = 0
    position = 0
    for start, length, run_crc in sorted(runs):
        if start != position:
            return None
        crc = crc32c_combine(crc, run_crc, length)
        position += length
    return crc if position == total else None
