"""Plain arrays that no checkpoint tool wrote: NumPy .npz archives and plain HDF5 files and Zarr v2/v3 groups."""
