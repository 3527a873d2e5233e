"""Every exported name of `popxl.ops` (and `popxl.ops.var_updates`, `popxl.ops.collectives`,
`popxl_addons`, `popxl_addons.ops`, `popxl_addons.transforms`) either works or raises exactly
`NotImplementedError("<module>.<name> is not implemented in xl yet")` when called.

The names come from each module's public namespace (`__all__`, which must list every
public function and class the module defines), so a new export without a recipe here fails.
A recipe builds a small program with the name; "works" means the program compiles and runs
in a Session and each result has the shape and dtype its Tensor declares.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
import popxl_addons as addons
from popxl import ops
from popxl.ops import collectives, var_updates


class Env:
    """Inputs for the recipes, in the main graph of a fresh Ir."""

    def __init__(self) -> None:
        self.ir = popxl.Ir()
        with self.ir.main_graph:
            self.x = popxl.variable(np.linspace(0.1, 1.2, 6, dtype=np.float32).reshape(2, 3), name="x")
            self.y = popxl.variable(np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3), name="y")
            self.w = popxl.variable(np.ones((3, 4), np.float32), name="w")
            self.v = popxl.variable(np.zeros((2, 3), np.float32), name="v")
            self.m = popxl.variable(np.full((2, 3), 0.1, np.float32), name="m")
            self.labels = popxl.variable(np.array([0, 2], np.int32), name="labels")
            self.idx = popxl.variable(np.array([1, 0], np.int32), name="idx")
            self.step = popxl.variable(np.array(1.0, np.float32), name="step")
            self.seed = popxl.variable(np.array([1, 2], np.uint32), name="seed")
            self.cond = popxl.variable(np.array(True), name="cond")

    def graph(self, fn: Callable[..., Any], *args: Any) -> popxl.Graph:
        return self.ir.create_graph(fn, *args)


def _double(a: popxl.Tensor) -> popxl.Tensor:
    return a * 2


R = dict[str, Callable[[Env], Any]]


def _full3(value: float) -> popxl.Tensor:
    return popxl.constant(np.full(3, value, np.float32))


def _op(name: str, *args: str, **kwargs: Any) -> Callable[[Env], Any]:
    """`ops.<name>` applied to the environment's tensors named `args`."""
    return lambda e: getattr(ops, name)(*(getattr(e, a) for a in args), **kwargs)


