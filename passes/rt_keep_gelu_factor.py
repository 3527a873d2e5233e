"""`rt-keep-gelu-factor`: a GELU keeps the factor its gradient computes again.

Both GELUs and their gradients compute the same factor of `x` from the same `x`:
`t = tanh(sqrt(2/pi) (x + 0.044715 x^3))` for `popxl.gelu` / `popxl.gelu_grad` (a third of
the gradient's work), `h = 0.5 (1 + erf(x / sqrt(2)))` for `popxl.geluerf` /
`popxl.geluerf_grad` (the erf, evaluated in float64: most of the gradient's work). Where a
gelu kernel and gradient kernels of its input are in one block, in that order, and nothing
between them writes the input, the gelu becomes its keeping kernel, which also writes the
factor into a new buffer, and each such gradient becomes the kernel that reads it:

| gelu | keeps | its gradient reads it |
|---|---|---|
| `popxl.gelu` -> `xl.gelu_tanh` (`GeluTanhOp`) | `t`, the result's type | `xl.gelu_grad_tanh` |
| `popxl.geluerf` -> `xl.geluerf_keep` (`GeluErfKeepOp`) | `h`, float64 | `xl.geluerf_grad_kept` |

(the op classes say which kernels they replace: `REPLACES`, `GRADIENT`, `KEEPS_FLOAT64`).

Across functions (outlined layers, `rt.func`): a gelu of a function whose input is one of
its arguments, and gradient kernels whose x is, at every call of their function (an input
argument) or in the program's body, the buffer that a call of the gelu's function (or a
gelu of the body) left as the gelu's input, nothing writing it since. The gelu's function
gets a destination for the factor (a new buffer at each of its calls), the gradient's
function an input for it (at each call, the buffer of the call that left its x). Only
functions called from the program's body alone.

The new kernels compute with the same NumPy operations in the same order as the kernels
they replace: the same bits. The cost is the factor's buffer, held from the forward kernel
to the last gradient. Only float buffers, gradients whose result has the gelu's type, and
a gelu that does not write its own input.

```mlir
// before
%y = rt.alloc : memref<2x3xf32>
rt.kernel "popxl.gelu"(%x) -> (%y) : (memref<2x3xf32>) -> memref<2x3xf32>
%dx = rt.alloc : memref<2x3xf32>
rt.kernel "popxl.gelu_grad"(%dy, %x) -> (%dx) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
// after `xl-opt -p rt-keep-gelu-factor`
%y = rt.alloc : memref<2x3xf32>
%t = rt.alloc : memref<2x3xf32>
rt.kernel "xl.gelu_tanh"(%x) -> (%y, %t) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
%dx = rt.alloc : memref<2x3xf32>
rt.kernel "xl.gelu_grad_tanh"(%dy, %x, %t) -> (%dx)
    : (memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
```
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import AnyFloat, Float64Type, IntegerAttr, MemRefType, ModuleOp, NoneAttr, i64
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.rt_kernels import KEEPING_GELUS, GeluErfKeepOp, GeluTanhOp
from xl.passes.rt_analysis import Memory, kernel_io, kernel_name, positions, programs, walk_ops, written_between

Keeper = type[GeluTanhOp] | type[GeluErfKeepOp]

# replaced gelu kernel name -> (its keeping class, replaced gradient kernel name)
KEEPERS: dict[str, tuple[Keeper, str]] = {c.REPLACES.name: (c, c.GRADIENT.REPLACES.name) for c in KEEPING_GELUS}
BACKWARD = {b for _, b in KEEPERS.values()}  # the gradient kernels replaced


def _factor_buffer(y: SSAValue, keeper: Keeper, made: dict[tuple[Attribute, bool], MemRefType]) -> MemRefType | None:
    """The kept factor's buffer type: `y`'s shape, `y`'s float type or float64 (one type
    object per shape in `made`); None when `y` is not a float buffer."""
    t = y.type
    if not isinstance(t, MemRefType) or not isinstance(t.element_type, AnyFloat):
        return None
    if not keeper.KEEPS_FLOAT64 and isinstance(t.layout, NoneAttr):
        return t
    key = (t, keeper.KEEPS_FLOAT64)
    if key not in made:
        made[key] = MemRefType(Float64Type() if keeper.KEEPS_FLOAT64 else t.element_type, t.get_shape())
    return made[key]


def _swap(mem: Memory, pos: dict[Operation, int], old: rt.KernelOp, new: rt.KernelOp) -> None:
    """`new` in place of `old`; `mem` sees it as the writer of its results, `pos` at `old`'s position."""
    block = old.parent
    assert isinstance(block, Block)
    block.insert_op_before(new, old)
    pos[new] = pos.pop(old)
    for v in kernel_io(new)[1]:
        mem.writers[v] = [new if w is old else w for w in mem.writers.get(v, [old])]
    old.detach()
    old.erase()


