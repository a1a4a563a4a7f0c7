"""Collective save: every rank writes its byte runs of ONE checkpoint, rank 0 commits it.

Executes a plan_save plan (plan.py) through the checkpoint engine's pieces:
rank 0 creates the temporary container (atomic.atomic_path) with every
global array (HDF5: contiguous datasets at offsets it lays out; Zarr: one
array per variable with a chunk grid giving each chunk one writer) and
broadcasts where each array's bytes go; every rank positional-writes its
regions through the Storage seam, fsyncs what it wrote, and sends rank 0
the crc32c of each byte run; rank 0 combines them into each array's
checksum (crc.py), writes the manifest last (with a "distributed" section)
and renames the checkpoint into place. Every step's outcome is allgathered
(agree.py): all ranks raise the same error or all go on. Never imports
h5py/zarr; decides nothing about who writes what (plan.py does).
"""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path
from typing import Any, cast

import numpy as np

from varstore import dtypes
from varstore.backends import format_for_path, get_backend
from varstore.backends.zarr3.store import chunk_path
from varstore.checkpoint.publish import atomic
from varstore.checkpoint.format.checksum import crc32c_of, crc32c_raw
from varstore.checkpoint.format.manifest import (
    INDEX_HEADER_BYTES,
    MANIFEST_PATH,
    Record,
    assign_paths,
    encode_index_header,
    encode_manifest,
    format_checksum,
    storage_layout,
)
from varstore.checkpoint.write.overwrite import check_replaceable
from varstore.checkpoint.write.plan import array_attrs, header, root_attrs
from varstore.distributed.agree import agree, agree_all
from varstore.distributed.checks import check_replicas as check_replica_values
from varstore.distributed.checks import check_structure
from varstore.distributed.communicator import Communicator, as_communicator
from varstore.distributed.crc import crc32c_combine, crc32c_of_runs
from varstore.distributed.plan import SavePlan, WriteItem, byte_runs, layouts_of, plan_save
from varstore.errors import CollectiveError, VarstoreError
from varstore.storage import storage_for

__all__ = ["save_collective", "CHECKSUM_RULE"]

#: How the manifest's checksum of a multi-writer array was computed (recorded in it).
CHECKSUM_RULE = ("crc32c of the whole array's C-order bytes, combined on rank 0 from the crc32c of every "
                 "byte run each rank wrote (GF(2) shift); 'writes' lists each write's region and its crc32c")
