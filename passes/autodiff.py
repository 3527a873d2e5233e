"""`autodiff`: builds the gradient graph of a `graph.graph` (popxl.transforms.autodiff).

```mlir
// xl-opt -p 'autodiff{graph=linear}'
graph.graph @linear(%x: tensor<2x4xf32>, %w: tensor<4x3xf32>) -> (tensor<2x3xf32>) {
  %y = popxl.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  graph.output %y : tensor<2x3xf32>
}
// after: a new graph `@linear_grad`
graph.graph @linear_grad(%dy: tensor<2x3xf32> {graph.name = "Gradient___y"},
                         %w: tensor<4x3xf32> {graph.name = "w"},
                         %x: tensor<2x4xf32> {graph.name = "x"})
    -> (tensor<2x4xf32>, tensor<4x3xf32>) attributes {
      autodiff.forward = @linear,
      autodiff.expected_inputs = [["fwd_grad", 0 : i64], ["fwd_input", 1 : i64], ["fwd_input", 0 : i64]],
      autodiff.expected_outputs = array<i64: 0, 1>} { ... }
```

Options: `graph` (the forward graph), `grads_provided` (forward output indices
whose gradients are the first inputs of the gradient graph, in that order; default:
all floating point outputs), `grads_required` (forward input indices whose
gradients are the outputs, in that order; default: all floating point inputs),
`grad_graph` (name of the new graph; default `<graph>_grad`, made unique) and
`called_grad_graphs` (`fwd:grad` pairs: gradient graphs to use for called
subgraphs instead of differentiating them).

The gradient graph's inputs are the provided gradients followed by the forward
tensors it needs; the expected connections are stored as attributes on it:

- `autodiff.forward = @fwd`
- `autodiff.expected_inputs = [[kind, index], ...]`, one per input, where kind is
  `"fwd_grad"` (the gradient of forward output `index`), `"fwd_input"` (forward
  input `index`) or `"fwd_output"` (forward output `index`);
- `autodiff.expected_outputs = array<i64: ...>`: the forward input of each output.

Forward intermediates that the gradient needs become extra outputs of the forward
graph (which is mutated, as in PopXL): its type and every `call.call` of it get the
new results (in place: existing results and ops stay valid). Calls into subgraphs
are differentiated recursively, each subgraph getting its own gradient graph
(`autodiff.forward` names it). Inputs that do not influence the provided outputs get
zero gradients; gradients of tensors used several times are summed; non-float
tensors get none. A forward graph that modifies one of its inputs in place is
refused, as PopXL does. In-place ops on the graph's own intermediates are first
rewritten into their out-of-place forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    BlockArgument,
    Operation,
    OpResult,
    Region,
    SSAValue,
    SSAValues,
)
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import CallOp, ConditionalOp, RepeatOp
from xl.dialects.graph import ConstantOp, GraphOp, OutputOp
from xl.dialects.utils import dtype_of, element_type, fmt_type, shape_of
from xl.passes.grad_rules import GRAD_RULES, NO_GRAD, Grads

FORWARD_ATTR = "autodiff.forward"
EXPECTED_INPUTS_ATTR = "autodiff.expected_inputs"
EXPECTED_OUTPUTS_ATTR = "autodiff.expected_outputs"

FWD_GRAD = "fwd_grad"
FWD_INPUT = "fwd_input"
FWD_OUTPUT = "fwd_output"
KINDS = (FWD_GRAD, FWD_INPUT, FWD_OUTPUT)


class AutodiffError(ValueError):
    """A graph cannot be differentiated as asked."""


# ------------------------------------------------------------------------------------
# Gradient graph info as stored in the IR
# ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GradInfo:
    """The expected connections of a gradient graph (read from / written to its attributes)."""

    forward: str
    expected_inputs: tuple[tuple[str, int], ...]
    expected_outputs: tuple[int, ...]

    def to_attributes(self) -> dict[str, Attribute]:
        return {
            FORWARD_ATTR: SymbolRefAttr(self.forward),
            EXPECTED_INPUTS_ATTR: ArrayAttr(
                [ArrayAttr([StringAttr(k), IntegerAttr(i, i64)]) for k, i in self.expected_inputs]
            ),
            EXPECTED_OUTPUTS_ATTR: DenseArrayBase.from_list(i64, list(self.expected_outputs)),
        }

    @staticmethod
    def from_graph(grad: GraphOp) -> GradInfo:
        attrs = grad.attributes
        fwd = attrs.get(FORWARD_ATTR)
        ins = attrs.get(EXPECTED_INPUTS_ATTR)
        outs = attrs.get(EXPECTED_OUTPUTS_ATTR)
        if not isinstance(fwd, SymbolRefAttr) or ins is None or outs is None:
            raise AutodiffError(
                f"graph @{grad.graph_name} is not a gradient graph (it lacks the "
                f"'{FORWARD_ATTR}', '{EXPECTED_INPUTS_ATTR}' and '{EXPECTED_OUTPUTS_ATTR}' attributes)"
            )
        expected_inputs: list[tuple[str, int]] = []
        assert isinstance(ins, ArrayAttr)
        for e in ins.data:
            assert isinstance(e, ArrayAttr) and len(e.data) == 2, e
            k, i = e.data
            assert isinstance(k, StringAttr) and isinstance(i, IntegerAttr), e
            if k.data not in KINDS:
                raise AutodiffError(f"@{grad.graph_name}: unknown connection kind '{k.data}'")
            expected_inputs.append((k.data, i.value.data))
        if isinstance(outs, DenseArrayBase):
            expected_outputs = tuple(int(v) for v in outs.get_values())
        else:
            assert isinstance(outs, ArrayAttr)
            expected_outputs = tuple(int(v.value.data) for v in outs.data)  # type: ignore[attr-defined]
        return GradInfo(fwd.root_reference.data, tuple(expected_inputs), expected_outputs)


def is_grad_graph(op: Operation) -> bool:
    return isinstance(op, GraphOp) and FORWARD_ATTR in op.attributes


# ------------------------------------------------------------------------------------
# Module helpers
# ------------------------------------------------------------------------------------


def graphs_by_name(module: ModuleOp) -> dict[str, GraphOp]:
    return {op.graph_name: op for op in module.ops if isinstance(op, GraphOp)}


def unique_graph_name(module: ModuleOp, base: str) -> str:
    names = {
        op.sym_name.data  # type: ignore[attr-defined]
        for op in module.ops
        if "sym_name" in op.properties
    }
    if base not in names:
        return base
    i = 1
    while f"{base}_{i}" in names:
        i += 1
    return f"{base}_{i}"


def append_results(op: Operation, types: Sequence[Attribute]) -> list[OpResult]:
    """Appends results to `op` in place (its existing results stay valid)."""
    n = len(op.results)
    new = [OpResult(t, op, n + i) for i, t in enumerate(types)]
    op.results = SSAValues((*op.results, *new))
    return new


def call_sites(module: ModuleOp) -> dict[str, list[Operation]]:
    """Every op of the module that calls a graph, by callee name."""
    sites: dict[str, list[Operation]] = {}
    for op in module.walk():
        if isinstance(op, CallOp | RepeatOp):
            sites.setdefault(op.callee.root_reference.data, []).append(op)
        elif isinstance(op, ConditionalOp):
            for ref in (op.then_branch, op.else_branch):
                sites.setdefault(ref.root_reference.data, []).append(op)
    return sites


def add_graph_outputs(
    module: ModuleOp,
    graph: GraphOp,
    values: Sequence[SSAValue],
    sites: Sequence[Operation] | None = None,
) -> list[int]:
    """Makes `values` (of `graph`) extra outputs of `graph`; returns their output indices.

    Every `call.call` of the graph (`sites`, default: found in `module`) gets the new
    results in place.
    """
    if not values:
        return []
    name = graph.graph_name
    if sites is None:
        sites = call_sites(module).get(name, [])
    for op in sites:
        if isinstance(op, RepeatOp):
            raise AutodiffError(
                f"autodiff: cannot add outputs to graph @{name}: it is the body of a call.repeat"
            )
        if isinstance(op, ConditionalOp):
            raise AutodiffError(
                f"autodiff: cannot add outputs to graph @{name}: it is a branch of a call.conditional"
            )
    out_op = graph.output_op
    n = len(out_op.outs)
    out_op.operands = [*out_op.operands, *values]
    graph.update_function_type()
    types = [v.type for v in values]
    for site in sites:
        append_results(site, types)
    return list(range(n, n + len(values)))


def _writes(op: Operation) -> list[int]:
    """Operand indices that `op` updates in place."""
    idx = list(getattr(op, "WRITES", ()) or ())
    by_ref = getattr(op, "operand_is_by_ref", None)
    if by_ref is not None:
        for i in range(len(op.operands)):
            if i not in idx and by_ref(i):
                idx.append(i)
    return idx


def check_not_modifying(graph: GraphOp) -> None:
    args = set(graph.body.block.args)
    for op in graph.body.walk():
        for i in _writes(op):
            v = op.operands[i]
            if v in args:
                idx = graph.body.block.args.index(v)  # type: ignore[arg-type]
                raise AutodiffError(
                    f"The graph {graph.graph_name} contains a modifying op: {op.name} modifies "
                    f"its input '{graph.input_name(idx)}' (input {idx}); autodiff needs a "
                    "forward graph that does not modify its inputs"
                )


def _functional_form(op: Operation) -> Operation | None:
    """The out-of-place op computing the value that in-place `op` writes to operand 0."""
    from xl.dialects.popxl import IdentityOp, Popxl, ScaledAddOp, op_props

    props = op_props(op)
    if op.name == "popxl.copy_var_update_":
        return IdentityOp.make([op.operands[1]])
    if op.name == "popxl.accumulate_" and len(op.operands) == 2:
        return ScaledAddOp.make(list(op.operands), a=1.0, b=float(props.get("f", 1.0)))
    if not op.name.endswith("_"):
        return None
    base = op.name[:-1]
    cls = next((c for c in Popxl.operations if c.name == base), None)
    if cls is None:
        return None
    try:
        return cls.make(list(op.operands), **props)  # type: ignore[attr-defined]
    except Exception:
        return None


def functionalize(graph: GraphOp) -> None:
    """Rewrites in-place ops on the graph's own intermediates into out-of-place ops.

    `popxl.relu_ %x` becomes `%x2 = popxl.relu %x` and every later use of `%x` in
    the graph uses `%x2` (likewise `scaled_add_`, `add_`, `copy_var_update_`,
    `accumulate_` with a constant factor). Ops without a functional form are kept;
    `autodiff` refuses them if a gradient must flow through what they write.
    """
    block = graph.body.block
    for op in list(block.ops):
        w = _writes(op)
        if w != [0] or op.results:
            continue
        target = op.operands[0]
        if target in block.args:
            continue  # refused by check_not_modifying
        new = _functional_form(op)
        if new is None or len(new.results) != 1 or new.results[0].type != target.type:
            continue
        Rewriter.insert_op(new, InsertPoint.before(op))
        later: set[Operation] = set()
        cur = op.next_op
        while cur is not None:
            later.add(cur)
            cur = cur.next_op
        nv = new.results[0]
        if target.name_hint and nv.name_hint is None:
            nv.name_hint = target.name_hint
        for use in list(target.uses):
            if use.operation in later or _ancestor_in(use.operation, later):
                use.operation.operands[use.index] = nv
        Rewriter.erase_op(op)


def _ancestor_in(op: Operation, ops: set[Operation]) -> bool:
    p = op.parent_op()
    while p is not None:
        if p in ops:
            return True
        p = p.parent_op()
    return False


def _check_index(arg: str, index: int, kind: str, n: int, graph: str) -> None:
    """Raise unless `index` (from argument `arg`) names one of the `n` `kind`s of `@graph`."""
    if not 0 <= index < n:
        raise AutodiffError(
            f"autodiff: {arg} index {index} is not an {kind} of graph @{graph} ({n} {kind}s)"
        )


def _is_float(v: SSAValue) -> bool:
    t = v.type
    if not isinstance(t, TensorType):
        return False
    try:
        return dtype_of(t).kind == "f"
    except TypeError:
        return False


def _value_name(v: SSAValue, fallback: str) -> str:
    return v.name_hint if v.name_hint else fallback


# ------------------------------------------------------------------------------------
# The gradient builder
# ------------------------------------------------------------------------------------


def _resolve_op_class(name: str) -> type[Operation]:
    from xl.dialects.call import Call
    from xl.dialects.graph import Graph
    from xl.dialects.popxl import Popxl

    for d in (Popxl, Graph, Call):
        for c in d.operations:
            if c.name == name:
                return c
    raise AutodiffError(f"autodiff: the gradient needs the op '{name}', which is not defined")


class _GradGraphBuilder:
    """Builds the gradient graph of one forward graph (implements `GradBuilder`)."""

    def __init__(self, driver: Autodiff, fwd: GraphOp):
        self.driver = driver
        self.module = driver.module
        self.fwd_graph = fwd
        self.block = Block()
        self.expected_inputs: list[tuple[str, int]] = []
        self.input_names: list[str] = []
        self.fwd_map: dict[SSAValue, SSAValue] = {}
        self.const_cache: dict[tuple[float, str], SSAValue] = {}
        self.needs_set: set[SSAValue] = set()
        self._out_idx: dict[SSAValue, int] | None = None
        self._pending: list[SSAValue] = []

    def _out_index(self) -> dict[SSAValue, int]:
        if self._out_idx is None:
            self._out_idx = {}
            for j, v in enumerate(self.fwd_graph.output_op.outs):
                self._out_idx.setdefault(v, j)
        return self._out_idx

    # -- GradBuilder interface ------------------------------------------------------
    def needs(self, value: SSAValue) -> bool:
        return value in self.needs_set

    def fwd(self, value: SSAValue) -> SSAValue:
        got = self.fwd_map.get(value)
        if got is not None:
            return got
        fwd_block = self.fwd_graph.body.block
        owner = value.owner
        if isinstance(owner, ConstantOp):
            c = owner.clone()
            self.block.add_op(c)
            got = c.results[0]
        elif isinstance(value, BlockArgument) and value.block is fwd_block:
            i = value.index
            got = self._add_input(value.type, (FWD_INPUT, i), self.fwd_graph.input_name(i))
        else:
            idx = self._out_index()
            j = idx.get(value)
            if j is None:
                # becomes a forward output when the gradient graph is done (one update of
                # the graph and its call sites for all activations)
                j = len(self.fwd_graph.output_op.outs) + len(self._pending)
                self._pending.append(value)
                idx[value] = j
            got = self._add_input(value.type, (FWD_OUTPUT, j), _value_name(value, f"t{j}"))
        self.fwd_map[value] = got
        return got

    def op(
        self,
        op: str | type[Operation],
        *operands: SSAValue,
        result_types: Sequence[Attribute] | None = None,
        **props: Any,
    ) -> Operation:
        cls = _resolve_op_class(op) if isinstance(op, str) else op
        make = getattr(cls, "make", None)
        if make is None:
            raise AutodiffError(f"autodiff: cannot build '{cls.name}' in a gradient graph")
        new = make(list(operands), list(result_types) if result_types is not None else None, **props)
        self.block.add_op(new)
        return new

    def v(
        self,
        op: str | type[Operation],
        *operands: SSAValue,
        result_type: Attribute | None = None,
        **props: Any,
    ) -> SSAValue:
        new = self.op(
            op, *operands, result_types=[result_type] if result_type is not None else None, **props
        )
        return new.results[0]

    def const(self, value: float, dtype: Any) -> SSAValue:
        dt = np.dtype(dtype)
        key = (float(value), dt.str)
        got = self.const_cache.get(key)
        if got is None:
            t = TensorType(element_type(dt), [])
            v = int(value) if dt.kind in "iub" else float(value)
            c = ConstantOp(DenseIntOrFPElementsAttr.from_list(t, [v]))
            self.block.add_op(c)
            got = c.results[0]
            self.const_cache[key] = got
        return got

    def zeros(self, type: Attribute) -> SSAValue:
        assert isinstance(type, TensorType)
        try:
            init = _resolve_op_class("popxl.init")
        except AutodiffError:
            init = None
        if init is not None:
            try:
                return self.v(init, result_type=type, init_type="zero")
            except Exception:
                pass
        dt = dtype_of(type)
        c = ConstantOp(
            DenseIntOrFPElementsAttr.from_list(type, [0.0 if dt.kind == "f" else 0])
        )
        self.block.add_op(c)
        return c.results[0]

    def sum_to(self, g: SSAValue, type: Attribute) -> SSAValue:
        if g.type == type:
            return g
        if shape_of(g.type) == shape_of(type):
            return self.v("popxl.cast", g, result_type=type)
        return self.v("popxl.reduce_to_shape", g, result_type=type)

    # -- building ---------------------------------------------------------------------
    def _add_input(self, type: Attribute, conn: tuple[str, int], name: str) -> SSAValue:
        arg = self.block.insert_arg(type, len(self.block.args))
        self.expected_inputs.append(conn)
        self.input_names.append(name)
        return arg

    def build(
        self, provided: Sequence[int], required: Sequence[int], name: str
    ) -> GraphOp:
        fwd = self.fwd_graph
        fblock = fwd.body.block
        outs = list(fwd.output_op.outs)

        # values that depend on a required input (and are floats)
        needs = self.needs_set
        for i in required:
            a = fblock.args[i]
            if _is_float(a):
                needs.add(a)
        for op in fblock.ops:
            if isinstance(op, OutputOp):
                break
            if any(o in needs for o in op.operands):
                for r in op.results:
                    if _is_float(r):
                        needs.add(r)

        for op in fblock.ops:
            for i in _writes(op):
                v = op.operands[i]
                if v in needs:
                    raise AutodiffError(
                        f"autodiff: graph @{fwd.graph_name}: {op.name} updates "
                        f"'{_value_name(v, 'a tensor')}' in place and a gradient must flow "
                        "through it; use the out-of-place op"
                    )

        grads: dict[SSAValue, list[SSAValue]] = {}
        for j in provided:
            v = outs[j]
            name_j = _value_name(v, f"t{j}")
            if v in fblock.args:
                name_j = fwd.input_name(fblock.args.index(v))  # type: ignore[arg-type]
            arg = self._add_input(v.type, (FWD_GRAD, j), f"Gradient___{name_j}")
            if v in needs:
                grads.setdefault(v, []).append(arg)

        summed: dict[SSAValue, SSAValue | None] = {}

        def take(v: SSAValue) -> SSAValue | None:
            if v in summed:
                return summed[v]
            parts = grads.pop(v, [])
            g: SSAValue | None = None
            for p in parts:
                g = p if g is None else self.v("popxl.add", g, p)
            summed[v] = g
            return g

        for op in reversed(list(fblock.ops)):
            if isinstance(op, OutputOp):
                continue
            dys = [take(r) if r in needs else None for r in op.results]
            if all(d is None for d in dys):
                continue
            if not any(self.needs(o) for o in op.operands):
                continue
            dxs = self._apply_rule(op, dys)
            if len(dxs) != len(op.operands):
                raise AutodiffError(
                    f"autodiff: the gradient rule of {op.name} returned {len(dxs)} "
                    f"gradients for {len(op.operands)} operands"
                )
            for o, dx in zip(op.operands, dxs):
                if dx is None or not self.needs(o):
                    continue
                if dx.type != o.type:
                    raise AutodiffError(
                        f"autodiff: the gradient rule of {op.name} produced a gradient of "
                        f"type {fmt_type(dx.type)} for an operand of type {fmt_type(o.type)}"
                    )
                grads.setdefault(o, []).append(dx)

        results: list[SSAValue] = []
        for i in required:
            a = fblock.args[i]
            g = take(a) if a in needs else None
            results.append(g if g is not None else self.zeros(a.type))
        self.block.add_op(OutputOp(results))

        first = len(fwd.output_op.outs)
        added = add_graph_outputs(self.module, fwd, self._pending, self.driver.sites_of(fwd))
        assert added == list(range(first, first + len(self._pending)))

        grad = GraphOp(
            name,
            [a.type for a in self.block.args],
            [r.type for r in results],
            Region(self.block),
            input_names=self.input_names,
        )
        info = GradInfo(fwd.graph_name, tuple(self.expected_inputs), tuple(required))
        grad.attributes.update(info.to_attributes())
        return grad

    def _apply_rule(self, op: Operation, dys: list[SSAValue | None]) -> Grads:
        if isinstance(op, CallOp):
            return self.driver.call_grad(self, op, dys)
        rule = GRAD_RULES.get(op.name)
        if rule is None:
            if op.name in NO_GRAD:
                return [None] * len(op.operands)
            raise AutodiffError(
                f"autodiff: no gradient rule for '{op.name}' in graph "
                f"@{self.fwd_graph.graph_name}, and a gradient must flow through it"
            )
        return list(rule(self, op, dys))


# ------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------


class Autodiff:
    """Differentiates a graph and, recursively, the subgraphs it calls."""

    def __init__(self, module: ModuleOp, called_grad_graphs: dict[str, str] | None = None):
        self.module = module
        self.graphs = graphs_by_name(module)
        self.called: dict[str, GraphOp] = {}
        for f, g in (called_grad_graphs or {}).items():
            if f not in self.graphs:
                raise AutodiffError(f"autodiff: no graph @{f} (in called_grad_graphs)")
            if g not in self.graphs:
                raise AutodiffError(f"autodiff: no graph @{g} (in called_grad_graphs)")
            self.called[f] = self.graphs[g]
        self.cache: dict[tuple[str, tuple[int, ...], tuple[int, ...]], GraphOp] = {}
        self.created: dict[str, GraphOp] = {}
        """forward graph name -> the gradient graph created for it (all of them)."""
        self._active: set[str] = set()
        self._sites: dict[str, list[Operation]] | None = None

    def sites_of(self, graph: GraphOp) -> list[Operation]:
        """The ops calling `graph` (computed once; autodiff adds no calls to forward graphs)."""
        if self._sites is None:
            self._sites = call_sites(self.module)
        return self._sites.get(graph.graph_name, [])

    def graph(self, name: str) -> GraphOp:
        g = self.graphs.get(name)
        if g is None:
            g = graphs_by_name(self.module).get(name)
        if g is None:
            raise AutodiffError(f"autodiff: no graph @{name} in the module")
        return g

    def differentiate(
        self,
        fwd: GraphOp,
        grads_provided: Sequence[int] | None = None,
        grads_required: Sequence[int] | None = None,
        grad_name: str | None = None,
    ) -> GraphOp:
        name = fwd.graph_name
        if name in self._active:
            raise AutodiffError(f"autodiff: graph @{name} calls itself recursively")
        fblock = fwd.body.block
        n_out = len(fwd.output_op.outs)
        n_in = len(fblock.args)
        if grads_provided is None:
            provided = [j for j, v in enumerate(fwd.output_op.outs) if _is_float(v)]
        else:
            provided = [int(j) for j in grads_provided]
            for j in provided:
                _check_index("grads_provided", j, "output", n_out, name)
        if grads_required is None:
            required = [i for i, a in enumerate(fblock.args) if _is_float(a)]
        else:
            required = [int(i) for i in grads_required]
            for i in required:
                _check_index("grads_required", i, "input", n_in, name)
                if not _is_float(fblock.args[i]):
                    raise AutodiffError(
                        f"autodiff: grads_required: input {i} ('{fwd.input_name(i)}') of graph "
                        f"@{name} is {fmt_type(fblock.args[i].type)}; only floating point "
                        "tensors have gradients"
                    )
        check_not_modifying(fwd)
        functionalize(fwd)
        gname = grad_name if grad_name is not None else unique_graph_name(self.module, f"{name}_grad")
        if gname in graphs_by_name(self.module):
            raise AutodiffError(f"autodiff: a graph named @{gname} already exists")
        self._active.add(name)
        try:
            grad = _GradGraphBuilder(self, fwd).build(provided, required, gname)
        finally:
            self._active.discard(name)
        Rewriter.insert_op(grad, InsertPoint.after(fwd))
        self.graphs[gname] = grad
        self.created[name] = grad
        return grad

    # -- call.call --------------------------------------------------------------------
    def call_grad(
        self, b: _GradGraphBuilder, call: CallOp, dys: list[SSAValue | None]
    ) -> list[SSAValue | None]:
        callee_name = call.callee.root_reference.data
        callee = self.graph(callee_name)
        n_args = len(call.args)
        needed = [i for i, a in enumerate(call.args) if b.needs(a)]
        if callee_name in self.called:
            grad = self.called[callee_name]
        else:
            provided = tuple(j for j, d in enumerate(dys) if d is not None)
            key = (callee_name, provided, tuple(needed))
            grad = self.cache.get(key)
            if grad is None:
                grad = self.differentiate(callee, provided, needed)
                self.cache[key] = grad
        info = GradInfo.from_graph(grad)
        if info.forward != callee_name:
            raise AutodiffError(
                f"autodiff: @{grad.graph_name} is the gradient graph of @{info.forward}, "
                f"not of @{callee_name}"
            )
        n_grad_inputs = len(grad.body.block.args)
        if len(info.expected_inputs) != n_grad_inputs:
            extra = [grad.input_name(i) for i in range(len(info.expected_inputs), n_grad_inputs)]
            raise AutodiffError(
                f"autodiff: gradient graph @{grad.graph_name} of @{callee_name} has inputs that "
                f"are not forward connections ({', '.join(extra)}, e.g. gradient accumulators); "
                "it cannot be called from another gradient graph"
            )
        inputs: list[SSAValue] = []
        callee_outs = callee.function_type.outputs.data
        for kind, idx in info.expected_inputs:
            if kind == FWD_GRAD:
                d = dys[idx] if idx < len(dys) else None
                inputs.append(d if d is not None else b.zeros(callee_outs[idx]))
            elif kind == FWD_INPUT:
                inputs.append(b.fwd(call.args[idx]))
            else:
                inputs.append(b.fwd(call.res[idx]))
        new = CallOp(grad.graph_name, inputs, grad.function_type.outputs.data)
        b.block.add_op(new)
        dxs: list[SSAValue | None] = [None] * n_args
        for r, i in zip(new.res, info.expected_outputs):
            if dxs[i] is None:
                dxs[i] = r
            else:
                dxs[i] = b.v("popxl.add", dxs[i], r)  # type: ignore[arg-type]
        for i in needed:
            if dxs[i] is None:
                raise AutodiffError(
                    f"autodiff: gradient graph @{grad.graph_name} of @{callee_name} does not "
                    f"compute the gradient of input {i} ('{callee.input_name(i)}'), which is needed"
                )
        return dxs


def autodiff(
    module: ModuleOp,
    graph: str,
    grads_provided: Sequence[int] | None = None,
    grads_required: Sequence[int] | None = None,
    grad_graph: str | None = None,
    called_grad_graphs: dict[str, str] | None = None,
) -> tuple[GraphOp, dict[str, GraphOp]]:
    """Differentiates `@graph` in `module`.

    Returns the new gradient graph and every gradient graph created (forward graph
    name -> gradient graph, the requested one included).
    """
    d = Autodiff(module, called_grad_graphs)
    fwd = d.graph(graph)
    grad = d.differentiate(fwd, grads_provided, grads_required, grad_graph)
    return grad, dict(d.created)


@dataclass(frozen=True)
class AutodiffPass(ModulePass):
    """`autodiff{graph=NAME grads_provided=0,1 grads_required=0 grad_graph=NAME called_grad_graphs=f:g}`."""

    name = "autodiff"

    graph: str | None = None
    grads_provided: tuple[int, ...] | None = None
    grads_required: tuple[int, ...] | None = None
    grad_graph: str | None = None
    called_grad_graphs: tuple[str, ...] = field(default=())

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.graph is None:
            raise AutodiffError("autodiff: the 'graph' option (the graph to differentiate) is required")
        called: dict[str, str] = {}
        for pair in self.called_grad_graphs:
            f, sep, g = pair.partition(":")
            if not sep:
                raise AutodiffError(
                    f"autodiff: called_grad_graphs entries are 'fwd:grad' pairs, got '{pair}'"
                )
            called[f.strip().lstrip("@")] = g.strip().lstrip("@")
        autodiff(
            op,
            self.graph,
            self.grads_provided,
            self.grads_required,
            self.grad_graph,
            called,
        )
