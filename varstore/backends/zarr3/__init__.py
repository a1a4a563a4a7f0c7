"""Zarr v3 backend package: the only place that imports zarr (store.py; walker.py for importers)."""

from __future__ import annotations

from varstore.backends.zarr3.store import BACKEND, Zarr3Backend, Zarr3Reader, Zarr3Writer, chunk_file, chunk_path

__all__ = ["BACKEND", "Zarr3Backend", "Zarr3Reader", "Zarr3Writer", "chunk_file", "chunk_path"]
