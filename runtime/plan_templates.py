"""Op templates of the generated plan: alias-aware NumPy code for the common kernels.

A template is registered by the op class it implements (`@template(GeluOp)`) and
returns the source lines of one kernel instance, or None to fall back to the kernel
factory of `xl.runtime.kernels` (the one the straightforward plan calls):

```python
@template(IdentityOp, DetachOp)
def _t_identity(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    return [f"{g.fn(np.copyto)}({o[0]}, {i[0]})"]
```

`i` / `o` are the global names of the bound in / out arrays, `p` the kernel's parameters;
`Gen` (`xl.runtime.codegen`) gives names for shared callables (`g.fn`), 0-d constants (`g.const`), precomputed
views (`g.view`) and scratch buffers shared by all kernels of a replica (`g.scratch`; of
one stream when virtual IPUs run concurrently, `xl.runtime.concurrent`).
Where a kernel's maths is more than a ufunc or two, its template lives next to the kernel and
calls the kernel's own function with precomputed views and scratch (softmax and gelu in
`kernels/activation.py`, group norm in `kernels/norm.py`, relu and its gradient, scaled adds,
accumulators and the NLL loss with its softmax gradient in `kernels/core.py`): the maths
exists once. The ufunc templates here read the kernels' tables (`BINARY_UFUNCS`,
`UNARY_UFUNCS`, `REDUCE_UFUNCS`). Here, `pow` by a constant 2 or 3 is multiplies,
reductions `ufunc.reduce(..., out=)` into a keepdims view,
`xl.gemm_acc` is one BLAS call, `dy @ W.T` with few rows the
(faster) transposed product.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from xl.dialects import rt
from xl.dialects.popxl import (
    CastOp,
    DetachOp,
    DivOp,
    ExpandOp,
    IdentityOp,
    MatmulOp,
    PowOp,
    ReduceToShapeOp,
    ReshapeOp,
    SqueezeOp,
    TransposeOp,
)
from xl.dialects.rt_kernels import FusedOp, GemmAccOp, kernel_class, view_array
from xl.runtime import blas
from xl.runtime.codegen import TEMPLATES, Gen, K, Template, as_view, template
from xl.runtime.errors import PlanError
from xl.runtime.kernels import KERNELS
from xl.runtime.kernels.core import BINARY_UFUNCS, REDUCE_UFUNCS, UNARY_UFUNCS
from xl.runtime.kernels.rt import parse_steps
from xl.runtime.plan_matmul import matmul_lines, row_sum_lines

# ------------------------------------------------------------------------------------
# Kernel templates: (gen, op, in names, out names, props) -> source lines, or None
# ------------------------------------------------------------------------------------

# one ufunc each, from the kernels' table (pow has its own template)
_BINARY = {cls: f for cls, f in BINARY_UFUNCS.items() if cls is not PowOp}
_UNARY = UNARY_UFUNCS


def _arity(op: K, n_in: int, n_out: int) -> bool:
    return len(op.ins) == n_in and len(op.outs) == n_out


@template(*_BINARY)
def _t_binary(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1) or op.cls is None:
        return None
    # `out=` by keyword: a positional `out` is deprecated for maximum/minimum
    return [f"{g.fn(_BINARY[op.cls])}({i[0]}, {i[1]}, out={o[0]})"]


@template(DivOp)
def _t_div(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1) or g.arr(op.outs[0]).dtype.kind != "f":
        return None
    return [f"{g.fn(np.divide)}({i[0]}, {i[1]}, {o[0]})"]


@template(*_UNARY)
def _t_unary(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1) or op.cls not in _UNARY:
        return None
    return [f"{g.fn(_UNARY[op.cls])}({i[0]}, {o[0]})"]


@template(PowOp)
def _t_pow(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """`x ** c` for a constant c in {1, 2, 3}: multiplies instead of `pow`."""
    if not _arity(op, 2, 1):
        return None
    x, c = op.ins
    out = g.arr(op.outs[0])
    if not isinstance(c.owner, rt.ConstOp) or out.dtype.kind != "f" or out.shape != g.arr(x).shape:
        return g_call_ufunc(g, np.power, i, o)
    vals = np.unique(g.arr(c))
    if vals.size != 1 or float(vals[0]) not in (1.0, 2.0, 3.0):
        return g_call_ufunc(g, np.power, i, o)
    e = int(vals[0])
    mul = g.fn(np.multiply)
    if e == 1:
        return [f"{g.fn(np.copyto)}({o[0]}, {i[0]})"]
    if e == 2:
        return [f"{mul}({i[0]}, {i[0]}, {o[0]})"]
    if op.outs[0] is x:
        _, sn = g.scratch(out.shape, out.dtype)
        return [f"{mul}({i[0]}, {i[0]}, {sn})", f"{mul}({sn}, {i[0]}, {o[0]})"]
    return [f"{mul}({i[0]}, {i[0]}, {o[0]})", f"{mul}({o[0]}, {i[0]}, {o[0]})"]


def g_call_ufunc(g: Gen, f: np.ufunc, i: list[str], o: list[str]) -> list[str]:
    return [f"{g.fn(f)}({', '.join(i)}, out={o[0]})"]


@template(IdentityOp, DetachOp)
def _t_identity(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    return [f"{g.fn(np.copyto)}({o[0]}, {i[0]})"]


@template(CastOp)
def _t_cast(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    return [f"{g.fn(np.copyto)}({o[0]}, {i[0]}, 'unsafe')"]


@template(MatmulOp)
def _t_matmul(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """Float matmuls on BLAS (`xl.runtime.plan_matmul`); others NumPy's matmul (float16,
    1-D or empty operands: the kernel)."""
    if not _arity(op, 2, 1):
        return None
    a, b, out = g.arr(op.ins[0]), g.arr(op.ins[1]), g.arr(op.outs[0])
    lines = matmul_lines(g, a, b, out, i[0], i[1], o[0])
    if lines is not None:
        return lines
    if out.dtype == np.float16:
        return None
    return [f"{g.fn(np.matmul)}({i[0]}, {i[1]}, {o[0]})"]


@template(TransposeOp, ReshapeOp, SqueezeOp, ExpandOp)
def _t_layout(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """Copy through a view computed now (the buffers never move): of the input when NumPy
    can view it in the output's shape, else of the output in the input's shape (a
    C-order reshape copy of a non-contiguous input). Never a copy made now: that would
    be a snapshot of the input at compile time."""
    if not _arity(op, 1, 1):
        return None
    x, out = g.arr(op.ins[0]), g.arr(op.outs[0])
    if op.cls is ExpandOp:
        return [f"{g.fn(np.copyto)}({o[0]}, {i[0]})"]
    src = view_array(op.cls, x, out.shape, p.get("perm"))
    if src is not None:
        return [f"{g.fn(np.copyto)}({o[0]}, {g.view(src)})"]
    if op.cls is TransposeOp:
        return None
    dst = as_view(out, x.shape)
    if dst is None:
        return None
    return [f"{g.fn(np.copyto)}({g.view(dst)}, {i[0]})"]


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` with the reduced `axes` kept as 1 (the shape of a keepdims reduction)."""
    return tuple(1 if d in axes else n for d, n in enumerate(shape))


