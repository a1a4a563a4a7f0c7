"""Coalesced ranged reads (storage/_ranged_reads.py): the GET plan, the window, one copy per value."""

from __future__ import annotations

import threading
import time

from varstore.storage._ranged_reads import Block, BlockReadAhead, coalesce, split_ranges

KiB, MiB = 1024, 1024 * 1024


def _plan(blocks: list[Block]) -> list[tuple[int, int, list[tuple[int, int]]]]:
    return [(b.start, b.length, b.members) for b in blocks]


def test_adjacent_extents_with_small_gaps_share_one_get() -> None:
    extents = [(0, 100), (104, 50), (200, 10)]  # gaps of 4 and 46 bytes
    assert _plan(coalesce(extents, range_bytes=1 * MiB, gap_bytes=64)) == [(0, 210, extents)]


def test_a_gap_wider_than_the_merge_gap_starts_a_new_get() -> None:
    extents = [(0, 100), (165, 10)]  # a gap of 65 bytes
    assert _plan(coalesce(extents, range_bytes=1 * MiB, gap_bytes=64)) == [(0, 100, [(0, 100)]), (165, 10, [(165, 10)])]


def test_a_block_closes_once_it_holds_range_bytes() -> None:
    extents = [(i * 4 * KiB, 4 * KiB) for i in range(10)]  # 40 KiB back to back
    blocks = coalesce(extents, range_bytes=16 * KiB, gap_bytes=0)
    assert [(b.start, b.length) for b in blocks] == [(0, 16 * KiB), (16 * KiB, 16 * KiB), (32 * KiB, 8 * KiB)]
    assert [len(b.members) for b in blocks] == [4, 4, 2]


def test_a_large_extent_is_split_into_range_sized_pieces_of_its_own() -> None:
    extents = [(0, 10), (10, 40 * KiB), (40 * KiB + 10, 10)]
    blocks = coalesce(extents, range_bytes=16 * KiB, gap_bytes=KiB)
    assert _plan(blocks) == [(0, 10, [(0, 10)]),
                             (10, 16 * KiB, [(10, 16 * KiB)]), (10 + 16 * KiB, 16 * KiB, [(10 + 16 * KiB, 16 * KiB)]),
                             (10 + 32 * KiB, 8 * KiB, [(10 + 32 * KiB, 8 * KiB)]),
                             (40 * KiB + 10, 10, [(40 * KiB + 10, 10)])]
    assert [b.owners for b in blocks[1:4]] == [[10], [10], [10]]  # pieces know the extent they belong to
    assert split_ranges(5, 33, 16) == [(5, 16), (21, 16), (37, 1)]


def test_blocks_are_planned_in_offset_order_and_fetched_in_read_order() -> None:
    extents = [(3000, 10), (0, 10), (1000, 10)]  # read order is not file order; gaps too wide to merge
    blocks = coalesce(extents, range_bytes=MiB, gap_bytes=100)
    assert [(b.start, b.priority) for b in blocks] == [(0, 1), (1000, 2), (3000, 0)]
    assert coalesce([(0, 0), (5, 10), (5, 10)], range_bytes=MiB, gap_bytes=0)[0].members == [(5, 10)]  # empty, repeated


class _Object:
    """An object's bytes behind a fetch function that records every call (offset, length, window held)."""

    def __init__(self, size: int) -> None:
        self.data = bytes(i % 251 for i in range(size))
        self.calls: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def fetch(self, offset: int, length: int) -> memoryview:
        with self.lock:
            self.calls.append((offset, length))
        return memoryview(self.data)[offset:offset + length]


def test_the_read_ahead_serves_each_value_from_its_block_and_drops_consumed_blocks() -> None:
    source = _Object(64 * KiB)
    extents = [(i * 4 * KiB, 4 * KiB - 16) for i in range(16)]  # 16 values with 16-byte gaps
    ahead = BlockReadAhead(source.fetch, extents, window_bytes=32 * KiB, max_in_flight=2,
                           range_bytes=16 * KiB - 16, gap_bytes=64)  # four values fill a block
    try:
        assert ahead.requests_planned == 4
        for offset, nbytes in extents:
            out = bytearray(nbytes)
            assert ahead.read_into(offset, nbytes, memoryview(out))
            assert bytes(out) == source.data[offset:offset + nbytes]
            ahead.done(offset)
    finally:
        ahead.stop()
    assert sorted(source.calls) == [(0, 16 * KiB - 16), (16 * KiB, 16 * KiB - 16), (32 * KiB, 16 * KiB - 16),
                                    (48 * KiB, 16 * KiB - 16)]  # every block once, nothing else


def test_the_read_ahead_holds_at_most_its_window_ahead_of_the_reader() -> None:
    source = _Object(64 * KiB)
    extents = [(i * 8 * KiB, 8 * KiB) for i in range(8)]
    ahead = BlockReadAhead(source.fetch, extents, window_bytes=16 * KiB, max_in_flight=8,
                           range_bytes=8 * KiB, gap_bytes=0)
    try:
        for _ in range(100):  # let the pool start what the window allows
            if len(source.calls) >= 2:
                break
            time.sleep(0.01)
        assert sorted(source.calls) == [(0, 8 * KiB), (8 * KiB, 8 * KiB)]  # 16 KiB window: two blocks
        out = bytearray(8 * KiB)
        assert ahead.read_into(0, 8 * KiB, memoryview(out))  # consumes block 0: one more may start
        for _ in range(100):
            if len(source.calls) >= 3:
                break
            time.sleep(0.01)
        assert sorted(source.calls) == [(0, 8 * KiB), (8 * KiB, 8 * KiB), (16 * KiB, 8 * KiB)]
        # the reader jumps ahead: the block it needs starts at once, past the window
        assert ahead.read_into(56 * KiB, 8 * KiB, memoryview(out))
        assert bytes(out) == source.data[56 * KiB:]
        assert (56 * KiB, 8 * KiB) in source.calls
    finally:
        ahead.stop()
    assert len(source.calls) == 4  # nothing more once stopped


def test_a_range_the_plan_does_not_cover_or_a_failed_get_is_left_to_the_caller() -> None:
    source = _Object(4 * KiB)

    def failing(offset: int, length: int) -> memoryview:
        if offset == 2 * KiB:
            raise OSError("connection reset")
        return source.fetch(offset, length)

    ahead = BlockReadAhead(failing, [(0, KiB), (2 * KiB, KiB)], window_bytes=MiB, max_in_flight=2,
                           range_bytes=MiB, gap_bytes=0)
    try:
        out = memoryview(bytearray(KiB))
        assert not ahead.read_into(KiB, KiB, out)  # between the planned extents: not fetched
        assert not ahead.read_into(2 * KiB, KiB, out)  # its GET failed: the caller reads (and reports) itself
        assert ahead.read_into(512, 256, out[:256])  # part of a planned block is served from it
        assert bytes(out[:256]) == source.data[512:768]
    finally:
        ahead.stop()
    assert not ahead.read_into(0, KiB, out)  # stopped: every read is the caller's again
