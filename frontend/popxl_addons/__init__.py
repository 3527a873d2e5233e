"""popxl_addons: `import popxl_addons as addons` — Modules, named tensors, variable factories,
graphs with named args, transforms and ops on top of `popxl` (upstream: graphcore/popxl-addons).
"""

from typing import Any

from popxl_addons import (  # noqa: F401  (the submodules, as upstream exposes them)
    array_munging,
    debugging,
    dot_tree,
    graph,
    graph_cache,
    module,
    named_replica_grouping,
    named_tensors,
    ops,
    optimizers,  # noqa: F401  (addons.optimizers.adam.AdamOptimizerStep)
    performance_utils,
    remote,
    rts,
    task_session,
    testing_utils,
    transforms,
    utils,
    variable_factory,
)
from popxl_addons.array_munging import *  # noqa: F401,F403  (upstream re-exports them)
from popxl_addons.debugging import print_tensor, print_text
from popxl_addons.dot_tree import DotTree, to_mapping
from popxl_addons.graph import BoundGraph, GraphWithNamedArgs
from popxl_addons.graph_cache import GraphCache, function
from popxl_addons.module import Module
from popxl_addons.named_tensors import NamedTensorData, NamedTensors, print_named_tensors
from popxl_addons.ops import cross_entropy, cross_entropy_with_grad, host_load, host_store
from popxl_addons.performance_utils import (
    evaluate_FLOPs,
    evaluate_ir_FLOPs,
    format_flops_scientific,
    print_FLOPs,
    total_FLOPs,
)
from popxl_addons.remote import (
    create_remote_buffer,
    load_remote_graph,
    named_buffers,
    named_variable_buffers,
    store_remote_graph,
)
from popxl_addons.route_tensor import is_subgraph, route_tensor_into_graph
from popxl_addons.seed_variable import seed_variable
from popxl_addons.streams import InputStreams, OutputStreams
from popxl_addons.task_session import TaskSession, write_variables_pb
from popxl_addons.tuning import (
    disable_fc_pass,
    enable_fc_pass,
    set_available_memory_proportion_by_ipu,
    set_graph_available_memory_proportion_by_ipu,
)
from popxl_addons.utils import OrderedDict, WeightsDict, timer
from popxl_addons.variable_factory import (
    NamedReplicaGrouping,
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

GIT_COMMIT: str | None  # bound on first use by __getattr__


def _git_commit() -> str | None:
    """The short commit of the git checkout this package is in (None when it is not in one,
    e.g. installed from a wheel)."""
    import os
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=7", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def __getattr__(name: str) -> Any:
    # GIT_COMMIT (upstream: the short commit of the popxl-addons checkout) is looked up on
    # first use; transforms are re-exported at top level (addons.autodiff, ...)
    if name == "GIT_COMMIT":
        commit = _git_commit()
        globals()["GIT_COMMIT"] = commit
        return commit
    try:
        return getattr(transforms, name)
    except AttributeError:
        raise AttributeError(f"module 'popxl_addons' has no attribute {name!r}") from None


__all__ = [
    "DotTree",
    "to_mapping",
    "NamedTensors",
    "NamedTensorData",
    "print_named_tensors",
    "VariableFactory",
    "NamedVariableFactories",
    "NamedReplicaGrouping",
    "add_variable_input",
    "add_replica_sharded_variable_input",
    "GraphWithNamedArgs",
    "BoundGraph",
    "GraphCache",
    "function",
    "Module",
    "InputStreams",
    "OutputStreams",
    "load_remote_graph",
    "store_remote_graph",
    "named_buffers",
    "named_variable_buffers",
    "create_remote_buffer",
    "ops",
    "transforms",
    "cross_entropy",
    "cross_entropy_with_grad",
    "host_load",
    "host_store",
    "seed_variable",
    "TaskSession",
    "write_variables_pb",
    "WeightsDict",
    "OrderedDict",
    "timer",
    "testing_utils",
    "route_tensor_into_graph",
    "is_subgraph",
    "print_tensor",
    "print_text",
    "set_available_memory_proportion_by_ipu",
    "set_graph_available_memory_proportion_by_ipu",
    "enable_fc_pass",
    "disable_fc_pass",
    "array_munging",
    "performance_utils",
    "debugging",
    "total_FLOPs",
    "evaluate_ir_FLOPs",
    "evaluate_FLOPs",
    "print_FLOPs",
    "format_flops_scientific",
]
__all__ += array_munging.__all__