def _reduce_into(
    g: Gen, ufunc: np.ufunc, src: str, x: np.ndarray, out: np.ndarray, axes: tuple[int, ...]
) -> list[str] | None:
    """`ufunc.reduce` of `src` (`x`) over `axes` straight into a keepdims view of `out`, or None."""
    kshape = _kept_shape(x.shape, axes)
    if math.prod(kshape) != out.size or not out.flags.c_contiguous:
        return None
    kept = as_view(out, kshape)
    if kept is None:
        return None
    return [f"{g.fn(ufunc.reduce)}({src}, {axes!r}, None, {g.view(kept)}, True)"]


def _reduce_template(ufunc: np.ufunc) -> Template:
    def t(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
        if not _arity(op, 1, 1):
            return None
        x, out = g.arr(op.ins[0]), g.arr(op.outs[0])
        axes = p.get("axis")
        axes = tuple(range(x.ndim)) if axes is None else tuple(int(a) % max(x.ndim, 1) for a in axes)
        if x.size == 0:
            return None
        if ufunc is np.add and x.dtype.kind in "biu" and x.dtype != out.dtype:
            return None
        return _reduce_into(g, ufunc, i[0], x, out, axes)

    return t


for _cls, _ufunc in REDUCE_UFUNCS.items():
    template(_cls)(_reduce_template(_ufunc))


@template(ReduceToShapeOp)
def _t_reduce_to_shape(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    x, out = g.arr(op.ins[0]), g.arr(op.outs[0])
    lead = x.ndim - out.ndim
    axes = tuple(range(lead)) + tuple(lead + k for k, d in enumerate(out.shape) if d == 1 and x.shape[lead + k] != 1)
    if not axes:
        return [f"{g.fn(np.copyto)}({o[0]}, {i[0]})"]
    if x.dtype != out.dtype:
        return None
    if axes == tuple(range(lead)):  # leading axes only (a bias gradient): BLAS's gemv
        rows = math.prod(x.shape[:lead])
        lines = row_sum_lines(g, x, out, rows)
        if lines is not None:
            return lines
    return _reduce_into(g, np.add, i[0], x, out, axes)


@template(GemmAccOp)
def _t_gemm_acc(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if len(op.ins) not in (3, 4) or len(op.outs) != 1 or op.outs[0] is not op.ins[2]:
        return None
    a, b, c, *step = (g.arr(v) for v in op.ins)
    if np.may_share_memory(a, c) or np.may_share_memory(b, c):
        return None  # BLAS must not write an operand it reads (the kernel copies)
    ta, tb = bool(p["trans_a"]), bool(p["trans_b"])
    if step:  # the running mean: scales from the counter when called
        call = blas.gemm_acc_mean(a, b, c, step[0], ta, tb)
    else:
        call = blas.gemm_acc(a, b, c, float(p["alpha"]), float(p["beta"]), ta, tb)
    return [f"{g.bind(call, 'gemm')}()"]


@template(FusedOp)
def _t_fused(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """Each step's own code, all writing the output buffer (see `rt-fuse-elementwise`)."""
    if len(op.outs) != 1:
        return None
    out = op.outs[0]
    lines: list[str] = []
    for name, args, props in parse_steps(p["steps"]):
        ins = [out if a < 0 else op.ins[a] for a in args]
        names = [g.buf(v) for v in ins]
        cls = kernel_class(name)
        tmpl = TEMPLATES.get(cls) if cls is not None else None
        step = tmpl(g, K(name, cls, ins, [out]), names, o, props) if tmpl is not None else None
        g.release_scratch()
        if step is None:
            factory = KERNELS.get(cls) if cls is not None else None
            if factory is None:
                raise PlanError(f"runtime: no NumPy kernel for '{name}'")
            step = [f"{g.bind(factory(props), 'k')}({', '.join(names + o)})"]
        lines += step
    return lines