def _keep(mem: Memory, pos: dict[Operation, int], gelu: rt.KernelOp, keeper: Keeper, kept: SSAValue) -> None:
    """`gelu` becomes `keeper`, writing its factor into `kept` too."""
    (x,), (y,) = kernel_io(gelu)
    _swap(mem, pos, gelu, rt.KernelOp(keeper.name, [x], [y, kept], dict(gelu.attributes)))


def _read_kept(mem: Memory, pos: dict[Operation, int], grad: rt.KernelOp, keeper: Keeper, kept: SSAValue) -> None:
    """Gradient kernel `grad` becomes `keeper`'s gradient, reading the factor from `kept`."""
    (dy, x), (dx,) = kernel_io(grad)
    _swap(mem, pos, grad, rt.KernelOp(keeper.GRADIENT.name, [dy, x, kept], [dx], dict(grad.attributes)))


def keep_gelu_factors(program: rt.ProgramOp) -> int:
    """Rewrite every eligible gelu of `program` and its gradients; returns how many gelus."""
    ops = walk_ops(program)
    gelus: list[rt.KernelOp] = []
    grads: dict[tuple[str, SSAValue], list[rt.KernelOp]] = {}  # (kernel, input x) -> gradients
    for op in ops:
        if type(op) is not rt.KernelOp:
            continue
        name = kernel_name(op) or ""
        if name in KEEPERS:
            gelus.append(op)
        elif name in BACKWARD:
            ins, outs = kernel_io(op)
            if len(ins) == 2 and len(outs) == 1:
                grads.setdefault((name, ins[1]), []).append(op)
    if not gelus or not grads:
        return 0
    mem = Memory(program, ops)
    made: dict[tuple[Attribute, bool], MemRefType] = {}
    pos_of: dict[Block, dict[Operation, int]] = {}  # kept valid through the rewrites (a new kernel at the old one's)
    n = 0
    for gelu in gelus:
        keeper, grad_name = KEEPERS[kernel_name(gelu) or ""]
        ins, outs = kernel_io(gelu)
        block = gelu.parent
        if len(ins) != 1 or len(outs) != 1 or (grad_name, ins[0]) not in grads or not isinstance(block, Block):
            continue
        (x,), (y,) = ins, outs
        kept_type = _factor_buffer(y, keeper, made)
        if kept_type is None or mem.root(x) is mem.root(y):
            continue
        pos = pos_of.get(block)
        if pos is None:
            pos = pos_of[block] = positions(block)
        here = pos[gelu]
        later = [
            g
            for g in grads[grad_name, x]
            if g.parent is block
            and pos[g] > here
            and kernel_io(g)[1][0].type == y.type
            and not written_between(mem, x, block, pos, here + 1, pos[g] - 1)
        ]
        if not later:
            continue
        kept = rt.AllocOp(kept_type)
        block.insert_op_before(kept, gelu)
        _keep(mem, pos, gelu, keeper, kept.result)
        for g in later:
            _read_kept(mem, pos, g, keeper, kept.result)
        n += 1
    return n + _across_functions(program, mem, made, pos_of)


# ------------------------------------------------------------------------------------
# A gelu in one function, its gradient in another (outlined layers)
# ------------------------------------------------------------------------------------


@dataclass
class _Forward:
    """A gelu of function `func` whose input is the function's argument `arg`, or of the
    program's body (`func` None, `arg` -1; already keeping its factor when `kept` has it)."""

    func: rt.FuncOp | None
    gelu: rt.KernelOp
    arg: int
    keeper: Keeper
    kept_type: MemRefType
    # the factor's buffer at each call of `func` (at the gelu itself in the program's body)
    kept: dict[Operation, SSAValue] = field(default_factory=dict)


@dataclass
class _Backward:
    """A gradient kernel of function `func` (None: of the program's body) whose x is, at
    every call of `func` (at the kernel itself), the input of a forward gelu, all of one
    kind (keeper and factor type)."""

    func: rt.FuncOp | None
    grad: rt.KernelOp
    # each call of `func` (the kernel itself) -> the call or the body's gelu that left x, and that gelu
    producers: dict[Operation, tuple[Operation, _Forward]]


