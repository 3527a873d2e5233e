"""`popxl.transforms.autodiff` (popxl/transforms/autodiff.py).

Runs the `autodiff` pass (`xl.passes.autodiff`) on the Ir's module and wraps the
gradient graph it creates. The expected connections live in the IR (attributes on
the gradient graph), so `GradGraphInfo` is only a view: it is rebuilt from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, overload

from popxl.errors import PopartException
from xl.dialects.graph import GraphOp
from xl.passes.autodiff import (
    FWD_GRAD,
    FWD_INPUT,
    AutodiffError,
    GradInfo,
)
from xl.passes.autodiff import autodiff as _autodiff_pass

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.tensor import Tensor

__all__ = ["ExpectedConnection", "ExpectedConnectionType", "GradGraphInfo", "autodiff"]


class ExpectedConnectionType(Enum):
    """What a gradient graph input (or output) corresponds to in the forward graph."""

    Fwd = "Fwd"
    """A forward tensor (an input or output of the forward graph)."""
    FwdGrad = "FwdGrad"
    """The gradient of a forward tensor."""

    def __str__(self) -> str:
        return f"ExpectedConnectionType.{self.name}"

    def __repr__(self) -> str:
        return str(self)


class ExpectedConnection:
    """One expected connection of a gradient graph: a forward tensor and its kind."""

    # set by `_create` (the only constructor)
    _fwd_tensor: Tensor
    _connection_type: ExpectedConnectionType
    _kind: str
    _index: int

    def __init__(self) -> None:
        raise TypeError(
            "ExpectedConnection cannot be constructed directly; use GradGraphInfo.expected_inputs or expected_outputs"
        )

    @classmethod
    def _create(
        cls, fwd_tensor: Tensor, connection_type: ExpectedConnectionType, kind: str, index: int
    ) -> ExpectedConnection:
        ec = cls.__new__(cls)
        ec._fwd_tensor = fwd_tensor
        ec._connection_type = connection_type
        ec._kind = kind  # "fwd_grad" | "fwd_input" | "fwd_output"
        ec._index = index  # forward output (fwd_grad, fwd_output) or input (fwd_input) index
        return ec

    @property
    def fwd_tensor(self) -> Tensor:
        """The forward graph's tensor the connection stands for (an input or an output of it)."""
        return self._fwd_tensor

    @property
    def connection_type(self) -> ExpectedConnectionType:
        """`ExpectedConnectionType.Fwd` (the forward tensor itself) or `FwdGrad` (its gradient)."""
        return self._connection_type

    def _parent(self, call_info: Any) -> Tensor:
        """The tensor in the caller of the forward graph that this connection refers to."""
        if self._kind == FWD_INPUT:
            return call_info.parent_input(self._index)
        return call_info.parent_output(self._index)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ExpectedConnection)
            and self._fwd_tensor == other._fwd_tensor
            and self._connection_type == other._connection_type
            and self._kind == other._kind
            and self._index == other._index
        )

    def __hash__(self) -> int:
        return hash((self._fwd_tensor, self._connection_type, self._kind, self._index))

    def __repr__(self) -> str:
        return f"({self._connection_type}, {self._fwd_tensor})"


