"""Ranged reads of one object: planned extents coalesced into few large GETs, fetched ahead of the reader.

A restore of N variables from one object (an HDF5 checkpoint on a bucket)
must not cost N requests: every request pays a round trip on a real store and
a whole-object copy on moto's test server. `coalesce` merges the planned
(offset, nbytes) extents that lie close together (gaps up to MERGE_GAP_BYTES
are read and dropped) into blocks of about RANGE_BYTES, and splits larger
extents into RANGE_BYTES pieces; `BlockReadAhead` fetches those blocks (at
most `max_in_flight` GETs, at most `window_bytes` fetched ahead of the reader)
and hands their bytes out with one copy each, straight from the client's
response buffer into the caller's target. `ObjectsReadAhead` does the same
for many whole objects (a Zarr checkpoint's chunks); `split_ranges` cuts one
large read into concurrent pieces. Knows nothing about checkpoints or the client library:
the fetch is passed in.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

__all__ = ["RANGE_BYTES", "MERGE_GAP_BYTES", "Block", "BlockReadAhead", "ObjectsReadAhead", "coalesce", "split_ranges"]

#: Bytes one coalesced GET aims at: a block closes once it holds this many (AWS's guidance for ranged
#: GETs is 8-16 MiB; fewer, larger requests also spare moto's whole-object copy per ranged GET).
RANGE_BYTES = 16 << 20
#: Extents at most this far apart share one GET (the gap is read and dropped), as object_store's
#: get_ranges coalesces (OBJECT_STORE_COALESCE_DEFAULT, 1 MiB).
MERGE_GAP_BYTES = 1 << 20

#: fetch(offset, length) -> exactly `length` bytes of the object (a read-only buffer is fine).
Fetch = Callable[[int, int], memoryview]


@dataclass
class Block:
    """One GET: bytes [start, start + length) and the planned extents (or extent pieces) inside it.

    Attributes:
      start: byte offset in the object.
      length: bytes fetched.
      members: (offset, nbytes) of the planned extents or pieces the block holds, ascending.
      owners: for each member, the offset of the planned extent it is (or is a piece of).
      priority: position in read order of the first extent the reader needs from it.
    """

    start: int
    length: int
    members: list[tuple[int, int]] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)
    priority: int = 0

    @property
    def end(self) -> int:
        return self.start + self.length


def split_ranges(offset: int, length: int, range_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
    """[(offset, nbytes)...] cutting [offset, offset + length) into pieces of at most `range_bytes`."""
    return [(start, min(range_bytes, offset + length - start)) for start in range(offset, offset + length, range_bytes)]


def coalesce(extents: Sequence[tuple[int, int]], range_bytes: int = RANGE_BYTES,
             gap_bytes: int = MERGE_GAP_BYTES) -> list[Block]:
    """Plans the GETs for `extents` ((offset, nbytes) in read order): blocks sorted by offset.

    Extents are merged in offset order while the gap to the next one is at most
    `gap_bytes` and the block holds fewer than `range_bytes` (so a block ends
    below 2 * range_bytes); an extent larger than `range_bytes` is split into
    pieces of its own. Empty and repeated extents are dropped; overlapping
    ones share the block of the first. Every block's `priority` is the
    earliest read-order position of the extents in it.
    """
    first_seen: dict[tuple[int, int], int] = {}
    for position, (offset, nbytes) in enumerate(extents):
        if nbytes > 0 and (offset, nbytes) not in first_seen:
            first_seen[(int(offset), int(nbytes))] = position
    blocks: list[Block] = []
    current: Block | None = None
    for (offset, nbytes), position in sorted(first_seen.items()):
        if nbytes > range_bytes:
            current = None
            for piece in split_ranges(offset, nbytes, range_bytes):
                blocks.append(Block(piece[0], piece[1], [piece], [offset], position))
            continue
        if (current is not None and current.length < range_bytes
                and current.end + gap_bytes >= offset and offset + nbytes - current.start <= 2 * range_bytes):
            current.length = max(current.length, offset + nbytes - current.start)
            current.members.append((offset, nbytes))
            current.owners.append(offset)
            current.priority = min(current.priority, position)
            continue
        current = Block(offset, nbytes, [(offset, nbytes)], [offset], position)
        blocks.append(current)
    return blocks


class BlockReadAhead:
    """Fetches the coalesced blocks of planned extents, in the order the reader needs them.

    At most `max_in_flight` GETs run at once and at most `window_bytes` of
    blocks are fetched or being fetched and not yet consumed (one block is
    always allowed); a block is dropped once every extent in it was read
    (`read_into` covering it, or `done(offset)`). A read of a block that was
    not started yet starts it at once, past the window (it is what the reader
    waits for). Implements the ReadAhead protocol (done, stop).
    """

    def __init__(self, fetch: Fetch, extents: Sequence[tuple[int, int]], window_bytes: int, max_in_flight: int, *,
                 range_bytes: int = RANGE_BYTES, gap_bytes: int = MERGE_GAP_BYTES,
                 on_stop: Callable[[BlockReadAhead], None] | None = None) -> None:
        self._fetch = fetch
        self.blocks = coalesce(extents, range_bytes, gap_bytes)
        self._starts = [block.start for block in self.blocks]
        self._members_of: dict[int, list[tuple[int, tuple[int, int]]]] = {}  # extent offset -> (block, member)
        for index, block in enumerate(self.blocks):
            for member, owner in zip(block.members, block.owners):
                self._members_of.setdefault(owner, []).append((index, member))
        self._remaining = [len(block.members) for block in self.blocks]
        self._consumed: set[tuple[int, tuple[int, int]]] = set()
        self._todo = sorted(range(len(self.blocks)), key=lambda i: (self.blocks[i].priority, self.blocks[i].start))
        self._next = 0  # position in _todo of the next block to consider starting
        self._futures: dict[int, Future[memoryview]] = {}
        self._finished: set[int] = set()  # fetched (or failed) and since dropped
        self._ahead = 0
        self._window = max(int(window_bytes), 1)
        self._lock = threading.Lock()
        self._stopped = False
        self._on_stop = on_stop
        self._pool = ThreadPoolExecutor(max_workers=max(1, max_in_flight), thread_name_prefix="varstore-ranged-get")
        self._fill()

    @property
    def requests_planned(self) -> int:
        """The number of GETs the plan needs (one per block)."""
        return len(self.blocks)

    # ------------------------------------------------------------------ the reader's side
    def read_into(self, offset: int, length: int, out: memoryview) -> bool:
        """Copies bytes [offset, offset + length) into `out` from the planned blocks; False when they do
        not cover the range, or a GET failed (the caller then reads the range itself and reports)."""
        index = bisect.bisect_right(self._starts, offset) - 1
        pieces: list[tuple[int, Block]] = []
        position = offset
        while position < offset + length:
            if index < 0 or index >= len(self.blocks) or not (
                    self.blocks[index].start <= position < self.blocks[index].end):
                return False
            pieces.append((index, self.blocks[index]))
            position = self.blocks[index].end
            index += 1
        futures = []
        with self._lock:
            if self._stopped or any(i in self._finished for i, _ in pieces):
                return False
            for i, _ in pieces:
                futures.append(self._futures.get(i) or self._start(i))
        try:
            views = [future.result() for future in futures]
        except Exception:  # noqa: BLE001 - the caller's own read raises the typed error
            return False
        end = offset + length
        for (_, block), data in zip(pieces, views):
            lo, hi = max(offset, block.start), min(end, block.end)
            out[lo - offset:hi - offset] = data[lo - block.start:hi - block.start]
        self._consume([(i, m) for i, block in pieces for m in block.members if offset <= m[0] and m[0] + m[1] <= end])
        return True

    def done(self, offset: int) -> None:
        """The planned extent at `offset` was read: its blocks may be dropped, the window moves on."""
        self._consume(self._members_of.get(offset, []))

    def stop(self) -> None:
        """Cancels what was not fetched, drops every block, waits for the GETs in flight."""
        with self._lock:
            self._stopped = True
            futures, self._futures = list(self._futures.values()), {}
        for future in futures:
            future.cancel()
        self._pool.shutdown(wait=True)
        if self._on_stop is not None:
            self._on_stop(self)
            self._on_stop = None

    def refill(self) -> None:
        """Starts what the window allows now (after reads consumed blocks)."""
        self._fill()

    # ------------------------------------------------------------------ internals
    def _consume(self, members: list[tuple[int, tuple[int, int]]]) -> None:
        with self._lock:
            for key in members:
                if key in self._consumed:
                    continue
                self._consumed.add(key)
                index = key[0]
                self._remaining[index] -= 1
                if self._remaining[index] == 0 and index in self._futures:
                    self._futures.pop(index)
                    self._finished.add(index)
                    self._ahead -= self.blocks[index].length
        self._fill()

    def _start(self, index: int) -> Future[memoryview]:
        """Submits block `index` (the lock is held)."""
        block = self.blocks[index]
        self._ahead += block.length
        future = self._pool.submit(self._fetch, block.start, block.length)
        self._futures[index] = future
        return future

    def _fill(self) -> None:
        with self._lock:
            while not self._stopped and self._next < len(self._todo):
                index = self._todo[self._next]
                if index in self._futures or index in self._finished or self._remaining[index] == 0:
                    self._next += 1
                    continue
                if self._ahead and self._ahead + self.blocks[index].length > self._window:
                    return
                self._start(index)
                self._next += 1


class ObjectsReadAhead:
    """Whole objects (a Zarr checkpoint's chunk objects) fetched ahead of the reader, like BlockReadAhead.

    The objects are laid end to end in one address space (never merged with
    each other; one larger than `range_bytes` is fetched in pieces) and handed
    to a BlockReadAhead, so the same bounds hold: at most `max_in_flight` GETs,
    at most `window_bytes` ahead, one copy into the target. An object is
    consumed when a read covers it whole; `done(offset)` only lets the window
    move on (a reader that skips an object through another path, a Zarr array
    read by zarr-python, must not make the next planned object count as read).
    """

    def __init__(self, fetch: Callable[[str, int, int], memoryview], objects: Sequence[tuple[str, int]],
                 window_bytes: int, max_in_flight: int, *, range_bytes: int = RANGE_BYTES,
                 on_stop: Callable[[ObjectsReadAhead], None] | None = None) -> None:
        self._fetch_object = fetch
        self._base: dict[str, int] = {}
        self._order: list[int] = []
        self._names: list[str] = []
        extents = []
        position = 0
        for name, nbytes in objects:
            if nbytes <= 0 or name in self._base:
                continue
            self._base[name] = position
            self._names.append(name)
            self._order.append(position)
            extents.append((position, int(nbytes)))
            position += int(nbytes) + 1  # a byte apart: objects never share a GET
        self._on_stop = on_stop
        self._inner = BlockReadAhead(self._fetch, extents, window_bytes, max_in_flight, range_bytes=range_bytes,
                                     gap_bytes=0)

    @property
    def names(self) -> list[str]:
        """The objects planned, in read order."""
        return list(self._names)

    @property
    def requests_planned(self) -> int:
        """The number of GETs the plan needs."""
        return self._inner.requests_planned

    def _fetch(self, start: int, length: int) -> memoryview:
        index = bisect.bisect_right(self._order, start) - 1
        return self._fetch_object(self._names[index], start - self._order[index], length)

    def read_into(self, name: str, offset: int, length: int, out: memoryview) -> bool:
        """Copies bytes [offset, offset + length) of object `name` into `out`; False when not planned."""
        base = self._base.get(name)
        return base is not None and self._inner.read_into(base + offset, length, out)

    def done(self, offset: int) -> None:
        """A value was read (objects were consumed by their reads): the window moves on."""
        self._inner.refill()

    def stop(self) -> None:
        """Cancels what was not fetched, drops every object, waits for the GETs in flight."""
        self._inner.stop()
        if self._on_stop is not None:
            self._on_stop(self)
            self._on_stop = None
