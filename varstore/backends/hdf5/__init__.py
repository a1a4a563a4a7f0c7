"""HDF5 backend package: the only place that imports h5py (store.py; walker.py for importers)."""

from __future__ import annotations

from varstore.backends.hdf5.store import BACKEND, HDF5_MAGIC, Hdf5Backend, Hdf5Reader, Hdf5Writer

__all__ = ["BACKEND", "HDF5_MAGIC", "Hdf5Backend", "Hdf5Reader", "Hdf5Writer"]
