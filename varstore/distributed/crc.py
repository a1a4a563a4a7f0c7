"""crc32c of an array assembled from byte runs written by several ranks, without reading it back.

crc32c is linear over GF(2): crc(A + B) = shift(crc(A), len(B)) xor crc(B),
where shift multiplies by x^(8 len(B)) modulo the Castagnoli polynomial (the
zlib crc32_combine construction, with the reflected polynomial 0x82F63B78).
The operators appending 2**k zero bytes are 32x32 bit matrices, built once
by repeated squaring and cached; one combine costs a few hundred operations
per set bit of the length. No I/O.
"""

from __future__ import annotations

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


_POWERS: list[list[int]] = []  # _POWERS[k]: the operator that appends 2**k zero bytes


def _power(k: int) -> list[int]:
    while len(_POWERS) <= k:
        if not _POWERS:
            operator = [_POLY] + [1 << n for n in range(31)]  # one zero bit
            for _ in range(3):  # 2, 4, 8 zero bits: one zero byte
                operator = _square(operator)
            _POWERS.append(operator)
        else:
            _POWERS.append(_square(_POWERS[-1]))
    return _POWERS[k]


def _shift(crc: int, nbytes: int) -> int:
    """crc32c state after appending `nbytes` zero bytes to data whose crc32c is `crc` (pre/post inverted)."""
    k = 0
    while nbytes and crc:
        if nbytes & 1:
            crc = _times(_power(k), crc)
        nbytes >>= 1
        k += 1
    return crc


def crc32c_combine(crc1: int, crc2: int, nbytes2: int) -> int:
    """crc32c of A + B from crc1 = crc32c(A), crc2 = crc32c(B) and nbytes2 = len(B) (bytes)."""
    if nbytes2 <= 0:
        return crc1
    return _shift(crc1, nbytes2) ^ crc2


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