def _host_identity() -> str:
    """This machine's kernel (host name and boot id): ranks that share it share one page cache."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        boot = f"pid {os.getpid()}"  # unknown: never taken for another process's host
    return f"{socket.gethostname()} {boot}"


_HOST = _host_identity()
#: Above this many byte runs in one write, rank 0 reads the array back for its checksum instead.
_MAX_RUNS = 4096


def _records(store: Any, plan: SavePlan) -> list[Record]:
    variables = {v.name: v for v in store.variables()}
    first: dict[str, Any] = {}
    partitioned: set[str] = set()
    for w in plan.writes:
        first.setdefault(w.array, variables[w.variable])
        if w.variable != w.array:
            partitioned.add(w.array)
    records = []
    for name, spec in plan.arrays.items():
        v = first[name]
        dtype = dtypes.as_dtype(spec.dtype)
        records.append(Record(name, spec.shape, spec.dtype, math.prod(spec.shape) * dtype.itemsize,
                              bool(v.trainable), tuple(v.collections),
                              None if name in partitioned else v.device))
    assign_paths(records, 0)
    return records


def _distributed_header(store: Any, plan: SavePlan) -> dict[str, Any]:
    arrays: dict[str, Any] = {}
    for v in store.variables():
        info = v.save_slice_info
        if info is not None:
            entry = arrays.setdefault(info.full_name, {"parts": [], "writes": []})
            entry["parts"].append({"name": v.name, "offset": list(info.var_offset), "shape": list(v.shape)})
    return {"world_size": plan.world_size, "checksums": CHECKSUM_RULE, "arrays": arrays}


def _region_value(variables: dict[str, Any], w: WriteItem) -> np.ndarray:
    value = variables[w.variable].host_view()
    region = np.asarray(value)[w.variable_index] if w.shape else np.asarray(value)
    return np.ascontiguousarray(region)


def _write_mine(comm: Communicator, store: Any, plan: SavePlan, fmt: str, tmp: Path,
                extents: dict[str, int | None], chunks: dict[str, tuple[str, list[int] | None, int]],
                host: str) -> dict[str, Any]:
    """Writes this rank's regions; returns what rank 0 needs: run crcs, region crcs, small values, bytes.

    The HDF5 file's bytes are fsynced here only on a host other than rank 0's
    (`host`): fsync flushes every dirty page of a file, whoever wrote it, so on
    rank 0's host its one fsync at commit covers every rank's writes (4 ranks
    fsyncing one file at once each waited for all of it). Zarr chunk files are
    each rank's own: it fsyncs them.
    """
    variables = {v.name: v for v in store.variables()}
    storage = storage_for(tmp)[0]
    runs: dict[str, list[tuple[int, int, int]] | None] = {}
    regions: list[tuple[str, list[int], list[int], int]] = []
    inline: dict[str, str] = {}  # arrays without an extent (HDF5 scalars): rank 0 writes them
    written: list[Path] = []
    nbytes = 0
    writer = storage.writer(str(tmp), keep_open=True) if fmt == "h5" else None
    try:
        for w in plan.for_rank(comm.rank):
            spec = plan.arrays[w.array]
            itemsize = dtypes.as_dtype(spec.dtype).itemsize
            data = _region_value(variables, w)
            flat = data.reshape(-1).view(np.uint8)
            nbytes += flat.nbytes
            pieces = byte_runs(spec.shape, w.offset, w.shape, itemsize) if flat.nbytes else []
            # each run's crc32c once: the region's is their combination (crc.py), the array's is rank 0's
            run_crcs = [] if len(pieces) > _MAX_RUNS else _run_crcs(flat, pieces)
            region_crc = crc32c_of(flat) if len(pieces) > _MAX_RUNS else _combined(run_crcs)
            regions.append((w.array, list(w.offset), list(w.shape), region_crc))
            if not flat.nbytes:
                continue
            if fmt == "h5":
                base = extents.get(w.array)
                if base is None:
                    inline[w.array] = flat.tobytes().hex()
                    continue
                position = 0
                for start, length in pieces:
                    writer.write_at(base + start, flat[position:position + length])  # type: ignore[union-attr]
                    position += length
            else:
                array_path, grid, extra = chunks[w.array]
                written += _write_zarr_chunks(storage, tmp, array_path, spec.shape, grid, extra, w, data)
            crcs = runs.setdefault(w.array, [])
            if crcs is not None:
                if len(pieces) > _MAX_RUNS:
                    runs[w.array] = None
                else:
                    crcs += run_crcs
    finally:
        if writer is not None:
            writer.finish()
        storage.close()
    atomic.fault_point("after_data")
    if fmt == "h5" and host != _HOST:  # on rank 0's host, its fsync of the one file at commit makes these durable
        atomic.fsync_paths([tmp])
    elif written:
        atomic.fsync_paths(written + sorted({p.parent for p in written}))
    return {"runs": runs, "regions": regions, "inline": inline, "bytes": nbytes}


def _run_crcs(flat: np.ndarray, pieces: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(start, length, crc32c) of each byte run, the runs lying one after another in `flat`."""
    out = []
    position = 0
    for start, length in pieces:
        out.append((start, length, crc32c_of(flat[position:position + length])))
        position += length
    return out


def _combined(run_crcs: list[tuple[int, int, int]]) -> int:
    """crc32c of the runs' bytes one after another (the region's C-order bytes)."""
    crc = 0
    for _, length, run_crc in run_crcs:
        crc = crc32c_combine(crc, run_crc, length)
    return crc