class GradGraphInfo:
    """A gradient graph and how its inputs and outputs relate to the forward graph."""

    # set by `from_graph` (the only constructor)
    _graph: Graph
    _forward_graph: Graph
    _info: GradInfo

    def __init__(self) -> None:
        raise TypeError("GradGraphInfo cannot be constructed directly; use popxl.transforms.autodiff")

    @classmethod
    def from_graph(cls, grad_graph: Graph) -> GradGraphInfo:
        """The info of a gradient graph, read from its `autodiff.*` attributes (e.g. a
        graph made by a pass from a gradient graph; ValueError for another graph)."""
        op = grad_graph._op
        if not isinstance(op, GraphOp):
            raise ValueError(f"GradGraphInfo.from_graph: graph {grad_graph.name!r} is not a gradient graph")
        try:
            info = GradInfo.from_graph(op)
        except AutodiffError as e:
            raise ValueError(f"GradGraphInfo.from_graph: {e}") from None
        ir = grad_graph.ir
        fwd = ir._graph_by_name(info.forward)
        g = cls.__new__(cls)
        g._graph = grad_graph
        g._forward_graph = fwd
        g._info = info
        return g

    @classmethod
    def create(
        cls,
        forward_graph: Graph,
        grad_graph: Graph,
        expected_inputs: Iterable[tuple[str, int]],
        expected_outputs: Iterable[int],
    ) -> GradGraphInfo:
        """Record connections on a (hand-built) gradient graph and return its info.

        `expected_inputs`: one `(kind, index)` per leading gradient graph input, kind
        `"fwd_grad"` (gradient of forward output `index`), `"fwd_input"` (forward
        input `index`) or `"fwd_output"` (forward output `index`); inputs after them
        are other arguments (e.g. the accumulators added by `accumulate`).
        `expected_outputs`: the forward input index of each gradient graph output.
        """
        op = grad_graph._op
        assert isinstance(op, GraphOp)
        info = GradInfo(
            forward_graph.name,
            tuple((str(k), int(i)) for k, i in expected_inputs),
            tuple(int(i) for i in expected_outputs),
        )
        n_in = len(op.body.block.args)
        n_out = len(op.function_type.outputs.data)
        if len(info.expected_inputs) > n_in or len(info.expected_outputs) != n_out:
            raise ValueError(
                f"GradGraphInfo: graph {grad_graph.name!r} has {n_in} inputs and {n_out} outputs; "
                f"got {len(info.expected_inputs)} expected inputs and "
                f"{len(info.expected_outputs)} expected outputs"
            )
        op.attributes.update(info.to_attributes())
        return cls.from_graph(grad_graph)

    # -- properties ---------------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        """The gradient graph."""
        return self._graph

    @property
    def forward_graph(self) -> Graph:
        """The graph this gradient graph differentiates."""
        return self._forward_graph

    def _refresh(self) -> GradInfo:
        op = self._graph._op
        assert isinstance(op, GraphOp), "a gradient graph is a subgraph"
        self._info = GradInfo.from_graph(op)
        return self._info

    @property
    def connections(self) -> tuple[tuple[tuple[str, int], ...], tuple[int, ...]]:
        """The expected connections by index, in the form `create` takes:
        `(expected_inputs, expected_outputs)`, each input a `(kind, index)` pair."""
        info = self._refresh()
        return tuple(info.expected_inputs), tuple(info.expected_outputs)

    def _connection(self, kind: str, index: int) -> ExpectedConnection:
        fwd = self._forward_graph
        if kind == FWD_INPUT:
            t = fwd.inputs[index]
            ctype = ExpectedConnectionType.Fwd
        else:
            t = fwd.outputs[index]
            ctype = ExpectedConnectionType.FwdGrad if kind == FWD_GRAD else ExpectedConnectionType.Fwd
        return ExpectedConnection._create(t, ctype, kind, index)

    @property
    def expected_inputs(self) -> tuple[ExpectedConnection, ...]:
        """One connection per gradient graph input: `FwdGrad` entries (gradients of
        forward outputs, in `grads_provided` order) then `Fwd` entries (forward tensors)."""
        info = self._refresh()
        return tuple(self._connection(k, i) for k, i in info.expected_inputs)

    @property
    def expected_outputs(self) -> tuple[ExpectedConnection, ...]:
        """One `FwdGrad` connection per gradient graph output (the forward input it is
        the gradient of)."""
        info = self._refresh()
        fwd = self._forward_graph
        return tuple(
            ExpectedConnection._create(fwd.inputs[i], ExpectedConnectionType.FwdGrad, FWD_INPUT, i)
            for i in info.expected_outputs
        )

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The forward tensors of `expected_inputs`."""
        return tuple(ec.fwd_tensor for ec in self.expected_inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The forward tensors of `expected_outputs`."""
        return tuple(ec.fwd_tensor for ec in self.expected_outputs)

    # -- connecting call sites ---------------------------------------------------------------------
    def _check_call_info(self, call_info: Any, graph: Graph, what: str) -> None:
        called = getattr(call_info, "called_graph", None)
        if called != graph:
            cname = called.name if called is not None else type(call_info).__name__
            raise TypeError(
                f"{what}: the call site calls graph {cname!r}, not {graph.name!r} (the "
                f"{'forward' if graph == self._forward_graph else 'gradient'} graph of this "
                "GradGraphInfo)"
            )

    def inputs_dict(self, fwd_call_info: Any) -> dict[Tensor, Tensor]:
        """{gradient graph input: tensor in the caller} for every `Fwd` connection, using
        a call site of the forward graph (`ops.call_with_info`)."""
        self._check_call_info(fwd_call_info, self._forward_graph, "GradGraphInfo.inputs_dict")
        grad_inputs = self._graph.inputs
        out: dict[Tensor, Tensor] = {}
        for idx, ec in enumerate(self.expected_inputs):
            if ec.connection_type == ExpectedConnectionType.Fwd:
                out[grad_inputs[idx]] = ec._parent(fwd_call_info)
        return out

    def fwd_graph_ins_to_grad_parent_outs(self, grad_call_info: Any) -> dict[Tensor, Tensor]:
        """{forward graph input: its gradient in the caller of the gradient graph}."""
        self._check_call_info(grad_call_info, self._graph, "GradGraphInfo.fwd_graph_ins_to_grad_parent_outs")
        return {ec.fwd_tensor: grad_call_info.parent_output(idx) for idx, ec in enumerate(self.expected_outputs)}

    def fwd_parent_ins_to_grad_parent_outs(self, fwd_call_info: Any, grad_call_info: Any) -> dict[Tensor, Tensor]:
        """{tensor passed to the forward call: its gradient from the gradient call}."""
        self._check_call_info(fwd_call_info, self._forward_graph, "GradGraphInfo.fwd_parent_ins_to_grad_parent_outs")
        self._check_call_info(grad_call_info, self._graph, "GradGraphInfo.fwd_parent_ins_to_grad_parent_outs")
        return {
            ec._parent(fwd_call_info): grad_call_info.parent_output(idx) for idx, ec in enumerate(self.expected_outputs)
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GradGraphInfo) and self._graph == other._graph

    def __hash__(self) -> int:
        return hash(self._graph)

    def __repr__(self) -> str:
        result = "GradGraphInfo[\n"
        result += f"  graph={self.graph.id}\n"
        result += "  expected_inputs=[\n"
        result += "".join(f"    {e!r}\n" for e in self.expected_inputs)
        result += "  ]\n"
        result += "  expected_outputs=[\n"
        result += "".join(f"    {e!r}\n" for e in self.expected_outputs)
        result += "  ]\n"
        result += "]"
        return result


