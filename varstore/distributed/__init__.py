"""Multi-process variable stores over MPI (or any Communicator): ownership checks, consistency checks, save/restore plans.

The only package that imports mpi4py (lazily, in communicator.py). The
collective save (save.py) and restore (restore.py) execute the plans
(plan.py); api.py gives them their public names: vs.save(..., comm=),
vs.restore(..., comm=), vs.CheckpointManager(..., comm=).
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
from varstore.distributed.restore import restore_collective
from varstore.distributed.save import save_collective
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
    "ReadItem", "RestorePlan", "plan_restore", "byte_runs", "save_collective", "restore_collective",
]
