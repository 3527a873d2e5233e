"""`lower-to-rt`: lowers a whole program (graph/popxl/call/ipu dialects) to `rt`.

The main graph is translated op by op into one `rt.program`; a call is expanded in
place (or becomes an `rt.call` of an `rt.func`, see below), `call.repeat` becomes `rt.loop`
and `call.conditional` becomes `rt.if`.
Every tensor gets a buffer; every popxl op becomes an `rt.kernel` with explicit
destinations (in-place ops write their operand's buffer). Replica collectives (ops with
the `CrossReplica` trait, `xl.dialects.replica`) lower the same way, their `grouping` a
kernel parameter; a grouped `graph.variable` becomes an `rt.state` with the same
`grouping` and one initial value per group.

```mlir
// before
graph.h2d_stream @x : tensor<2xf32>
graph.main {
  %x = graph.host_load @x : tensor<2xf32>
  %y = popxl.relu %x : (tensor<2xf32>) -> tensor<2xf32>
}
// after `xl-opt -p lower-to-rt`
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %x = rt.alloc : memref<2xf32>
  rt.h2d "x", %x : memref<2xf32>
  %y = rt.alloc : memref<2xf32>
  rt.kernel "popxl.relu" (%x) -> (%y) : (memref<2xf32>) -> (memref<2xf32>)
}
```

A constant updated in place (by an in-place op or as a by-reference call argument) is
copied into a fresh buffer where it is defined, so each execution starts from its value.

Call semantics: a by-reference input aliases the caller's buffer; an input the
callee updates in place without being by-reference is copied; outputs never alias
the caller's buffers (copied when they would).

Functions (`functions=true`, the default). A graph called by more than one `call.call`
becomes one `rt.func` and each call an `rt.call`, instead of one copy of its body per
call. The function's arguments are its inputs (the caller's buffers, so a by-reference
input is updated in place; an input the body writes without being by-reference is copied
inside the body) followed by its outputs (destinations: fresh buffers of the caller, which
the body's kernels write directly). Graphs called once are expanded as before, and so are
graphs that cannot be a function: those doing host I/O, remote buffer access or replica
collectives (directly or in a graph they call); so is a call passing one buffer as two
inputs of which one is updated in place by reference. Programs whose ops are placed on more than
one IPU (`ipu.id`) keep expanding every call (a current limitation: the runtime's
per-IPU scheduling works on the expanded program). `functions=false` expands every call.

```mlir
// before: @layer called twice
graph.graph @layer(%x: tensor<2xf32>) -> (tensor<2xf32>) {
  %y = popxl.relu %x : (tensor<2xf32>) -> tensor<2xf32>
  graph.output %y : tensor<2xf32>
}
graph.main {
  %a = graph.constant dense<1.0> : tensor<2xf32>
  %b = call.call @layer(%a) : (tensor<2xf32>) -> tensor<2xf32>
  %c = call.call @layer(%b) : (tensor<2xf32>) -> tensor<2xf32>
}
// after `xl-opt -p lower-to-rt`
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  rt.func @layer(%x: memref<2xf32>) -> (%y: memref<2xf32>) {
    rt.kernel "popxl.relu"(%x) -> (%y) : (memref<2xf32>) -> memref<2xf32>
  }
  %a = rt.const dense<1.0> : tensor<2xf32> : memref<2xf32>
  %b = rt.alloc : memref<2xf32>
  rt.call @layer(%a) -> (%b) : (memref<2xf32>) -> memref<2xf32>
  %c = rt.alloc : memref<2xf32>
  rt.call @layer(%b) -> (%c) : (memref<2xf32>) -> memref<2xf32>
}
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

from xl.dialects import rt
from xl.dialects.call import CallOp, ConditionalOp, RepeatOp
from xl.dialects.effects import written_operands
from xl.dialects.graph import (
    EXTERNAL_ATTR,
    ConstantOp,
    D2HStreamOp,
    GraphOp,
    H2DStreamOp,
    HostLoadOp,
    HostStoreOp,
    MainGraphOp,
    OutputOp,
    VariableOp,
)
from xl.dialects.ipu import IPU_ATTR
from xl.dialects.ipu import CopyOp as IpuCopyOp
from xl.dialects.popxl import PopxlOp, is_written, op_props, to_attr
from xl.dialects.rt import GRAPH_ATTR, SOURCE_ATTR
from xl.dialects.traits import is_cross_replica
from xl.passes.lower_remote import lowering_of

_MEMREFS: dict[Attribute, MemRefType] = {}


def to_memref(t: Attribute) -> MemRefType:
    m = _MEMREFS.get(t)  # building a MemRefType costs ~45 us; programs repeat few types
    if m is None:
        assert isinstance(t, TensorType), t
        m = _MEMREFS[t] = MemRefType(t.get_element_type(), t.get_shape())
    return m


class LoweringError(ValueError):
    pass


def function_graphs(module: ModuleOp, graphs: dict[str, GraphOp]) -> set[str]:
    """The graphs `lower-to-rt{functions=true}` keeps as `rt.func`: called by more than one
    `call.call` and made only of ops a function body can hold (see the module docstring);
    none when the program's ops are placed on more than one IPU."""
    counts: dict[str, int] = {}
    ipus: set[Attribute] = set()
    for op in module.walk():
        if isinstance(op, CallOp):
            name = op.callee.root_reference.data
            counts[name] = counts.get(name, 0) + 1
        ipu = op.attributes.get(IPU_ATTR)
        if ipu is not None:
            ipus.add(ipu)
    if len(ipus) > 1:
        return set()
    ok: dict[str, bool] = {}

    def eligible(name: str) -> bool:
        if name in ok:
            return ok[name]
        ok[name] = False  # recursion: not a function (lowering reports it)
        g = graphs.get(name)
        if g is None:
            return False
        for op in g.body.block.ops:
            if isinstance(op, PopxlOp) and not is_cross_replica(op):
                continue
            if isinstance(op, ConstantOp | IpuCopyOp | OutputOp):
                continue
            if isinstance(op, CallOp | RepeatOp) and eligible(op.callee.root_reference.data):
                continue
            if isinstance(op, ConditionalOp) and all(
                eligible(b.root_reference.data) for b in (op.then_branch, op.else_branch)
            ):
                continue
            return False
        ok[name] = True
        return True

    return {name for name, n in counts.items() if n > 1 and eligible(name)}