def _write_zarr_chunks(storage: Any, tmp: Path, array: str, shape: tuple[int, ...], chunks: list[int] | None,
                       extra: int, w: WriteItem, data: np.ndarray) -> list[Path]:
    """Writes the chunk files of region `w` (`extra` trailing storage axes: strings stored as code units)."""
    directory = tmp / array
    grid = tuple(chunks) if chunks is not None else tuple(max(1, n) for n in shape)
    files = []
    starts = [range(o // c, (o + n) // c) for o, n, c in zip(w.offset, w.shape, grid)]
    for index in np.ndindex(*[len(r) for r in starts]) if shape else [()]:
        position = tuple(r[i] for r, i in zip(starts, index))
        local = tuple(slice(p * c - o, p * c - o + c) for p, c, o in zip(position, grid, w.offset))
        block = np.ascontiguousarray(data[local]) if shape else data
        file = chunk_path(directory, position + (0,) * extra)
        file.parent.mkdir(parents=True, exist_ok=True)
        writer = storage.writer(str(file))
        try:
            writer.write_at(0, block.reshape(-1).view(np.uint8))
        finally:
            writer.finish()
        files.append(file)
    return files


def save_collective(path: os.PathLike[str] | str, store: Any, comm: Any = None, *, step: int | None = None,
                    metadata: dict[str, Any] | None = None, format: str | None = None,
                    check_replicas: bool = False, overwrite: bool = False) -> Path:
    """Saves a store collectively: every rank of `comm` calls it and writes its part of ONE checkpoint.

    See varstore.save(..., comm=) for the arguments. Returns the final path on every rank.

    Raises:
      DistributedMismatchError, ReplicaDivergenceError: the ranks' stores differ (on every rank).
      Any error of a rank while saving, raised on every rank as "rank R of N: ..."; nothing is
      committed then and what was under `path` is left as it was.
    """
    communicator = as_communicator(comm)
    if not getattr(store, "structure_agreed", False):  # a ShardedState is the same everywhere by construction
        check_structure(store, communicator)
    if check_replicas:
        check_replica_values(store, communicator)
    final = Path(path)
    fmt = format_for_path(final, format)
    plan = plan_save(layouts_of(store), communicator.size)
    records = _records(store, plan)
    planned = header(fmt, step, metadata, final)
    planned["layout"] = "per-variable"
    planned["distributed"] = _distributed_header(store, plan)
    try:
        if communicator.rank == 0:
            _save_rank0(communicator, store, plan, fmt, final, records, planned, overwrite)
        else:
            _save_other(communicator, store, plan, fmt)
    except CollectiveError:
        raise  # the transport broke (a peer died): there is no one to wait for
    except VarstoreError:
        communicator.barrier()  # every rank raised at the same step; return once rank 0 has cleaned up
        raise
    communicator.barrier()
    return final


def _save_other(comm: Communicator, store: Any, plan: SavePlan, fmt: str) -> None:
    where = comm.bcast(None)
    if where is None:  # rank 0 failed to prepare; it broadcasts the error next
        agree(comm, lambda: None)
        return
    laid_out = cast("list[Any]", where)
    tmp, extents, chunks, host = Path(laid_out[0]), laid_out[1], laid_out[2], str(laid_out[3])
    agree_all(comm, lambda: _write_mine(comm, store, plan, fmt, tmp, extents, chunks, host))  # reports: rank 0
    agree(comm, lambda: None)  # rank 0's commit


def _save_rank0(comm: Communicator, store: Any, plan: SavePlan, fmt: str, final: Path,
                records: list[Record], planned: dict[str, Any], overwrite: bool) -> None:
    backend = get_backend(fmt)
    single_file = not backend.is_directory
    prepared: dict[str, Any] = {}
    failure: BaseException | None = None
    context = None
    try:
        check_replaceable(final, fmt, overwrite)
        context = atomic.atomic_path(final)
        tmp = context.__enter__()
        prepared["tmp"] = tmp
        writer = backend.open_writer(tmp, INDEX_HEADER_BYTES if single_file else 0)
        prepared["writer"] = writer
        if single_file:  # the data's blocks in one go before HDF5 lays out anything, as write_engine does
            storage = storage_for(tmp)[0]
            reserve = storage.writer(str(tmp))
            reserve.reserve(INDEX_HEADER_BYTES + sum(record.nbytes for record in records))
            reserve.finish()
            storage.close()
        extents: dict[str, int | None] = {}
        chunks: dict[str, tuple[str, list[int] | None, int]] = {}
        for record in records:
            spec = plan.arrays[record.name]
            storage_dtype, storage_shape = storage_layout(record.numpy_dtype, record.shape,
                                                          writer.native_bytes_strings)
            attrs = array_attrs(record)
            if fmt == "zarr":
                grid = tuple(spec.chunks) + tuple(storage_shape[len(spec.chunks):])
                zarr_writer: Any = writer  # the Zarr writer takes a chunk grid (backends/zarr3)
                extent = zarr_writer.create_array(str(record.path), storage_dtype, storage_shape, attrs, chunks=grid)
                whole = tuple(max(1, n) for n in spec.chunks) == tuple(max(1, n) for n in spec.shape)
                chunks[record.name] = (str(record.path), None if whole else list(spec.chunks),
                                      len(storage_shape) - len(spec.shape))
            else:
                extent = writer.create_array(str(record.path), storage_dtype, storage_shape, attrs)
                extents[record.name] = None if extent is None else extent.offset
                record.file_offset = None if extent is None else extent.offset
    except BaseException as err:  # noqa: BLE001 - reported to every rank below
        failure = err
    if failure is not None:
        comm.bcast(None)
        _abort(prepared, context, failure)
        agree(comm, lambda: _reraise(failure))
        return
    comm.bcast([str(prepared["tmp"]), cast(Any, extents), cast(Any, chunks), _HOST])
    try:
        reports = cast("list[dict[str, Any]]",
                       agree_all(comm, lambda: _write_mine(comm, store, plan, fmt, tmp, extents, chunks, _HOST)))
        agree(comm, lambda: _commit(prepared, context, plan, fmt, records, planned, reports, single_file))
    except BaseException as err:
        _abort(prepared, context, err)
        raise


def _reraise(err: BaseException) -> None:
    raise err


def _abort(prepared: dict[str, Any], context: Any, err: BaseException) -> None:
    writer = prepared.pop("writer", None)
    if writer is not None:
        abort = getattr(writer, "abort", None)
        if abort is not None:
            abort()
    if context is not None and "tmp" in prepared:
        prepared.pop("tmp")
        context.__exit__(type(err), err, err.__traceback__)


def _commit(prepared: dict[str, Any], context: Any, plan: SavePlan, fmt: str, records: list[Record],
            planned: dict[str, Any], reports: list[dict[str, Any]] | None, single_file: bool) -> None:
    assert reports is not None
    writer = prepared["writer"]
    tmp: Path = prepared["tmp"]
    atomic.fault_point("before_checksums")
    runs: dict[str, list[tuple[int, int, int]] | None] = {}
    writes: dict[str, list[dict[str, Any]]] = {}
    for rank, report in enumerate(reports):
        for array, crcs in report["runs"].items():
            if array in runs and runs[array] is None:
                continue
            runs[array] = None if crcs is None else (runs.get(array) or []) + [tuple(c) for c in crcs]
        for array, offset, shape, crc in report["regions"]:
            writes.setdefault(array, []).append({"rank": rank, "offset": offset, "shape": shape,
                                                 "crc32c": format_checksum(crc)})
        for array, text in report["inline"].items():
            data = bytes.fromhex(text)
            record = next(r for r in records if r.name == array)
            storage_dtype, storage_shape = storage_layout(record.numpy_dtype, record.shape,
                                                          writer.native_bytes_strings)
            writer.write_array(record.path, np.frombuffer(data, dtype=storage_dtype).reshape(storage_shape))
            runs[array] = [(0, len(data), crc32c_raw(data))]
    arrays = planned["distributed"]["arrays"]
    for record in records:
        if len(writes.get(record.name, [])) > 1 or record.name in arrays:
            arrays.setdefault(record.name, {"parts": [], "writes": []})["writes"] = writes[record.name]
        if record.nbytes == 0:
            record.checksum = 0
            continue
        found = runs.get(record.name)
        record.checksum = None if found is None else crc32c_of_runs(found, record.nbytes)
        if record.checksum is None and fmt == "h5" and record.file_offset is not None:
            record.checksum = _read_back_crc(tmp, record.file_offset, record.nbytes)
    planned["distributed"]["bytes_per_rank"] = [report["bytes"] for report in reports]
    manifest = encode_manifest(planned, records, 0, None)
    extent = writer.create_array(MANIFEST_PATH, np.dtype("u1"), (len(manifest),),
                                 {"description": "JSON index of every variable; see docs"})
    paths: list[Path] = []
    if extent is not None:
        storage = storage_for(extent.file)[0]
        out = storage.writer(str(extent.file), keep_open=single_file)
        out.write_at(extent.offset, manifest)
        out.finish()
        storage.close()
    root = root_attrs({k: v for k, v in planned.items() if k != "distributed"}, crc32c_raw(manifest))
    root["varstore_written_by_ranks"] = plan.world_size
    writer.set_root_attrs(root)
    paths += writer.close()
    prepared.pop("writer")
    if single_file and extent is not None:
        storage = storage_for(tmp)[0]
        out = storage.writer(str(tmp))
        out.write_at(0, encode_index_header(extent.offset, len(manifest), crc32c_raw(manifest)))
        out.finish()
        storage.close()
    if extent is not None and not single_file:
        paths.append(extent.file)
    atomic.fsync_paths(paths)
    prepared.pop("tmp")
    context.__exit__(None, None, None)  # renames into place (fault point "before_rename")


def _read_back_crc(tmp: Path, offset: int, nbytes: int) -> int:
    storage = storage_for(tmp)[0]
    crc = 0
    step = 64 << 20
    for start in range(0, nbytes, step):
        length = min(step, nbytes - start)
        crc = crc32c_of(bytes(storage.read_range(str(tmp), offset + start, length)), crc)
    storage.close()
    return crc