OPS: R = {
    # elementwise unary
    **{
        n: _op(n, "x")
        for n in (
            "abs",
            "ceil",
            "floor",
            "cos",
            "sin",
            "tanh",
            "exp",
            "log",
            "log2",
            "sqrt",
            "sign",
            "negate",
            "neg",
            "relu",
            "gelu",
            "geluerf",
            "swish",
            "sigmoid",
            "isnan",
            "isinf",
            "isfinite",
            "identity",
            "rename",
            "detach",
            "detach_",
            "flatten",
            "flatten_",
            "transpose",
            "transpose_",
            "lamb_square",
            "print_tensor",
            "io_tile_copy",
        )
    },
    **{n: _op(n, "v") for n in ("exp_", "relu_", "gelu_", "geluerf_", "swish_")},
    "logical_not": lambda e: ops.logical_not(e.cond),
    "clip": lambda e: ops.clip(e.y, -0.5, 0.5),
    "clamp": lambda e: ops.clamp(e.y, -0.5, 0.5),
    "erf": lambda e: ops.erf(e.y),
    "bitwise_not": lambda e: ops.bitwise_not(e.idx),
    **{
        n: _op(n, "idx", "labels")
        for n in (
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
            "bitwise_xnor",
        )
    },
    "logical_xor": lambda e: ops.logical_xor(e.cond, e.cond),
    # binary
    **{
        n: _op(n, "x", "y")
        for n in (
            "add",
            "sub",
            "mul",
            "div",
            "fmod",
            "pow",
            "equal",
            "greater",
            "maximum",
        )
    },
    "add_": lambda e: ops.add_(e.v, e.x),
    "logical_and": lambda e: ops.logical_and(e.cond, e.cond),
    "logical_or": lambda e: ops.logical_or(e.cond, e.cond),
    "where": lambda e: ops.where(ops.greater(e.x, e.y), e.x, e.y),
    # reductions
    **{
        n: _op(n, "x", axis=1)
        for n in (
            "sum",
            "mean",
            "max",
            "min",
            "prod",
            "sumsquare",
            "logsum",
            "logsumexp",
            "l1",
            "l2",
        )
    },
    "argmax": lambda e: ops.argmax(e.x, 1),
    "argmin": lambda e: ops.argmin(e.x, 1),
    "cumsum": lambda e: ops.cumsum(e.x, 1),
    "topk": lambda e: ops.topk(e.x, 2, axis=1),
    "median": lambda e: ops.median(e.x, axis=1),
    # shape
    "reshape": lambda e: ops.reshape(e.x, (3, 2)),
    "reshape_": lambda e: ops.reshape_(e.x, (6,)),
    "squeeze": lambda e: ops.squeeze(ops.reshape(e.x, (1, 2, 3))),
    "concat": lambda e: ops.concat([e.x, e.y], axis=0),
    "concat_": lambda e: ops.concat_([e.x, e.y], axis=1),
    "split": lambda e: ops.split(e.x, 3, axis=1),
    "slice": lambda e: ops.slice(e.x, start=1, stop=3, axis=1),
    "slice_": lambda e: ops.slice_(e.x, start=0, stop=1, axis=0),
    "subsample": lambda e: ops.subsample(e.x, [1, 2]),
    "expand": lambda e: ops.expand(ops.reshape(e.x, (2, 1, 3)), (2, 4, 3)),
    # indexing
    "gather": lambda e: ops.gather(e.x, e.idx),
    "tied_gather": lambda e: ops.tied_gather(e.x, e.idx),
    "scatter": lambda e: ops.scatter(
        e.x, ops.reshape(e.idx, (1, 2)), ops.slice(e.y, start=0, stop=1, axis=0)[:, :2], axis=0
    ),
    "scatter_reduce": lambda e: ops.scatter_reduce(e.x, e.idx, "max", axis_size=3),
    "groupedgather": lambda e: ops.groupedgather(e.x, ops.reshape(e.idx, (2, 1)), group_size=2),
    "dynamic_slice": lambda e: ops.dynamic_slice(e.x, popxl.constant(np.array([1], np.uint32)), [1], [2]),
    "dynamic_update": lambda e: ops.dynamic_update(
        e.x, popxl.constant(np.array([1], np.uint32)), ops.slice(e.y, start=0, stop=2, axis=1), [1], [2]
    ),
    "dynamic_update_": lambda e: ops.dynamic_update_(
        e.v, popxl.constant(np.array([1], np.uint32)), ops.slice(e.y, start=0, stop=2, axis=1), [1], [2]
    ),
    "onehot": lambda e: ops.onehot(e.labels, 3, [0.0, 1.0]),
    # nn
    "matmul": lambda e: ops.matmul(e.x, e.w),
    "softmax": lambda e: ops.softmax(e.x, axis=1),
    "log_softmax": lambda e: ops.log_softmax(e.x, axis=1),
    "interpolate": lambda e: ops.interpolate(e.x, (1.0, 2.0), mode="linear"),
    "roi_align": lambda e: ops.roi_align(
        ops.reshape(e.x, (1, 1, 2, 3)),
        np.array([[0.0, 0.0, 2.0, 1.0]], np.float32),
        np.array([0], np.int32),
        (2, 2),
        1.0,
        2,
    ),
    "histogram": lambda e: ops.histogram(e.x, [0.5, 1.0], absolute_of_input=True),
    "layer_norm": lambda e: ops.layer_norm(
        e.x, popxl.constant(np.ones(3, np.float32)), popxl.constant(np.zeros(3, np.float32))
    ),
    "group_norm": lambda e: ops.group_norm(
        ops.reshape(e.x, (1, 2, 3)), popxl.constant(np.ones(2, np.float32)), popxl.constant(np.zeros(2, np.float32)), 2
    ),
    "conv": lambda e: ops.conv(ops.reshape(e.x, (1, 1, 2, 3)), ops.reshape(e.y, (2, 1, 1, 3)), padding=(0, 1, 0, 1)),
    "conv_transpose": lambda e: ops.conv_transpose(
        ops.reshape(e.x, (1, 2, 3)), ops.reshape(e.y, (2, 1, 3)), stride=(2,)
    ),
    "PadType": lambda e: ops.conv(
        ops.reshape(e.x, (1, 2, 3)), ops.reshape(e.y, (1, 2, 3)), pad_type=ops.PadType.same_upper
    ),
    "average_pool": lambda e: ops.average_pool(ops.reshape(e.x, (1, 1, 2, 3)), (2, 2), padding=(0, 1, 0, 1)),
    "max_pool": lambda e: ops.max_pool(ops.reshape(e.x, (1, 2, 3)), (2,), stride=(2,), ceil_mode=True),
    "batch_norm_inference": lambda e: ops.batch_norm_inference(e.x, _full3(1.0), _full3(0.0), _full3(0.5), _full3(2.0)),
    # loss
    "nll_loss": lambda e: ops.nll_loss(ops.softmax(e.x, 1), e.labels),
    "nll_loss_with_softmax_grad": lambda e: ops.nll_loss_with_softmax_grad(ops.softmax(e.x, 1), e.labels),
    # random
    "dropout": lambda e: ops.dropout(e.x, e.seed, 0.5),
    "random_uniform": lambda e: ops.random_uniform(e.seed, (2, 3)),
    "random_normal": lambda e: ops.random_normal(e.seed, (2, 3)),
    "split_random_seed": lambda e: ops.split_random_seed(e.seed),
    "shaped_dropout": lambda e: ops.shaped_dropout(e.x, e.seed, (2, 1), 0.5),
    # float8
    "pow2scale_cast_to_fp8": lambda e: ops.pow2scale_cast_to_fp8(e.x, 1, popxl.float8_143),
    "pow2scale_cast_from_fp8": lambda e: ops.pow2scale_cast_from_fp8(
        ops.pow2scale_cast_to_fp8(e.x, 0, popxl.float8_152), -1, popxl.float16
    ),
    "matmul_pow2scaled": lambda e: ops.matmul_pow2scaled(
        ops.pow2scale_cast_to_fp8(e.x, 0, popxl.float8_143),
        ops.pow2scale_cast_to_fp8(e.w, 0, popxl.float8_152),
        popxl.constant(np.int32(2)),
    ),
    "conv_pow2scaled": lambda e: ops.conv_pow2scaled(
        ops.pow2scale_cast_to_fp8(ops.reshape(e.x, (1, 1, 2, 3)), 0, popxl.float8_143),
        ops.pow2scale_cast_to_fp8(ops.reshape(e.y, (2, 1, 1, 3)), 0, popxl.float8_143),
        1,
        padding=(0, 1, 0, 1),
    ),
    "conv_transpose_pow2scaled": lambda e: ops.conv_transpose_pow2scaled(
        ops.pow2scale_cast_to_fp8(ops.reshape(e.x, (1, 2, 3)), 0, popxl.float8_152),
        ops.pow2scale_cast_to_fp8(ops.reshape(e.y, (2, 1, 3)), 0, popxl.float8_143),
        -1,
        stride=(2,),
    ),
    # misc
    "cast": lambda e: ops.cast(e.x, popxl.int32),
    "init": lambda e: ops.init((2, 2), popxl.float32),
    "increment_mod": lambda e: ops.increment_mod(e.step, 1.0, 3.0),
    "increment_mod_": lambda e: ops.increment_mod_(e.step, 1.0, 3.0),
    "scaled_add": lambda e: ops.scaled_add(e.x, e.y, 0.5, 2.0),
    "scaled_add_": lambda e: ops.scaled_add_(e.v, e.y, 0.5, 2.0),
    # control / IO
    "call": lambda e: ops.call(e.graph(_double, e.x), e.x),
    "call_with_info": lambda e: ops.call_with_info(e.graph(_double, e.x), e.x).outputs,
    "CallSiteInfo": lambda e: _callsite(e),
    "repeat": lambda e: ops.repeat(e.graph(_double, e.x), 3, e.x),
    "repeat_with_info": lambda e: ops.repeat_with_info(e.graph(_double, e.x), 3, e.x).outputs,
    "conditional": lambda e: ops.conditional(
        e.cond, e.graph(_double, e.x), e.graph(lambda a: a + 1, e.x), [e.x], [e.x]
    ),
    "conditional_with_info": lambda e: (
        ops.conditional_with_info(e.cond, e.graph(_double, e.x), e.graph(lambda a: a + 1, e.x), [e.x], [e.x]).outputs
    ),
    "ConditionalSiteInfo": lambda e: _conditional_site(e),
    "host_load": lambda e: ops.host_load(popxl.h2d_stream((2, 3), popxl.float32, "in")),
    "host_store": lambda e: ops.host_store(popxl.d2h_stream((2, 3), popxl.float32, "extra"), e.x),
    "ipu_copy": lambda e: ops.ipu_copy(e.x, 1, 0),
    "remote_load": lambda e: ops.remote_load(_remote(e), 1),
    "remote_load_": lambda e: ops.remote_load_(_remote(e), 0, e.y),
    "remote_store": lambda e: ops.remote_store(_remote(e), 1, e.x),
    "remote_code_load": lambda e: ops.remote_code_load(e.graph(_double, e.x), "executable"),
}


