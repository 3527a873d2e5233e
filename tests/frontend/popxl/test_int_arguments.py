"""Every integer parameter of the public API refuses a bool.

`True` is an `int` in Python, so an unchecked `popxl.Ir(replication=True)` was a one-replica Ir
and `ops.split(x, True)` one piece. Each parameter of the public API whose annotation allows a
bare `int` is listed in `CALLS` (a call that passes the value in that parameter) or in `EXEMPT`
(with the reason); `test_every_int_parameter_is_listed` derives the parameters from the
signatures of popxl, popxl.ops (collectives, var_updates), popxl.transforms, popxl.utils,
popxl.fp8_utils and popxl_addons (transforms, ops), so a parameter added later fails until it is
listed. For each listed parameter, `True` and `False` are refused with a `TypeError` or
`ValueError` (a `RuntimeError` for the float8 casts' `log2_scale`, as upstream) naming the
parameter and the value, and a valid int is accepted (so the refusal
is the bool's).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import popxl
import popxl.fp8_utils
import popxl.ops as ops
import popxl.transforms
import popxl.utils
import popxl_addons as addons
import popxl_addons.ops
import popxl_addons.transforms

MODULES = {
    "popxl": popxl,
    "popxl.ops": ops,
    "popxl.ops.collectives": ops.collectives,
    "popxl.ops.var_updates": ops.var_updates,
    "popxl.transforms": popxl.transforms,
    "popxl.utils": popxl.utils,
    "popxl.fp8_utils": popxl.fp8_utils,
    "popxl_addons": addons,
    "popxl_addons.transforms": popxl_addons.transforms,
    "popxl_addons.ops": popxl_addons.ops,
}


def _takes_int(annotation: Any) -> bool:
    """Whether an annotation (a string: `from __future__ import annotations`) has a bare
    `int` among its alternatives (`int`, `int | None`, `Tensor | int`; not `list[int]`)."""
    if annotation is inspect.Parameter.empty:
        return False
    text, depth, top = str(annotation), 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if depth == 0 and ch not in "[]":
            top += ch
    return "int" in (part.strip() for part in top.split("|"))


def _int_parameters() -> Iterator[str]:
    """`module.function:param`, `module.Class.method:param` and `module.Class.property` (a
    setter) for every public int parameter."""

    def of(fn: Any, path: str) -> Iterator[str]:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return
        for p in params:
            if p.name not in ("self", "cls") and _takes_int(p.annotation):
                yield f"{path}:{p.name}"

    for mod_name, mod in MODULES.items():
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            path = f"{mod_name}.{name}"
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    if isinstance(member, property):
                        if member.fset is not None and any(
                            _takes_int(p.annotation)
                            for p in list(inspect.signature(member.fset).parameters.values())[1:]
                        ):
                            yield f"{path}.{attr}"
                        continue
                    if isinstance(member, staticmethod | classmethod):
                        member = member.__func__
                    if inspect.isfunction(member):
                        yield from of(member, f"{path}.{attr}")
            elif callable(obj):
                yield from of(obj, path)


# -- how each parameter is reached ---------------------------------------------------------------

R = 4  # replicas of the programs below


@contextmanager
def main_graph(replicas: int = R) -> Iterator[popxl.Ir]:
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        yield ir


def in_main(fn: Callable[[popxl.Ir, Any], Any], replicas: int = R) -> Callable[[Any], Any]:
    def call(v: Any) -> Any:
        with main_graph(replicas) as ir:
            return fn(ir, v)

    return call


def x(shape: tuple[int, ...] = (4, 4), dtype: Any = np.float32) -> popxl.Tensor:
    return popxl.variable(np.ones(shape, dtype))


def idx(values: Any = (0, 1)) -> popxl.Tensor:
    return popxl.constant(np.array(values, np.int32))


def f8() -> popxl.Tensor:
    return popxl.variable(np.ones(4, np.float32), popxl.float8_143)


def remote(entries: int = 2) -> popxl.RemoteBuffer:
    return popxl.remote_buffer((2,), popxl.float32, entries=entries)


def call_info(ir: popxl.Ir) -> Any:
    g = ir.create_graph(lambda a: a + 1, x((2,)))
    return ops.call_with_info(g, x((2,)))


def cond_info(ir: popxl.Ir) -> Any:
    g = ir.create_graph(lambda a: a + 1, x((2,)))
    return ops.conditional_with_info(popxl.constant(True), g, g, [x((2,))], [x((2,))])


def hook(ir: popxl.Ir, v: Any) -> None:
    g = ir.main_graph
    for _ in range(2):  # handles 0 and 1 (a bool would name one of them)
        g.register_op_created_hook(lambda op: None)
    g.remove_op_created_hook(v)


def session_summary(v: Any) -> Any:
    with main_graph(1):
        pass
    return popxl.Session(popxl.Ir(), "cpu", profile=True).profile_summary(print_table=False, row_limit=v)


def factories() -> addons.NamedVariableFactories:
    return addons.NamedVariableFactories.from_dict({"w": addons.VariableFactory(np.ones(4, np.float32))})


def tensors(ir: popxl.Ir) -> addons.NamedTensors:
    return addons.NamedTensors.from_dict({"w": x((4,))})


class Dense(addons.Module):
    def build(self, a: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("w", lambda: np.ones((4, 4), np.float32), popxl.float32)
        return ops.gelu(a @ w)


def serialise(steps: Any, rows: Any) -> Any:
    """`batch_serialise` of a one-layer graph fed from a stream."""
    x_s = popxl.h2d_stream((2, 4), popxl.float32, "x")
    _, graph = Dense().create_graph(x_s.spec)
    return addons.transforms.batch_serialise(graph, steps, {graph.graph.inputs[0]: x_s}, {}, {}, rows=rows)


def serialise_fwd_and_grad(steps: Any, rows: Any) -> Any:
    """`batch_serialise_fwd_and_grad` of a one-layer graph and its gradient."""
    x_s = popxl.h2d_stream((2, 4), popxl.float32, "x")
    _, graph = Dense().create_graph(x_s.spec)
    _, dgraph = addons.autodiff_with_accumulation(graph, graph.args.tensors, grads_required=graph.graph.inputs[:1])
    g_in = dgraph.graph.inputs[0]
    g_buf = popxl.remote_buffer(g_in.shape, g_in.dtype, 4)
    return addons.transforms.batch_serialise_fwd_and_grad(
        graph, dgraph, graph.args, steps, {graph.graph.inputs[0]: x_s, g_in: (g_buf, 0)}, {}, {}, rows=rows
    )


def in_subgraph(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`fn(v)` inside a subgraph being built (where graph inputs can be added)."""

    def call(v: Any) -> Any:
        with main_graph() as ir, ir.create_empty_graph("g"):
            return fn(v)

    return call