class _Emitter:
    def __init__(self, graphs: dict[str, GraphOp], functions: set[str] | None = None):
        self.graphs = graphs
        # graphs lowered as one rt.func, and the functions made so far
        self.functions = functions or set()
        self.funcs: dict[str, rt.FuncOp] = {}
        self.program: rt.ProgramOp | None = None
        self.stack: list[str] = []
        self.slots: set[str] = set()
        # the rt.state of each remote buffer, by buffer name (set by passes/lower_remote.py)
        self.remote_states: dict[str, SSAValue] = {}

    # -- helpers -----------------------------------------------------------------
    def alloc(self, block: Block, type: Attribute, hint: str | None) -> SSAValue:
        op = rt.AllocOp(to_memref(type))
        op.result.name_hint = hint
        block.add_op(op)
        return op.result

    def copy_to_new(self, block: Block, buf: SSAValue, hint: str | None) -> SSAValue:
        assert isinstance(buf.type, MemRefType)
        op = rt.AllocOp(buf.type)
        op.result.name_hint = hint
        block.add_op(op)
        block.add_op(rt.CopyOp(buf, op.result))
        return op.result

    # -- blocks ------------------------------------------------------------------
    def emit_ops(
        self,
        ops: Sequence[Operation],
        env: dict[SSAValue, SSAValue],
        block: Block,
        fresh: set[SSAValue],
    ) -> None:
        for op in ops:
            self.emit(op, env, block, fresh)

    def emit(self, op: Operation, env: dict[SSAValue, SSAValue], block: Block, fresh: set[SSAValue]) -> None:
        if isinstance(op, PopxlOp) or is_cross_replica(op):
            ins = [env[o] for o in op.operands]
            outs = [env[op.operands[i]] for i in written_operands(op)]
            for r in op.results:
                buf = self.alloc(block, r.type, r.name_hint)
                env[r] = buf
                fresh.add(buf)
                outs.append(buf)
            # plain properties, with `operand_segments` telling which optional operands
            # are present (it survives printing, unlike operandSegmentSizes)
            attrs: dict[str, Attribute] = {k: to_attr(v) for k, v in op_props(op).items()}
            for key in (IPU_ATTR, SOURCE_ATTR, GRAPH_ATTR):  # placement, source op (profiles, errors)
                if key in op.attributes:
                    attrs[key] = op.attributes[key]
            block.add_op(rt.KernelOp(op.name, ins, outs, attrs))
        elif isinstance(op, VariableOp):
            name = op.var_name.data
            if name in self.slots:
                raise LoweringError(f'lower-to-rt: two variables are named "{name}"')
            self.slots.add(name)
            # a grouped variable (`grouping` of several groups) keeps one value per group
            st = rt.StateOp(name, to_memref(op.result.type), op.init, op.properties.get("grouping"))
            if EXTERNAL_ATTR in op.attributes:  # its value is in an .npz: xl-run --vars must give it
                st.attributes[EXTERNAL_ATTR] = op.attributes[EXTERNAL_ATTR]
            st.result.name_hint = op.result.name_hint
            block.add_op(st)
            env[op.result] = st.result
        elif isinstance(op, ConstantOp):
            c = rt.ConstOp(op.value, to_memref(op.result.type))
            c.result.name_hint = op.result.name_hint
            block.add_op(c)
            env[op.result] = c.result
            if is_written(op.result):
                # Updated in place: each execution updates a fresh copy of its value (the
                # constant itself is read-only storage and keeps its value).
                buf = self.copy_to_new(block, c.result, op.result.name_hint)
                env[op.result] = buf
                fresh.add(buf)
        elif isinstance(op, HostLoadOp):
            buf = self.alloc(block, op.result.type, op.result.name_hint)
            block.add_op(rt.H2DOp(op.stream.root_reference.data, buf))
            env[op.result] = buf
            fresh.add(buf)
        elif isinstance(op, HostStoreOp):
            block.add_op(rt.D2HOp(op.stream.root_reference.data, env[op.value]))
        elif isinstance(op, IpuCopyOp):
            buf = self.copy_to_new(block, env[op.input], op.result.name_hint)
            env[op.result] = buf
            fresh.add(buf)
        elif isinstance(op, CallOp) and self.call_as_function(op, env):
            func = self.function(op, op.callee.root_reference.data)
            outs = [self.alloc(block, r.type, r.name_hint) for r in op.res]
            block.add_op(rt.CallOp(func.func_name, [env[a] for a in op.args], outs))
            for r, buf in zip(op.res, outs, strict=True):
                env[r] = buf
                fresh.add(buf)
        elif isinstance(op, CallOp):
            g = self.callee(op, op.callee.root_reference.data)
            results = self.emit_graph(g, [env[a] for a in op.args], block)
            for r, buf in zip(op.res, results, strict=True):
                env[r] = buf
                fresh.add(buf)
        elif isinstance(op, RepeatOp):
            self.emit_repeat(op, env, block, fresh)
        elif isinstance(op, ConditionalOp):
            self.emit_conditional(op, env, block, fresh)
        elif isinstance(op, H2DStreamOp | D2HStreamOp):
            pass
        elif (lower := lowering_of(op)) is not None:  # remote buffers (passes/lower_remote.py)
            lower(self, op, env, block, fresh)
        else:
            raise LoweringError(f"lower-to-rt: cannot lower '{op.name}'")

    def callee(self, op: Operation, name: str) -> GraphOp:
        g = self.graphs.get(name)
        if g is None:
            raise LoweringError(f"lower-to-rt: {op.name} calls unknown graph @{name}")
        if name in self.stack:
            raise LoweringError(f"lower-to-rt: graph @{name} is recursive")
        return g

    def call_as_function(self, op: CallOp, env: dict[SSAValue, SSAValue]) -> bool:
        """Whether `op` becomes an `rt.call`: its graph is a function, unless the call passes
        one buffer as two inputs and updates one of them in place (by reference): the body
        is optimised for distinct arguments, so such a call is expanded."""
        name = op.callee.root_reference.data
        if name not in self.functions:
            return False
        ins = [env[a] for a in op.args]
        if len(set(ins)) == len(ins):
            return True
        g = self.graphs[name]
        return not any(g.input_is_by_ref(i) and is_written(a) for i, a in enumerate(g.body.block.args))

    def function(self, op: Operation, name: str) -> rt.FuncOp:
        """The `rt.func` of graph @name (emitted on first use, at the start of the program)."""
        func = self.funcs.get(name)
        if func is not None:
            return func
        g = self.callee(op, name)
        ins = [to_memref(a.type) for a in g.body.block.args]
        outs = [to_memref(t) for t in g.function_type.outputs.data]
        func = rt.FuncOp(name, ins, outs)
        body = func.body.block
        for a, ga in zip(func.ins, g.body.block.args, strict=True):
            a.name_hint = ga.name_hint
        for a, v in zip(func.outs, g.output_op.outs, strict=True):
            a.name_hint = v.name_hint
        results = self.emit_graph(g, list(func.ins), body)
        for buf, out in zip(results, func.outs, strict=True):
            alloc = buf.owner
            if isinstance(alloc, rt.AllocOp) and alloc.parent is body and results.count(buf) == 1:
                # the body writes the destination directly
                buf.replace_all_uses_with(out)
                alloc.detach()
                alloc.erase()
            else:
                body.add_op(rt.CopyOp(buf, out))
        assert self.program is not None
        prog = self.program.body.block
        anchor = next((o for o in prog.ops if not isinstance(o, rt.FuncOp)), None)
        if anchor is None:
            prog.add_op(func)
        else:
            prog.insert_op_before(func, anchor)
        self.funcs[name] = func
        return func

    def bind_args(self, g: GraphOp, args: Sequence[SSAValue], block: Block) -> dict[SSAValue, SSAValue]:
        env: dict[SSAValue, SSAValue] = {}
        updated = g.updated_by_ref(args)
        for i, (arg, buf) in enumerate(zip(g.body.block.args, args, strict=True)):
            if not g.input_is_by_ref(i) and (is_written(arg) or buf in updated):
                buf = self.copy_to_new(block, buf, arg.name_hint)
            env[arg] = buf
        return env

    def emit_body(self, g: GraphOp, env: dict[SSAValue, SSAValue], block: Block) -> list[SSAValue]:
        """Emit the graph body; returns the output buffers (fresh ones, copies otherwise)."""
        self.stack.append(g.graph_name)
        fresh: set[SSAValue] = set()
        ops = list(g.body.block.ops)
        self.emit_ops(ops[:-1], env, block, fresh)
        self.stack.pop()
        out_op = ops[-1]
        assert isinstance(out_op, OutputOp)
        outs: list[SSAValue] = []
        for v in out_op.outs:
            buf = env[v]
            if buf not in fresh or buf in outs:
                buf = self.copy_to_new(block, buf, v.name_hint)
            outs.append(buf)
        return outs

    def emit_graph(self, g: GraphOp, args: Sequence[SSAValue], block: Block) -> list[SSAValue]:
        return self.emit_body(g, self.bind_args(g, args, block), block)

    def emit_repeat(self, op: RepeatOp, env: dict[SSAValue, SSAValue], block: Block, fresh: set[SSAValue]) -> None:
        g = self.callee(op, op.callee.root_reference.data)
        n_out = len(op.res)
        carried: list[SSAValue] = []
        args: list[SSAValue] = []
        updated = g.updated_by_ref([env[a] for a in op.args])
        for i, a in enumerate(op.args):
            buf = env[a]
            if not g.input_is_by_ref(i) and (i < n_out or buf in updated):
                # carried values, and an input whose tensor the loop updates through a
                # by-reference input (it keeps its value from before the loop, as upstream)
                buf = self.copy_to_new(block, buf, g.body.block.args[i].name_hint)
            if i < n_out:
                carried.append(buf)
            args.append(buf)
        count = op.repeat_count.value.data
        loop = rt.LoopOp(count)
        block.add_op(loop)
        body = loop.body.block
        benv: dict[SSAValue, SSAValue] = {}
        for i, (arg, buf) in enumerate(zip(g.body.block.args, args, strict=True)):
            if i >= n_out and not g.input_is_by_ref(i) and is_written(arg):
                # a fresh copy per iteration: the callee must see the value before the loop
                buf = self.copy_to_new(body, buf, arg.name_hint)
            benv[arg] = buf
        outs = self.emit_body(g, benv, body)
        for src, dst in zip(outs, carried, strict=True):
            if src is not dst:
                body.add_op(rt.CopyOp(src, dst))
        for r, buf in zip(op.res, carried, strict=True):
            env[r] = buf
            fresh.add(buf)

    def emit_conditional(
        self, op: ConditionalOp, env: dict[SSAValue, SSAValue], block: Block, fresh: set[SSAValue]
    ) -> None:
        then_g = self.callee(op, op.then_branch.root_reference.data)
        else_g = self.callee(op, op.else_branch.root_reference.data)
        results = [self.alloc(block, r.type, r.name_hint) for r in op.res]
        if_op = rt.IfOp(env[op.condition])
        block.add_op(if_op)
        for g, region_block, args in (
            (then_g, if_op.then_region.block, op.then_args),
            (else_g, if_op.else_region.block, op.else_args),
        ):
            outs = self.emit_graph(g, [env[a] for a in args], region_block)
            for src, dst in zip(outs, results, strict=True):
                region_block.add_op(rt.CopyOp(src, dst))
        for r, buf in zip(op.res, results, strict=True):
            env[r] = buf
            fresh.add(buf)


def lower_module(module: ModuleOp, functions: bool = True) -> None:
    mains = [op for op in module.ops if isinstance(op, MainGraphOp)]
    if len(mains) != 1:
        raise LoweringError(f"lower-to-rt: expected one graph.main, found {len(mains)}")
    (main,) = mains
    graphs = {op.graph_name: op for op in module.ops if isinstance(op, GraphOp)}
    program = rt.ProgramOp(attributes=rt.ProgramOp.program_attributes(main.num_host_transfers, main.replication_factor))
    emitter = _Emitter(graphs, function_graphs(module, graphs) if functions else None)
    emitter.program = program
    emitter.emit_ops(list(main.body.block.ops), {}, program.body.block, set())
    for op in list(module.ops):
        op.detach()
        op.erase(safe_erase=False)
    module.body.block.add_op(program)


@dataclass(frozen=True)
class LowerToRtPass(ModulePass):
    """Lower the program to the `rt` dialect (see module docstring); `functions=false`
    expands every call."""

    name = "lower-to-rt"
    functions: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        try:
            lower_module(op, self.functions)
        except KeyError as e:  # a value used before it is defined
            raise VerifyException(f"lower-to-rt: value used before definition: {e}") from None
