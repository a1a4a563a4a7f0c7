"""Every exception varstore raises, rooted at VarstoreError.

Messages say what went wrong, where (variable name and file), expected vs.
found, and what to do. Classes also derive from the matching builtin
(ValueError, TypeError, KeyError, OSError) so callers written against
TensorFlow or NumPy conventions keep working. Nothing else lives here.
"""

from __future__ import annotations

__all__ = [
    "VarstoreError",
    "CheckpointConflictError",
    "ShapeMismatchError",
    "DtypeMismatchError",
    "ValueOutOfRangeError",
    "VariableExistsError",
    "VariableNotFoundError",
    "InvalidNameError",
    "ReshapeError",
    "InitializationCycleError",
    "InitializerError",
    "VariableArgumentError",
    "DeviceError",
    "MissingDependencyError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "NotACheckpointError",
    "CorruptCheckpointError",
    "ChecksumError",
    "UnsupportedDtypeError",
    "UnsupportedFormatError",
    "UnsafeFormatError",
    "UnsafeCheckpointError",
    "PathOutsideCheckpointError",
    "ValueTooLargeError",
    "CoverageError",
    "SpecialFileError",
    "CheckpointPermissionError",
    "CheckpointReplacedError",
    "CheckpointWriteError",
    "DiskFullError",
    "RestoreError",
    "RestoreTargetError",
    "UnknownVariableError",
    "ConversionError",
    "CheckpointLockedError",
    "CheckpointExistsError",
    "InvalidMetadataError",
    "ScopeError",
    "PartitionError",
    "NotOwnedError",
    "DistributedMismatchError",
    "ReplicaDivergenceError",
    "CommunicatorError",
    "CollectiveError",
    "ObjectStoreError",
    "ObjectNotFoundError",
    "ObjectChangedError",
    "ConditionalWriteError",
    "InvalidURLError",
]


class VarstoreError(Exception):
    """Root of every error varstore raises."""


# ----------------------------------------------------------------- core
class ShapeMismatchError(VarstoreError, ValueError):
    """A value's shape does not match the variable's shape (assign, reuse, restore)."""


class DtypeMismatchError(VarstoreError, TypeError):
    """A value's dtype cannot be cast safely ("same_kind") to the variable's dtype."""


class ValueOutOfRangeError(DtypeMismatchError, ValueError):
    """A value does not fit the dtype it becomes: a Python number (1e40 as float32, 2**40 as int32), or an array restored or assigned into a narrower dtype (int64 2**40 into int32, float32 1e5 into float16, "defgh" into U3); refused as TF refuses it, never stored as inf, wrapped or cut."""


class VariableExistsError(VarstoreError, ValueError):
    """get_variable without reuse named a variable that already exists (as TF1)."""


class VariableNotFoundError(VarstoreError, ValueError):
    """get_variable with reuse=True named a variable that does not exist (as TF1)."""


class InvalidNameError(VarstoreError, ValueError):
    """A variable or scope name is empty, has '..' or empty parts, control characters, or a leading/trailing '/'."""


class ReshapeError(VarstoreError, ValueError):
    """A variable's shape is fixed at creation; it cannot be reshaped in place."""


class InitializationCycleError(VarstoreError, RuntimeError):
    """Initializers that read each other's initialized_value() form a cycle."""


class InitializerError(VarstoreError, ValueError):
    """An initializer was misused (bad shape for identity/orthogonal, bad argument)."""


class VariableArgumentError(VarstoreError, ValueError):
    """An argument ported TF code passes to Variable / get_variable has a value TF refuses too: an unknown synchronization or aggregation, a constraint, regularizer or custom_getter that is not callable."""


class DeviceError(VarstoreError, RuntimeError):
    """A device string is malformed, or a device is unavailable with soft placement off."""