def _tensor_indices(
    tensors: Iterable[Tensor], candidates: tuple[Tensor, ...], graph: Graph, what: str, where: str
) -> list[int]:
    from popxl.tensor import Tensor

    if isinstance(tensors, Tensor) or not isinstance(tensors, Iterable):
        raise TypeError(f"autodiff: {what} must be an iterable of Tensors, got {type(tensors).__name__}")
    idx: list[int] = []
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"autodiff: {what} must contain Tensors, got {type(t).__name__}")
        for i, c in enumerate(candidates):
            if c is t or c._value is t._value:
                idx.append(i)
                break
        else:
            if t.graph != graph:
                raise ValueError(
                    f"autodiff: {what}: tensor {t.id} is not in graph {graph.name!r} "
                    f"(it belongs to graph {t.graph.name!r})"
                )
            raise ValueError(f"autodiff: {what}: tensor {t.id} is not {where} of graph {graph.name!r}")
    return idx


class AutodiffBuildError(AutodiffError, PopartException):
    """A graph that `autodiff` cannot differentiate: an `AutodiffError` (a ValueError) and
    `popart.popart_exception`, as PopART's autodiff raises it."""


@overload
def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: Mapping[Graph, GradGraphInfo] | None = None,
    return_all_grad_graphs: Literal[False] = False,
) -> GradGraphInfo: ...