def _top_calls(program: rt.ProgramOp, ops: list[Operation]) -> dict[str, list[rt.CallOp]] | None:
    """The calls in the program's body, by function; functions also called elsewhere (in a
    function, a loop or a branch) are left out."""
    body = program.body.block
    calls: dict[str, list[rt.CallOp]] = {}
    elsewhere: set[str] = set()
    for op in ops:
        if isinstance(op, rt.CallOp):
            if op.parent is body:
                calls.setdefault(op.callee_name, []).append(op)
            else:
                elsewhere.add(op.callee_name)
    for name in elsewhere:
        calls.pop(name, None)
    return calls or None


def _forwards(
    program: rt.ProgramOp, funcs: list[rt.FuncOp], mem: Memory, made: dict[tuple[Attribute, bool], MemRefType]
) -> list[_Forward]:
    """The gelus of the functions whose input is an argument not written after them, and
    the gelus of the program's body (also those keeping their factor already)."""
    out: list[_Forward] = []
    kept_by = {c.name: c for c in KEEPING_GELUS}
    for f in [*funcs, None]:
        block = f.body.block if f is not None else program.body.block
        pos = positions(block) if f is not None else {}
        for op in block.ops:
            if type(op) is not rt.KernelOp:
                continue
            name = kernel_name(op) or ""
            ins, outs = kernel_io(op)
            keeper = KEEPERS[name][0] if name in KEEPERS else kept_by.get(name) if f is None else None
            if keeper is None or len(ins) != 1 or len(outs) != (1 if name in KEEPERS else 2):
                continue
            kept_type = _factor_buffer(outs[0], keeper, made)
            x = ins[0]
            if kept_type is None or mem.root(x) is mem.root(outs[0]):
                continue
            if f is None:
                fw = _Forward(None, op, -1, keeper, kept_type)
                if len(outs) == 2:
                    fw.kept[op] = outs[1]
                out.append(fw)
            elif isinstance(x, BlockArgument) and not written_between(mem, x, block, pos, pos[op] + 1, len(pos)):
                out.append(_Forward(f, op, x.index, keeper, kept_type))
    return out


def _backwards(
    program: rt.ProgramOp,
    funcs: list[rt.FuncOp],
    calls: dict[str, list[rt.CallOp]],
    forwards: list[_Forward],
    mem: Memory,
    body_pos: dict[Operation, int],
) -> list[_Backward]:
    """The gradient kernels that read x, at every call of their function (x an input
    argument of it) or in the program's body, from a buffer of the body that a forward
    gelu's call (or a gelu of the body) wrote, or read, as its input, nothing writing it
    since."""
    body = program.body.block
    # a buffer of the body -> (position, call or gelu, forward gelu) of each op leaving it as that gelu's input
    writers: dict[SSAValue, list[tuple[int, Operation, _Forward]]] = {}
    for fw in forwards:
        if fw.func is None:
            writers.setdefault(kernel_io(fw.gelu)[0][0], []).append((body_pos[fw.gelu], fw.gelu, fw))
            continue
        k = fw.arg - len(fw.func.ins)
        if k < 0:
            continue  # the gelu's input is an input of its function: not written by it
        for c in calls.get(fw.func.func_name, []):
            writers.setdefault(c.io()[1][k], []).append((body_pos[c], c, fw))

    def producers_of(
        grad: rt.KernelOp, func: rt.FuncOp | None, sites: list[tuple[Operation, SSAValue]]
    ) -> _Backward | None:
        """The producers of x at each site (a call and its x operand, or the body's
        gradient and its x), all of one kind that fits the gradient; None otherwise."""
        name = kernel_name(grad) or ""
        dx_type = kernel_io(grad)[1][0].type
        found: dict[Operation, tuple[Operation, _Forward]] = {}
        for site, xb in sites:
            before = [w for w in writers.get(xb, []) if w[0] < body_pos[site]]
            if not before:
                return None
            p, prod, fw = max(before, key=lambda w: w[0])
            first = next(iter(found.values()), (prod, fw))[1]
            if fw.func is func or fw.keeper is not first.keeper or fw.kept_type != first.kept_type:
                return None
            if KEEPERS[fw.keeper.REPLACES.name][1] != name or dx_type != kernel_io(fw.gelu)[1][0].type:
                return None
            if written_between(mem, xb, body, body_pos, p + 1, body_pos[site] - 1):
                return None
            found[site] = (prod, fw)
        return _Backward(func, grad, found) if found else None

    out: list[_Backward] = []
    for func in [*funcs, None]:
        block = func.body.block if func is not None else body
        fpos = positions(block) if func is not None else body_pos
        for op in block.ops:
            if type(op) is not rt.KernelOp or (kernel_name(op) or "") not in BACKWARD:
                continue
            ins, outs = kernel_io(op)
            if len(ins) != 2 or len(outs) != 1:
                continue
            if func is None:
                bw = producers_of(op, None, [(op, ins[1])])
            elif not isinstance(ins[1], BlockArgument) or ins[1].index >= len(func.ins):
                continue
            elif written_between(mem, ins[1], block, fpos, 0, fpos[op] - 1):
                continue
            else:
                j = ins[1].index
                bw = producers_of(op, func, [(c, c.io()[0][j]) for c in calls.get(func.func_name, [])])
            if bw is not None:
                out.append(bw)
    return out


