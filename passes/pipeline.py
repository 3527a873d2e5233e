"""`pipeline`: lowers each `pipeline.region` into a pipelined schedule of subgraph calls.

The ops of every stage `s` are moved into three graphs, `@loads_stage_s` (the host loads),
`@stage_s` (the computation) and `@stores_stage_s` (the host stores); the `ipu.copy` ops that
carry values to the next stage go to one graph `@ipu_copies`. A cycle runs a range of stages:
their loads, their computations, their stores, then the copies (skipped in the very last
cycle). `@pipeline_graph` runs, for S stages and N steps:

- ramp-up: cycles over stages `[0, i)` for i = 1 .. S-1;
- the main loop: `call.repeat @main_repeat` of `N - (S - 1)` cycles over all stages, the values
  copied between IPUs being its loop-carried values;
- ramp-down: cycles over stages `[i, S)` for i = 1 .. S-1.

So micro-batch `n` is loaded by stage 0 in cycle `n` and processed by stage `s` in cycle
`n + s`: every stage runs exactly N times. The region is replaced by one `call.call
@pipeline_graph` taking the outside values the stages use (by reference). Copies whose
source stage has not run yet (ramp-up) or no longer runs (ramp-down) copy a zero
`popxl.init` placeholder (`%dummy__<name>`) whose result no stage uses.

A stash (`pipeline.stash` in stage `f`, `pipeline.restore` in stage `t`) becomes three
variables in `graph.main` (the ring buffer of depth `t - f + 1` and a `ui32` counter for each
side), passed by reference: the producer stage writes with `popxl.dynamic_update_` then
advances its counter with `popxl.increment_mod_`, the consumer reads with `popxl.dynamic_slice`
then advances its own counter.

```mlir
// before (xl-opt -p pipeline)
graph.main {
  pipeline.region steps 4 {
    %x = graph.host_load @x {pipeline.stage = 0 : i64} : tensor<ui32>
    %c = ipu.copy %x {source = 0 : i64, destination = 1 : i64, pipeline.stage = 0 : i64}
        : (tensor<ui32>) -> tensor<ui32>
    graph.host_store @y, %c {pipeline.stage = 1 : i64} : tensor<ui32>
  }
}
// after: @loads_stage_0, @stage_0, @stage_1, @stores_stage_1, @ipu_copies, @main_repeat and
graph.graph @pipeline_graph() {
  %x = call.call @loads_stage_0() : () -> tensor<ui32>
  call.call @stage_0() : () -> ()
  %c = call.call @ipu_copies(%x) : (tensor<ui32>) -> tensor<ui32>
  %c_1 = call.repeat @main_repeat 3 (%c) : (tensor<ui32>) -> tensor<ui32>
  call.call @stage_1() : () -> ()
  call.call @stores_stage_1(%c_1) : (tensor<ui32>) -> ()
  graph.output
}
graph.main {
  call.call @pipeline_graph() : () -> ()
}
```
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

from xl.dialects.call import CallOp, RepeatOp
from xl.dialects.graph import (
    BY_REF_ATTR,
    NAME_ATTR,
    GraphOp,
    HostLoadOp,
    HostStoreOp,
    MainGraphOp,
    OutputOp,
    VariableOp,
)
from xl.dialects.ipu import IPU_ATTR
from xl.dialects.ipu import CopyOp as IpuCopyOp
from xl.dialects.pipeline import (
    STAGE_ATTR,
    RegionOp,
    RestoreOp,
    StashOp,
    is_stage_copy,
    set_stage,
    stage_of,
)
from xl.dialects.popxl import (
    DynamicSliceOp,
    DynamicUpdateInplaceOp,
    IncrementModInplaceOp,
    InitOp,
    ReshapeOp,
)
from xl.dialects.utils import dense_attr, numpy_dtype, tensor_type


class PipelineError(ValueError):
    """A pipeline region cannot be lowered."""


@dataclass
class _Group:
    """Ops of one stage graph (`loads_stage_s`, `stage_s`, `stores_stage_s` or `ipu_copies`)."""

    name: str
    ops: list[Operation] = field(default_factory=list)
    inputs: list[SSAValue] = field(default_factory=list)
    outputs: list[SSAValue] = field(default_factory=list)
    graph: GraphOp | None = None


@dataclass
class Pipelined:
    """What the pass made of one region."""

    call: CallOp
    """The `call.call @pipeline_graph` that replaced the region."""
    graph: GraphOp
    """`@pipeline_graph`."""
    num_stages: int
    stash_variables: list[VariableOp]
    """The ring buffers and counters created in `graph.main`."""


def _name_hint(v: SSAValue, default: str) -> str:
    return v.name_hint if v.name_hint else default


def _set_hint(v: SSAValue, name: str | None) -> None:
    try:
        v.name_hint = name
    except ValueError:  # not a valid SSA name
        pass


def _symbols(module: ModuleOp) -> set[str]:
    out: set[str] = set()
    for op in module.ops:
        sym = op.properties.get("sym_name")
        if isinstance(sym, StringAttr):
            out.add(sym.data)
    return out


def _unique(used: set[str], name: str) -> str:
    cand, k = name, 1
    while cand in used:
        cand = f"{name}_{k}"
        k += 1
    used.add(cand)
    return cand


def _placement(ops: Sequence[Operation]) -> Attribute | None:
    ids = {op.attributes[IPU_ATTR] for op in ops if IPU_ATTR in op.attributes}
    return next(iter(ids)) if len(ids) == 1 else None


# ---------------------------------------------------------------------------------------
# Stashes -> variables + dynamic_update_ / dynamic_slice + increment_mod_
# ---------------------------------------------------------------------------------------


def _lower_stashes(region: RegionOp, variable_names: set[str]) -> list[VariableOp]:
    block = region.body.block
    stashes = [op for op in block.ops if isinstance(op, StashOp)]
    if not stashes:
        return []
    if not isinstance(region.parent_op(), MainGraphOp):
        raise PipelineError(
            "pipeline: a pipeline.region with stashes must be in graph.main (the ring buffers are variables)"
        )
    made: list[VariableOp] = []

    def variable(name: str, type: TensorType) -> SSAValue:
        name = _unique(variable_names, name)
        zeros = np.zeros(type.get_shape(), numpy_dtype(type.get_element_type()))
        var = VariableOp(name, type, dense_attr(zeros))
        _set_hint(var.result, name.replace("/", "_"))
        block.parent_op().parent_block().insert_op_before(var, region)  # pyright: ignore[reportOptionalMemberAccess]
        made.append(var)
        return var.result

    counter_type = tensor_type((1,), np.uint32)
    for k, stash in enumerate(stashes):
        s = stage_of(stash)
        assert s is not None
        depth = stash.depth
        hint = stash.input.name_hint or f"t{k}"
        prefix = f"{StashOp.name}{k}.{hint}"
        buf = variable(f"{prefix}.buffer", stash.result.type)
        counter = variable(f"{prefix}.stash_counter", counter_type)
        value_type = stash.input.type
        assert isinstance(value_type, TensorType)
        one = tensor_type((1, *value_type.get_shape()), numpy_dtype(value_type.get_element_type()))
        ipu = stash.attributes.get(IPU_ATTR)
        new: list[Operation] = [
            reshape := ReshapeOp.make([stash.input], [one]),
            DynamicUpdateInplaceOp.make([buf, counter, reshape.results[0]], axes=(0,), sizes=(1,), no_overlap=True),
            IncrementModInplaceOp.make([counter], increment=1.0, modulus=float(depth)),
        ]
        for op in new:
            set_stage(op, s)
            if ipu is not None:
                op.attributes[IPU_ATTR] = ipu
            block.insert_op_before(op, stash)
        for use in list(stash.result.uses):
            restore = use.operation
            assert isinstance(restore, RestoreOp)  # checked by the verifier
            t = stage_of(restore)
            assert t is not None
            rcounter = variable(f"{prefix}.restore_counter", counter_type)
            ipu = restore.attributes.get(IPU_ATTR)
            new = [
                sliced := DynamicSliceOp.make([buf, rcounter], axes=(0,), sizes=(1,), no_overlap=True),
                IncrementModInplaceOp.make([rcounter], increment=1.0, modulus=float(depth)),
                out := ReshapeOp.make([sliced.results[0]], [restore.result.type]),
            ]
            for op in new:
                set_stage(op, t)
                if ipu is not None:
                    op.attributes[IPU_ATTR] = ipu
                block.insert_op_before(op, restore)
            _set_hint(out.results[0], restore.result.name_hint)
            restore.result.replace_all_uses_with(out.results[0])
            restore.detach()
            restore.erase()
        stash.detach()
        stash.erase()
    return made


# ---------------------------------------------------------------------------------------
# Grouping the region's ops into stage graphs
# ---------------------------------------------------------------------------------------


def _groups(
    region: RegionOp, num_stages: int
) -> tuple[dict[int, _Group], dict[int, _Group], dict[int, _Group], _Group | None, list[_Group]]:
    loads: dict[int, _Group] = {}
    computes: dict[int, _Group] = {s: _Group(f"stage_{s}") for s in range(num_stages)}
    stores: dict[int, _Group] = {}
    copies: _Group | None = None
    block = region.body.block
    for op in block.ops:
        s = stage_of(op)
        assert s is not None
        if isinstance(op, HostLoadOp):
            loads.setdefault(s, _Group(f"loads_stage_{s}")).ops.append(op)
        elif isinstance(op, HostStoreOp):
            stores.setdefault(s, _Group(f"stores_stage_{s}")).ops.append(op)
        elif isinstance(op, IpuCopyOp) and is_stage_copy(op):
            if copies is None:
                copies = _Group("ipu_copies")
            copies.ops.append(op)
        else:
            computes[s].ops.append(op)
    ordered: list[_Group] = []
    for s in range(num_stages):
        for g in (loads.get(s), computes[s], stores.get(s)):
            if g is not None:
                ordered.append(g)
    if copies is not None:
        ordered.append(copies)

    owner: dict[Operation, _Group] = {op: g for g in ordered for op in g.ops}
    for g in ordered:
        seen_in: set[SSAValue] = set()
        for op in g.ops:
            for v in op.operands:
                if owner.get(v.owner) is not g and v not in seen_in:  # pyright: ignore[reportArgumentType]
                    seen_in.add(v)
                    g.inputs.append(v)
            for r in op.results:
                users = {u.operation for u in r.uses}
                for u in users:
                    if u.parent_block() is not block:
                        raise PipelineError(
                            f"pipeline: {_name_hint(r, 'a value')} defined in the pipeline "
                            f"region is used after it by '{u.name}'"
                        )
                if any(owner[u] is not g for u in users):
                    g.outputs.append(r)
    return loads, computes, stores, copies, ordered


def _build_graph(g: _Group, name: str) -> GraphOp:
    block = Block(arg_types=[v.type for v in g.inputs])
    vm: dict[SSAValue, SSAValue] = {}
    names: list[str] = []
    for i, (v, arg) in enumerate(zip(g.inputs, block.args, strict=True)):
        n = _name_hint(v, f"arg{i}")
        names.append(n)
        _set_hint(arg, v.name_hint)
        vm[v] = arg
    for op in g.ops:
        new = op.clone(vm)
        new.attributes.pop(STAGE_ATTR, None)
        block.add_op(new)
    block.add_op(OutputOp([vm[v] for v in g.outputs]))
    graph = GraphOp(
        name,
        [v.type for v in g.inputs],
        [v.type for v in g.outputs],
        Region(block),
        input_names=names,
        by_ref=[True] * len(names),
    )
    return graph


# ---------------------------------------------------------------------------------------
# The schedule
# ---------------------------------------------------------------------------------------


class _Scope:
    """Original region values -> values in the graph being built. A value first used in a
    nested graph becomes one of its inputs (by reference), bound to the parent's value."""

    def __init__(self, block: Block, parent: _Scope | None, region: Block | None = None):
        self.block = block
        self.parent = parent
        self.region = region  # top level: values of the region are never inputs
        self.map: dict[SSAValue, SSAValue] = {}
        self.implicit: list[tuple[SSAValue, SSAValue]] = []  # (original, input arg)
        self.dummies: dict[SSAValue, SSAValue] = {}

    def dummy(self, v: SSAValue) -> SSAValue:
        """A zero placeholder for a region value copied by `ipu_copies` while its stage
        does not run (top level only)."""
        d = self.dummies.get(v)
        if d is None:
            init = InitOp.make([], [v.type], init_type="zero")
            ipu = v.owner.attributes.get(IPU_ATTR)  # pyright: ignore[reportAttributeAccessIssue]
            if ipu is not None:
                init.attributes[IPU_ATTR] = ipu
            _set_hint(init.results[0], f"dummy__{v.name_hint}" if v.name_hint else None)
            self.block.add_op(init)
            d = self.dummies[v] = init.results[0]
        return d

    def get(self, v: SSAValue) -> SSAValue:
        got = self.map.get(v)
        if got is not None:
            return got
        if self.region is not None and isinstance(v.owner, Operation):
            if v.owner.parent_block() is self.region:
                return self.dummy(v)
        if self.parent is not None:
            self.parent.get(v)  # must exist (or become an input) up the chain
        arg = self.block.insert_arg(v.type, len(self.block.args))
        _set_hint(arg, v.name_hint)
        self.map[v] = arg
        self.implicit.append((v, arg))
        return arg

    def outer(self, v: SSAValue) -> SSAValue:
        """The value bound to implicit input `v` in the enclosing graph (or the caller)."""
        return self.parent.get(v) if self.parent is not None else v


