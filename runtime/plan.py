"""The optimised plan: one generated Python function per replica for a whole `rt.program`.

`build_replica(program)` allocates every buffer once, binds each kernel to its arrays at
compile time and emits straight-line Python source (loops become `for`, branches `if`),
compiled once with `compile()`. The bound arrays, ufuncs and constants are globals of the
generated code, so a steady-state step does no name lookups in Python dicts of ours, no
dispatch on types or kernel names, no shape checks and no array allocations: it calls
NumPy ufuncs with preallocated `out=` arrays, precomputed views and bound BLAS calls.

Kernel selection: the common kernels have *templates* here, alias-aware sequences of
in-place ufunc calls over shared scratch buffers: gelu / gelu_grad as multiplies and one
tanh, `pow` by a constant 2 or 3 as multiplies, reductions as `ufunc.reduce(..., out=)`,
the NLL gradient through a precomputed flat index, `xl.gemm_acc` as one BLAS call,
`dy @ W.T` with few rows computed as the (faster) transposed product. Anything else
calls the kernel factory of `xl.runtime.kernels`, as the straightforward plan does.
Kernels marked `rt.view` bind their output as a view of their input and emit no code.
Scalar constants are 0-d arrays of the operand dtype (same results as Python scalars,
no conversion per call).

Code size: kernels of 4+ lines become calls to helper functions shared by all kernels
with the same code, and long programs are split into chunk functions, so `compile()`
stays linear and small. Scratch buffers are shared by all kernels of a replica: a step
function is not re-entrant.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from xdsl.ir import Block, Operation, SSAValue
from xl.dialects import rt
from xl.dialects.utils import dense_to_numpy, dtype_of, shape_of
from xl.runtime import blas
from xl.runtime.aliasing import check_writable, inputs_to_snapshot
from xl.runtime.errors import PlanError, describe_buffer, diagnostic_props
from xl.runtime.streams import stream_entry
from xl.runtime.views import view_array
from xl.runtime.kernels import KERNELS, check_range
from xl.runtime.xl_kernels import parse_steps

VIEW_ATTR = "rt.view"

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


class K:
    """What a template sees of a kernel: its name and its in / out buffers."""

    __slots__ = ("ins", "name", "outs")

    def __init__(self, name: str, ins: Sequence[SSAValue], outs: Sequence[SSAValue]):
        self.name = name
        self.ins = tuple(ins)
        self.outs = tuple(outs)


class Gen:
    """Source and namespace of one generated step function."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {}
        self.lines: list[str] = []
        self.arrays: dict[SSAValue, np.ndarray] = {}
        self.names: dict[SSAValue, str] = {}
        self._ids = itertools.count()
        self._fns: dict[int, str] = {}
        self._consts: dict[tuple[str, np.dtype], str] = {}
        self._scratch: dict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] = {}
        self._in_use: dict[tuple[tuple[int, ...], np.dtype], int] = {}

    # -- names -----------------------------------------------------------------------------
    def bind(self, obj: Any, hint: str = "k") -> str:
        name = f"{hint}{next(self._ids)}"
        self.ns[name] = obj
        return name

    def fn(self, f: Any) -> str:
        """A name for a shared callable (ufunc, function)."""
        key = id(f)
        name = self._fns.get(key)
        if name is None:
            base = getattr(f, "__name__", "f")
            name = self._fns[key] = self.bind(f, f"_{base}_")
        return name

    def buf(self, v: SSAValue) -> str:
        return self.names[v]

    def arr(self, v: SSAValue) -> np.ndarray:
        return self.arrays[v]

    def set_buffer(self, v: SSAValue, a: np.ndarray, hint: str = "b") -> None:
        self.arrays[v] = a
        self.names[v] = self.bind(a, hint)

    def const(self, value: float, dtype: Any) -> str:
        """A global name for a 0-d constant array of `dtype`.

        Passing a 0-d array of the operand's dtype to a ufunc gives the same result as a
        Python scalar (which NumPy converts to that dtype), without the conversion and its
        allocation on every call (~0.3 us faster).
        """
        dt = np.dtype(dtype)
        key = (repr(value), dt)
        name = self._consts.get(key)
        if name is None:
            arr = np.array(value, dtype=dt)
            arr.flags.writeable = False
            name = self._consts[key] = f"_k{len(self._consts)}"
            self.ns[name] = arr
        return name

    def view(self, a: np.ndarray) -> str:
        """A name for a precomputed array (typically a view of a buffer)."""
        return self.bind(a, "v")

    # -- scratch: temporaries inside one kernel, shared by all kernels -----------------------
    def scratch(self, shape: Sequence[int], dtype: Any) -> tuple[np.ndarray, str]:
        key = (tuple(shape), np.dtype(dtype))
        i = self._in_use.get(key, 0)
        pool = self._scratch.setdefault(key, [])
        if i == len(pool):
            a = np.zeros(key[0], key[1])
            pool.append(a)
            self.ns[f"s_{id(a)}"] = a
        self._in_use[key] = i + 1
        a = pool[i]
        return a, f"s_{id(a)}"

    def release_scratch(self) -> None:
        self._in_use.clear()


