"""`outlined_copy`: what `inline{keep-shared=true},hoist-updates,outline` make of a
training step, built without making the expanded program first.

The default compile of a large program (`xl.compiler.driver.OUTLINE_PIPELINE`) inlines
the forward and gradient graphs into `graph.main`, hoists the variable updates, removes
dead ops and outlines the repeated layers: all but one copy of each repeat is made only to
be dropped again. `outlined_copy` reads the input as if inlined instead: the ops of
`graph.main` and of the graphs it calls, in the order `inline` gives them, each with the
operands it will have (a graph's input is the caller's value, a call's result the value
the graph returns, `popxl.identity` copies where `inline` makes them). `hoist-updates`
orders that list (`xl.passes.hoist_updates.hoist_order`), the dead ops are left out (the
liveness of `xl.passes.outline_dce`), `outline`'s first round chooses its groups on it
(`xl.passes.outline`: the same sequence, signatures and choice), and only then is the
module built: the ops outside the chosen runs copied into `graph.main`, the first run of
each group copied into its graph, a call for each run. Further rounds, if any, run on that
module as in the pass. Same ops, values, names and order as the passes (tested against
them on the benchmark models and random repeated programs); the input is not changed.

It applies when every graph called is called from exactly one place through a chain of
calls from `graph.main` (the graphs `inline{keep-shared=true}` moves rather than copies)
and no op of the inlined program has regions; otherwise `outlined_copy` returns None and the
passes run on a copy as usual.

```python
from xl.passes.outline_copy import outlined_copy

module = outlined_copy(frontend_module, min_ops=6)  # or None: run the passes
```
"""

from __future__ import annotations

from typing import cast

from xdsl.dialects.builtin import ModuleOp, SymbolRefAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.traits import MemoryEffect
from xdsl.transforms.dead_code_elimination import would_be_trivially_dead

from xl.dialects.call import CallOp, call_sites
from xl.dialects.effects import AllocEffect, TensorOpEffect, ValueEffect, written_operands
from xl.dialects.graph import GraphOp, MainGraphOp, OutputOp, graphs_by_name
from xl.dialects.popxl import IdentityOp
from xl.passes.hoist_updates import hoist_order
from xl.passes.inline import _acyclic, _body_outputs, _by_ref_inputs_written, _copied_inputs, _movable
from xl.passes.outline import (
    _Group,
    _rounds,
    _run_inputs,
    _Sequence,
    _sequence_of,
    _Signatures,
    _unique_name,
    _written,
    select_groups,
)

__all__ = ["outlined_copy"]


class _Unsupported(Exception):
    """The input is not of the form `outlined_copy` reads (the passes run instead)."""


class _Inlined:
    """`graph.main` as `inline{keep-shared=true}` would make it, without making it: its ops
    in order (the input's own ops, and `popxl.identity` ops not in any block for the copies
    `inline` adds), the operands each will have, and the name hints `inline` gives values
    (by id; the input's values are not renamed). Every graph is expanded at its only call,
    so each op of the input appears once and its results stand for themselves."""

    def __init__(self, module: ModuleOp, main: MainGraphOp) -> None:
        self.graphs = graphs_by_name(module)
        self.ops: list[Operation] = []
        self.operands: list[tuple[SSAValue, ...]] = []
        self.hints: dict[int, str | None] = {}  # id(value) -> its name hint, where inline sets one
        self.vm: dict[SSAValue, SSAValue] = {}  # graph input / call result -> the value it is
        self._placeholders: dict[int, SSAValue] = {}  # id(type) -> an operand for new identities
        self._keep: list[Attribute] = []  # the types whose ids are keys above
        self._copy_ops(main.body.block)

    def hint(self, v: SSAValue) -> str | None:
        return self.hints[id(v)] if id(v) in self.hints else v.name_hint

    def _add(self, op: Operation, operands: tuple[SSAValue, ...]) -> None:
        self.ops.append(op)
        self.operands.append(operands)

    def _copy_ops(self, block: Block, stop: Operation | None = None) -> None:
        get = self.vm.get
        add_op, add_operands = self.ops.append, self.operands.append
        for op in block.ops:
            if op is stop:
                break
            if isinstance(op, CallOp):
                self._expand(op)
                continue
            if op.regions:
                raise _Unsupported
            add_op(op)
            add_operands(tuple([get(v, v) for v in op.operands]))

    def _identity(self, value: SSAValue) -> SSAValue:
        """The result of a new `popxl.identity` of `value` (made on a placeholder operand of
        the same type: the input's values get no new uses)."""
        t = value.type
        ph = self._placeholders.get(id(t))
        if ph is None:
            ph = self._placeholders[id(t)] = Block(arg_types=[t]).args[0]
            self._keep.append(t)
        op = IdentityOp.make([ph])
        self._add(op, (value,))
        return op.results[0]

    def _expand(self, call: CallOp) -> None:
        # `inlined_copy`'s expansion of a moved call
        callee = self.graphs[call.callee.root_reference.data]
        block = callee.body.block
        vm, hints = self.vm, self.hints
        for arg, operand, copy_it in zip(block.args, call.args, _copied_inputs(callee, call), strict=True):
            value = vm.get(operand, operand)
            if copy_it:
                value = self._identity(value)
            if self.hint(value) is None:  # what moving the body does (uses replaced)
                hints[id(value)] = arg.name_hint
            vm[arg] = value
        terminator, results, copied_out = _body_outputs(callee)
        self._copy_ops(block, terminator)
        for old, v, copy_it in zip(call.res, results, copied_out, strict=True):
            mapped = vm.get(v, v)
            if copy_it:
                mapped = self._identity(mapped)
            if old.name_hint and self.hint(mapped) is None:
                hints[id(mapped)] = old.name_hint
            vm[old] = mapped


