"""Multi-process variable stores over MPI (or any Communicator): ownership checks, consistency checks, save/restore plans.

The only package that imports mpi4py (lazily, in communicator.py). Phase 1
of issue 12: the collective save/restore that executes these plans lands
with vs.save(..., comm=) / vs.restore(..., comm=) in the checkpoint engine.
"""

from __future__ import annotations

from varstore.distributed.checks import check_replicas, check_structure, describe_structure, replica_checksums
from varstore.distributed.communicator import (
    Communicator,
    Message,
    MPICommunicator,
    ReduceOp,
    SingleProcess,
    as_communicator,
)
from varstore.distributed.plan import (
    ArraySpec,
    ReadItem,
    RestorePlan,
    SavePlan,
    VariableLayout,
    WriteItem,
    byte_runs,
    layouts_of,
    plan_restore,
    plan_save,
)

__all__ = [
    "Communicator", "Message", "ReduceOp", "MPICommunicator", "SingleProcess", "as_communicator",
    "check_structure", "check_replicas", "describe_structure", "replica_checksums",
    "VariableLayout", "layouts_of", "ArraySpec", "WriteItem", "SavePlan", "plan_save",
    "ReadItem", "RestorePlan", "plan_restore", "byte_runs",
]