# ------------------------------------------------------------------------------------
# Kernel templates: (gen, op, in names, out names, props) -> source lines, or None
# ------------------------------------------------------------------------------------

Template = Callable[[Gen, K, list[str], list[str], dict[str, Any]], "list[str] | None"]
TEMPLATES: dict[str, Template] = {}


def template(*names: str) -> Callable[[Template], Template]:
    def deco(f: Template) -> Template:
        for n in names:
            TEMPLATES[n] = f
        return f

    return deco


_BINARY = {
    "popxl.add": np.add,
    "popxl.sub": np.subtract,
    "popxl.mul": np.multiply,
    "popxl.maximum": np.maximum,
    "popxl.minimum": np.minimum,
    "popxl.equal": np.equal,
    "popxl.greater": np.greater,
    "popxl.logical_and": np.logical_and,
    "popxl.logical_or": np.logical_or,
}
_UNARY = {
    "popxl.neg": np.negative,
    "popxl.abs": np.abs,
    "popxl.sign": np.sign,
    "popxl.tanh": np.tanh,
    "popxl.exp": np.exp,
    "popxl.log": np.log,
    "popxl.sqrt": np.sqrt,
    "popxl.cos": np.cos,
    "popxl.sin": np.sin,
    "popxl.logical_not": np.logical_not,
}


def _arity(op: K, n_in: int, n_out: int) -> bool:
    return len(op.ins) == n_in and len(op.outs) == n_out


@template(*_BINARY)
def _t_binary(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1):
        return None
    # `out=` by keyword: a positional `out` is deprecated for maximum/minimum
    return [f"{g.fn(_BINARY[op.name])}({i[0]}, {i[1]}, out={o[0]})"]


@template("popxl.div")
def _t_div(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1) or g.arr(op.outs[0]).dtype.kind != "f":
        return None
    return [f"{g.fn(np.divide)}({i[0]}, {i[1]}, {o[0]})"]


