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
(`popxl.identity`), and an output that is one of the callee's inputs is copied, so
the caller never aliases what it passed in. Graphs no longer called from anywhere
are erased unless `remove-dead=false`.

`inline{keep-shared=true}` inlines only the calls of graphs called from one place and
keeps the calls of graphs called from several places (counted before inlining: the
graphs `outline` created, a layer the user calls twice), so that `lower-to-rt` makes one
function of each; graphs nested in a kept graph are inlined into it as usual.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import CallOp, call_sites
from xl.dialects.effects import is_written
from xl.dialects.graph import GraphOp, OutputOp, graphs_by_name
from xl.dialects.popxl import IdentityOp


def called_names(module: ModuleOp) -> set[str]:
    """The names of the graphs some op of `module` calls."""
    return set(call_sites(module))


def inline_call(call: CallOp, callee: GraphOp) -> None:
    """Inline one call (callee must not contain the call itself)."""
    block = callee.body.block
    vm: dict[SSAValue, SSAValue] = {}
    for i, (arg, operand) in enumerate(zip(block.args, call.args, strict=True)):
        if not callee.input_is_by_ref(i) and is_written(arg):
            copy = IdentityOp.make([operand])
            Rewriter.insert_op(copy, InsertPoint.before(call))
            operand = copy.results[0]
        vm[arg] = operand
    body_values: set[SSAValue] = set()
    for inner in block.ops:
        if isinstance(inner, OutputOp):
            outs: list[SSAValue] = []
            for v in inner.outs:
                mapped = vm.get(v, v)
                if v not in body_values:
                    copy = IdentityOp.make([mapped])
                    Rewriter.insert_op(copy, InsertPoint.before(call))
                    mapped = copy.results[0]
                outs.append(mapped)
            break
        new = inner.clone(vm)
        Rewriter.insert_op(new, InsertPoint.before(call))
        body_values.update(inner.results)
    else:  # pragma: no cover - verified graphs end with graph.output
        raise ValueError(f"graph @{callee.graph_name} has no graph.output")
    for old, new_v in zip(call.res, outs, strict=True):
        if old.name_hint and new_v.name_hint is None:
            new_v.name_hint = old.name_hint
        old.replace_all_uses_with(new_v)
    Rewriter.erase_op(call)


def inline_all(module: ModuleOp, remove_dead: bool = True, keep_shared: bool = False) -> None:
    """Inline every `call.call` in the module, innermost callees first; with `keep_shared`,
    not the calls of graphs called from more than one place."""
    graphs = graphs_by_name(module)
    shared = {name for name, sites in call_sites(module).items() if len(sites) > 1} if keep_shared else set()
    changed = True
    while changed:
        changed = False
        calls = [op for op in module.walk() if isinstance(op, CallOp)]
        for call in calls:
            name = call.callee.root_reference.data
            if name in shared:
                continue
            callee = graphs.get(name)
            if callee is None:
                raise ValueError(f"inline: call to unknown graph @{name}")
            if callee.is_ancestor(call):
                raise ValueError(f"inline: graph @{name} calls itself")
            inline_call(call, callee)
            changed = True
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
