"""Graph helpers shared by the passes that rewrite gradient graphs (`accumulate`, `recompute`)."""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, SSAValue

from xl.dialects.graph import GraphOp, graphs_by_name
from xl.dialects.ipu import IPU_ATTR
from xl.passes.autodiff_info import AutodiffError, GradInfo


def graph_placement(graph: GraphOp) -> Attribute | None:
    """The `ipu.id` of the graph's ops when they all agree (else None). New ops take the
    gradient graph's placement, else the forward graph's."""
    ids = {op.attributes[IPU_ATTR] for op in graph.body.walk() if IPU_ATTR in op.attributes}
    return next(iter(ids)) if len(ids) == 1 else None


def set_name_hint(value: SSAValue, name: str | None) -> None:
    """Sets `value.name_hint` to `name`, unless it is not a valid SSA name."""
    try:
        value.name_hint = name
    except ValueError:  # not a valid SSA name
        pass


def grad_and_forward(
    module: ModuleOp, graph: str, pass_name: str, error: type[Exception]
) -> tuple[dict[str, GraphOp], GraphOp, GradInfo, GraphOp]:
    """The module's graphs by name, gradient graph `@graph`, its `GradInfo` and its forward
    graph; raises `error` (messages prefixed `<pass_name>: `) when any is missing."""
    graphs = graphs_by_name(module)
    grad = graphs.get(graph)
    if grad is None:
        raise error(f"{pass_name}: no graph @{graph} in the module")
    try:
        info = GradInfo.from_graph(grad)
    except AutodiffError as e:
        raise error(f"{pass_name}: {e}") from None
    fwd = graphs.get(info.forward)
    if fwd is None:
        raise error(f"{pass_name}: @{graph} is the gradient graph of @{info.forward}, which is not in the module")
    return graphs, grad, info, fwd
