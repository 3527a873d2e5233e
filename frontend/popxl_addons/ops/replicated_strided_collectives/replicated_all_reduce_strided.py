"""`replicated_all_reduce_strided` and its identical-input variants (see the package
docstring), and `replicated_all_reduce_strided_graph`."""

from __future__ import annotations

import contextlib

import popxl
import popxl.ops as ops
from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.ops.replicated_all_reduce_TP import (
    replicated_all_reduce,
    replicated_all_reduce_identical_grad_inputs,
    replicated_all_reduce_identical_inputs,
)
from popxl_addons.ops.replicated_strided_collectives._common import checked, checked_op

__all__ = [
    "replicated_all_reduce_strided",
    "replicated_all_reduce_strided_graph",
    "replicated_all_reduce_strided_identical_grad_inputs",
    "replicated_all_reduce_strided_identical_inputs",
]


def replicated_all_reduce_strided(
    t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """The all-reduce (`add` or `mean`) of `t` over the group (default: all replicas); the
    gradient is the same all-reduce of the gradients."""
    what = "addons.ops.replicated_all_reduce_strided"
    group = checked(t, group, what)
    return replicated_all_reduce(t, checked_op(op, what), group)


def replicated_all_reduce_strided_identical_inputs(
    t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """`t` itself (its inputs are identical over the group); the gradient is the all-reduce
    (`add` or `mean`) of the gradients."""
    what = "addons.ops.replicated_all_reduce_strided_identical_inputs"
    group = checked(t, group, what)
    return replicated_all_reduce_identical_inputs(t, checked_op(op, what), group)


def replicated_all_reduce_strided_identical_grad_inputs(
    t: popxl.Tensor, op: str = "add", group: popxl.ReplicaGrouping | None = None
) -> popxl.Tensor:
    """The all-reduce (`add` or `mean`) of `t` over the group; the gradient is the incoming
    gradient (identical over the group)."""
    what = "addons.ops.replicated_all_reduce_strided_identical_grad_inputs"
    group = checked(t, group, what)
    return replicated_all_reduce_identical_grad_inputs(t, checked_op(op, what), group)


def replicated_all_reduce_strided_graph(
    tensors: NamedTensors,
    op: str = "add",
    group: popxl.ReplicaGrouping | None = None,
    use_io_tiles: bool = False,
) -> tuple[GraphWithNamedArgs, list[str]]:
    """A graph with a named input per tensor of `tensors` that outputs the strided
    all-reduce of each, and the names of its outputs in order:

    ```python
    graph, names = replicated_all_reduce_strided_graph(tensors)
    reduced = NamedTensors.pack(names, graph.bind(tensors).call())
    ```

    `use_io_tiles`: each input is copied to the IO tiles first.
    """
    if not isinstance(tensors, NamedTensors):
        what = "addons.ops.replicated_all_reduce_strided_graph"
        raise TypeError(f"{what}: tensors must be NamedTensors, got {type(tensors).__name__}")
    ir = popxl.gcg().ir
    graph = ir.create_empty_graph("replica_reduce")
    names: list[str] = []
    args: dict[str, popxl.Tensor] = {}
    tiles = popxl.io_tiles() if use_io_tiles else contextlib.nullcontext()
    with graph, popxl.in_sequence(False), tiles:
        for name, tensor in zip(*tensors.unpack()):
            sg_t = popxl.graph_input(tensor.shape, tensor.dtype, tensor.name, meta_shape=tensor.meta_shape or None)
            args[name] = sg_t
            names.append(name)
            if use_io_tiles:
                sg_t = ops.io_tile_copy(sg_t)
            popxl.graph_output(replicated_all_reduce_strided(sg_t, op, group))
    return GraphWithNamedArgs(graph, NamedTensors.from_dict(args)), names
