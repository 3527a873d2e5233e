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
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import CallOp, call_sites, called_graph_names
from xl.dialects.effects import is_written, written_operands
from xl.dialects.graph import GraphOp, MainGraphOp, OutputOp, graphs_by_name
from xl.dialects.popxl import IdentityOp


def called_names(module: ModuleOp) -> set[str]:
    """The names of the graphs some op of `module` calls."""
    return set(call_sites(module))


def _copied_inputs(callee: GraphOp, call: CallOp) -> list[bool]:
    """Which operands of `call` the inlined body gets as copies: a by-value input the body
    writes, or one sharing its tensor with an input the callee updates by reference."""
    updated = callee.updated_by_ref(call.args)
    return [
        not callee.input_is_by_ref(i) and (is_written(arg) or operand in updated)
        for i, (arg, operand) in enumerate(zip(callee.body.block.args, call.args, strict=True))
    ]


def _body_outputs(callee: GraphOp) -> tuple[OutputOp, list[SSAValue], list[bool]]:
    """The callee's `graph.output`, the values it returns and which of them the caller gets
    as copies (`_copied_outputs`)."""
    block = callee.body.block
    terminator = block.last_op
    if not isinstance(terminator, OutputOp):  # pragma: no cover - verified graphs end with graph.output
        raise ValueError(f"graph @{callee.graph_name} has no graph.output")
    results = list(terminator.outs)
    return terminator, results, _copied_outputs(block, results)


def _copied_outputs(block: Block, results: list[SSAValue]) -> list[bool]:
    """Which outputs of a graph (body `block`) the caller gets as a copy: an input or outside
    value, or a value output a second time."""
    seen: set[SSAValue] = set()
    out = []
    for v in results:
        out.append(not isinstance(v.owner, Operation) or v.owner.parent_block() is not block or v in seen)
        seen.add(v)
    return out


def inline_call(call: CallOp, callee: GraphOp, move: bool = False) -> list[CallOp]:
    """Inline one call (callee must not contain the call itself); returns the `call.call`s
    of the copied body (none when moved). With `move`, the body's ops are moved out of the
    callee instead of copied (its only call, when it is erased afterwards: much cheaper for
    the big graphs of a training step)."""
    copied: list[CallOp] = []
    block = callee.body.block
    vm: dict[SSAValue, SSAValue] = {}
    for arg, operand, copy_it in zip(block.args, call.args, _copied_inputs(callee, call), strict=True):
        if copy_it:
            copy = IdentityOp.make([operand])
            Rewriter.insert_op(copy, InsertPoint.before(call))
            operand = copy.results[0]
        vm[arg] = operand
    terminator, results, copied_out = _body_outputs(callee)
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


def _acyclic(graphs: dict[str, GraphOp], sites: dict[str, list[Operation]], shared: set[str]) -> bool:
    """Whether no graph reaches itself through the calls `inline_all` expands."""
    edges: dict[str, list[str]] = {}
    for name, ops in sites.items():
        if name in shared:
            continue
        for op in ops:
            if isinstance(op, CallOp):
                g = op.parent_op()
                if isinstance(g, GraphOp):
                    edges.setdefault(g.graph_name, []).append(name)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in edges:
        if root in state:
            continue
        state[root] = 1
        path = [(root, iter(edges.get(root, ())))]
        while path:
            name, it = path[-1]
            nxt = next(it, None)
            if nxt is None:
                state[name] = 2
                path.pop()
            elif state.get(nxt) == 1:
                return False
            elif nxt not in state:
                state[nxt] = 1
                path.append((nxt, iter(edges.get(nxt, ()))))
    return True


def _by_ref_inputs_written(graphs: dict[str, GraphOp], sites: dict[str, list[Operation]], shared: set[str]) -> bool:
    """Whether every by-reference input of a graph whose calls `inline_all` expands is
    updated by its body (an in-place op, or a by-reference input of such a graph that is).
    A call counts every by-reference input as written; once its graph is inlined, only what
    the body writes is. Where the two differ, whether an outer graph's input is copied at
    its call depends on which call `inline_all` expanded first."""
    memo: dict[tuple[str, int], bool] = {}

    def written(g: GraphOp, i: int) -> bool:
        key = (g.graph_name, i)
        if key not in memo:
            memo[key] = False  # no cycles here (`_acyclic`)
            for use in g.body.block.args[i].uses:
                op = use.operation
                name = op.callee.root_reference.data if isinstance(op, CallOp) else None
                if name is not None and name not in shared:
                    callee = graphs[name]
                    hit = callee.input_is_by_ref(use.index) and written(callee, use.index)
                else:
                    hit = use.index in written_operands(op)
                if hit:
                    memo[key] = True
                    break
        return memo[key]

    for name, ops in sites.items():
        if name not in shared and any(isinstance(op, CallOp) for op in ops):
            g = graphs[name]
            if not all(written(g, i) for i in g.by_ref_inputs()):
                return False
    return True