def _across_functions(
    program: rt.ProgramOp,
    mem: Memory,
    made: dict[tuple[Attribute, bool], MemRefType],
    pos_of: dict[Block, dict[Operation, int]],
) -> int:
    """Gelus in one function whose gradients are in another: the gelu's function gets a
    destination for the factor (a new buffer at each call), the gradient's function an
    input for it (the buffer of the call that wrote its x)."""
    calls = _top_calls(program, mem.ops)
    if calls is None:
        return 0
    body = program.body.block
    funcs = [f for f in body.ops if isinstance(f, rt.FuncOp) and f.func_name in calls]
    forwards = _forwards(program, funcs, mem, made)
    if not forwards:
        return 0
    pos = pos_of.get(body)
    if pos is None:
        pos = pos_of[body] = positions(body)
    backwards = _backwards(program, funcs, calls, forwards, mem, pos)
    used = list({id(fw): fw for b in backwards for _, fw in b.producers.values()}.values())
    extra_ins: dict[rt.CallOp, list[SSAValue]] = {}
    extra_outs: dict[rt.CallOp, list[SSAValue]] = {}
    # the forward functions: a destination for each used gelu's factor, a buffer at each call
    for fw in used:
        if fw.func is None:  # a gelu of the program's body
            if fw.gelu not in fw.kept:
                kept = rt.AllocOp(fw.kept_type)
                body.insert_op_before(kept, fw.gelu)
                fw.kept[fw.gelu] = kept.result
                _keep(mem, pos, fw.gelu, fw.keeper, kept.result)
            continue
        block = fw.func.body.block
        arg = block.insert_arg(fw.kept_type, len(block.args))
        fw.func.properties["num_outs"] = IntegerAttr(fw.func.n_outs + 1, i64)
        _keep(mem, {fw.gelu: 0}, fw.gelu, fw.keeper, arg)  # (a function's positions are not read again)
        for c in calls[fw.func.func_name]:
            kept = rt.AllocOp(fw.kept_type)
            body.insert_op_before(kept, c)
            extra_outs.setdefault(c, []).append(kept.result)
            fw.kept[c] = kept.result
    # the gradient kernels: the factor as an input of their function, or the body's buffer
    for bw in backwards:
        first = next(iter(bw.producers.values()))[1]
        if bw.func is None:
            ((producer, fw),) = bw.producers.values()
            _read_kept(mem, pos, bw.grad, fw.keeper, fw.kept[producer])
            continue
        arg = bw.func.body.block.insert_arg(first.kept_type, len(bw.func.ins))
        _read_kept(mem, {bw.grad: 0}, bw.grad, first.keeper, arg)
        for c, (producer, fw) in bw.producers.items():
            assert isinstance(c, rt.CallOp)
            extra_ins.setdefault(c, []).append(fw.kept[producer])
    for c in {*extra_ins, *extra_outs}:
        ins, outs = c.io()
        c.set_io([*ins, *extra_ins.get(c, [])], [*outs, *extra_outs.get(c, [])])
    return len(used)


@dataclass(frozen=True)
class RtKeepGeluFactorPass(ModulePass):
    """A gelu writes the factor of x it computes; its gradients read it (in its block, or
    in another function through new arguments)."""

    name = "rt-keep-gelu-factor"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            keep_gelu_factors(program)