def _remote(e: Env) -> popxl.RemoteBuffer:
    """A buffer of two (2, 3) float32 entries, entry 1 holding a remote variable."""
    rb = popxl.remote_buffer((2, 3), popxl.float32, 2)
    popxl.remote_variable(np.ones((2, 3), np.float32), rb, 1)
    return rb


# Exported names that raise NotImplementedError unconditionally (upstream features xl has
# no equivalent of yet); each is called with no arguments.
STUBS: tuple[str, ...] = ()


def _callsite(e: Env) -> Any:
    info = ops.call_with_info(e.graph(_double, e.x), e.x)
    assert isinstance(info, ops.CallSiteInfo)
    assert info.graph_to_parent(info.called_graph.inputs[0]) is e.x
    return info.outputs


def _conditional_site(e: Env) -> Any:
    info = ops.conditional_with_info(e.cond, e.graph(_double, e.x), e.graph(lambda a: a + 1, e.x), [e.x], [e.x])
    assert isinstance(info, ops.ConditionalSiteInfo)
    assert info.condition is not None
    return info.outputs


VAR_UPDATES: R = {
    "accumulate_": lambda e: var_updates.accumulate_(e.v, e.x, 0.5),
    "accumulate_mean_": lambda e: var_updates.accumulate_mean_(e.v, e.x, e.step),
    "accumulate_moving_average_": lambda e: var_updates.accumulate_moving_average_(e.v, e.x, 0.9),
    "accumulate_moving_average_square_": lambda e: var_updates.accumulate_moving_average_square_(e.v, e.x, 0.9),
    "accumulate_square_": lambda e: var_updates.accumulate_square_(e.v, e.x),
    "accumulator_scale_": lambda e: var_updates.accumulator_scale_(e.v, 0.5),
    "accumulator_zero_": lambda e: var_updates.accumulator_zero_(e.v),
    "adam_updater": lambda e: var_updates.adam_updater(e.m, e.x, e.y, e.step, 0.01, 0.9, 0.999, 1e-6),
    "adamax_updater": lambda e: var_updates.adamax_updater(e.m, e.x, e.y, e.step, 0.01, 0.9, 1e-6),
    "lamb_updater": lambda e: var_updates.lamb_updater(e.m, e.x, e.y, e.step, 0.01, 0.9, 0.999, 1e-6),
    "adam_var_update": lambda e: var_updates.adam_var_update(
        e.v, e.x, ops.lamb_square(e.y), ops.lamb_square(e.x), 0.1, 10.0
    ),
    "copy_var_update_": lambda e: var_updates.copy_var_update_(e.v, e.x),
    "sparse_accumulate_": lambda e: var_updates.sparse_accumulate_(e.v, ops.gather(e.x, e.idx), e.idx),
}