def _inlined(module: ModuleOp) -> tuple[_Inlined, MainGraphOp] | None:
    """The inlined `graph.main` of `module` (`_Inlined`), or None when some called graph is
    not moved by `inline{keep-shared=true}` (called from several places, not through a
    chain of single calls from `graph.main`, recursively) or `inlined_copy` would not
    apply. Graphs called from nowhere are erased by `inline`: not read."""
    mains = [op for op in module.body.block.ops if isinstance(op, MainGraphOp)]
    if len(mains) != 1:
        return None
    graphs = graphs_by_name(module)
    sites = call_sites(module)
    for name, ops in sites.items():
        if len(ops) != 1 or not isinstance(ops[0], CallOp) or name not in graphs:
            return None
        if not isinstance(ops[0].parent_op(), GraphOp | MainGraphOp):
            return None
    if not _acyclic(graphs, sites, set()) or not _by_ref_inputs_written(graphs, sites, set()):
        return None
    if len(_movable(sites)) != len(sites):
        return None
    try:
        return _Inlined(module, mains[0]), mains[0]
    except _Unsupported:
        return None


# Per op class: whether its effects are `TensorOpEffect`'s (or `ValueEffect`'s) without an
# allocation: such an op that updates an operand in place has unknown effects or a write,
# so it is never trivially dead (asked before xDSL's query, which costs ~5 us an op).
_WRITE_EFFECT: dict[type[Operation], bool] = {}


def _writes(op: Operation) -> bool:
    """Whether `op` updates an operand in place with `TensorOpEffect`'s effects."""
    cls = type(op)
    w = _WRITE_EFFECT.get(cls)
    if w is None:
        effects = cls.get_traits_of_type(MemoryEffect)
        w = _WRITE_EFFECT[cls] = any(isinstance(t, TensorOpEffect | ValueEffect) for t in effects) and not any(
            isinstance(t, AllocEffect) for t in effects
        )
    return w and bool(written_operands(op))


def _live(ops: list[Operation], operands: list[tuple[SSAValue, ...]]) -> list[int]:
    """The positions of the live ops (`xl.passes.outline_dce`'s liveness on one block
    without regions: an op is live when it would not be trivially dead or a live op uses
    one of its results; users come after their operands, so one backward sweep)."""
    used: set[int] = set()  # ids of values used by live ops
    keep: list[int] = []
    for n in range(len(ops) - 1, -1, -1):
        op = ops[n]
        for r in op.results:
            if id(r) in used:
                break
        else:
            if not _writes(op) and would_be_trivially_dead(op):
                continue
        keep.append(n)
        used.update(map(id, operands[n]))
    keep.reverse()
    return keep


def _copy(op: Operation, operands: list[SSAValue], hints: _Inlined) -> Operation:
    """A copy of `op` (no regions, no successors) with `operands`; its results are named
    as `op`'s once inlined."""
    cls = type(op)
    new = cls.__new__(cls)
    Operation.__init__(
        new,
        operands=operands,
        result_types=[r.type for r in op.results],
        properties=op.properties,  # copied by __init__
        attributes=op.attributes,
        location=op.location,
    )
    for old, res in zip(op.results, new.results, strict=True):
        res.name_hint = hints.hint(old)
    return new


