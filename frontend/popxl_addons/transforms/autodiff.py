"""`addons.autodiff` (popxl_addons/transforms/autodiff.py).

`popxl.transforms.autodiff` (the `autodiff` pass) for a `GraphWithNamedArgs`, with
the gradient graphs of called subgraphs recorded on the graph reused, returning the
gradient graph as a `GraphWithNamedArgs` carrying its `grad_graph_info`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import popxl
from popxl.transforms.autodiff import GradGraphInfo
from popxl.transforms.autodiff import autodiff as _popxl_autodiff
from popxl_addons.graph import GraphWithNamedArgs

__all__ = ["autodiff", "remap_grad_info"]  # and autodiff_with_accumulation, through __getattr__


def autodiff(
    graph: GraphWithNamedArgs | popxl.Graph,
    grads_provided: Iterable[popxl.Tensor] | None = None,
    grads_required: Iterable[popxl.Tensor] | None = None,
    called_graphs_grad_info: Mapping[popxl.Graph, GradGraphInfo] | None = None,
    *,
    force: bool = False,
) -> GraphWithNamedArgs:
    """The gradient graph of `graph`, as a `GraphWithNamedArgs` with `grad_graph_info`.

    Args:
        graph: the forward graph (a `GraphWithNamedArgs` or a `popxl.Graph`).
        grads_provided: forward outputs whose gradients are the gradient graph's
            first inputs (default: all).
        grads_required: forward inputs whose gradients it returns (default: all).
        called_graphs_grad_info: gradient graphs for called subgraphs; merged over
            `graph.called_graphs_grad_info` (these win).
        force: differentiate a graph again although autodiff was already applied to it
            (it adds the activations to the forward graph's outputs once more).

    Raises ValueError if autodiff was already applied to this `GraphWithNamedArgs`.
    """
    gwna: GraphWithNamedArgs | None = None
    if isinstance(graph, GraphWithNamedArgs):
        gwna = graph
        fwd = graph.graph
    elif isinstance(graph, popxl.Graph):
        fwd = graph
    else:
        raise TypeError(f"addons.autodiff: expected a GraphWithNamedArgs or popxl.Graph, got {type(graph).__name__}")
    if gwna is not None and gwna.autodiff_applied and not force:
        raise ValueError(
            f"addons.autodiff: autodiff has already been applied to graph '{fwd.name}' (it adds "
            "the activations to the forward graph's outputs); pass force=True to apply it again"
        )
    from popxl_addons.module import check_recursively_autodiffable, normalise_called_graphs_grad_info

    called: dict[popxl.Graph, GradGraphInfo] = {}
    if gwna is not None:
        called.update(gwna.called_graphs_grad_info)
    called.update(normalise_called_graphs_grad_info(called_graphs_grad_info))
    check_recursively_autodiffable(fwd, called)
    infos = _popxl_autodiff(
        fwd,
        grads_provided=grads_provided,
        grads_required=grads_required,
        called_graphs_grad_info=called,
        return_all_grad_graphs=True,
    )
    assert isinstance(infos, dict)
    if gwna is not None:
        gwna.autodiff_applied = True
    return GraphWithNamedArgs.from_grad_graph(infos[fwd])


def remap_grad_info(grad_info: GradGraphInfo, forward_graph: popxl.Graph, backward_graph: popxl.Graph) -> GradGraphInfo:
    """`grad_info`'s expected connections re-targeted, by index, to `forward_graph` and
    `backward_graph` (e.g. copies of the original graphs)."""
    expected_inputs, expected_outputs = grad_info.connections
    return GradGraphInfo.create(forward_graph, backward_graph, expected_inputs, expected_outputs)


def __getattr__(name: str) -> object:
    # upstream defines autodiff_with_accumulation in this module; here it lives in
    # popxl_addons.transforms.accumulate (which imports this module), so it is looked up late
    if name == "autodiff_with_accumulation":
        from popxl_addons.transforms.accumulate import autodiff_with_accumulation

        return autodiff_with_accumulation
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
