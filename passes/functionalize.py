"""`functionalize`: rewrites in-place ops on a graph's own intermediates into out-of-place ops.

```mlir
// xl-opt -p functionalize
graph.graph @g(%x: tensor<2xf32> {graph.name = "x"}) -> (tensor<2xf32>) {
  %h = popxl.exp %x : (tensor<2xf32>) -> tensor<2xf32>
  popxl.scaled_add_ %h, %x {a = 1.0 : f64, b = 2.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> ()
  graph.output %h : tensor<2xf32>
}
// after:
graph.graph @g(%x: tensor<2xf32> {graph.name = "x"}) -> (tensor<2xf32>) {
  %h = popxl.exp %x : (tensor<2xf32>) -> tensor<2xf32>
  %h_1 = popxl.scaled_add %h, %x {a = 1.0 : f64, b = 2.0 : f64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  graph.output %h_1 : tensor<2xf32>
}
```

Every later use of the written value (in the graph, nested regions included) uses the
new result. Handled: `<op>_` ops whose out-of-place `<op>` exists in the same dialect
(`popxl.relu_`, `replica.all_reduce_`), `copy_var_update_`
(an identity of the new value) and `accumulate_` with a constant factor (a
`scaled_add`). Ops without a functional form are kept, as are in-place updates of the
graph's inputs (they are the graph's effect on its caller). `autodiff` runs this step
on the forward graph first.

Option `graph`: the graph to rewrite (default: every `graph.graph`; `graph.main` is
never rewritten, its in-place updates are its variables' updates).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.effects import written_operands
from xl.dialects.graph import GraphOp, graphs_by_name


class FunctionalizeError(ValueError):
    """The `functionalize` pass was asked for a graph that does not exist."""


def functional_form(op: Operation) -> Operation | None:
    """The out-of-place op computing the value that in-place `op` writes to operand 0
    (not inserted), or None when there is none."""
    from xl.dialects.popxl import AccumulateOp, CopyVarUpdateOp, IdentityOp, Popxl, ScaledAddOp, op_props

    props = op_props(op)
    if isinstance(op, CopyVarUpdateOp):
        return IdentityOp.make([op.operands[1]])
    if isinstance(op, AccumulateOp) and len(op.operands) == 2:
        return ScaledAddOp.make(list(op.operands), a=1.0, b=float(props.get("f", 1.0)))
    if not op.name.endswith("_"):
        return None
    base = op.name[:-1]
    from xl.dialects import get_all_dialects

    factory = get_all_dialects().get(op.name.split(".", 1)[0])  # e.g. replica.all_reduce_
    candidates = factory().operations if factory is not None else Popxl.operations
    cls = next((c for c in candidates if c.name == base), None)
    if cls is None:
        return None
    try:
        return cls.make(list(op.operands), **props)  # pyright: ignore[reportAttributeAccessIssue]
    except Exception:
        return None


def _ancestor_in(op: Operation, ops: set[Operation]) -> bool:
    p = op.parent_op()
    while p is not None:
        if p in ops:
            return True
        p = p.parent_op()
    return False


def functionalize(graph: GraphOp) -> None:
    """Rewrites in-place ops on the graph's own intermediates into out-of-place ops.

    `popxl.scaled_add_ %x, %y` becomes `%x2 = popxl.scaled_add %x, %y` and every later use of `%x` in
    the graph uses `%x2` (likewise `scaled_add_`, `add_`, `copy_var_update_`,
    `accumulate_` with a constant factor). Ops without a functional form are kept.
    """
    block = graph.body.block
    for op in list(block.ops):
        w = written_operands(op)
        if w != (0,) or op.results:
            continue
        target = op.operands[0]
        if target in block.args:
            continue  # the graph's effect on its caller
        new = functional_form(op)
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


@dataclass(frozen=True)
class FunctionalizePass(ModulePass):
    """`functionalize{graph=NAME}`: see the module docstring."""

    name = "functionalize"

    graph: str | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        graphs = graphs_by_name(op)
        if self.graph is None:
            targets = list(graphs.values())
        else:
            g = graphs.get(self.graph.lstrip("@"))
            if g is None:
                raise FunctionalizeError(f"functionalize: no graph @{self.graph} in the module")
            targets = [g]
        for g in targets:
            functionalize(g)