@overload
def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: Mapping[Graph, GradGraphInfo] | None = None,
    *,
    return_all_grad_graphs: Literal[True],
) -> dict[Graph, GradGraphInfo]: ...


@overload
def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: Mapping[Graph, GradGraphInfo] | None = None,
    return_all_grad_graphs: bool = False,
) -> GradGraphInfo | dict[Graph, GradGraphInfo]: ...


def autodiff(
    graph: Graph,
    grads_provided: Iterable[Tensor] | None = None,
    grads_required: Iterable[Tensor] | None = None,
    called_graphs_grad_info: Mapping[Graph, GradGraphInfo] | None = None,
    return_all_grad_graphs: bool = False,
) -> GradGraphInfo | dict[Graph, GradGraphInfo]:
    """Creates the gradient graph of `graph`.

    Args:
        graph: the forward graph.
        grads_provided: forward outputs whose gradients the gradient graph takes as its
            first inputs, in this order (default: all floating point outputs).
        grads_required: forward inputs whose gradients the gradient graph returns, in
            this order (default: all floating point inputs).
        called_graphs_grad_info: gradient graphs to use for the subgraphs that `graph`
            calls (others are differentiated recursively).
        return_all_grad_graphs: return {forward graph: GradGraphInfo} for every
            gradient graph used (the called subgraphs' included).

    The forward tensors the gradient graph needs become extra outputs of `graph`
    (existing call sites of it get the new outputs).
    """
    from popxl.graph import Graph

    if not isinstance(graph, Graph):
        raise TypeError(f"autodiff: expected a popxl.Graph, got {type(graph).__name__}")
    if graph._is_main:
        raise ValueError("autodiff: the main graph cannot be differentiated; use a subgraph")
    ir = graph.ir
    provided = (
        None
        if grads_provided is None
        else _tensor_indices(grads_provided, graph.outputs, graph, "grads_provided", "an output")
    )
    required = (
        None
        if grads_required is None
        else _tensor_indices(grads_required, graph.inputs, graph, "grads_required", "an input")
    )
    called: dict[str, str] = {}
    given: dict[Graph, GradGraphInfo] = {}
    if called_graphs_grad_info is not None and not isinstance(called_graphs_grad_info, Mapping):
        raise TypeError(
            "autodiff: called_graphs_grad_info must map graphs to GradGraphInfo, got "
            f"{type(called_graphs_grad_info).__name__}"
        )
    for fwd_g, info in (called_graphs_grad_info or {}).items():
        if not isinstance(info, GradGraphInfo):
            raise TypeError(
                f"autodiff: called_graphs_grad_info values must be GradGraphInfo, got {type(info).__name__}"
            )
        if info.forward_graph != fwd_g:
            raise ValueError(
                f"autodiff: called_graphs_grad_info: {info.graph.name!r} is the gradient graph of "
                f"{info.forward_graph.name!r}, not of {fwd_g.name!r}"
            )
        called[fwd_g.name] = info.graph.name
        given[fwd_g] = info
    try:
        grad_op, created = _autodiff_pass(ir._module, graph.name, provided, required, called_grad_graphs=called)
    except AutodiffError as e:
        # PopART's autodiff raises its exception type (popart.popart_exception catches it)
        raise AutodiffBuildError(*e.args) from None
    from popxl.graph import Graph as _G

    top = GradGraphInfo.from_graph(_G._from_op(ir, grad_op))
    if not return_all_grad_graphs:
        return top
    out: dict[Graph, GradGraphInfo] = dict(given)
    for g_op in created.values():
        info = GradGraphInfo.from_graph(_G._from_op(ir, g_op))
        out[info.forward_graph] = info
    out[graph] = top
    return out