class MissingDependencyError(VarstoreError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


# ----------------------------------------------------------- checkpoints
class CheckpointError(VarstoreError, OSError):
    """Something is wrong with a checkpoint file or directory."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint exists at the given path."""


class NotACheckpointError(CheckpointError):
    """The file exists but is not in any format varstore reads (wrong magic, empty, foreign)."""


class CorruptCheckpointError(CheckpointError):
    """The checkpoint is damaged: truncated, inconsistent metadata, or unreadable bytes."""


class ChecksumError(CorruptCheckpointError):
    """A variable's bytes do not match the checksum recorded when it was written."""


class UnsupportedDtypeError(VarstoreError, TypeError):
    """A dtype varstore cannot store or read (object arrays, unknown dtype codes)."""


class UnsupportedFormatError(CheckpointError):
    """A recognised format that varstore does not read or write (or a missing feature of one)."""


class UnsafeFormatError(UnsupportedFormatError):
    """A pickle whose code would run: a global outside the torch.save allow-list (malicious, or a whole nn.Module), a non-torch pickle, npz object arrays; refused, nothing executed."""


class UnsafeCheckpointError(UnsafeFormatError):
    """A file's content is hostile: a pickled container that contains itself or shares children, more
    names or memo entries than the file can hold, a zip member compressed with a method torch, npz and
    Keras never write, byte ranges that alias one another; refused before anything is allocated."""


class PathOutsideCheckpointError(UnsafeCheckpointError):
    """A path read from file content (an Orbax leaf key, a TF `checkpoint` state file, a shard name of an
    index, a DCP file name, a manager's pointer) resolves outside the checkpoint or manager directory;
    names the file and the field. Nothing outside is read, written or deleted."""


class ValueTooLargeError(CheckpointError, MemoryError):
    """A variable's declared size exceeds the read limit (`max_bytes`, default from available memory,
    `VARSTORE_MAX_BYTES`) or what the file can back; names the variable, the declared size and the limit."""


class CoverageError(CorruptCheckpointError):
    """The chunks, slices or shards of a partitioned value do not cover its array exactly once (a gap or
    an overlap); refused, never filled from uninitialized memory."""


class SpecialFileError(CheckpointError):
    """A FIFO, socket or device (or a symlink loop) stands where a checkpoint file or chunk should be;
    refused after a stat, without opening it for reading."""


class CheckpointPermissionError(CheckpointError, PermissionError):
    """The operating system refused to read or write a checkpoint path (permission denied); names the path."""


class CheckpointReplacedError(CheckpointError):
    """The checkpoint was replaced by another save while it was being read; open it again."""


class CheckpointWriteError(CheckpointError):
    """A write failed or was interrupted (an I/O error of the file system); the old destination is left
    whole and no partial output stays behind; names the destination. `.errno` is the OS error number."""


class DiskFullError(CheckpointWriteError):
    """A write ran out of space (ENOSPC, EDQUOT: the file system or quota is full; EFBIG: the file size
    limit); the old destination is left whole and the temporaries are removed; names the destination."""


class RestoreError(VarstoreError, KeyError):
    """A restore (strict by default) found target variables without a checkpoint value, or
    RestoreResult.assert_consumed() found anything unmatched; lists the names with did-you-mean hints.

    Attributes:
      missing: target names the checkpoint has no value for.
      unexpected: checkpoint names no target took (reported; they fail only assert_consumed).
    """

    def __init__(self, message: str, missing: list[str] | None = None,
                 unexpected: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.missing = list(missing or [])
        self.unexpected = list(unexpected or [])

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class RestoreTargetError(VarstoreError, TypeError):
    """A restore target is not a Variable or a writeable NumPy array (a torch tensor: use varstore.torch)."""


class CheckpointLockedError(CheckpointError):
    """Another process holds the CheckpointManager directory's lock."""


class CheckpointConflictError(CheckpointError):
    """Another writer committed to the same incremental checkpoint repository (Icechunk) first; this
    save's snapshot was not committed (nothing of it is visible): save again."""


class CheckpointExistsError(VarstoreError, FileExistsError):
    """A save, convert or CheckpointManager save would replace something that is not a varstore
    checkpoint of the same format (a plain file, a directory with other content, another tool's file,
    a symlink); the message names the path and what is there. Pass overwrite=True (CLI: --force)."""

    def __init__(self, message: str, path: str | None = None, found: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.found = found

    def __str__(self) -> str:
        return self.message


class UnknownVariableError(VarstoreError, KeyError):
    """A name that is not in the checkpoint (CheckpointReader.info / read)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class InvalidMetadataError(VarstoreError, TypeError):
    """Checkpoint metadata (user metadata, step) is not JSON-compatible."""


class ScopeError(VarstoreError, ValueError):
    """variable_scope was misused: no name, reuse=True with default_name, or another store's scope object."""


class ConversionError(VarstoreError, ValueError):
    """convert() or a foreign-format writer got options it cannot honour: a malformed rename rule,
    a rename that makes two names equal, a non-float --dtype, a duplicate name."""


# ---------------------------------------------------------- distributed
class PartitionError(VarstoreError, ValueError):
    """A partitioner or partitioned get_variable was misused: bad partition list, more than one sliced
    axis, more parts than rows, or reuse with another partitioning (as tf.compat.v1.get_variable)."""


class NotOwnedError(VarstoreError, RuntimeError):
    """A variable owned by another rank was read or assigned on this rank (it holds no value here)."""


class DistributedMismatchError(VarstoreError, RuntimeError):
    """The ranks of a communicator disagree about the store's structure (names, shapes, dtypes,
    placement, partitioning); raised identically on every rank, naming the first difference."""


class ReplicaDivergenceError(VarstoreError, RuntimeError):
    """Replicated variables hold different values on different ranks (checksums differ); names them."""


class CommunicatorError(VarstoreError, TypeError):
    """Something that is neither an mpi4py communicator nor a varstore.distributed.Communicator was
    passed as `comm`, or a collective got a message it cannot send (not JSON-compatible)."""


class CollectiveError(VarstoreError, RuntimeError):
    """A collective operation failed in the transport: a peer rank died or the process group's timeout
    passed; the save in progress is not committed (the previous checkpoint stays the latest)."""


# ---------------------------------------------------------- object storage
class ObjectStoreError(CheckpointError):
    """A request to an object store (s3://, gs://, az://) failed after its retries; names the URL.

    Messages never contain credentials: secret keys, session tokens and signatures are redacted.
    """


class ObjectNotFoundError(ObjectStoreError, FileNotFoundError):
    """The object store has no object at the URL (GET/HEAD answered 404)."""


class ObjectChangedError(ObjectStoreError):
    """An object changed while it was being read: a ranged GET carrying the ETag the object had when it
    was opened (If-Match) was refused, because another save replaced the object since. Open it again."""


class ConditionalWriteError(ObjectStoreError):
    """A conditional write (If-None-Match: * or If-Match: etag) lost a race: another writer
    created or changed the object first. Re-read the object and decide again."""


class InvalidURLError(ObjectStoreError, ValueError):
    """An object-store URL is malformed (no bucket, unknown scheme), storage_options has an unknown key,
    or a client setting is out of range (part_size below 5 MiB, max_in_flight below 1)."""