def _clone(op: Operation, vm: dict[SSAValue, SSAValue]) -> Operation:
    """`op.clone(vm)`; for an op without regions and successors (most), the same op built
    with `Operation.__init__` directly (what `clone_without_regions` does through `create`,
    its argument copies and its empty region and successor lists: ~15 % of an op's copy)."""
    if op.regions or op.successors:
        return op.clone(vm)
    cls = type(op)
    new = cls.__new__(cls)
    get = vm.get
    Operation.__init__(
        new,
        operands=[get(v, v) for v in op.operands],
        result_types=[r.type for r in op.results],
        properties=op.properties,  # copied by __init__
        attributes=op.attributes,
        location=op.location,
    )
    for old, res in zip(op.results, new.results, strict=True):
        vm[old] = res
        res.name_hint = old.name_hint
    return new


def inlined_copy(module: ModuleOp, remove_dead: bool = True, keep_shared: bool = False) -> ModuleOp | None:
    """What `inline_all(module.clone(), remove_dead, keep_shared)` makes, built without
    changing `module`: each op is copied once, to its place in the result (a callee's body
    where its call was), instead of a clone of everything then the bodies moved; graphs
    left without callers are not copied. The same ops, values, names and order (tested
    against `inline_all` on random structured programs). None when `inline_all` should
    run on a clone instead (which handles or reports it): a `call.call` nested in an op
    other than a graph, a call of an unknown graph, graphs calling each other in a cycle,
    a by-reference input that the graph's body does not update (`_by_ref_inputs_written`)."""
    graphs = graphs_by_name(module)
    sites = call_sites(module)
    shared = {name for name, ops in sites.items() if len(ops) > 1} if keep_shared else set()
    for name, ops in sites.items():
        for op in ops:
            if isinstance(op, CallOp):
                if name not in shared and name not in graphs:
                    return None
                if not isinstance(op.parent_op(), GraphOp | MainGraphOp):
                    return None
    if not _acyclic(graphs, sites, shared) or not _by_ref_inputs_written(graphs, sites, shared):
        return None
    moved = _movable(sites) if remove_dead else set()
    movable = {name for name, ops in sites.items() if ops[0] in moved}

    live: set[str] = set()  # the graphs the copied ops call (`called_names` of the result)

    def add(dst: Block, op: Operation, vm: dict[SSAValue, SSAValue]) -> None:
        new = _clone(op, vm)
        dst.add_op(new)
        for inner in new.walk() if new.regions else (new,):
            live.update(called_graph_names(inner))

    def copy_ops(src: Block, dst: Block, vm: dict[SSAValue, SSAValue]) -> None:
        for op in src.ops:
            if isinstance(op, CallOp) and op.callee.root_reference.data not in shared:
                expand(op, dst, vm)
            else:
                add(dst, op, vm)

    def expand(call: CallOp, dst: Block, vm: dict[SSAValue, SSAValue]) -> None:
        # `inline_call`, writing into `dst` what it inserts around the call
        callee = graphs[call.callee.root_reference.data]
        block = callee.body.block
        inner: dict[SSAValue, SSAValue] = {}
        moves = call in moved
        for arg, operand, copy_it in zip(block.args, call.args, _copied_inputs(callee, call), strict=True):
            value = vm[operand]
            if copy_it:
                copy = IdentityOp.make([value])
                dst.add_op(copy)
                value = copy.results[0]
            if moves and value.name_hint is None:  # what moving the body does (uses replaced)
                value.name_hint = arg.name_hint
            inner[arg] = value
        terminator, results, copied_out = _body_outputs(callee)
        for op in block.ops:
            if op is terminator:
                break
            if isinstance(op, CallOp) and op.callee.root_reference.data not in shared:
                expand(op, dst, inner)
            else:
                add(dst, op, inner)
        for old, v, copy_it in zip(call.res, results, copied_out, strict=True):
            mapped = inner[v]
            if copy_it:
                copy = IdentityOp.make([mapped])
                dst.add_op(copy)
                mapped = copy.results[0]
            if old.name_hint and mapped.name_hint is None:
                mapped.name_hint = old.name_hint
            vm[old] = mapped

    new = module.clone_without_regions()
    top = Block()
    new.regions[0].add_block(top)
    for op in module.body.block.ops:
        if isinstance(op, GraphOp | MainGraphOp):
            if isinstance(op, GraphOp) and op.graph_name in movable:
                continue  # its body goes where its only call was
            src = op.body.block
            copy = op.clone_without_regions()
            block = Block(arg_types=[a.type for a in src.args])
            vm: dict[SSAValue, SSAValue] = {}
            for a, b in zip(src.args, block.args, strict=True):
                b.name_hint = a.name_hint
                vm[a] = b
            copy.regions[0].add_block(block)
            copy_ops(src, block, vm)
            top.add_op(copy)
        else:
            add(top, op, {})
    if remove_dead:
        for g in [op for op in top.ops if isinstance(op, GraphOp) and op.graph_name not in live]:
            Rewriter.erase_op(g)
    return new


@dataclass(frozen=True)
class InlinePass(ModulePass):
    """Inline all `call.call` ops (with `keep-shared`, not those of graphs called from
    several places); `remove-dead` erases graphs no longer called."""

    name = "inline"
    remove_dead: bool = True
    keep_shared: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        inline_all(op, self.remove_dead, self.keep_shared)
