"""`hoist-updates`: in-place updates of variables move up to where their inputs are ready.

```mlir
// before: the step on %w waits until the end of the backward pass
graph.h2d_stream @x : tensor<2x2xf32>
graph.main {
  %w = graph.variable "w" : tensor<2x2xf32>
  %v = graph.variable "v" : tensor<2x2xf32>
  %x = graph.host_load @x : tensor<2x2xf32>
  %gw = popxl.mul %x, %x : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %gv = popxl.add %x, %x : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %h = popxl.tanh %gv : (tensor<2x2xf32>) -> tensor<2x2xf32>
  popxl.scaled_add_ %w, %gw {a = 1.0 : f64, b = -0.1 : f64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> ()
  popxl.scaled_add_ %v, %h {a = 1.0 : f64, b = -0.1 : f64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> ()
}
// after `xl-opt -p hoist-updates`: the step on %w right after %gw
graph.h2d_stream @x : tensor<2x2xf32>
graph.main {
  %w = graph.variable "w" : tensor<2x2xf32>
  %v = graph.variable "v" : tensor<2x2xf32>
  %x = graph.host_load @x : tensor<2x2xf32>
  %gw = popxl.mul %x, %x : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  popxl.scaled_add_ %w, %gw {a = 1.0 : f64, b = -0.1 : f64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> ()
  %gv = popxl.add %x, %x : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %h = popxl.tanh %gv : (tensor<2x2xf32>) -> tensor<2x2xf32>
  popxl.scaled_add_ %v, %h {a = 1.0 : f64, b = -0.1 : f64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> ()
}
```

Why. A training step built with `autodiff` computes every gradient, then applies every
update: all weight gradients are alive at once. Right after its gradient, an update can
be fused with the matmul that produces the gradient (`rt-fold-update`) and the gradient
is never stored; and once the update sits next to the backward of its layer, `outline`
keeps the two in one graph (the gradient stays inside it), so that outlining does not
turn every weight gradient into an output of a call, alive until the end of the step.

What moves. An op that updates in place (`written_operands`) only tensors defined by
`graph.variable` (through view-like ops), has no regions and is neither a call nor a
replica collective. It moves up within its block, to right after the last op before it
that defines one of its operands, writes one it reads, or reads or writes one it writes
(a view-like result counts as the tensor it views, transitively), and never above an op
with regions. Everything else keeps its order; updates that end up after the same op keep
theirs. No op it moves above writes what it reads or touches what it writes, so every
value is unchanged.

`graph=G` restricts the pass to graph @G (`graph.main` when G is `main`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects.call import CallOp, ConditionalOp, RepeatOp
from xl.dialects.effects import InPlaceInterface, written_operands
from xl.dialects.graph import GraphOp, MainGraphOp, VariableOp
from xl.dialects.traits import is_cross_replica, is_view_like

__all__ = ["HoistUpdatesPass", "hoist_order", "hoist_updates"]

# A position in the new order: (index of a kept op, -1) for the kept op itself, (index, k)
# for the k-th op moved right after it.
_Pos = tuple[int, int]
_START: _Pos = (-1, -1)


# Per op class: (may be hoisted: updates in place and is neither a call nor a collective,
# view-like). Traits belong to the class: asked once per class.
_KIND: dict[type[Operation], tuple[bool, bool]] = {}


def _kind(op: Operation) -> tuple[bool, bool]:
    t = type(op)
    k = _KIND.get(t)
    if k is None:
        writes = t.get_trait(InPlaceInterface) is not None
        call = issubclass(t, CallOp | RepeatOp | ConditionalOp)
        k = _KIND[t] = (writes and not call and not is_cross_replica(op), is_view_like(op))
    return k


def _movable(op: Operation, operands: Sequence[SSAValue], written: tuple[int, ...], root: dict[int, SSAValue]) -> bool:
    """Whether `op` may be hoisted: it updates in place (`written`) only variables (through
    views: `root`), has no regions, is neither a call nor a collective."""
    if not written or op.regions or not _kind(op)[0]:
        return False
    for i in written:
        v = operands[i]
        r = root.get(id(v), v)
        if not isinstance(getattr(r, "owner", None), VariableOp):
            return False
    return True


def hoist_order(ops: Sequence[Operation], operands: Sequence[Sequence[SSAValue]]) -> list[int]:
    """The order of `ops` (one block's, in order; `operands[i]` the operands of `ops[i]`)
    once their variable updates are hoisted (see the module docstring), as indices into
    `ops`. The operands are given so that a caller can order ops whose operands are not yet
    the values they will be (`xl.passes.outline_copy`). (Ops and values are keyed by `id`:
    their own hashes are Python calls; all of them stay alive meanwhile.)"""
    kept: list[int] = []
    after: dict[int, list[int]] = {}
    pos: dict[int, _Pos] = {}  # id(op) -> its position
    # per alias root (by id): the last position that wrote it (or defined it), and the last
    # that touched it at all (read, wrote or defined)
    wrote: dict[int, _Pos] = {}
    touched: dict[int, _Pos] = {}
    root: dict[int, SSAValue] = {}  # id(view-like result) -> the tensor it views
    barrier = _START
    for n, (op, op_operands) in enumerate(zip(ops, operands, strict=True)):
        roots = [id(root.get(id(v), v)) for v in op_operands]
        written = written_operands(op)
        if written and _movable(op, op_operands, written, root):
            at = barrier
            for i, (v, r) in enumerate(zip(op_operands, roots, strict=True)):
                owner = v.owner  # the operand itself is defined before (a view after its root)
                if isinstance(owner, Operation):
                    at = max(at, pos.get(id(owner), _START))
                at = max(at, (touched if i in written else wrote).get(r, _START))
            i = at[0]
            here = after.setdefault(i, [])
            p: _Pos = (i, len(here))
            here.append(n)
            for i, r in enumerate(roots):
                t = touched.get(r)
                if t is None or t < p:
                    touched[r] = p
                if i in written:
                    w = wrote.get(r)
                    if w is None or w < p:
                        wrote[r] = p
        else:
            # a kept op's position is past every position so far
            p = (len(kept), -1)
            kept.append(n)
            if op.regions:
                barrier = p
            for r in roots:
                touched[r] = p
            for i in written:
                wrote[roots[i]] = p
        pos[id(op)] = p
        results = op.results
        if len(roots) == 1 and len(results) == 1 and _kind(op)[1]:
            root[id(results[0])] = root.get(id(op_operands[0]), op_operands[0])
        for res in results:
            touched[id(res)] = wrote[id(res)] = p
    order: list[int] = list(after.get(-1, ()))
    for i, n in enumerate(kept):
        order.append(n)
        order.extend(after.get(i, ()))
    return order


def hoist_block(block: Block) -> bool:
    """Hoist the variable updates of `block` (see the module docstring); whether the order
    changed."""
    ops = list(block.ops)
    changed = False
    prev: Operation | None = None
    for op in [ops[n] for n in hoist_order(ops, [tuple(op.operands) for op in ops])]:
        # move the hoisted ops only: the others keep their relative order
        if op.prev_op is not prev:
            op.detach()
            if prev is None:
                block.insert_op_before(op, block.first_op) if block.first_op else block.add_op(op)
            else:
                block.insert_op_after(op, prev)
            changed = True
        prev = op
    return changed


def hoist_updates(module: ModuleOp, graph: str | None = None) -> None:
    """`hoist-updates` on every graph body and `graph.main` (or only graph @G)."""
    for holder in module.body.block.ops:
        if isinstance(holder, MainGraphOp):
            name = "main"
        elif isinstance(holder, GraphOp):
            name = holder.graph_name
        else:
            continue
        if graph is not None and graph != name:
            continue
        hoist_block(holder.regions[0].block)


@dataclass(frozen=True)
class HoistUpdatesPass(ModulePass):
    """Move in-place updates of variables up to right after their inputs (module docstring)."""

    name = "hoist-updates"
    graph: str | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        hoist_updates(op, self.graph)