COLLECTIVES: R = {
    "CommGroup": lambda e: _check(
        collectives.CommGroup(collectives.CommGroupType.Consecutive, 2).replicaGroupSize == 2
    ),
    "CommGroupType": lambda e: _check(collectives.CommGroupType.All != collectives.CommGroupType.Orthogonal),
    "CollectiveOps": lambda e: _check(collectives.CollectiveOps[:2] == ("add", "mean")),
    # replication factor 1: groups of one replica (tests/frontend/popxl/test_replica_*.py replicate)
    "replicated_all_reduce": lambda e: collectives.replicated_all_reduce(e.x, "max"),
    "replicated_all_reduce_": lambda e: collectives.replicated_all_reduce_(e.v, "add"),
    "replicated_all_gather": lambda e: collectives.replicated_all_gather(e.x, axis=1),
    "replicated_reduce_scatter": lambda e: collectives.replicated_reduce_scatter(e.x),
    "replica_sharded_slice": lambda e: collectives.replica_sharded_slice(e.x),
    "replicated_slice": lambda e: collectives.replicated_slice(e.x, 1),
    "all_reduce": lambda e: collectives.all_reduce([e.x, e.y], [0, 1], "max"),
    "all_reduce_identical_inputs": lambda e: collectives.all_reduce_identical_inputs([e.x, e.x], [0, 1]),
    "all_reduce_identical_grad_inputs": lambda e: collectives.all_reduce_identical_grad_inputs([e.x, e.y], [0, 1]),
}
COLLECTIVE_STUBS: tuple[str, ...] = ()