def _arg_attrs(names: Sequence[str], by_ref: Sequence[bool]) -> ArrayAttr[DictionaryAttr]:
    out: list[DictionaryAttr] = []
    for n, r in zip(names, by_ref, strict=True):
        d: dict[str, Attribute] = {BY_REF_ATTR: UnitAttr()} if r else {}
        d[NAME_ATTR] = StringAttr(n)
        out.append(DictionaryAttr(d))
    return ArrayAttr(out)


def _finish_graph(
    name: str, block: Block, outputs: Sequence[SSAValue], names: Sequence[str], by_ref: Sequence[bool]
) -> GraphOp:
    block.add_op(OutputOp(list(outputs)))
    g = GraphOp(name, [a.type for a in block.args], [v.type for v in outputs], Region(block))
    g.arg_attrs = _arg_attrs(names, by_ref)
    return g


class _Schedule:
    def __init__(
        self,
        num_stages: int,
        loads: dict[int, _Group],
        computes: dict[int, _Group],
        stores: dict[int, _Group],
        copies: _Group | None,
    ):
        self.S = num_stages
        self.loads, self.computes, self.stores, self.copies = loads, computes, stores, copies

    def call(self, scope: _Scope, g: _Group) -> None:
        assert g.graph is not None
        op = CallOp(g.graph.graph_name, [scope.get(v) for v in g.inputs], [v.type for v in g.outputs])
        ipu = _placement(g.ops)
        if ipu is not None:
            op.attributes[IPU_ATTR] = ipu
        scope.block.add_op(op)
        for v, r in zip(g.outputs, op.res, strict=True):
            _set_hint(r, v.name_hint)
            scope.map[v] = r

    def cycle(self, scope: _Scope, start: int, end: int) -> None:
        for groups in (self.loads, self.computes, self.stores):
            for s in range(start, end):
                g = groups.get(s)
                if g is not None:
                    self.call(scope, g)
        if self.copies is not None and start != self.S - 1:
            self.call(scope, self.copies)