def _graph(
    new: ModuleOp,
    main: MainGraphOp,
    seq: _Sequence,
    group: _Group,
    inl: _Inlined,
    operands: dict[int, tuple[SSAValue, ...]],
) -> tuple[GraphOp, list[SSAValue], list[tuple[int, int]], list[Attribute], SymbolRefAttr]:
    """`outline_group`'s graph of `group` (its body still empty), inserted before `main`;
    its inputs (values of the inlined program), the slots where each run uses them, its
    output types and the callee attribute its calls share."""
    p0, length = group.starts[0], group.length
    first = cast(list[Operation], seq.ops[p0 : p0 + length])
    used, slots, users = _run_inputs(seq, p0, length, lambda op: operands[id(op)])
    number = {id(v): i for i, v in enumerate(used)}
    by_ref = [False] * len(used)
    for op in (first[k] for k in users):
        ins = operands[id(op)]
        for i in _written(op):
            k = number.get(id(ins[i]))
            if k is not None:
                by_ref[k] = True
    out_types = [first[k].results[r].type for k, r in group.outputs]
    graph = GraphOp(
        _unique_name(new, "outlined"),
        [v.type for v in used],
        out_types,
        input_names=[inl.hint(v) or f"in{i}" for i, v in enumerate(used)],
        by_ref=by_ref,
    )
    for v, arg in zip(used, graph.body.block.args, strict=True):
        hint = inl.hint(v)
        if hint:
            arg.name_hint = hint
    main.parent_block().insert_op_before(graph, main)  # pyright: ignore[reportOptionalMemberAccess]
    return graph, used, slots, out_types, SymbolRefAttr(graph.graph_name)


def outlined_copy(module: ModuleOp, min_ops: int) -> ModuleOp | None:
    """What `inline{keep-shared=true},hoist-updates,outline{min-ops=min_ops}` make of a
    copy of `module` (see the module docstring), or None where that does not apply (run
    the passes instead)."""
    if min_ops < 1:
        return None
    found = _inlined(module)
    if found is None:
        return None
    inl, src_main = found
    order = hoist_order(inl.ops, inl.operands)
    live = _live([inl.ops[n] for n in order], [inl.operands[n] for n in order])
    ops = [inl.ops[order[n]] for n in live]
    operands = [inl.operands[order[n]] for n in live]
    signatures = _Signatures()
    seq = _sequence_of([list(zip(ops, operands))], set(), signatures)
    groups, more = select_groups(seq, min_ops)

    # the module: its ops but the graphs (all expanded), graph.main rebuilt below
    new = cast(ModuleOp, module.clone_without_regions())
    top = Block()
    new.regions[0].add_block(top)
    main = cast(MainGraphOp, src_main.clone_without_regions())
    main.regions[0].add_block(block := Block())
    for op in module.body.block.ops:
        if op is src_main:
            top.add_op(main)
        elif not isinstance(op, GraphOp):
            top.add_op(op.clone())

    # the groups' graphs, in the order the pass makes them; where each run lies
    by_op = {id(op): ins for op, ins in zip(ops, operands, strict=True)}
    made = [_graph(new, main, seq, g, inl, by_op) for g in groups]
    run_of: dict[int, tuple[int, int, int]] = {}  # id(op of a run) -> (group, run start, position)
    for gi, g in enumerate(groups):
        for p in g.starts:
            for q in range(p, p + g.length):
                run_of[id(seq.ops[q])] = (gi, p, q)

    # graph.main in order: the ops outside runs copied, the first runs copied into their
    # graphs, a call after the last op of each run
    values: dict[int, SSAValue] = {}  # id(value of the inlined program) -> its copy in main
    bodies: dict[int, dict[int, SSAValue]] = {}  # group -> id(value) -> its copy in the body
    barriers: set[int] = set()
    of_op, alive = signatures.of_op, signatures.alive
    for op, ins in zip(ops, operands, strict=True):
        where = run_of.get(id(op))
        if where is None:
            copy = _copy(op, [values[id(v)] for v in ins], inl)
            block.add_op(copy)
            for old, res in zip(op.results, copy.results, strict=True):
                values[id(old)] = res
            if more:
                sig = of_op.get(id(op))
                if sig is not None:  # the next round's signature, as the pass keeps it
                    of_op[id(copy)] = sig
                    alive.append(copy)
            continue
        gi, p, g = where
        group = groups[gi]
        graph, used, slots, out_types, callee = made[gi]
        if p == group.starts[0]:
            body = bodies.get(gi)
            if body is None:
                body = bodies[gi] = {id(v): a for v, a in zip(used, graph.body.block.args, strict=True)}
            copy = _copy(op, [body[id(v)] for v in ins], inl)
            graph.body.block.add_op(copy)
            for old, res in zip(op.results, copy.results, strict=True):
                body[id(old)] = res
        if g != p + group.length - 1:
            continue
        # the run's last op: its call
        run = cast(list[Operation], seq.ops[p : p + group.length])
        if p == group.starts[0]:
            args = [values[id(v)] for v in used]
            body = bodies[gi]
            graph.body.block.add_op(OutputOp([body[id(run[k].results[r])] for k, r in group.outputs]))
        else:
            args = [values[id(by_op[id(run[k])][i])] for k, i in slots]
        call = CallOp.create(operands=args, result_types=out_types, properties={"callee": callee})
        block.add_op(call)
        barriers.add(id(call))
        for (k, r), res in zip(group.outputs, call.res, strict=True):
            old = run[k].results[r]
            res.name_hint = inl.hint(old)
            values[id(old)] = res
    created = [graph.graph_name for graph, *_ in made]
    _rounds(new, [main], min_ops, barriers, signatures, created, more)
    return new
