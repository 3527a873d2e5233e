"""The gradient graph builder of `autodiff`: one forward graph, reverse mode.

`GradGraphBuilder.build` walks the forward graph backwards and applies each op's
gradient rule (`xl.passes.grad_rules`); it implements the rules' `GradBuilder`
interface. Calls into subgraphs are handed back to the driver (`xl.passes.autodiff`).
Forward values the gradient needs become inputs of the gradient graph: forward inputs
directly, intermediates as extra forward outputs (added once, when the graph is built).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue

from xl.dialects.call import CallSiteError, add_graph_outputs
from xl.dialects.effects import written_operands
from xl.dialects.graph import ConstantOp, GraphOp, OutputOp
from xl.dialects.ipu import IPU_ATTR
from xl.dialects.popxl import AddOp, CastOp, InitOp, ReduceToShapeOp
from xl.dialects.traits import has_no_gradient
from xl.dialects.utils import dtype_of, fmt_type, shape_of, tensor_type
from xl.passes.autodiff_info import FWD_GRAD, FWD_INPUT, FWD_OUTPUT, AutodiffError, GradInfo
from xl.passes.grad_rules import Grads, get_grad_rule

if TYPE_CHECKING:
    from xl.passes.autodiff import Autodiff


def is_float(v: SSAValue) -> bool:
    """Whether `v` is a floating point tensor (only those have gradients)."""
    t = v.type
    if not isinstance(t, TensorType):
        return False
    try:
        return dtype_of(t).kind == "f"
    except TypeError:
        return False


def place_like(op: Operation, block: Block, after: Operation | None) -> None:
    """Gives the ops of `block` after `after` (all when None) the placement (`ipu.id`) of
    the forward op `op` they differentiate, unless they have their own."""
    place = op.attributes.get(IPU_ATTR)
    if place is None:
        return
    new = after.next_op if after is not None else block.first_op
    while new is not None:
        if IPU_ATTR not in new.attributes:
            new.attributes[IPU_ATTR] = place
        new = new.next_op


def value_name(v: SSAValue, fallback: str) -> str:
    return v.name_hint if v.name_hint else fallback


class GradGraphBuilder:
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
            got = self._add_input(value.type, (FWD_OUTPUT, j), value_name(value, f"t{j}"))
        self.fwd_map[value] = got
        return got

    def op(
        self,
        op: type[Operation],
        *operands: SSAValue,
        result_types: Sequence[Attribute] | None = None,
        **props: Any,
    ) -> Operation:
        cls = op
        make = getattr(cls, "make", None)
        if make is None:
            raise AutodiffError(f"autodiff: cannot build '{cls.name}' in a gradient graph")
        new = make(list(operands), list(result_types) if result_types is not None else None, **props)
        self.block.add_op(new)
        return new

    def v(
        self,
        op: type[Operation],
        *operands: SSAValue,
        result_type: Attribute | None = None,
        **props: Any,
    ) -> SSAValue:
        new = self.op(op, *operands, result_types=[result_type] if result_type is not None else None, **props)
        return new.results[0]

    def const(self, value: float, dtype: Any) -> SSAValue:
        dt = np.dtype(dtype)
        key = (float(value), dt.str)
        got = self.const_cache.get(key)
        if got is None:
            t = tensor_type((), dt)
            v = int(value) if dt.kind in "iub" else float(value)
            c = ConstantOp(DenseIntOrFPElementsAttr.from_list(t, [v]))
            self.block.add_op(c)
            got = c.results[0]
            self.const_cache[key] = got
        return got

    def zeros(self, type: Attribute) -> SSAValue:
        assert isinstance(type, TensorType)
        try:
            return self.v(InitOp, result_type=type, init_type="zero")
        except Exception:
            pass
        dt = dtype_of(type)
        c = ConstantOp(DenseIntOrFPElementsAttr.from_list(type, [0.0 if dt.kind == "f" else 0]))
        self.block.add_op(c)
        return c.results[0]

    def sum_to(self, g: SSAValue, type: Attribute) -> SSAValue:
        if g.type == type:
            return g
        if shape_of(g.type) == shape_of(type):
            return self.v(CastOp, g, result_type=type)
        return self.v(ReduceToShapeOp, g, result_type=type)

    # -- building ---------------------------------------------------------------------
    def _add_input(self, type: Attribute, conn: tuple[str, int], name: str) -> SSAValue:
        arg = self.block.insert_arg(type, len(self.block.args))
        self.expected_inputs.append(conn)
        self.input_names.append(name)
        return arg

    def build(self, provided: Sequence[int], required: Sequence[int], name: str) -> GraphOp:
        fwd = self.fwd_graph
        fblock = fwd.body.block
        outs = list(fwd.output_op.outs)

        # values that depend on a required input (and are floats)
        needs = self.needs_set
        for i in required:
            a = fblock.args[i]
            if is_float(a):
                needs.add(a)
        for op in fblock.ops:
            if isinstance(op, OutputOp):
                break
            if any(o in needs for o in op.operands):
                for r in op.results:
                    if is_float(r):
                        needs.add(r)

        for op in fblock.ops:
            for i in written_operands(op):
                v = op.operands[i]
                if v in needs:
                    raise AutodiffError(
                        f"autodiff: graph @{fwd.graph_name}: {op.name} updates "
                        f"'{value_name(v, 'a tensor')}' in place and a gradient must flow "
                        "through it; use the out-of-place op"
                    )

        grads: dict[SSAValue, list[SSAValue]] = {}
        for j in provided:
            v = outs[j]
            name_j = value_name(v, f"t{j}")
            if v in fblock.args:
                name_j = fwd.input_name(fblock.args.index(v))
            arg = self._add_input(v.type, (FWD_GRAD, j), f"Gradient___{name_j}")
            if v in needs:
                grads.setdefault(v, []).append(arg)

        summed: dict[SSAValue, SSAValue | None] = {}

        def take(v: SSAValue) -> SSAValue | None:
            if v in summed:
                return summed[v]
            parts = grads.pop(v, [])
            g: SSAValue | None = None
            last = self.block.last_op
            for p in parts:
                g = p if g is None else self.v(AddOp, g, p)
            if isinstance(v.owner, Operation):  # the sum runs where v is made
                place_like(v.owner, self.block, last)
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
        try:
            added = add_graph_outputs(self.module, fwd, self._pending, self.driver.sites_of(fwd))
        except CallSiteError as e:
            raise AutodiffError(f"autodiff: {e}") from None
        assert added == list(range(first, first + len(self._pending)))

        # ops not made by a rule (gradient sums, zeros) run where the forward graph runs
        # when all its ops agree
        places = {o.attributes[IPU_ATTR] for o in fblock.ops if IPU_ATTR in o.attributes}
        if len(places) == 1:
            (place,) = places
            for o in self.block.ops:
                if IPU_ATTR not in o.attributes and not isinstance(o, OutputOp):
                    o.attributes[IPU_ATTR] = place

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
        rule = get_grad_rule(op)
        if rule is None:
            if has_no_gradient(op):
                return [None] * len(op.operands)
            raise AutodiffError(
                f"autodiff: no gradient rule for '{op.name}' in graph "
                f"@{self.fwd_graph.graph_name}, and a gradient must flow through it"
            )
        last = self.block.last_op
        grads = list(rule(self, op, dys))
        place_like(op, self.block, last)
        return grads
