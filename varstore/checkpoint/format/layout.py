"""Which storage layout a save uses: every variable at its name, or small ones packed into one blob.

"per-variable" (the default up to PER_VARIABLE_MAX_VARIABLES = 4,096 variables):
every variable is its own HDF5 dataset / Zarr array at its full name, so
plain h5py, h5ls, HDFView and zarr see them all. "packed": variables smaller
than `pack_threshold_bytes` are stored back to back in `_varstore/packed`
(indexed by the manifest), which keeps saves and restores of tens of
thousands of tiny variables fast. The threshold comes from measurements in
docs/benchmarks/README.md. The chosen layout is recorded in the root
attribute `varstore_layout`; readers treat both alike. Decides only; writes nothing.
"""

from __future__ import annotations

from varstore.errors import InvalidMetadataError

__all__ = ["LAYOUTS", "PER_VARIABLE_MAX_VARIABLES", "choose_layout", "pack_threshold"]

#: The layouts a save accepts (None: choose by variable count).
LAYOUTS = ("per-variable", "packed")
#: Saves of at most this many variables default to the per-variable layout, larger ones to the packed
#: layout: one HDF5 dataset with its attributes costs ~0.6 ms to create, the packed copy ~7 us
#: (docs/benchmarks/README.md), and the issue asks per-variable for at least 4,096 variables.
PER_VARIABLE_MAX_VARIABLES = 4096


def choose_layout(layout: str | None, count: int) -> str:
    """"per-variable" or "packed" for a save of `count` variables; `layout` None picks by count.

    Raises:
      InvalidMetadataError: `layout` is not None, "per-variable" or "packed".
    """
    if layout is None:
        return "packed" if count > PER_VARIABLE_MAX_VARIABLES else "per-variable"
    if layout not in LAYOUTS:
        raise InvalidMetadataError(
            f"layout={layout!r} is not a checkpoint layout: use 'per-variable' (every variable at its "
            f"name), 'packed' (small variables in one blob) or None (packed above "
            f"{PER_VARIABLE_MAX_VARIABLES} variables)")
    return layout


def pack_threshold(layout: str, pack_threshold_bytes: int) -> int:
    """Variables below this many bytes are packed: 0 (none) for "per-variable"."""
    return max(0, int(pack_threshold_bytes)) if layout == "packed" else 0