@template(*_UNARY)
def _t_unary(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    return [f"{g.fn(_UNARY[op.name])}({i[0]}, {o[0]})"]


@template("popxl.relu")
def _t_relu(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    return [f"{g.fn(np.maximum)}({i[0]}, {g.const(0, g.arr(op.outs[0]).dtype)}, out={o[0]})"]


@template("popxl.pow")
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


@template("popxl.identity", "popxl.detach")
def _t_identity(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    return [f"{g.fn(np.copyto)}({o[0]}, {i[0]})"]


@template("popxl.cast")
def _t_cast(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    return [f"{g.fn(np.copyto)}({o[0]}, {i[0]}, 'unsafe')"]


@template("popxl.matmul")
def _t_matmul(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1):
        return None
    a, b, out = g.arr(op.ins[0]), g.arr(op.ins[1]), g.arr(op.outs[0])
    if (
        a.ndim == 2
        and b.ndim == 2
        and a.dtype == b.dtype == out.dtype
        and a.dtype.kind == "f"
        and a.flags.c_contiguous
        and b.flags.f_contiguous
        and not b.flags.c_contiguous
        and a.shape[0] <= 64
        and min(b.shape) >= 128
    ):
        # A @ B with B a transposed view and few rows in A (a backward matmul through a
        # weight, `dy @ W.T`): OpenBLAS is about 2x faster on the transposed problem
        # W @ dy.T with an M x K output; the transposing copy of the small result is cheap.
        ta, t = g.scratch((out.shape[1], out.shape[0]), out.dtype)
        return [
            f"{g.fn(np.matmul)}({g.view(b.T)}, {g.view(a.T)}, {t})",
            f"{g.fn(np.copyto)}({o[0]}, {g.view(ta.T)})",
        ]
    return [f"{g.fn(np.matmul)}({i[0]}, {i[1]}, {o[0]})"]


@template("popxl.transpose", "popxl.reshape", "popxl.squeeze", "popxl.expand")
def _t_layout(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """Copy through a view computed now (the buffers never move): of the input when NumPy
    can view it in the output's shape, else of the output in the input's shape (a
    C-order reshape copy of a non-contiguous input). Never a copy made now: that would
    be a snapshot of the input at compile time."""
    if not _arity(op, 1, 1):
        return None
    x, out = g.arr(op.ins[0]), g.arr(op.outs[0])
    if op.name == "popxl.expand":
        return [f"{g.fn(np.copyto)}({o[0]}, {i[0]})"]
    src = view_array(op.name, x, out.shape, p.get("perm"))
    if src is not None:
        return [f"{g.fn(np.copyto)}({o[0]}, {g.view(src)})"]
    if op.name == "popxl.transpose":
        return None
    dst = as_view(out, x.shape)
    if dst is None:
        return None
    return [f"{g.fn(np.copyto)}({g.view(dst)}, {i[0]})"]


def as_view(a: np.ndarray, shape: Sequence[int]) -> np.ndarray | None:
    """`a` reshaped to `shape` as a view of the same memory, or None if that needs a copy.

    Every view a template precomputes at compile time goes through this: a reshape that
    silently copies would bind a snapshot taken at compile time.
    """
    try:
        return np.reshape(a, tuple(shape), copy=False)
    except ValueError:
        return None


def _gelu_tanh(g: Gen, k: Callable[[float], str], x: str, x2: str, u: str) -> list[str]:
    """Lines that leave x^2 in `x2` and tanh(sqrt(2/pi) x (1 + 0.044715 x^2)) in `u` (`x2` may be `u`)."""
    mul, add = g.fn(np.multiply), g.fn(np.add)
    return [
        f"{mul}({x}, {x}, {x2})",
        f"{mul}({x2}, {k(_GELU_A)}, {u})",
        f"{add}({u}, {k(1)}, {u})",
        f"{mul}({u}, {x}, {u})",
        f"{mul}({u}, {k(_SQRT_2_OVER_PI)}, {u})",
        f"{g.fn(np.tanh)}({u}, {u})",
    ]


@template("popxl.gelu")
def _t_gelu(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), as the reference kernel, no temporaries."""
    if not _arity(op, 1, 1):
        return None
    out = g.arr(op.outs[0])
    if out.dtype.kind != "f":
        return None
    x = i[0]
    if op.outs[0] is op.ins[0]:
        _, u = g.scratch(out.shape, out.dtype)
    else:
        u = o[0]
    mul, add = g.fn(np.multiply), g.fn(np.add)
    k = partial(g.const, dtype=out.dtype)
    return [
        *_gelu_tanh(g, k, x, u, u),
        f"{add}({u}, {k(1)}, {u})",
        f"{mul}({u}, {k(0.5)}, {u})",
        f"{mul}({x}, {u}, {o[0]})",
    ]


@template("popxl.gelu_grad")
def _t_gelu_grad(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """dy (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3a x^2)), t = tanh(u), as the reference."""
    if not _arity(op, 2, 1):
        return None
    out = g.arr(op.outs[0])
    if out.dtype.kind != "f" or any(g.arr(v).shape != out.shape for v in op.ins):
        return None
    dy, x = i
    _, x2 = g.scratch(out.shape, out.dtype)
    _, u = g.scratch(out.shape, out.dtype)
    _, s = g.scratch(out.shape, out.dtype)
    mul, add = g.fn(np.multiply), g.fn(np.add)
    k = partial(g.const, dtype=out.dtype)
    return [
        *_gelu_tanh(g, k, x, x2, u),  # t
        f"{mul}({x2}, {k(3 * _GELU_A * _SQRT_2_OVER_PI)}, {x2})",  # du
        f"{add}({x2}, {k(_SQRT_2_OVER_PI)}, {x2})",
        f"{mul}({x2}, {x}, {x2})",
        f"{mul}({u}, {u}, {s})",
        f"{g.fn(np.subtract)}({k(1)}, {s}, {s})",  # sech2
        f"{mul}({x2}, {s}, {x2})",
        f"{add}({x2}, {u}, {x2})",
        f"{add}({x2}, {k(1)}, {x2})",
        f"{mul}({x2}, {k(0.5)}, {x2})",
        f"{mul}({dy}, {x2}, {o[0]})",
    ]


@template("popxl.relu_grad")
def _t_relu_grad(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1):
        return None
    x = g.arr(op.ins[1])
    _, m = g.scratch(x.shape, np.bool_)
    return [
        f"{g.fn(np.greater)}({i[1]}, {g.const(0, x.dtype)}, {m})",
        f"{g.fn(np.multiply)}({i[0]}, {m}, {o[0]})",
    ]


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` with the reduced `axes` kept as 1 (the shape of a keepdims reduction)."""
    return tuple(1 if d in axes else n for d, n in enumerate(shape))


def _softmax_axis(out: np.ndarray, p: dict[str, Any]) -> tuple[int, tuple[int, ...]]:
    """The normalised softmax axis and the keepdims shape of a reduction over it."""
    axis = int(p["axis"]) % out.ndim
    return axis, _kept_shape(out.shape, (axis,))


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


@template("popxl.softmax")
def _t_softmax(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    out = g.arr(op.outs[0])
    if out.dtype.kind != "f" or out.ndim == 0:
        return None
    axis, kshape = _softmax_axis(out, p)
    _, m = g.scratch(kshape, out.dtype)
    _, s = g.scratch(kshape, out.dtype)
    return [
        f"{g.fn(np.maximum.reduce)}({i[0]}, {axis}, None, {m}, True)",
        f"{g.fn(np.subtract)}({i[0]}, {m}, {o[0]})",
        f"{g.fn(np.exp)}({o[0]}, {o[0]})",
        f"{g.fn(np.add.reduce)}({o[0]}, {axis}, None, {s}, True)",
        f"{g.fn(np.divide)}({o[0]}, {s}, {o[0]})",
    ]


@template("popxl.softmax_grad")
def _t_softmax_grad(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1):
        return None
    out = g.arr(op.outs[0])
    if out.dtype.kind != "f" or any(g.arr(v).shape != out.shape for v in op.ins):
        return None
    axis, kshape = _softmax_axis(out, p)
    _, t = g.scratch(out.shape, out.dtype)
    _, s = g.scratch(kshape, out.dtype)
    dy, y = i
    return [
        f"{g.fn(np.multiply)}({dy}, {y}, {t})",
        f"{g.fn(np.add.reduce)}({t}, {axis}, None, {s}, True)",
        f"{g.fn(np.subtract)}({dy}, {s}, {t})",
        f"{g.fn(np.multiply)}({y}, {t}, {o[0]})",
    ]


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


TEMPLATES["popxl.reduce_sum"] = _reduce_template(np.add)
TEMPLATES["popxl.reduce_max"] = _reduce_template(np.maximum)
TEMPLATES["popxl.reduce_min"] = _reduce_template(np.minimum)


@template("popxl.reduce_to_shape")
def _t_reduce_to_shape(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 1, 1):
        return None
    x, out = g.arr(op.ins[0]), g.arr(op.outs[0])
    lead = x.ndim - out.ndim
    axes = tuple(range(lead)) + tuple(
        lead + k for k, d in enumerate(out.shape) if d == 1 and x.shape[lead + k] != 1
    )
    if not axes:
        return [f"{g.fn(np.copyto)}({o[0]}, {i[0]})"]
    if x.dtype != out.dtype:
        return None
    return _reduce_into(g, np.add, i[0], x, out, axes)


@template("popxl.scaled_add_")
def _t_scaled_add_(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1) or op.outs[0] is not op.ins[0]:
        return None
    x, y = g.arr(op.ins[0]), g.arr(op.ins[1])
    if x.dtype != y.dtype or x.dtype.kind != "f":
        return None
    a, b = float(p["a"]), float(p["b"])
    mul, add = g.fn(np.multiply), g.fn(np.add)
    lines = []
    if b != 1.0 or (a != 1.0 and np.may_share_memory(x, y)):
        # b * y goes to scratch before x is written (y may be x: `scaled_add_(y, y)`)
        _, s = g.scratch(y.shape, y.dtype)
        if b != 1.0:
            lines.append(f"{mul}({i[1]}, {g.const(b, y.dtype)}, {s})")
        else:
            lines.append(f"{g.fn(np.copyto)}({s}, {i[1]})")
    else:
        s = i[1]
    if a != 1.0:
        lines.append(f"{mul}({i[0]}, {g.const(a, x.dtype)}, {i[0]})")
    lines.append(f"{add}({i[0]}, {s}, {i[0]})")
    return lines


@template("popxl.scaled_add")
def _t_scaled_add(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 2, 1):
        return None
    x, y, out = g.arr(op.ins[0]), g.arr(op.ins[1]), g.arr(op.outs[0])
    if not (x.dtype == y.dtype == out.dtype) or out.dtype.kind != "f":
        return None
    a, b = float(p["a"]), float(p["b"])
    mul, add = g.fn(np.multiply), g.fn(np.add)
    if a == 1.0 and b == 1.0:
        return [f"{add}({i[0]}, {i[1]}, {o[0]})"]
    _, t = g.scratch(y.shape, y.dtype)
    k = partial(g.const, dtype=out.dtype)
    return [f"{mul}({i[1]}, {k(b)}, {t})", f"{mul}({i[0]}, {k(a)}, {o[0]})", f"{add}({o[0]}, {t}, {o[0]})"]


@template("popxl.nll_loss_with_softmax_grad")
def _t_nll_softmax_grad(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """Without ignore_index / loss_grad tensor: gathers through a precomputed flat index."""
    segs = p.get("operand_segments", p.get("operandSegmentSizes"))
    if not _arity(op, 2, 2) or p.get("ignore_index") is not None or (segs is not None and sum(segs) != 2):
        return None
    probs, labels = g.arr(op.ins[0]), g.arr(op.ins[1])
    loss, dx = g.arr(op.outs[0]), g.arr(op.outs[1])
    red = p.get("reduction", "mean")
    if (
        probs.dtype.kind != "f"
        or dx.dtype != probs.dtype
        or loss.dtype != probs.dtype
        or probs.ndim == 0
        or not (probs.flags.c_contiguous and dx.flags.c_contiguous and labels.flags.c_contiguous)
        or red not in ("mean", "sum", "none")
        or (red == "none" and loss.size != labels.size)
        or (red != "none" and loss.size != 1)
        or labels.dtype.kind not in "iu"
    ):
        return None
    c = probs.shape[-1]
    n = probs.size // max(c, 1)
    if labels.size != n or n == 0:
        return None
    lg = float(p.get("loss_grad", 1.0))
    rows_c = np.arange(n, dtype=np.int64) * c
    _, idx = g.scratch((n,), np.int64)
    _, pk = g.scratch((n,), probs.dtype)
    pflat, dflat, lab = as_view(probs, (-1,)), as_view(dx, (-1,)), as_view(labels, (-1,))
    loss_n, loss_0 = as_view(loss, (n,)) if red == "none" else None, as_view(loss, ())
    if pflat is None or dflat is None or lab is None or loss_0 is None and red != "none":
        return None
    if red == "none" and loss_n is None:
        return None
    take, copyto = g.fn(np.take), g.fn(np.copyto)
    pf, df = g.view(pflat), g.view(dflat)
    lv_ = g.view(lab)
    # A label outside [0, C) would read another row. Seen as unsigned, a negative label
    # is huge: one max() over the labels per step, the full check only when it fails.
    uv = g.view(lab.view(np.dtype(f"u{lab.dtype.itemsize}")))
    chk = g.bind(partial(check_range, lo=0, hi=c, p=p, i=1, op=op.name,
                         what="label", note=f"{c} classes"), "chk")
    lines = [
        f"if {uv}.max() >= {c}: {chk}({lv_})",
        f"{g.fn(np.add)}({g.view(rows_c)}, {lv_}, {idx})",
        f"{take}({pf}, {idx}, None, {pk})",
        f"{g.fn(np.log)}({pk}, {pk})",
        f"{g.fn(np.negative)}({pk}, {pk})",
    ]
    if red == "none":
        lines.append(f"{copyto}({g.view(loss_n)}, {pk})")
        scale = lg
    elif red == "sum":
        lines.append(f"{g.fn(np.add.reduce)}({pk}, 0, None, {g.view(loss_0)})")
        scale = lg
    else:
        lv = g.view(loss_0)
        lines.append(f"{g.fn(np.add.reduce)}({pk}, 0, None, {lv})")
        lines.append(f"{g.fn(np.divide)}({lv}, {g.const(n, probs.dtype)}, {lv})")
        scale = lg / n
    lines += [
        f"{copyto}({df}, {pf})",
        f"{take}({df}, {idx}, None, {pk})",
        f"{g.fn(np.subtract)}({pk}, {g.const(1, probs.dtype)}, {pk})",
        f"{g.fn(np.put)}({df}, {idx}, {pk})",
    ]
    if scale != 1.0:
        lines.append(f"{g.fn(np.multiply)}({o[1]}, {g.const(scale, probs.dtype)}, {o[1]})")
    return lines


@template("xl.gemm_acc")
def _t_gemm_acc(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    if not _arity(op, 3, 1) or op.outs[0] is not op.ins[2]:
        return None
    a, b, c = (g.arr(v) for v in op.ins)
    if np.may_share_memory(a, c) or np.may_share_memory(b, c):
        return None  # BLAS must not write an operand it reads (the kernel copies)
    call = blas.gemm_acc(
        a, b, c, float(p["alpha"]), float(p["beta"]), bool(p["trans_a"]), bool(p["trans_b"])
    )
    return [f"{g.bind(call, 'gemm')}()"]


@template("xl.fused")
def _t_fused(g: Gen, op: K, i: list[str], o: list[str], p: dict[str, Any]):
    """Each step's own code, all writing the output buffer (see `rt-fuse-elementwise`)."""
    if len(op.outs) != 1:
        return None
    out = op.outs[0]
    lines: list[str] = []
    for name, args, props in parse_steps(p["steps"]):
        ins = [out if a < 0 else op.ins[a] for a in args]
        names = [g.buf(v) for v in ins]
        tmpl = TEMPLATES.get(name)
        step = tmpl(g, K(name, ins, [out]), names, o, props) if tmpl is not None else None
        g.release_scratch()
        if step is None:
            factory = KERNELS.get(name)
            if factory is None:
                raise PlanError(f"runtime: no NumPy kernel for '{name}'")
            step = [f"{g.bind(factory(props), 'k')}({', '.join(names + o)})"]
        lines += step
    return lines


# ------------------------------------------------------------------------------------
# Building the step function
# ------------------------------------------------------------------------------------


class PlanBuilder:
    """Allocates the buffers of one replica and generates its step function."""

    def __init__(self, stream_in: type, stream_out: type) -> None:
        self.g = Gen()
        self.state: dict[str, np.ndarray] = {}
        self.inputs: dict[str, Any] = {}
        self.outputs: dict[str, Any] = {}
        self._stream_in = stream_in
        self._stream_out = stream_out
        self.fallbacks: list[str] = []
        self.snapshots: list[str] = []  # kernels whose overlapping inputs are copied first
        self.helpers: dict[str, str] = {}  # outlined kernel body -> helper name

    def emit(self, line: str, depth: int) -> None:
        self.g.lines.append("    " * depth + line)

    def block(self, block: Block, depth: int) -> None:
        start = len(self.g.lines)
        for op in block.ops:
            self.op(op, depth)
        if len(self.g.lines) == start:
            self.emit("pass", depth)

    def op(self, op: Operation, depth: int) -> None:
        g = self.g
        if isinstance(op, rt.AllocOp):
            t = op.result.type
            g.set_buffer(op.result, np.zeros(shape_of(t), dtype=dtype_of(t)))
            return
        if isinstance(op, rt.StateOp):
            t = op.result.type
            arr = (
                dense_to_numpy(op.init)
                if op.init is not None
                else np.zeros(shape_of(t), dtype=dtype_of(t))
            )
            arr = np.array(arr, dtype=dtype_of(t), order="C").reshape(shape_of(t))
            g.set_buffer(op.result, arr, "w")
            self.state[op.slot.data] = arr
            return
        if isinstance(op, rt.ConstOp):
            arr = np.array(dense_to_numpy(op.value)).reshape(shape_of(op.result.type))
            arr.flags.writeable = False
            g.set_buffer(op.result, arr, "c")
            return
        if isinstance(op, rt.KernelOp):
            self.kernel(op, depth)
            return
        if isinstance(op, rt.CopyOp | rt.H2DOp):
            dest = op.dest if isinstance(op, rt.CopyOp) else op.buffer
            check_writable(op.name, [g.arr(dest)], lambda i: describe_buffer(dest))
        if isinstance(op, rt.CopyOp):
            self.emit(f"{g.fn(np.copyto)}({g.buf(op.dest)}, {g.buf(op.source)})", depth)
            return
        if isinstance(op, rt.H2DOp):
            s = stream_entry(op, self.inputs, self._stream_in, "loaded")
            sn, b = g.bind(s, "s"), g.buf(op.buffer)
            self.emit(
                f"_d = {sn}.data; _i = {sn}.index; {g.fn(np.copyto)}({b}, _d[_i % _d.shape[0]]); "
                f"{sn}.index = _i + 1",
                depth,
            )
            return
        if isinstance(op, rt.D2HOp):
            s = stream_entry(op, self.outputs, self._stream_out, "stored")
            sn, b = g.bind(s, "s"), g.buf(op.buffer)
            self.emit(
                f"_d = {sn}.data; _i = {sn}.index; {g.fn(np.copyto)}(_d[_i % _d.shape[0], ...], {b}); "
                f"{sn}.index = _i + 1",
                depth,
            )
            return
        if isinstance(op, rt.LoopOp):
            count = op.count.value.data
            self.emit(f"for _ in {g.fn(range)}({count}):", depth)
            self.block(op.body.block, depth + 1)
            return
        if isinstance(op, rt.IfOp):
            self.emit(f"if {g.buf(op.condition)}:", depth)
            self.block(op.then_region.block, depth + 1)
            self.emit("else:", depth)
            self.block(op.else_region.block, depth + 1)
            return
        raise PlanError(f"runtime: cannot execute '{op.name}'")

    def kernel(self, rop: rt.KernelOp, depth: int) -> None:
        g = self.g
        name = rop.kernel.data
        props = rop.params
        props.update(diagnostic_props(rop))
        op = K(name, *rop.io())
        if VIEW_ATTR in rop.attributes and len(op.ins) == 1 and len(op.outs) == 1:
            x = g.arr(op.ins[0])
            shape = shape_of(op.outs[0].type)
            v = view_array(name, x, shape, props.get("perm"))
            if v is not None:
                g.set_buffer(op.outs[0], v, "v")
                return
            # Not expressible as a view (rt-views never marks such a kernel): the output
            # gets storage and the kernel copies, every step.
            g.set_buffer(op.outs[0], np.zeros(shape, dtype_of(op.outs[0].type)))
        ins = [g.buf(v) for v in op.ins]
        outs = [g.buf(v) for v in op.outs]
        pre: list[str] = []
        check_writable(name, [g.arr(v) for v in op.outs], lambda i: describe_buffer(op.outs[i]))
        snap = inputs_to_snapshot(name, [g.arr(v) for v in op.ins], [g.arr(v) for v in op.outs])
        if snap:
            # inputs overlapping an output are read (copied) before the kernel writes
            in_vals = list(op.ins)
            for j in snap:
                x = g.arr(op.ins[j])
                copy = rt.AllocOp(op.ins[j].type).result  # a private buffer for the copy
                g.set_buffer(copy, np.empty_like(x, order="C"), "snap")
                pre.append(f"{g.fn(np.copyto)}({g.buf(copy)}, {ins[j]})")
                ins[j] = g.buf(copy)
                in_vals[j] = copy
            op = K(name, in_vals, op.outs)
            self.snapshots.append(name)
        tmpl = TEMPLATES.get(name)
        lines = tmpl(g, op, ins, outs, props) if tmpl is not None else None
        g.release_scratch()
        if lines is None:
            factory = KERNELS.get(name)
            if factory is None:
                raise PlanError(f"runtime: no NumPy kernel for '{name}'")
            fn = factory(props)
            self.fallbacks.append(name)
            lines = [f"{g.bind(fn, 'k')}({', '.join(ins + outs)})"]
        lines = pre + lines
        if len(lines) >= OUTLINE_LINES:
            lines = [self.outline(lines)]
        self.emit(f"# {name}", depth)
        for line in lines:
            self.emit(line, depth)

    def outline(self, lines: list[str]) -> str:
        """Replace a multi-line kernel body by a call to a shared helper function.

        The arrays it uses become parameters, so kernels with the same code (e.g. every
        gelu of one shape/aliasing pattern) share one helper: the generated source, and
        thus `compile()` time, stays small. A call costs ~0.1 us against the several
        ufunc calls of the body.
        """
        ns = self.g.ns
        params: list[str] = []
        index: dict[str, int] = {}

        def param(m: re.Match[str]) -> str:
            t = m.group(0)
            if t.startswith("_") or t not in ns:
                return t
            j = index.get(t)
            if j is None:
                j = index[t] = len(params)
                params.append(t)
            return f"a{j}"

        key = "\n".join(_IDENT.sub(param, line) for line in lines)
        fname = self.helpers.get(key)
        if fname is None:
            fname = self.helpers[key] = f"_h{len(self.helpers)}"
        return f"{fname}({', '.join(params)})"

    def finish(self, marks: Sequence[int] = ()) -> tuple[Callable[[], None], str]:
        """Compile the generated source; returns (step function, source).

        The bound objects are the globals of the generated code (LOAD_GLOBAL is cached
        by the interpreter, about as fast as a local). Long programs are split at the
        top-level op boundaries `marks` into functions of about `CHUNK_LINES` lines, which
        keeps `compile()` linear in the program size.
        """
        g = self.g
        lines = g.lines
        cuts = [0]
        for m in marks:
            if m - cuts[-1] >= CHUNK_LINES:
                cuts.append(m)
        cuts.append(len(lines))
        src_lines: list[str] = []
        for body, fname in self.helpers.items():
            n = len(set(re.findall(r"\ba(\d+)\b", body)))
            src_lines.append(f"def {fname}({', '.join(f'a{j}' for j in range(n))}):")
            src_lines += ["    " + line for line in body.split("\n")]
        if len(cuts) <= 2:
            src_lines.append("def _step():")
            src_lines += ["    " + line for line in lines] or ["    pass"]
        else:
            calls = []
            for k in range(len(cuts) - 1):
                src_lines.append(f"def _chunk{k}():")
                src_lines += ["    " + line for line in lines[cuts[k] : cuts[k + 1]]] or ["    pass"]
                calls.append(f"    _chunk{k}()")
            src_lines.append("def _step():")
            src_lines += calls
        src = "\n".join(src_lines) + "\n"
        scope = dict(g.ns)
        exec(compile(src, "<xl plan>", "exec"), scope)
        return scope["_step"], src


CHUNK_LINES = 2000
OUTLINE_LINES = 4  # kernels with at least this many lines become shared helpers
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


def build_replica(program: rt.ProgramOp, stream_in: type, stream_out: type) -> tuple[PlanBuilder, list[int]]:
    """The builder of one replica (step source generated) and its top-level op boundaries."""
    b = PlanBuilder(stream_in, stream_out)
    marks = []
    for op in program.body.block.ops:
        marks.append(len(b.g.lines))
        b.op(op, 0)
    return b, marks