# parameter -> (call passing the value, a valid value)
CALLS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    # the program
    "popxl.Ir.__init__:replication": (lambda v: popxl.Ir(replication=v), 2),
    "popxl.Ir.num_host_transfers": (lambda v: setattr(popxl.Ir(), "num_host_transfers", v), 2),
    "popxl.Ir.replication_factor": (lambda v: setattr(popxl.Ir(), "replication_factor", v), 2),
    "popxl.Ir.replica_grouping:stride": (lambda v: popxl.Ir(replication=R).replica_grouping(stride=v), 2),
    "popxl.Ir.replica_grouping:group_size": (lambda v: popxl.Ir(replication=R).replica_grouping(group_size=v), 2),
    "popxl.Ir.to_mlir:elide_larger_than": (lambda v: popxl.Ir().to_mlir(elide_larger_than=v), 4),
    "popxl.Graph.remove_op_created_hook:handle": (in_main(hook), 1),
    "popxl.Session.profile_summary:row_limit": (session_summary, 3),
    "popxl.ipu:ipu": (lambda v: popxl.ipu(v).__enter__(), 1),
    "popxl.create_seeds:seed": (lambda v: popxl.create_seeds(v), 7),
    "popxl.create_seeds:offset": (lambda v: popxl.create_seeds(1, offset=v), 2),
    "popxl.create_seeds:batches_per_step": (lambda v: popxl.create_seeds(1, batches_per_step=v), 2),
    "popxl.create_seeds:gradient_accumulation_factor": (
        lambda v: popxl.create_seeds(1, gradient_accumulation_factor=v),
        2,
    ),
    "popxl.create_seeds:replicas": (lambda v: popxl.create_seeds(1, replicas=v), 2),
    "popxl.utils.create_seeds:seed": (lambda v: popxl.utils.create_seeds(v), 7),
    "popxl.utils.create_seeds:offset": (lambda v: popxl.utils.create_seeds(1, offset=v), 2),
    "popxl.utils.create_seeds:batches_per_step": (lambda v: popxl.utils.create_seeds(1, batches_per_step=v), 2),
    "popxl.utils.create_seeds:gradient_accumulation_factor": (
        lambda v: popxl.utils.create_seeds(1, gradient_accumulation_factor=v),
        2,
    ),
    "popxl.utils.create_seeds:replicas": (lambda v: popxl.utils.create_seeds(1, replicas=v), 2),
    "popxl.utils.to_numpy:log2_scale": (lambda v: popxl.utils.to_numpy([1.0], popxl.float8_143, log2_scale=v), 1),
    "popxl.fp8_utils.host_pow2scale_cast_from_fp8:log2_scale": (
        lambda v: popxl.fp8_utils.host_pow2scale_cast_from_fp8(
            np.ones(2, popxl.dtypes.np_dtype_float8_143), popxl.float32, log2_scale=v
        ),
        1,
    ),
    "popxl.fp8_utils.host_pow2scale_cast_to_fp8:log2_scale": (
        lambda v: popxl.fp8_utils.host_pow2scale_cast_to_fp8(np.ones(2, np.float32), popxl.float8_143, log2_scale=v),
        1,
    ),
    "popxl.h2d_stream:shape": (in_main(lambda ir, v: popxl.h2d_stream(v, popxl.float32)), 3),
    "popxl.d2h_stream:shape": (in_main(lambda ir, v: popxl.d2h_stream(v, popxl.float32)), 3),
    # remote memory
    "popxl.remote_buffer:entries": (in_main(lambda ir, v: remote(v)), 2),
    "popxl.RemoteBuffer.__init__:entries": (in_main(lambda ir, v: popxl.RemoteBuffer((2,), popxl.float32, v)), 2),
    "popxl.RemoteBuffer.entries": (in_main(lambda ir, v: setattr(remote(), "entries", v)), 3),
    "popxl.RemoteBuffer.set_remote_buffer_info:entries": (
        in_main(lambda ir, v: remote().set_remote_buffer_info(popxl.float32, (2,), v)),
        3,
    ),
    "popxl.RemoteBuffer.validate_tensor_matches_buffer:num_shards": (
        in_main(lambda ir, v: remote().validate_tensor_matches_buffer(x((2,)), num_shards=v)),
        1,
    ),
    "popxl.replica_sharded_buffer:entries": (
        in_main(lambda ir, v: popxl.replica_sharded_buffer((4,), popxl.float32, entries=v)),
        2,
    ),
    "popxl.replica_sharded_buffer:shard_over": (
        in_main(lambda ir, v: popxl.replica_sharded_buffer((4,), popxl.float32, shard_over=v)),
        2,
    ),
    "popxl.remote_variable:offset": (
        in_main(lambda ir, v: popxl.remote_variable(np.ones(2, np.float32), remote(), offset=v)),
        1,
    ),
    "popxl.remote_replica_sharded_variable:offset": (
        in_main(
            lambda ir, v: popxl.remote_replica_sharded_variable(
                np.ones(4, np.float32), popxl.replica_sharded_buffer((4,), popxl.float32, entries=2), offset=v
            )
        ),
        1,
    ),
    "popxl.replica_sharded_variable:shard_over": (
        in_main(lambda ir, v: popxl.replica_sharded_variable(np.ones(4, np.float32), popxl.float32, shard_over=v)),
        2,
    ),
    "popxl.ops.remote_load:offset": (in_main(lambda ir, v: ops.remote_load(remote(), v)), 1),
    "popxl.ops.remote_load_:offset": (in_main(lambda ir, v: ops.remote_load_(remote(), v, x((2,)))), 1),
    "popxl.ops.remote_store:offset": (in_main(lambda ir, v: ops.remote_store(remote(), v, x((2,)))), 1),
    # IPUs and calls
    "popxl.Tensor.copy_to_ipu:destination": (in_main(lambda ir, v: x().copy_to_ipu(v, 0)), 1),
    "popxl.Tensor.copy_to_ipu:source": (in_main(lambda ir, v: x().copy_to_ipu(2, v)), 0),
    "popxl.Variable.copy_to_ipu:destination": (in_main(lambda ir, v: x().copy_to_ipu(v, 0)), 1),
    "popxl.Variable.copy_to_ipu:source": (in_main(lambda ir, v: x().copy_to_ipu(2, v)), 0),
    "popxl.ops.ipu_copy:destination": (in_main(lambda ir, v: ops.ipu_copy(x(), v, 0)), 1),
    "popxl.ops.ipu_copy:source": (in_main(lambda ir, v: ops.ipu_copy(x(), 2, v)), 0),
    "popxl.ops.repeat:repeat_count": (
        in_main(lambda ir, v: ops.repeat(ir.create_graph(lambda a: a + 1, x((2,))), v, x((2,)))),
        2,
    ),
    "popxl.ops.repeat_with_info:repeat_count": (
        in_main(lambda ir, v: ops.repeat_with_info(ir.create_graph(lambda a: a + 1, x((2,))), v, x((2,)))),
        2,
    ),
    "popxl.ops.CallSiteInfo.parent_input:idx": (in_main(lambda ir, v: call_info(ir).parent_input(v)), 0),
    "popxl.ops.CallSiteInfo.parent_output:idx": (in_main(lambda ir, v: call_info(ir).parent_output(v)), 0),
    "popxl.ops.CallSiteInfo.graph_to_parent_input_index:idx": (
        in_main(lambda ir, v: call_info(ir).graph_to_parent_input_index(v)),
        0,
    ),
    "popxl.ops.CallSiteInfo.graph_to_parent_output_index:idx": (
        in_main(lambda ir, v: call_info(ir).graph_to_parent_output_index(v)),
        0,
    ),
    "popxl.ops.CallSiteInfo.parent_to_graph_input_index:idx": (
        in_main(lambda ir, v: call_info(ir).parent_to_graph_input_index(v)),
        0,
    ),
    "popxl.ops.CallSiteInfo.parent_to_graph_output_index:idx": (
        in_main(lambda ir, v: call_info(ir).parent_to_graph_output_index(v)),
        0,
    ),
    "popxl.ops.ConditionalSiteInfo.parent_output:idx": (
        in_main(
            lambda ir, v: ops.conditional_with_info(
                popxl.constant(True),
                ir.create_graph(lambda a: a + 1, x((2,))),
                ir.create_graph(lambda a: a + 2, x((2,))),
                [x((2,))],
                [x((2,))],
            ).parent_output(v)
        ),
        0,
    ),
    "popxl.ops.ConditionalSiteInfo.parent_input:idx": (in_main(lambda ir, v: cond_info(ir).parent_input(v)), 1),
    "popxl.ops.ConditionalSiteInfo.graph_to_parent_input_index:idx": (
        in_main(lambda ir, v: cond_info(ir).graph_to_parent_input_index(v)),
        0,
    ),
    "popxl.ops.ConditionalSiteInfo.graph_to_parent_output_index:idx": (
        in_main(lambda ir, v: cond_info(ir).graph_to_parent_output_index(v)),
        0,
    ),
    "popxl.ops.ConditionalSiteInfo.parent_to_graph_input_index:idx": (
        in_main(lambda ir, v: cond_info(ir).parent_to_graph_input_index(v)),
        1,
    ),
    "popxl.ops.ConditionalSiteInfo.parent_to_graph_output_index:idx": (
        in_main(lambda ir, v: cond_info(ir).parent_to_graph_output_index(v)),
        0,
    ),
    "popxl.ops.ConditionalSiteInfo.is_parent_index_in_then_branch:idx": (
        in_main(lambda ir, v: cond_info(ir).is_parent_index_in_then_branch(v)),
        1,
    ),
    "popxl.ops.subsample:strides": (in_main(lambda ir, v: ops.subsample(x((4,)), v)), 2),
    # collectives
    "popxl.ops.collectives.CommGroup.__init__:type": (lambda v: ops.collectives.CommGroup(v, 2), 1),
    "popxl.ops.collectives.CommGroup.__init__:replicaGroupSize": (lambda v: ops.collectives.CommGroup(1, v), 2),
    "popxl.ops.collectives.replicated_all_gather:axis": (
        in_main(lambda ir, v: ops.collectives.replicated_all_gather(x(), axis=v)),
        1,
    ),
    "popxl.ops.collectives.replicated_slice:axis": (
        in_main(lambda ir, v: ops.collectives.replicated_slice(x(), axis=v)),
        1,
    ),
    # ops
    "popxl.ops.argmax:dim": (in_main(lambda ir, v: ops.argmax(x(), v)), 1),
    "popxl.ops.argmin:dim": (in_main(lambda ir, v: ops.argmin(x(), v)), 1),
    "popxl.ops.concat:axis": (in_main(lambda ir, v: ops.concat([x(), x()], axis=v)), 1),
    "popxl.ops.concat_:axis": (in_main(lambda ir, v: ops.concat_([x(), x()], axis=v)), 1),
    "popxl.ops.conv:groups": (in_main(lambda ir, v: ops.conv(x((1, 2, 4, 4)), x((2, 1, 1, 1)), groups=v)), 2),
    "popxl.ops.conv_pow2scaled:groups": (
        in_main(
            lambda ir, v: ops.conv_pow2scaled(
                x((1, 2, 4, 4), popxl.dtypes.np_dtype_float8_143),
                x((2, 1, 1, 1), popxl.dtypes.np_dtype_float8_143),
                0,
                groups=v,
            )
        ),
        2,
    ),
    "popxl.ops.conv_pow2scaled:log2_scale": (
        in_main(
            lambda ir, v: ops.conv_pow2scaled(
                x((1, 2, 4, 4), popxl.dtypes.np_dtype_float8_143), x((2, 2, 1, 1), popxl.dtypes.np_dtype_float8_143), v
            )
        ),
        1,
    ),
    "popxl.ops.conv_transpose:groups": (
        in_main(lambda ir, v: ops.conv_transpose(x((1, 2, 4, 4)), x((2, 1, 1, 1)), groups=v)),
        2,
    ),
    "popxl.ops.conv_transpose_pow2scaled:groups": (
        in_main(
            lambda ir, v: ops.conv_transpose_pow2scaled(
                x((1, 2, 4, 4), popxl.dtypes.np_dtype_float8_143),
                x((2, 1, 1, 1), popxl.dtypes.np_dtype_float8_143),
                0,
                groups=v,
            )
        ),
        2,
    ),
    "popxl.ops.conv_transpose_pow2scaled:log2_scale": (
        in_main(
            lambda ir, v: ops.conv_transpose_pow2scaled(
                x((1, 2, 4, 4), popxl.dtypes.np_dtype_float8_143), x((2, 2, 1, 1), popxl.dtypes.np_dtype_float8_143), v
            )
        ),
        1,
    ),
    "popxl.ops.cumsum:dim": (in_main(lambda ir, v: ops.cumsum(x(), v)), 1),
    "popxl.ops.gather:axis": (in_main(lambda ir, v: ops.gather(x(), idx(), axis=v)), 1),
    "popxl.ops.groupedgather:axis": (
        in_main(lambda ir, v: ops.groupedgather(x((2, 4)), idx([[0], [1]]), axis=v, group_size=2)),
        0,
    ),
    "popxl.ops.groupedgather:group_size": (
        in_main(lambda ir, v: ops.groupedgather(x((2, 4)), idx([[0], [1]]), axis=0, group_size=v)),
        2,
    ),
    "popxl.ops.group_norm:num_groups": (
        in_main(lambda ir, v: ops.group_norm(x((2, 4, 3)), x((4,)), x((4,)), v)),
        2,
    ),
    "popxl.ops.l1:axis": (in_main(lambda ir, v: ops.l1(x(), v)), 1),
    "popxl.ops.l2:axis": (in_main(lambda ir, v: ops.l2(x(), v)), 1),
    "popxl.ops.log_softmax:axis": (in_main(lambda ir, v: ops.log_softmax(x(), v)), 1),
    "popxl.ops.logsum:axis": (in_main(lambda ir, v: ops.logsum(x(), v)), 1),
    "popxl.ops.logsumexp:axis": (in_main(lambda ir, v: ops.logsumexp(x(), v)), 1),
    "popxl.ops.matmul_pow2scaled:log2_scale": (
        in_main(
            lambda ir, v: ops.matmul_pow2scaled(
                x((4, 4), popxl.dtypes.np_dtype_float8_143), x((4, 4), popxl.dtypes.np_dtype_float8_143), v
            )
        ),
        1,
    ),
    "popxl.ops.max:axis": (in_main(lambda ir, v: ops.max(x(), v)), 1),
    "popxl.ops.mean:axis": (in_main(lambda ir, v: ops.mean(x(), v)), 1),
    "popxl.ops.median:axis": (in_main(lambda ir, v: ops.median(x(), v)), 1),
    "popxl.ops.min:axis": (in_main(lambda ir, v: ops.min(x(), v)), 1),
    "popxl.ops.prod:axis": (in_main(lambda ir, v: ops.prod(x(), v)), 1),
    "popxl.ops.sum:axis": (in_main(lambda ir, v: ops.sum(x(), v)), 1),
    "popxl.ops.sumsquare:axis": (in_main(lambda ir, v: ops.sumsquare(x(), v)), 1),
    "popxl.ops.nll_loss:ignore_index": (in_main(lambda ir, v: ops.nll_loss(x(), idx([0, 1, 2, 3]), ignore_index=v)), 1),
    "popxl.ops.nll_loss_with_softmax_grad:ignore_index": (
        in_main(lambda ir, v: ops.nll_loss_with_softmax_grad(ops.softmax(x(), 1), idx([0, 1, 2, 3]), ignore_index=v)),
        1,
    ),
    "popxl.ops.onehot:axis": (
        in_main(lambda ir, v: ops.onehot(idx(), popxl.constant(np.int32(3)), x((2,)), axis=v)),
        0,
    ),
    "popxl.ops.pow2scale_cast_from_fp8:log2_scale": (
        in_main(lambda ir, v: ops.pow2scale_cast_from_fp8(f8(), v, popxl.float32)),
        1,
    ),
    "popxl.ops.pow2scale_cast_to_fp8:log2_scale": (
        in_main(lambda ir, v: ops.pow2scale_cast_to_fp8(x((4,)), v, popxl.float8_143)),
        1,
    ),
    "popxl.ops.print_tensor:digits": (in_main(lambda ir, v: ops.print_tensor(x(), digits=v)), 4),
    "popxl.ops.print_tensor:edge_items": (in_main(lambda ir, v: ops.print_tensor(x(), edge_items=v)), 2),
    "popxl.ops.print_tensor:max_line_width": (in_main(lambda ir, v: ops.print_tensor(x(), max_line_width=v)), 60),
    "popxl.ops.print_tensor:summarise_threshold": (
        in_main(lambda ir, v: ops.print_tensor(x(), summarise_threshold=v)),
        10,
    ),
    "popxl.ops.roi_align:sampling_ratio": (
        in_main(
            lambda ir, v: ops.roi_align(
                x((1, 1, 4, 4)), popxl.constant(np.array([[0, 0, 2, 2]], np.float32)), idx([0]), (2, 2), 1.0, v
            )
        ),
        2,
    ),
    "popxl.ops.scatter:axis": (in_main(lambda ir, v: ops.scatter(x(), idx([[0, 1]]), x((1, 2)), axis=v)), 1),
    "popxl.ops.scatter_reduce:axis": (
        in_main(lambda ir, v: ops.scatter_reduce(x(), idx([0, 1, 0, 1]), "sum", axis=v, axis_size=2)),
        0,
    ),
    "popxl.ops.scatter_reduce:axis_size": (
        in_main(lambda ir, v: ops.scatter_reduce(x(), idx([0, 1, 0, 1]), "sum", axis_size=v)),
        2,
    ),
    "popxl.ops.slice:start": (in_main(lambda ir, v: ops.slice(x(), start=v, stop=3, axis=0)), 1),
    "popxl.ops.slice:stop": (in_main(lambda ir, v: ops.slice(x(), start=0, stop=v, axis=0)), 3),
    "popxl.ops.slice:step": (in_main(lambda ir, v: ops.slice(x(), start=0, stop=3, step=v, axis=0)), 2),
    "popxl.ops.slice:axis": (in_main(lambda ir, v: ops.slice(x(), start=0, stop=3, axis=v)), 1),
    "popxl.ops.slice_:start": (in_main(lambda ir, v: ops.slice_(x(), start=v, stop=3, axis=0)), 1),
    "popxl.ops.slice_:stop": (in_main(lambda ir, v: ops.slice_(x(), start=0, stop=v, axis=0)), 3),
    "popxl.ops.slice_:step": (in_main(lambda ir, v: ops.slice_(x(), start=0, stop=3, step=v, axis=0)), 2),
    "popxl.ops.slice_:axis": (in_main(lambda ir, v: ops.slice_(x(), start=0, stop=3, axis=v)), 1),
    "popxl.ops.softmax:axis": (in_main(lambda ir, v: ops.softmax(x(), v)), 1),
    "popxl.ops.split:axis": (in_main(lambda ir, v: ops.split(x(), 2, axis=v)), 1),
    "popxl.ops.split:splits": (in_main(lambda ir, v: ops.split(x(), v)), 2),
    "popxl.ops.split_random_seed:n": (
        in_main(lambda ir, v: ops.split_random_seed(popxl.variable(np.zeros(2, np.uint32), popxl.uint32), v)),
        2,
    ),
    "popxl.ops.squeeze:axes": (in_main(lambda ir, v: ops.squeeze(x((4, 1)), v)), 1),
    "popxl.ops.tied_gather:axis": (in_main(lambda ir, v: ops.tied_gather(x(), idx(), axis=v)), 1),
    "popxl.ops.topk:axis": (in_main(lambda ir, v: ops.topk(x(), 2, axis=v)), 1),
    "popxl.ops.topk:k": (in_main(lambda ir, v: ops.topk(x(), v, axis=0)), 2),
    "popxl.ops.var_updates.sparse_accumulate_:axis": (
        in_main(lambda ir, v: ops.var_updates.sparse_accumulate_(x(), x((2, 4)), idx(), axis=v)),
        0,
    ),
    # popxl_addons
    "popxl_addons.seed_variable:seed": (in_main(lambda ir, v: addons.seed_variable(v)), 7),
    "popxl_addons.transforms.pipelined_execution:steps": (
        in_main(lambda ir, v: addons.transforms.pipelined_execution(v).__enter__()),
        4,
    ),
    "popxl_addons.named_variable_buffers:entries": (
        in_main(lambda ir, v: addons.named_variable_buffers(factories(), entries=v)),
        2,
    ),
    "popxl_addons.named_buffers:entries": (in_main(lambda ir, v: addons.named_buffers(tensors(ir), entries=v)), 2),
    "popxl_addons.load_remote_graph:entries": (
        in_main(lambda ir, v: addons.load_remote_graph(addons.named_buffers(tensors(ir), 2), entries=v)),
        2,
    ),
    "popxl_addons.store_remote_graph:entries": (
        in_main(lambda ir, v: addons.store_remote_graph(addons.named_buffers(tensors(ir), 2), entries=v)),
        2,
    ),
    "popxl_addons.create_remote_buffer:entries": (
        in_main(lambda ir, v: addons.create_remote_buffer(popxl.TensorSpec((4,), popxl.float32), entries=v)),
        2,
    ),
    "popxl_addons.create_remote_buffer:shard_over": (
        in_main(lambda ir, v: addons.create_remote_buffer(popxl.TensorSpec((4,), popxl.float32), shard_over=v)),
        2,
    ),
    "popxl_addons.NamedVariableFactories.init_remote:entry": (
        in_main(lambda ir, v: factories().init_remote(addons.named_variable_buffers(factories(), 2), entry=v)),
        1,
    ),
    "popxl_addons.VariableFactory.__init__:shard_over": (
        in_main(lambda ir, v: addons.VariableFactory(np.ones(4, np.float32), shard_over=v)),
        2,
    ),
    "popxl_addons.VariableFactory.create_remote_tensor:entry": (
        in_main(lambda ir, v: addons.VariableFactory(np.ones(2, np.float32)).create_remote_tensor(remote(), entry=v)),
        1,
    ),
    "popxl_addons.add_replica_sharded_variable_input:shard_over": (
        in_subgraph(lambda v: addons.add_replica_sharded_variable_input("w", np.ones(4, np.float32), shard_over=v)),
        2,
    ),
    "popxl_addons.Module.add_replica_sharded_variable_input:shard_over": (
        in_subgraph(
            lambda v: addons.Module().add_replica_sharded_variable_input("w", np.ones(4, np.float32), shard_over=v)
        ),
        2,
    ),
    "popxl_addons.TaskSession.__init__:max_checkpoints": (
        lambda v: addons.TaskSession(
            [], [], addons.NamedTensors(), max_checkpoints=v, ir=popxl.Ir(), device_desc="cpu"
        ),
        2,
    ),
    "popxl_addons.cross_entropy:ignore_index": (
        in_main(lambda ir, v: addons.cross_entropy(x(), idx([0, 1, 2, 3]), ignore_index=v)),
        1,
    ),
    "popxl_addons.ops.cross_entropy:ignore_index": (
        in_main(lambda ir, v: addons.ops.cross_entropy(x(), idx([0, 1, 2, 3]), ignore_index=v)),
        1,
    ),
    "popxl_addons.cross_entropy_with_grad:ignore_index": (
        in_main(lambda ir, v: addons.cross_entropy_with_grad(x(), idx([0, 1, 2, 3]), ignore_index=v)),
        1,
    ),
    "popxl_addons.ops.cross_entropy_with_grad:ignore_index": (
        in_main(lambda ir, v: addons.ops.cross_entropy_with_grad(x(), idx([0, 1, 2, 3]), ignore_index=v)),
        1,
    ),
    "popxl_addons.cross_entropy_with_grad:loss_scaling": (
        in_main(lambda ir, v: addons.cross_entropy_with_grad(x(), idx([0, 1, 2, 3]), loss_scaling=v)),
        2,
    ),
    "popxl_addons.ops.cross_entropy_with_grad:loss_scaling": (
        in_main(lambda ir, v: addons.ops.cross_entropy_with_grad(x(), idx([0, 1, 2, 3]), loss_scaling=v)),
        2,
    ),
    "popxl_addons.transforms.batch_serial_buffer:steps": (
        in_main(lambda ir, v: addons.transforms.batch_serial_buffer(x((2, 4)), steps=v)),
        2,
    ),
    "popxl_addons.transforms.batch_serial_buffer:rows": (
        in_main(lambda ir, v: addons.transforms.batch_serial_buffer(x((2, 4)), rows=v)),
        2,
    ),
    "popxl_addons.transforms.batch_serialise:steps": (in_main(lambda ir, v: serialise(v, 1)), 2),
    "popxl_addons.transforms.batch_serialise:rows": (in_main(lambda ir, v: serialise(2, v)), 2),
    "popxl_addons.transforms.batch_serialise_fwd_and_grad:steps": (
        in_main(lambda ir, v: serialise_fwd_and_grad(v, 1)),
        2,
    ),
    "popxl_addons.transforms.batch_serialise_fwd_and_grad:rows": (
        in_main(lambda ir, v: serialise_fwd_and_grad(2, v)),
        2,
    ),
    "popxl_addons.OrderedDict.idx:idx": (lambda v: addons.OrderedDict([("a", 1), ("b", 2)]).idx(v), 1),
    # host-side NumPy helpers of popxl_addons (array munging)
    "popxl_addons.shard:n": (lambda v: addons.shard(np.ones((4, 2)), v, 0), 2),
    "popxl_addons.shard:axis": (lambda v: addons.shard(np.ones((4, 4)), 2, v), 1),
    "popxl_addons.unshard:axis": (lambda v: addons.unshard(np.ones((2, 2, 2)), v), 1),
    "popxl_addons.unshard_arrays:axis": (lambda v: addons.unshard_arrays([np.ones((1, 2))] * 2, v), 0),
    "popxl_addons.repeat:n": (lambda v: addons.repeat(np.ones(2), v), 2),
    "popxl_addons.repeat:axis": (lambda v: addons.repeat(np.ones((2, 2)), 2, v), 1),
    "popxl_addons.repeat_axis:n": (lambda v: addons.repeat_axis(np.ones((2, 2)), v), 2),
    "popxl_addons.repeat_axis:axis": (lambda v: addons.repeat_axis(np.ones((2, 2)), 2, v), 1),
    "popxl_addons.pad_axis:n": (lambda v: addons.pad_axis(np.ones((3, 2)), v, 0), 4),
    "popxl_addons.pad_axis:axis": (lambda v: addons.pad_axis(np.ones((2, 3)), 4, v), 1),
    "popxl_addons.squeeze_safe:axis": (lambda v: addons.squeeze_safe(np.ones((2, 1)), v), 1),
    "popxl_addons.handle_negative_axis:axis": (lambda v: addons.handle_negative_axis(np.ones((2, 2)), v), 1),
    "popxl_addons.repeat_shard:n_repeats": (lambda v: addons.repeat_shard(np.ones((4, 2)), v, 2, 0), 2),
    "popxl_addons.repeat_shard:n_shards": (lambda v: addons.repeat_shard(np.ones((4, 2)), 2, v, 0), 2),
    "popxl_addons.repeat_shard:shard_axis": (lambda v: addons.repeat_shard(np.ones((2, 4)), 2, 2, v), 1),
    "popxl_addons.shard2D:n_1": (lambda v: addons.shard2D(np.ones((4, 4)), v, 2, 0, 1), 2),
    "popxl_addons.shard2D:n_2": (lambda v: addons.shard2D(np.ones((4, 4)), 2, v, 0, 1), 2),
    "popxl_addons.shard2D:axis_1": (lambda v: addons.shard2D(np.ones((4, 4, 4)), 2, 2, v, 2), 1),
    "popxl_addons.shard2D:axis_2": (lambda v: addons.shard2D(np.ones((4, 4, 4)), 2, 2, 0, v), 2),
    "popxl_addons.split2D:n_1": (lambda v: addons.split2D(np.ones((4, 4)), v, 2, 0, 1), 2),
    "popxl_addons.split2D:n_2": (lambda v: addons.split2D(np.ones((4, 4)), 2, v, 0, 1), 2),
    "popxl_addons.split2D:axis_1": (lambda v: addons.split2D(np.ones((4, 4, 4)), 2, 2, v, 2), 1),
    "popxl_addons.split2D:axis_2": (lambda v: addons.split2D(np.ones((4, 4, 4)), 2, 2, 0, v), 2),
    "popxl_addons.unshard2D:n_1": (lambda v: addons.unshard2D(np.ones((4, 2, 2)), v, 2, 0, 1), 2),
    "popxl_addons.unshard2D:n_2": (lambda v: addons.unshard2D(np.ones((4, 2, 2)), 2, v, 0, 1), 2),
    "popxl_addons.unshard2D:axis_1": (lambda v: addons.unshard2D(np.ones((4, 2, 2, 2)), 2, 2, v, 2), 1),
    "popxl_addons.unshard2D:axis_2": (lambda v: addons.unshard2D(np.ones((4, 2, 2, 2)), 2, 2, 0, v), 2),
    "popxl_addons.tensor_parallel_input:tp": (lambda v: addons.tensor_parallel_input(np.ones((2, 3)), v, 4), 2),
    "popxl_addons.tensor_parallel_input:rf": (lambda v: addons.tensor_parallel_input(np.ones((2, 3)), 2, v), 4),
    "popxl_addons.tensor_parallel_output:num_host_transfers": (
        lambda v: addons.tensor_parallel_output(np.ones((2, 4, 3)), v, 2, 4, (3,)),
        2,
    ),
    "popxl_addons.tensor_parallel_output:tp": (
        lambda v: addons.tensor_parallel_output(np.ones((2, 4, 3)), 2, v, 4, (3,)),
        2,
    ),
    "popxl_addons.tensor_parallel_output:rf": (
        lambda v: addons.tensor_parallel_output(np.ones((2, 4, 3)), 2, 2, v, (3,)),
        4,
    ),
    "popxl_addons.tensor_parallel_output:true_num_host_transfers": (
        lambda v: addons.tensor_parallel_output(np.ones((2, 4, 3)), 2, 2, 4, (3,), true_num_host_transfers=v),
        2,
    ),
}

