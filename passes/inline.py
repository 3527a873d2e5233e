"""`inline`: replaces `call.call` ops by the body of the called graph.

```mlir
// before
graph.graph @g(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %y = popxl.relu %x : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %y : tensor<2xf32>
}
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  %r = call.call @g(%a) : (tensor<2xf32>) -> tensor<2xf32>
}
// after `xl-opt -p inline`
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  %r = popxl.relu %a : (tensor<2xf32>) -> tensor<2xf32>
}
```

Call semantics are kept: a by-reference input is the caller's tensor itself; an
input that the callee updates in place without being by-reference is copied first
(`popxl.identity`), as is one whose tensor the call also passes to a by-reference input
that the callee updates, and an output that is one of the callee's inputs is copied, so
the caller never aliases what it passed in (a value output twice is copied the second
time: the call's results are distinct tensors). Graphs no longer called from anywhere
are erased unless `remove-dead=false`.

`inline{keep-shared=true}` inlines only the calls of graphs called from one place and
keeps the calls of graphs called from several places (counted before inlining: the
graphs `outline` created, a layer the user calls twice), so that `lower-to-rt` makes one
function of each; graphs nested in a kept graph are inlined into it as usual.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import CallOp, call_sites
from xl.dialects.effects import is_written
from xl.dialects.graph import GraphOp, MainGraphOp, OutputOp, graphs_by_name
from xl.dialects.popxl import IdentityOp


def called_names(module: ModuleOp) -> set[str]:
    """The names of the graphs some op of `module` calls."""
    return set(call_sites(module))


def inline_call(call: CallOp, callee: GraphOp, move: bool = False) -> list[CallOp]:
    """Inline one call (callee must not contain the call itself); returns the `call.call`s
    of the copied body (none when moved). With `move`, the body's ops are moved out of the
    callee instead of copied (its only call, when it is erased afterwards: much cheaper for
    the big graphs of a training step)."""
    copied: list[CallOp] = []
    block = callee.body.block
    vm: dict[SSAValue, SSAValue] = {}
    updated = callee.updated_by_ref(call.args)
    for i, (arg, operand) in enumerate(zip(block.args, call.args, strict=True)):
        if not callee.input_is_by_ref(i) and (is_written(arg) or operand in updated):
            copy = IdentityOp.make([operand])
            Rewriter.insert_op(copy, InsertPoint.before(call))
            operand = copy.results[0]
        vm[arg] = operand
    terminator = block.last_op
    if not isinstance(terminator, OutputOp):  # pragma: no cover - verified graphs end with graph.output
        raise ValueError(f"graph @{callee.graph_name} has no graph.output")
    results = list(terminator.outs)
    # an input or outside value, or a value output twice: the caller gets a copy
    copied_out = [
        not isinstance(v.owner, Operation) or v.owner.parent_block() is not block or v in results[:n]
        for n, v in enumerate(results)
    ]
    if move:
        for arg in block.args:
            arg.replace_all_uses_with(vm[arg])
        while (inner := block.first_op) is not terminator:
            assert inner is not None
            inner.detach()
            Rewriter.insert_op(inner, InsertPoint.before(call))
    else:
        for inner in block.ops:
            if inner is terminator:
                break
            new = inner.clone(vm)  # maps the results in vm too
            Rewriter.insert_op(new, InsertPoint.before(call))
            if isinstance(new, CallOp):
                copied.append(new)
            elif new.regions:
                copied.extend(op for op in new.walk() if isinstance(op, CallOp))
    outs: list[SSAValue] = []
    anchor: Operation = call
    for v, copy_it in zip(results, copied_out, strict=True):
        mapped = vm.get(v, v)
        if copy_it:
            copy = IdentityOp.make([mapped])
            Rewriter.insert_op(copy, InsertPoint.after(anchor))
            anchor = copy
            mapped = copy.results[0]
        outs.append(mapped)
    for old, new_v in zip(call.res, outs, strict=True):
        if old.name_hint and new_v.name_hint is None:
            new_v.name_hint = old.name_hint
        old.replace_all_uses_with(new_v)
    Rewriter.erase_op(call)
    return copied


def _movable(sites: dict[str, list[Operation]]) -> set[Operation]:
    """The calls whose body can be moved rather than copied: the only call of their graph,
    in `graph.main` or in a graph whose own body is moved (never in one that is copied)."""
    owner: dict[Operation, str | None] = {}
    for ops in sites.values():
        for op in ops:
            g = op.parent_op()
            while g is not None and not isinstance(g, GraphOp | MainGraphOp):
                g = g.parent_op()
            owner[op] = g.graph_name if isinstance(g, GraphOp) else None
    done: dict[str, bool] = {}

    def moved(name: str) -> bool:
        if name in done:
            return done[name]
        done[name] = False  # a cycle: copied (and reported as recursive)
        ops = sites.get(name, [])
        ok = len(ops) == 1 and isinstance(ops[0], CallOp)
        if ok:
            parent = owner[ops[0]]
            ok = parent is None or moved(parent)
        done[name] = ok
        return ok

    return {ops[0] for name, ops in sites.items() if moved(name)}


def inline_all(module: ModuleOp, remove_dead: bool = True, keep_shared: bool = False) -> None:
    """Inline every `call.call` in the module (the calls found, then those in the copied
    bodies); with `keep_shared`, not the calls of graphs called from more than one place."""
    graphs = graphs_by_name(module)
    sites = call_sites(module)
    shared = {name for name, ops in sites.items() if len(ops) > 1} if keep_shared else set()
    movable = _movable(sites) if remove_dead else set()
    work = deque(op for op in module.walk() if isinstance(op, CallOp))
    while work:
        call = work.popleft()
        name = call.callee.root_reference.data
        if name in shared:
            continue
        callee = graphs.get(name)
        if callee is None:
            raise ValueError(f"inline: call to unknown graph @{name}")
        if callee.is_ancestor(call):
            raise ValueError(f"inline: graph @{name} calls itself")
        work.extend(inline_call(call, callee, move=call in movable))
    if remove_dead:
        live = called_names(module)
        for g in list(graphs.values()):
            if g.graph_name not in live:
                Rewriter.erase_op(g)


@dataclass(frozen=True)
class InlinePass(ModulePass):
    """Inline all `call.call` ops (with `keep-shared`, not those of graphs called from
    several places); `remove-dead` erases graphs no longer called."""

    name = "inline"
    remove_dead: bool = True
    keep_shared: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        inline_all(op, self.remove_dead, self.keep_shared)
