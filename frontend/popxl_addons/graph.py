"""`GraphWithNamedArgs` and `BoundGraph` (popxl_addons/graph.py).

A `GraphWithNamedArgs` is a `popxl.Graph` plus `NamedTensors` naming some of its
inputs (the variables a module added with `add_variable_input`). Binding it to
main-graph variables with the same names gives a `BoundGraph`, whose `call` only
needs the remaining (positional) inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import popxl
import popxl.ops as ops
from popxl.printing import schedule_str as popxl_schedule_str
from popxl_addons.dot_tree import DotTree
from popxl_addons.named_tensors import NamedTensors

if TYPE_CHECKING:
    from popxl_addons.module import Aux

__all__ = ["GraphWithNamedArgs", "BoundGraph", "TensorMap", "schedule_str"]

TensorMap = Mapping[Any, Any]


def _check_graph(graph: Any, what: str) -> None:
    if not isinstance(graph, popxl.Graph):
        raise TypeError(f"{what}: graph must be a popxl.Graph, got {type(graph).__name__}")


def _as_tensor_map(graph_args: NamedTensors, args: Any, what: str = "GraphWithNamedArgs.bind") -> dict[Any, Any]:
    """`args` as {graph tensor: parent tensor}: a Mapping, or a DotTree matched by key."""
    if args is not None and not isinstance(args, DotTree | Mapping):
        raise TypeError(
            f"{what}: args must be a NamedTensors or a mapping of graph inputs to tensors, got {type(args).__name__}"
        )
    if args is None:
        return {}
    if isinstance(args, DotTree):
        return graph_args.to_mapping(args)
    return dict(args)


class BoundGraph:
    """A graph plus a mapping {graph input: parent tensor} supplied at every call."""

    def __init__(self, graph: Any, args: TensorMap | None = None):
        _check_graph(graph, "BoundGraph")
        if args is not None and not isinstance(args, Mapping):
            raise TypeError(f"BoundGraph: args must be a mapping of graph inputs to tensors, got {type(args).__name__}")
        self.graph = graph
        self.args: dict[Any, Any] = dict(args) if args is not None else {}

    def _inputs_dict(self, args: TensorMap | None) -> dict[Any, Any]:
        merged = dict(self.args)
        if args is not None:
            if not isinstance(args, Mapping):
                raise TypeError(
                    f"BoundGraph: args must be a mapping of graph inputs to tensors, got {type(args).__name__}"
                )
            merged.update(dict(args))
        return merged

    def call(self, *targs: Any, args: TensorMap | None = None) -> tuple:
        """`ops.call(graph, *targs, inputs_dict=bound args | args)`: the output tensors."""
        return ops.call(self.graph, *targs, inputs_dict=self._inputs_dict(args))

    def call_with_info(self, *targs: Any, args: TensorMap | None = None) -> Any:
        """Like `call` but returns the `CallSiteInfo`."""
        return ops.call_with_info(self.graph, *targs, inputs_dict=self._inputs_dict(args))

    def bind(self, args: TensorMap | None = None) -> BoundGraph:
        """A new BoundGraph with `args` added to (and overriding) the bound args."""
        return BoundGraph(self.graph, self._inputs_dict(args))

    def subgraph_io_map(self, *targs: Any, args: TensorMap | None = None, outs: Any = None) -> dict[Any, Any]:
        """{graph tensor: parent tensor} for the positional inputs, the bound/extra args
        and (if given) the outputs."""
        io: dict[Any, Any] = {}
        inputs = list(self.graph.inputs)
        for sg_t, t in zip(inputs, targs):
            io[sg_t] = t
        io.update(self._inputs_dict(args))
        if outs is not None:
            if not isinstance(outs, tuple | list):
                outs = (outs,)
            for sg_t, t in zip(self.graph.outputs, outs):
                io[sg_t] = t
        return io


class GraphWithNamedArgs:
    """A `popxl.Graph` and the `NamedTensors` naming its variable inputs.

    Args:
        graph: the graph.
        args: named inputs of the graph (default: none).
        grad_graph_info: the `GradGraphInfo` when this is a gradient graph.
        from_module: the module the graph was built from.
        aux: auxiliary named tensors of the module.
        called_graphs_grad_info: {called graph: GradGraphInfo} to reuse when autodiffing.
    """

    def __init__(
        self,
        graph: Any,
        args: NamedTensors | None = None,
        grad_graph_info: Any = None,
        from_module: Any = None,
        aux: NamedTensors | Aux | None = None,
        called_graphs_grad_info: Mapping[Any, Any] | None = None,
    ):
        _check_graph(graph, "GraphWithNamedArgs")
        from popxl_addons.module import Aux, normalise_called_graphs_grad_info

        if args is not None and not isinstance(args, NamedTensors):
            raise TypeError(f"GraphWithNamedArgs: args must be a NamedTensors, got {type(args).__name__}")
        if aux is not None and not isinstance(aux, NamedTensors | Aux):
            raise TypeError(f"GraphWithNamedArgs: aux must be a NamedTensors, got {type(aux).__name__}")
        if isinstance(aux, NamedTensors):
            converted = Aux()
            for k, v in aux.to_dict().items():
                converted[k] = v
            aux = converted
        self.graph = graph
        self.args: NamedTensors = args if args is not None else NamedTensors()
        self._grad_graph_info = grad_graph_info
        self._from_module = from_module
        self.aux: Aux = aux if aux is not None else Aux()
        self.called_graphs_grad_info: dict[Any, Any] = normalise_called_graphs_grad_info(called_graphs_grad_info)
        self.autodiff_applied = False

    @classmethod
    def from_grad_graph(cls, grad_graph_info: Any, args: NamedTensors | None = None):
        """The gradient graph of `grad_graph_info` (a `GradGraphInfo`) with named inputs `args`, keeping the info."""
        return cls(grad_graph_info.graph, args, grad_graph_info=grad_graph_info)

    @property
    def grad_graph_info(self) -> Any:
        """The `GradGraphInfo` of a gradient graph (from `autodiff`); AttributeError for other graphs."""
        if self._grad_graph_info is None:
            raise AttributeError(
                f"GraphWithNamedArgs of graph '{self.graph.name}' is not a gradient graph: it has no grad_graph_info"
            )
        return self._grad_graph_info

    @grad_graph_info.setter
    def grad_graph_info(self, value: Any) -> None:
        self._grad_graph_info = value

    @property
    def _aux(self) -> Any:
        return self.aux

    @property
    def from_module(self) -> Any:
        """The module this graph was built from (None if unknown)."""
        return self._from_module

    @property
    def is_grad_graph(self) -> bool:
        """Whether this is a gradient graph (it has a `grad_graph_info`)."""
        return self._grad_graph_info is not None

    def bind(self, args: TensorMap | NamedTensors | None = None) -> BoundGraph:
        """A BoundGraph binding the named inputs to the tensors of `args` with the same keys."""
        return BoundGraph(self.graph, _as_tensor_map(self.args, args))

    def call(self, *targs: Any, args: TensorMap | NamedTensors | None = None) -> tuple:
        """Call without bound args: every input must come from `targs` or `args`."""
        return BoundGraph(self.graph, _as_tensor_map(self.args, args, "GraphWithNamedArgs.call")).call(*targs)

    def call_with_info(self, *targs: Any, args: TensorMap | NamedTensors | None = None) -> Any:
        """Like `call`, but returns the `CallSiteInfo` of the call."""
        return BoundGraph(
            self.graph, _as_tensor_map(self.args, args, "GraphWithNamedArgs.call_with_info")
        ).call_with_info(*targs)

    def autodiff(
        self,
        grads_provided: Any = None,
        grads_required: Any = None,
        called_graphs_grad_info: Any = None,
        method: str = "auto",
        force: bool = False,
    ) -> GraphWithNamedArgs:
        """The gradient graph of this graph.

        `method`: 'build_grad' uses the `build_grad` of the module the graph was built from
        (`Module.create_grad_graph`); 'autodiff' the autodiff transform
        (`popxl_addons.transforms.autodiff`, with `called_graphs_grad_info` merged with this
        graph's own, which win); 'auto' (default) the first when the module defines
        `build_grad`, else the second. Raises if autodiff was already applied, unless `force`.
        """
        from popxl_addons.module import normalise_called_graphs_grad_info

        if method not in ("auto", "autodiff", "build_grad"):
            raise ValueError(f"`method` should be one of 'auto', 'build_grad' or 'autodiff'. Not: {method!r}")
        if self.autodiff_applied and not force:
            raise ValueError(
                f"Autodiff has already been applied to graph '{self.graph.name}' (it adds the "
                "activations to the forward graph's outputs); pass force=True to apply it again"
            )
        module = self._from_module
        if method in ("auto", "build_grad"):
            if module is not None and getattr(module, "implements_grad_graph", False):
                result = module.create_grad_graph(self, grads_provided=grads_provided, grads_required=grads_required)
                self.autodiff_applied = True
                return result
            if method == "build_grad":
                raise ValueError(
                    f"autodiff(method='build_grad') of graph '{self.graph.name}': it needs the "
                    "module's `build_grad` overridden and `from_module` is specified when this "
                    "GraphWithNamedArgs was made (it has "
                    + (
                        "no from_module)"
                        if module is None
                        else f"module {type(module).__name__}, which has no build_grad)"
                    )
                )
        from popxl_addons.transforms.autodiff import autodiff

        called = normalise_called_graphs_grad_info(called_graphs_grad_info)
        called.update(self.called_graphs_grad_info)
        result = autodiff(
            self.graph,
            grads_provided=grads_provided,
            grads_required=grads_required,
            called_graphs_grad_info=called,
        )
        self.autodiff_applied = True
        return result

    def copy(self) -> GraphWithNamedArgs:
        """A shallow copy (same graph; args/aux trees copied; module and grad info kept)."""
        new = GraphWithNamedArgs(
            self.graph,
            self.args.copy(),
            self._grad_graph_info,
            self._from_module,
            self.aux.copy(),
            self.called_graphs_grad_info,
        )
        new.autodiff_applied = self.autodiff_applied
        return new

    def print_schedule(self) -> str:
        """The graph's ops in schedule order, PopART style (see `schedule_str`)."""
        return schedule_str(self.graph, self.args)


def schedule_str(graph: Any, args: NamedTensors | None = None) -> str:
    """PopART-style schedule text of `graph` (`popxl.printing.schedule_str`); the inputs in
    `args` are shown by their key (`weight=%2`):

    ```
    Graph : Linear_subgraph(0)
      (%1, weight=%2, bias=%3) -> (%5) {
        MatMul.100 (%1 [(2, 4) float32], %2 [(4, 32) float32]) -> (%4 [(2, 32) float32])
        Add.101 (%4 [(2, 32) float32], %3 [(32,) float32]) -> (%5 [(2, 32) float32])
      }
    ```
    """
    _check_graph(graph, "schedule_str")
    names = {t: k for k, t in args.to_dict().items()} if args is not None else None
    return popxl_schedule_str(graph, names)
