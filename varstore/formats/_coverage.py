"""Partitioned values cover their array exactly once: chunk and slice boxes checked for bounds, overlap and gaps.

One rule for DCP chunks and TF partitioned-variable slices (and any format that stores a
tensor as boxes): every box lies inside the shape, no two boxes share an element, and their
volumes add up to the array's. A value that fails is refused, never assembled into memory
that a gap would leave uninitialized. Reads no file; knows no format.
"""

from __future__ import annotations

from collections.abc import Sequence

from varstore.errors import CoverageError

__all__ = ["check_coverage"]


def _volume(sizes: Sequence[int]) -> int:
    volume = 1
    for size in sizes:
        volume *= int(size)
    return volume


def check_coverage(shape: Sequence[int], boxes: Sequence[tuple[Sequence[int], Sequence[int]]], what: str) -> None:
    """Checks that `boxes` ((offsets, sizes) per box) tile `shape` exactly once.

    Args:
      shape: the array's shape.
      boxes: one (offsets, sizes) pair per stored chunk or slice, each of len(shape).
      what: names the file and the variable for the message ("'ckpt/.metadata': tensor 'w'").

    Raises:
      CoverageError: a box outside the shape, two boxes that overlap (naming both), or boxes that
        leave elements uncovered (their volumes add up to less than the array's).
    """
    shape = tuple(int(d) for d in shape)
    spans = []
    for offsets, sizes in boxes:
        offsets, sizes = tuple(int(o) for o in offsets), tuple(int(s) for s in sizes)
        if len(offsets) != len(shape) or len(sizes) != len(shape) or any(
                o < 0 or s < 0 or o + s > d for o, s, d in zip(offsets, sizes, shape)):
            raise CoverageError(f"{what}: the box at {list(offsets)} of size {list(sizes)} lies outside "
                                f"shape {list(shape)}")
        if _volume(sizes):
            spans.append((offsets, sizes))
    # Overlap: sweep along the axis with the most distinct offsets (column shards split axis 1, so a
    # sweep along axis 0 would keep every box active and compare all pairs), comparing each box with
    # those that start before it and still reach its start on that axis.
    axis = max(range(len(shape)), key=lambda a: len({o[a] for o, _ in spans}), default=0)
    spans.sort(key=lambda box: (box[0][axis], box[0]) if shape else box[0])
    active: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for offsets, sizes in spans:
        active = [b for b in active if not shape or b[0][axis] + b[1][axis] > offsets[axis]]
        for other_offsets, other_sizes in active:
            if all(o1 < o2 + s2 and o2 < o1 + s1
                   for o1, s1, o2, s2 in zip(offsets, sizes, other_offsets, other_sizes)):
                raise CoverageError(
                    f"{what}: the boxes at {list(other_offsets)} (size {list(other_sizes)}) and {list(offsets)} "
                    f"(size {list(sizes)}) overlap; each element must be stored once")
        active.append((offsets, sizes))
    covered, total = sum(_volume(s) for _, s in spans), _volume(shape)
    if covered != total:
        raise CoverageError(f"{what}: its boxes cover {covered} of its {total} elements (shape {list(shape)}); "
                            f"the missing ones are stored nowhere")
