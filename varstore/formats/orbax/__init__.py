"""Orbax checkpoints, one family: the reader (OCDBT through tensorstore, per-array Zarr) and the writer of the per-array Zarr layout."""
