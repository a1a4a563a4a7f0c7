"""The core's public names (variables, scopes, collections, initializers, devices), for `varstore/__init__.py`.

Only re-exports; defines nothing.
"""

from __future__ import annotations

from varstore import initializers
from varstore.store import initializers_v1
from varstore.store._assignment import assign, assign_add, assign_sub, scatter_update
from varstore.store._getter import RegularizationLoss
from varstore.store.collections import (
    GLOBAL_VARIABLES,
    LOCAL_VARIABLES,
    MODEL_VARIABLES,
    REGULARIZATION_LOSSES,
    TRAINABLE_VARIABLES,
)
from varstore.store.default_store import (
    add_to_collection,
    get_collection,
    get_default_store,
    get_local_variable,
    get_variable,
    get_variable_scope,
    global_variables,
    initialize,
    local_variables,
    model_variables,
    name_scope,
    report_uninitialized,
    reset_default_store,
    trainable_variables,
    variable_scope,
)
from varstore.store.devices import (
    get_log_device_placement,
    get_soft_device_placement,
    set_log_device_placement,
    set_soft_device_placement,
)
from varstore.initializers import get_random_seed, set_random_seed
from varstore.store.initializers_v1 import (
    constant_initializer,
    glorot_normal_initializer,
    glorot_uniform_initializer,
    ones_initializer,
    orthogonal_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    truncated_normal_initializer,
    variance_scaling_initializer,
    zeros_initializer,
)
from varstore.store.partitioners import fixed_size_partitioner, min_max_variable_partitioner, variable_axis_size_partitioner
from varstore.store.partitioning import PartitionedVariable, SaveSliceInfo
from varstore.store.placement import (
    GreedyLoadBalancingStrategy,
    PlacementRequest,
    byte_size_load_fn,
    device,
    replica_device_setter,
)
from varstore.store.scopes import VariableStore
from varstore.store.value_sources import ValueSource, check_restorable
from varstore.store._variable_scope import AUTO_REUSE, VariableScope
from varstore.store.variable_options import VariableAggregation, VariableSynchronization
from varstore.store.variables import Variable

__all__ = [
    "Variable",
    "ValueSource",
    "check_restorable",
    "VariableStore",
    "VariableScope",
    "AUTO_REUSE",
    "variable_scope",
    "get_variable_scope",
    "get_variable",
    "get_collection",
    "add_to_collection",
    "get_default_store",
    "reset_default_store",
    "global_variables",
    "trainable_variables",
    "local_variables",
    "initialize",
    "report_uninitialized",
    "GLOBAL_VARIABLES",
    "TRAINABLE_VARIABLES",
    "LOCAL_VARIABLES",
    "initializers",
    "set_random_seed",
    "get_random_seed",
    "device",
    "PlacementRequest",
    "replica_device_setter",
    "set_log_device_placement",
    "get_log_device_placement",
    "set_soft_device_placement",
    "get_soft_device_placement",
    "PartitionedVariable",
    "SaveSliceInfo",
    "fixed_size_partitioner",
    "min_max_variable_partitioner",
    "variable_axis_size_partitioner",
    "name_scope",
    "model_variables",
    "MODEL_VARIABLES",
    "initializers_v1",
    "zeros_initializer",
    "ones_initializer",
    "constant_initializer",
    "random_normal_initializer",
    "truncated_normal_initializer",
    "random_uniform_initializer",
    "variance_scaling_initializer",
    "glorot_uniform_initializer",
    "glorot_normal_initializer",
    "orthogonal_initializer",
    "GreedyLoadBalancingStrategy",
    "byte_size_load_fn",
    "VariableSynchronization",
    "VariableAggregation",
    "RegularizationLoss",
    "REGULARIZATION_LOSSES",
    "get_local_variable",
    "assign",
    "assign_add",
    "assign_sub",
    "scatter_update",
]