# parameter -> why a bool is a legitimate value there
EXEMPT: dict[str, str] = {
    "popxl_addons.VariableFactory.__init__:data_iter": "the variable's data: True is the value of a bool variable",
    "popxl_addons.pad_axis:value": "the fill value: True pads a bool array",
    "popxl_addons.named_variable_buffers:shard_over_dict": "a bool is upstream's on/off switch for sharding",
    "popxl_addons.DotTree.get:key": "a key of a tree of names (ints are positions of a list-like level)",
    "popxl_addons.DotTree.insert:key": "a key of a tree of names",
    "popxl_addons.DotTree.pop:key": "a key of a tree of names",
    "popxl_addons.Module.get:key": "a key of a tree of names",
    "popxl_addons.Module.add_variable_inputs:name": "a name (or a position) in the module's tree",
}


def test_every_int_parameter_is_listed() -> None:
    derived = set(_int_parameters())
    assert derived, "no int parameter found: the signature scan is broken"
    unlisted = sorted(derived - set(CALLS) - set(EXEMPT))
    assert not unlisted, f"int parameters with no bool check listed here: {unlisted}"
    stale = sorted((set(CALLS) | set(EXEMPT)) - derived)
    assert not stale, f"listed parameters that no longer exist: {stale}"


def _arg_name(param: str) -> str:
    """What the message must name: the parameter, or the property a setter sets."""
    return param.split(":", 1)[1] if ":" in param else param.rsplit(".", 1)[1]


@pytest.mark.parametrize("param", sorted(CALLS))
def test_a_valid_int_is_accepted(param: str) -> None:
    call, valid = CALLS[param]
    call(valid)


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("param", sorted(CALLS))
def test_a_bool_is_refused(param: str, value: bool) -> None:
    call, _ = CALLS[param]
    # RuntimeError: the float8 casts' log2_scale, as upstream
    with pytest.raises((TypeError, ValueError, RuntimeError)) as e:
        call(value)
    msg = str(e.value)
    assert _arg_name(param) in msg and str(value) in msg, f"{param}={value}: the message names neither: {msg}"