def _check(ok: bool) -> None:
    assert ok


class _Linear(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", lambda: np.ones((x.shape[-1], 2), np.float32), x.dtype)
        return x @ w


def _module_graph(e: Env) -> tuple[Any, Any]:
    """(GraphWithNamedArgs, NamedTensors of its variables) of `_Linear` on `e.x`."""
    facts, graph = _Linear().create_graph(e.x)
    variables = facts.init()
    return graph, variables


def _addons_autodiff(e: Env) -> Any:
    graph, variables = _module_graph(e)
    grad = addons.autodiff(graph)
    fwd_info = graph.bind(variables).call_with_info(e.x)
    dx = grad.call(popxl.constant(np.ones((2, 2), np.float32)), args=grad.grad_graph_info.inputs_dict(fwd_info))
    return dx


ADDONS: R = {
    "DotTree": lambda e: _check(addons.DotTree.from_dict({"a.b": 1}).a.b == 1),
    "to_mapping": lambda e: _check(
        addons.to_mapping(addons.NamedTensors(a=e.x), addons.NamedTensors(a=e.y)) == {e.x: e.y}
    ),
    "NamedTensors": lambda e: _check(addons.NamedTensors.from_dict({"p.q": e.x}).tensors == (e.x,)),
    "NamedTensorData": lambda e: _check(addons.NamedTensorData(a=np.ones(2)).len_flat() == 1),
    "print_named_tensors": lambda e: addons.print_named_tensors(addons.NamedTensors(a=e.x)).tensors,
    "VariableFactory": lambda e: addons.VariableFactory(
        lambda: np.ones(2, np.float32), popxl.float32, "f"
    ).create_tensor(),
    "NamedVariableFactories": lambda e: _module_graph(e)[1].tensors,
    "NamedReplicaGrouping": lambda e: _check(
        addons.NamedReplicaGrouping.from_dict({"a": e.ir.replica_grouping()}).a is not None
    ),
    "add_variable_input": lambda e: _graph_with_variable_input(e, addons.add_variable_input),
    "add_replica_sharded_variable_input": lambda e: _graph_with_variable_input(
        e, addons.add_replica_sharded_variable_input
    ),
    "GraphWithNamedArgs": lambda e: addons.GraphWithNamedArgs(e.graph(_double, e.x)).call(e.x),
    "BoundGraph": lambda e: addons.BoundGraph(e.graph(_double, e.x)).call(e.x),
    "GraphCache": lambda e: addons.GraphCache().create_graph(_double, e.x).inputs,
    "function": lambda e: addons.function(_double)(e.x),
    "Module": lambda e: _module_graph(e)[0].bind(_module_graph(e)[1]).call(e.x),
    "InputStreams": lambda e: ops.host_load(addons.InputStreams(a=((2, 3), popxl.float32)).a),
    "OutputStreams": lambda e: ops.host_store(addons.OutputStreams(b=((2, 3), popxl.float32)).b, e.x),
    "cross_entropy": lambda e: addons.cross_entropy(e.x, e.labels),
    "replicated_all_reduce_identical_inputs": lambda e: addons.ops.replicated_all_reduce_identical_inputs(e.x),
    "replicated_all_reduce_identical_grad_inputs": lambda e: addons.ops.replicated_all_reduce_identical_grad_inputs(
        e.x, "mean"
    ),
    "cross_entropy_with_grad": lambda e: addons.cross_entropy_with_grad(e.x, e.labels),
    "host_load": lambda e: addons.host_load(np.ones((2, 3)), popxl.float32, "in")[2],
    "host_store": lambda e: _check(isinstance(addons.host_store(e.x), popxl.DeviceToHostStream)),
    # transforms
    "autodiff": _addons_autodiff,
    "remap_grad_info": lambda e: _remap(e),
    "autodiff_with_accumulation": lambda e: _accumulation(e),
    "recompute_graph": lambda e: _recompute(e),
}

# Names whose behaviour is pinned by their own test module instead of a recipe here.
TESTED_ELSEWHERE = {
    "pipelined_execution": "tests/passes/test_pipeline*.py (the pipelining transform)",
    **{
        n: "tests/frontend/addons/test_addons_remote.py (phased load/store round trips)"
        for n in (
            "load_remote_graph",
            "store_remote_graph",
            "named_buffers",
            "named_variable_buffers",
            "create_remote_buffer",
        )
    },
    **{
        n: "tests/passes/test_batch_serialise.py (every io mode against NumPy and the plain program)"
        for n in ("batch_serialise", "batch_serialise_fwd_and_grad", "batch_serial_buffer", "RemoteHandle")
    },
    # popxl_addons names pinned by their own test modules
    **{
        n: "tests/frontend/addons/test_addons_utils.py (array_munging against upstream's documented examples)"
        for n in addons.array_munging.__all__
    },
    **{
        n: "tests/frontend/addons/test_addons_utils.py (FLOPs of a hand-counted MLP)"
        for n in ("total_FLOPs", "evaluate_ir_FLOPs", "evaluate_FLOPs", "print_FLOPs", "format_flops_scientific")
    },
    **{
        n: "tests/frontend/addons/test_addons_utils.py"
        for n in (
            "seed_variable",
            "route_tensor_into_graph",
            "is_subgraph",
            "print_tensor",
            "print_text",
            "set_available_memory_proportion_by_ipu",
            "set_graph_available_memory_proportion_by_ipu",
            "enable_fc_pass",
            "disable_fc_pass",
        )
    },
    **{
        n: "tests/frontend/addons/test_addons_task_session.py"
        for n in ("TaskSession", "write_variables_pb", "WeightsDict", "timer")
    },
    **{
        n: "tests/frontend/addons/test_addons_api_current.py (upstream's names)"
        for n in ("OrderedDict", "add_recompute_inputs")
    },
    **{
        n: "tests/frontend/addons/test_addons_ops.py (against torch F.layer_norm)"
        for n in ("layer_norm", "layer_norm_no_affine")
    },
    "fp8_amax_scale": "tests/frontend/addons/test_addons_custom_ops.py (against NumPy on float16 / float32 data)",
}


def _graph_with_variable_input(e: Env, add: Callable[..., Any]) -> Any:
    def build(x: popxl.Tensor) -> popxl.Tensor:
        w, factory = add("w", lambda: np.ones(3, np.float32), popxl.float32)
        assert isinstance(factory, addons.VariableFactory)
        return x * w

    g = e.graph(build, e.x)
    (w_in,) = [t for t in g.inputs if t.name == "w"]
    return ops.call(g, e.x, inputs_dict={w_in: popxl.constant(np.full(3, 2.0, np.float32))})


def _remap(e: Env) -> Any:
    graph, variables = _module_graph(e)
    grad = addons.autodiff(graph)
    info = addons.transforms.remap_grad_info(grad.grad_graph_info, graph.graph, grad.graph)
    return _check(len(info.expected_inputs) == len(grad.grad_graph_info.expected_inputs))


def _accumulation(e: Env) -> Any:
    graph, variables = _module_graph(e)
    facts, grad = addons.transforms.autodiff_with_accumulation(graph, graph.args.tensors)
    return _check(isinstance(grad, addons.GraphWithNamedArgs) and "mean_accum_counter" in facts.to_dict())


def _recompute(e: Env) -> Any:
    graph, variables = _module_graph(e)
    grad = addons.autodiff(graph)
    return _check(isinstance(addons.transforms.recompute_graph(grad), addons.GraphWithNamedArgs))


def _public_definitions(module: types.ModuleType) -> set[str]:
    """Public functions and classes defined in `module` itself."""
    out = set()
    for name, obj in vars(module).items():
        if name.startswith("_"):
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            home = getattr(obj, "__module__", "") or ""
            if home == module.__name__:
                out.add(name)
    return out


def _exports(module: types.ModuleType) -> list[str]:
    """`module.__all__` without submodules; fails if a public definition is missing from it."""
    names = list(module.__all__)
    missing = _public_definitions(module) - set(names)
    assert not missing, f"{module.__name__} defines public names not in __all__: {sorted(missing)}"
    return [n for n in names if not isinstance(getattr(module, n), types.ModuleType)]


MODULES: list[tuple[types.ModuleType, str, R, tuple[str, ...]]] = [
    (ops, "popxl.ops", OPS, STUBS),
    (var_updates, "popxl.ops.var_updates", VAR_UPDATES, ()),
    (collectives, "popxl.ops.collectives", COLLECTIVES, COLLECTIVE_STUBS),
    (addons, "popxl_addons", ADDONS, ()),
    (addons.ops, "popxl_addons.ops", ADDONS, ()),
    (addons.transforms, "popxl_addons.transforms", ADDONS, ()),
]

CASES = [(qual, name, recipes, stubs) for module, qual, recipes, stubs in MODULES for name in _exports(module)]

NOT_IMPLEMENTED: list[str] = []


def _run(e: Env, result: Any) -> None:
    """Store every Tensor in `result`, run the program and check the results' shapes/dtypes."""
    flat = result if isinstance(result, tuple | list) else [result]
    tensors = [t for t in flat if isinstance(t, popxl.Tensor)]
    with e.ir.main_graph:
        streams = []
        for i, t in enumerate(tensors):
            if t.graph is not e.ir.main_graph:
                continue
            s = popxl.d2h_stream(t.shape, t.dtype, f"out{i}")
            ops.host_store(s, t)
            streams.append((s, t))
    with popxl.Session(e.ir, "cpu") as session:
        inputs = {s: np.ones(s.shape, s.dtype.as_numpy()) for s in session.expected_inputs()}
        outs = session.run(inputs)
    for s, t in streams:
        assert outs[s].shape == t.shape and outs[s].dtype == t.dtype.as_numpy(), (t, outs[s].shape)


@pytest.mark.parametrize("qual,name,recipes,stubs", CASES, ids=[f"{c[0]}.{c[1]}" for c in CASES])
def test_exported_name_works_or_is_not_implemented(qual, name, recipes, stubs):
    fn = getattr(__import__(qual.split(".")[0]) if "." not in qual else _module(qual), name)
    message = f"{qual}.{name} is not implemented in xl yet"
    if name in stubs:
        with pytest.raises(NotImplementedError) as info:
            fn()
        assert type(info.value) is NotImplementedError and str(info.value) == message
        return
    if name in TESTED_ELSEWHERE:
        return
    assert name in recipes, f"{qual}.{name} is exported but has no recipe in {__file__}"
    e = Env()
    try:
        with e.ir.main_graph:
            result = recipes[name](e)
    except NotImplementedError as err:
        assert type(err) is NotImplementedError and str(err) == message, (
            f"{qual}.{name} raised NotImplementedError({str(err)!r}); expected {message!r}"
        )
        return
    _run(e, result)


def _module(qual: str) -> Any:
    import importlib

    return importlib.import_module(qual)