def lower_region(module: ModuleOp, region: RegionOp) -> Pipelined:
    """Replaces `region` by a call of a new `@pipeline_graph` (see the module docstring)."""
    try:
        region.verify_region()
    except VerifyException as e:
        raise PipelineError(str(e).split("\n\n")[0]) from None
    num_stages = region.num_stages
    steps = region.steps.value.data
    used = _symbols(module)
    variable_names = {op.var_name.data for op in module.walk() if isinstance(op, VariableOp)}
    stash_vars = _lower_stashes(region, variable_names)

    loads, computes, stores, copies, ordered = _groups(region, num_stages)
    top = region
    while not isinstance(top.parent_op(), ModuleOp):
        top = top.parent_op()
        assert top is not None
    module_block = module.body.block
    for g in ordered:
        g.graph = _build_graph(g, _unique(used, g.name))
        module_block.insert_op_before(g.graph, top)

    sched = _Schedule(num_stages, loads, computes, stores, copies)
    pblock = Block()
    # A region value looked up before its stage ran (a copy in ramp-up or ramp-down) is a
    # zero placeholder (`_Scope.dummy`).
    pscope = _Scope(pblock, None, region.body.block)

    # Ramp-up.
    for i in range(1, num_stages):
        sched.cycle(pscope, 0, i)

    # Main loop: the copied values are loop-carried.
    carried = list(copies.outputs) if copies is not None else []
    rblock = Block(arg_types=[v.type for v in carried])
    rscope = _Scope(rblock, pscope)
    for v, arg in zip(carried, rblock.args, strict=True):
        _set_hint(arg, v.name_hint)
        rscope.map[v] = arg
    sched.cycle(rscope, 0, num_stages)
    carried_out = [rscope.map[v] for v in carried]
    rnames = [_name_hint(v, f"carried{i}") for i, v in enumerate(carried)]
    rnames += [_name_hint(v, f"arg{i}") for i, (v, _) in enumerate(rscope.implicit)]
    rgraph = _finish_graph(
        _unique(used, "main_repeat"),
        rblock,
        carried_out,
        rnames,
        [False] * len(carried) + [True] * len(rscope.implicit),
    )
    module_block.insert_op_before(rgraph, top)
    rargs = [pscope.get(v) for v in carried] + [rscope.outer(v) for v, _ in rscope.implicit]
    repeat = RepeatOp(rgraph.graph_name, steps - (num_stages - 1), rargs, [v.type for v in carried])
    pblock.add_op(repeat)
    for v, r in zip(carried, repeat.res, strict=True):
        _set_hint(r, v.name_hint)
        pscope.map[v] = r
    # Stage outputs made inside the loop are not visible after it: forget those of the
    # ramp-up (the copies of stages that no longer run get placeholders).
    region_block = region.body.block
    for v in list(pscope.map):
        if v not in carried and isinstance(v.owner, Operation) and v.owner.parent_block() is region_block:
            del pscope.map[v]

    # Ramp-down.
    for i in range(1, num_stages):
        sched.cycle(pscope, i, num_stages)

    pnames = [_name_hint(v, f"arg{i}") for i, (v, _) in enumerate(pscope.implicit)]
    pgraph = _finish_graph(_unique(used, "pipeline_graph"), pblock, [], pnames, [True] * len(pscope.implicit))
    module_block.insert_op_before(pgraph, top)

    call = CallOp(pgraph.graph_name, [v for v, _ in pscope.implicit], [])
    parent_block = region.parent_block()
    assert parent_block is not None
    parent_block.insert_op_before(call, region)
    region.detach()
    region.erase(safe_erase=False)
    return Pipelined(call, pgraph, num_stages, stash_vars)


def pipeline_regions(module: ModuleOp) -> list[RegionOp]:
    """The `pipeline.region` ops of the module (what the `pipeline` pass lowers)."""
    return [op for op in module.walk() if isinstance(op, RegionOp)]


def pipeline_module(module: ModuleOp) -> list[Pipelined]:
    """Lowers every `pipeline.region` of the module."""
    return [lower_region(module, r) for r in pipeline_regions(module)]


@dataclass(frozen=True)
class PipelinePass(ModulePass):
    """`pipeline`: lower every `pipeline.region` (see the module docstring)."""

    name = "pipeline"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pipeline_module(op)
