"""One or more cases per runtime kernel, with NumPy references, for the registry-derived tests.

`KERNEL_CLASSES` is every kernel the runtime has (`xl.runtime.kernels.KERNELS`, the replica
collectives of `xl.runtime.kernels.collectives.COLLECTIVES`): a kernel registered later is listed
without editing anything, and `tests/runtime/test_kernel_views.py` fails until it has a case here.

A `KernelCase` gives the inputs (a function of a random generator: each call gives new
values of the same shapes), the op's properties and a NumPy reference written from the
op's definition: `ref(*inputs)` returns the written operands after the kernel (in-place
ops), then the results; a `None` entry is not compared. Inputs are adversarial where the
op allows it: exact zeros, ties, large magnitudes (logits near 1000), sizes that a group
or a block does not divide. Where a loop reference already exists in the op's own tests,
it is used. A case without `ref` (random numbers, float8 scaling, a few gradients) is
compared with the kernel run on contiguous copies through the straightforward plan; each
of those ops is checked against an independent reference in `tests/runtime/test_kernels.py` or
its family's `tests/runtime/test_ops_*.py` (`test_every_op_has_a_kernel_and_a_test`).

Replica collectives (`replicas > 1`) take inputs and give references with a leading
replica axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import test as xdsl_test
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute

import xl.dialects.ipu as I
import xl.dialects.popxl as P
import xl.dialects.replica as R
import xl.runtime.executable  # noqa: F401  (registers every kernel and collective)
from tests.runtime.test_ops_nn_conv import ref_conv, ref_conv_transpose, ref_pool
from tests.runtime.test_ops_nn_resample import ref_roi_align
from tests.runtime.test_ops_nn_select import _loop_scatter_reduce
from xl.dialects.attrs import to_attr
from xl.dialects.custom_ops import CustomOpDefinition, register_custom_op
from xl.dialects.effects import written_operands
from xl.dialects.popxl import op_props
from xl.dialects.rt_kernels import (
    AllReduceGemmUpdateOp,
    AllReduceUpdateOp,
    FusedOp,
    GeluErfGradKeptOp,
    GeluErfKeepOp,
    GeluGradTanhOp,
    GeluTanhOp,
    GemmAccOp,
    KernelClass,
    SoftmaxFusedOp,
    SoftmaxGradFusedOp,
)
from xl.dialects.utils import dtype_of, shape_of, tensor_type
from xl.passes.rt_fuse_elementwise import _steps_attr
from xl.runtime.kernels import KERNELS
from xl.runtime.kernels.collectives import COLLECTIVES

KERNEL_CLASSES: list[KernelClass] = sorted({*KERNELS, *COLLECTIVES}, key=lambda c: c.name)

Arrays = Sequence[np.ndarray | None]
Shape = tuple[int, ...]


@dataclass
class RtForm:
    """An `rt.kernel` given directly (kernels no dialect op builds): its attributes and
    outputs, each an input index (written in place) or the (shape, dtype) of a result."""

    attrs: dict[str, Any]
    outs: list[int | tuple[Shape, Any]]


@dataclass
class KernelCase:
    cls: KernelClass
    inputs: Callable[[np.random.Generator], Arrays]
    props: dict[str, Any] = field(default_factory=dict)
    ref: Callable[..., Sequence[np.ndarray | None]] | None = None
    result_types: list[tuple[Shape, Any]] | None = None
    rtol: float = 1e-6
    atol: float = 1e-6
    replicas: int = 1
    label: str = ""
    rt: Callable[[list[np.ndarray]], RtForm] | None = None

    @property
    def id(self) -> str:
        return f"{self.cls.name}{'-' + self.label if self.label else ''}"


@dataclass
class KernelForm:
    """What an `rt.kernel` of a case is: its name, attributes (as attributes), and each
    output as an input index (written in place) or the (shape, dtype) of a new buffer."""

    name: str
    attrs: dict[str, Attribute]
    outs: list[int | tuple[Shape, np.dtype]]


def kernel_form(case: KernelCase, ins: Arrays) -> KernelForm:
    """The `rt.kernel` of `case` for inputs like `ins` (None: an absent optional operand;
    collectives: a leading replica axis), as `lower-to-rt` makes it."""
    present = [a for a in ins if a is not None]
    shapes = [a.shape[1:] if case.replicas > 1 else a.shape for a in present]
    if case.rt is not None:
        form = case.rt(present)
        outs: list[int | tuple[Shape, np.dtype]] = [
            o if isinstance(o, int) else (tuple(o[0]), np.dtype(o[1])) for o in form.outs
        ]
        return KernelForm(case.cls.name, {k: to_attr(v) for k, v in form.attrs.items()}, outs)
    src = xdsl_test.TestOp.create(result_types=[tensor_type(s, a.dtype) for s, a in zip(shapes, present)])
    it = iter(src.results)
    operands = [None if a is None else next(it) for a in ins]
    rts = None if case.result_types is None else [tensor_type(s, d) for s, d in case.result_types]
    op = case.cls.make(operands, rts, **case.props)  # pyright: ignore[reportAttributeAccessIssue]
    op.verify()
    outs = [*written_operands(op)]
    for r in op.results:
        t = r.type
        assert isinstance(t, TensorType)
        outs.append((shape_of(t), dtype_of(t)))
    return KernelForm(case.cls.name, {k: to_attr(v) for k, v in op_props(op).items()}, outs)


# ------------------------------------------------------------------------------------
# Values
# ------------------------------------------------------------------------------------


def adv(rng: np.random.Generator, shape: Shape, dtype: Any = np.float32, big: float = 1e3) -> np.ndarray:
    """Normal values with exact zeros, ties (repeats of the first value) and large magnitudes."""
    x = np.asarray(rng.standard_normal(shape) * 2.0)
    f = x.reshape(-1)
    n = f.size
    if n > 1:
        f[1::4] = f[0]
    if n > 2:
        f[2::5] = 0.0
    if n > 3:
        f[3::7] = big * np.where(rng.random(f[3::7].shape) < 0.5, -1.0, 1.0)
    return x.astype(dtype)


def pos(rng: np.random.Generator, shape: Shape, dtype: Any = np.float32) -> np.ndarray:
    """Positive values with ties, tiny and large ones."""
    x = np.asarray(np.abs(rng.standard_normal(shape)) + 0.25)
    f = x.reshape(-1)
    if f.size > 1:
        f[1::4] = f[0]
    if f.size > 2:
        f[2::6] = 1e-3
    if f.size > 3:
        f[3::7] = 1e3
    return x.astype(dtype)


def unit(rng: np.random.Generator, shape: Shape, dtype: Any = np.float32) -> np.ndarray:
    """Values in [-0.9, 0.9] with ties and zeros (moments, factors, probabilities' logits)."""
    x = np.asarray(rng.uniform(-0.9, 0.9, shape))
    f = x.reshape(-1)
    if f.size > 1:
        f[1::4] = f[0]
    if f.size > 2:
        f[2::5] = 0.0
    return x.astype(dtype)


def ints(rng: np.random.Generator, shape: Shape, lo: int, hi: int, dtype: Any = np.int32) -> np.ndarray:
    return np.asarray(rng.integers(lo, hi, shape)).astype(dtype)


def bools(rng: np.random.Generator, shape: Shape) -> np.ndarray:
    return np.asarray(rng.random(shape) < 0.5)


def probs(rng: np.random.Generator, shape: Shape) -> np.ndarray:
    z = rng.standard_normal(shape)
    e = np.exp(z - z.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return p.astype(np.float32)


def scalar(v: float, dtype: Any = np.float32) -> np.ndarray:
    return np.array(v, dtype)


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64)


def softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    z = f64(x)
    e = np.exp(z - z.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


_SQ2PI = math.sqrt(2.0 / math.pi)
_ERF = np.vectorize(math.erf)


def gelu64(x: np.ndarray) -> np.ndarray:
    z = f64(x)
    return 0.5 * z * (1.0 + np.tanh(_SQ2PI * (z + 0.044715 * z**3)))


def gelu_tanh64(x: np.ndarray) -> np.ndarray:
    """tanh(u) inside the GELU's tanh approximation, u = sqrt(2/pi) (x + 0.044715 x^3)."""
    z = f64(x)
    return np.tanh(_SQ2PI * (z + 0.044715 * z**3))


def gelu_grad64(x: np.ndarray) -> np.ndarray:
    z = f64(x)
    t = gelu_tanh64(x)
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * _SQ2PI * (1 + 3 * 0.044715 * z * z)


def geluerf64(x: np.ndarray) -> np.ndarray:
    z = f64(x)
    return 0.5 * z * (1.0 + _ERF(z / math.sqrt(2.0)))


def geluerf_factor64(x: np.ndarray) -> np.ndarray:
    """0.5 (1 + erf(x / sqrt(2))): the exact GELU is x times it."""
    return 0.5 * (1.0 + _ERF(f64(x) / math.sqrt(2.0)))


def geluerf_grad64(x: np.ndarray) -> np.ndarray:
    z = f64(x)
    return geluerf_factor64(x) + z * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def sigmoid64(x: np.ndarray) -> np.ndarray:
    z = f64(x)
    return np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))


def as32(x: np.ndarray | float) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np.float32)


def _adam64(m, v, w, t, wd, b1, b2, eps, kind):
    m, v = f64(m), f64(v)
    if t is not None:
        m = m / (1 - b1**t)
        if kind != "adamax":
            v = v / (1 - b2**t)
    x = m / (v + eps) if kind == "adamax" else m / (np.sqrt(v) + eps)
    return x + wd * f64(w) if w is not None else x


def _nll(p: np.ndarray, lab: np.ndarray, red: str, ignore: int | None, log_prob: bool):
    """Per-row losses (ignored rows 0), the kept mask and the NLL by `red`."""
    p2 = f64(p).reshape(-1, p.shape[-1])
    lab1 = lab.reshape(-1).astype(np.int64)
    keep = np.ones(lab1.size, bool) if ignore is None else lab1 != ignore
    picked = p2[np.arange(lab1.size), np.where(keep, lab1, 0)]
    loss = np.where(keep, -picked if log_prob else -np.log(picked), 0.0)
    n = max(int(keep.sum()), 1)
    total = loss.reshape(lab.shape) if red == "none" else (loss.sum() if red == "sum" else loss.sum() / n)
    return loss, keep, n, total


def _prod_others(x: np.ndarray, axis: int) -> np.ndarray:
    """Product along `axis` of every other element, element by element (exact with zeros)."""
    z = f64(x)
    out = np.empty_like(z)
    for i in range(z.shape[axis]):
        others = np.delete(z, i, axis=axis)
        np.put_along_axis(
            out, np.full(z.shape[:axis] + (1,) + z.shape[axis + 1 :], i), np.prod(others, axis, keepdims=True), axis
        )
    return out


# ------------------------------------------------------------------------------------
# The cases
# ------------------------------------------------------------------------------------

CASES: list[KernelCase] = []


def case(cls: KernelClass, inputs: Callable[[np.random.Generator], Arrays], ref=None, **kw: Any) -> None:
    CASES.append(KernelCase(cls, inputs, ref=ref, **kw))


def _unary(cls: KernelClass, fn: Callable[[np.ndarray], np.ndarray], gen=adv, rtol=1e-6, atol=1e-6, dtype=np.float32):
    case(cls, lambda r: [gen(r, (5, 3), dtype)], lambda x: [np.asarray(fn(x)).astype(dtype)], rtol=rtol, atol=atol)


_unary(P.NegOp, np.negative)
_unary(P.AbsOp, np.abs)
_unary(P.SignOp, np.sign)
_unary(P.TanhOp, lambda x: np.tanh(f64(x)), rtol=2e-6)
_unary(P.ExpOp, lambda x: np.exp(f64(x)), gen=unit, rtol=2e-6)
_unary(P.LogOp, lambda x: np.log(f64(x)), gen=pos, rtol=2e-6)
_unary(P.SqrtOp, lambda x: np.sqrt(f64(x)), gen=pos)
_unary(P.CosOp, lambda x: np.cos(f64(x)), rtol=1e-5, atol=1e-6)
_unary(P.SinOp, lambda x: np.sin(f64(x)), rtol=1e-5, atol=1e-6)
_unary(P.ReluOp, lambda x: np.maximum(x, 0))
_unary(P.GeluOp, gelu64, rtol=1e-5, atol=1e-6)
_unary(P.GeluErfOp, geluerf64, rtol=1e-5, atol=1e-6)
_unary(P.ErfOp, lambda x: _ERF(f64(x)), rtol=1e-6, atol=1e-7)
_unary(P.SigmoidOp, sigmoid64, rtol=1e-5, atol=1e-7)
_unary(P.SwishOp, lambda x: f64(x) * sigmoid64(x), rtol=1e-5, atol=1e-6)
_unary(P.CeilOp, np.ceil, gen=lambda r, s, d: (adv(r, s, np.float64) * 1.3).astype(d))
_unary(P.FloorOp, np.floor, gen=lambda r, s, d: (adv(r, s, np.float64) * 1.3).astype(d))
_unary(P.IdentityOp, lambda x: x)
_unary(P.DetachOp, lambda x: x)
case(P.LogicalNotOp, lambda r: [bools(r, (5, 3))], lambda x: [np.logical_not(x)])
case(P.BitwiseNotOp, lambda r: [ints(r, (5, 3), -1000, 1000)], lambda x: [np.invert(x)])
case(P.CastOp, lambda r: [adv(r, (5, 3))], lambda x: [x.astype(np.float16)], result_types=[((5, 3), np.float16)])
case(
    P.CastOp,
    lambda r: [adv(r, (5, 3), big=1e4) * 3],
    lambda x: [x.astype(np.int32)],
    result_types=[((5, 3), np.int32)],
    label="to-int",
)
case(P.ClipOp, lambda r: [adv(r, (5, 3))], lambda x: [np.clip(x, -1.0, 2.0)], props={"min": -1.0, "max": 2.0})


def _binary(cls: KernelClass, fn, gen_a=adv, gen_b=adv, shapes=((5, 3), (5, 3)), rtol=1e-6, label=""):
    case(
        cls,
        lambda r: [gen_a(r, shapes[0]), gen_b(r, shapes[1])],
        lambda a, b: [np.asarray(fn(a, b))],
        rtol=rtol,
        label=label,
    )


def _f32(fn):
    return lambda a, b: as32(fn(f64(a), f64(b)))


_binary(P.AddOp, _f32(np.add))
_binary(P.AddOp, _f32(np.add), shapes=((5, 3), (3,)), label="broadcast")
_binary(P.SubOp, _f32(np.subtract))
_binary(P.MulOp, _f32(np.multiply))
_binary(P.DivOp, _f32(np.divide), gen_b=lambda r, s: pos(r, s) * np.where(r.random(s) < 0.5, -1, 1).astype(np.float32))
_binary(P.PowOp, _f32(np.power), gen_a=pos, gen_b=lambda r, s: unit(r, s) * 2, rtol=1e-5)
_binary(P.MaximumOp, np.maximum)
_binary(P.MinimumOp, np.minimum)
_binary(P.FmodOp, np.fmod, gen_b=lambda r, s: pos(r, s) * np.where(r.random(s) < 0.5, -1, 1).astype(np.float32))
_binary(P.EqualOp, np.equal, gen_b=lambda r, s: adv(r, s) * (r.random(s) < 0.5).astype(np.float32))
_binary(P.GreaterOp, np.greater)
for _cls, _fn in ((P.LogicalAndOp, np.logical_and), (P.LogicalOrOp, np.logical_or), (P.LogicalXorOp, np.logical_xor)):
    case(_cls, lambda r: [bools(r, (5, 3)), bools(r, (5, 3))], lambda a, b, f=_fn: [f(a, b)])
for _cls, _fn in (
    (P.BitwiseAndOp, np.bitwise_and),
    (P.BitwiseOrOp, np.bitwise_or),
    (P.BitwiseXorOp, np.bitwise_xor),
    (P.BitwiseXnorOp, lambda a, b: np.invert(np.bitwise_xor(a, b))),
):
    case(_cls, lambda r: [ints(r, (5, 3), -1000, 1000), ints(r, (5, 3), -1000, 1000)], lambda a, b, f=_fn: [f(a, b)])
case(
    P.WhereOp,
    lambda r: [bools(r, (5, 3)), adv(r, (5, 3)), adv(r, (3,))],
    lambda c, a, b: [np.where(c, a, b)],
)

# gradients of elementwise ops
case(
    P.GeluGradOp,
    lambda r: [adv(r, (5, 3)), adv(r, (5, 3))],
    lambda dy, x: [as32(f64(dy) * gelu_grad64(x))],
    rtol=1e-5,
    atol=1e-5,
)
case(
    P.GeluErfGradOp,
    lambda r: [adv(r, (5, 3)), adv(r, (5, 3))],
    lambda dy, x: [as32(f64(dy) * geluerf_grad64(x))],
    rtol=1e-5,
    atol=1e-5,
)
case(
    P.ReluGradOp, lambda r: [adv(r, (5, 3)), adv(r, (5, 3))], lambda dy, x: [np.where(x > 0, dy, 0).astype(np.float32)]
)

# linear algebra
case(P.MatmulOp, lambda r: [adv(r, (5, 4)), adv(r, (4, 3))], lambda a, b: [as32(f64(a) @ f64(b))], rtol=1e-5, atol=1e-3)
case(
    P.MatmulOp,
    lambda r: [adv(r, (2, 5, 4)), adv(r, (4, 3))],
    lambda a, b: [as32(f64(a) @ f64(b))],
    rtol=1e-5,
    atol=1e-3,
    label="batched",
)
case(
    P.ScaledAddOp,
    lambda r: [adv(r, (5, 3)), adv(r, (5, 3))],
    lambda x, y: [as32(0.5 * f64(x) - 2.0 * f64(y))],
    props={"a": 0.5, "b": -2.0},
)
case(
    P.ScaledAddInplaceOp,
    lambda r: [adv(r, (5, 3)), adv(r, (5, 3))],
    lambda x, y: [as32(0.5 * f64(x) - 2.0 * f64(y))],
    props={"a": 0.5, "b": -2.0},
)
case(
    GemmAccOp,
    lambda r: [adv(r, (4, 5)), adv(r, (3, 4)), adv(r, (5, 3))],
    lambda a, b, c: [as32(0.5 * (f64(a).T @ f64(b).T) - 2.0 * f64(c))],
    rt=lambda ins: RtForm({"alpha": 0.5, "beta": -2.0, "trans_a": True, "trans_b": True}, [2]),
    rtol=1e-5,
    atol=1e-3,
)
case(
    GemmAccOp,
    lambda r: [adv(r, (5, 4)), adv(r, (4, 3)), adv(r, (5, 3))],
    lambda a, b, c: [as32(f64(a) @ f64(b) + f64(c))],
    rt=lambda ins: RtForm({"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False}, [2]),
    rtol=1e-5,
    atol=1e-3,
    label="plain",
)
case(
    GemmAccOp,
    lambda r: [adv(r, (4, 5)), adv(r, (3, 4)), adv(r, (5, 3)), np.array(3.0, np.float32)],
    # the running mean after 3 steps: scales 1/4 and 3/4 from the counter (4th input)
    lambda a, b, c, n: [as32((f64(a).T @ f64(b).T + 3.0 * f64(c)) / 4.0)],
    rt=lambda ins: RtForm({"trans_a": True, "trans_b": True}, [2]),
    rtol=1e-5,
    atol=1e-3,
    label="running_mean",
)
case(
    FusedOp,
    lambda r: [adv(r, (5, 3)), adv(r, (5, 3)), adv(r, (3,))],
    lambda a, b, c: [as32(np.maximum(f64(a) * f64(b) + f64(c), 0.0))],
    rt=lambda ins: RtForm(
        {"steps": _steps_attr([("popxl.mul", [0, 1], {}), ("popxl.add", [-1, 2], {}), ("popxl.relu", [-1], {})])},
        [((5, 3), np.float32)],
    ),
    rtol=1e-6,
    atol=1e-3,
)

# the gelu that keeps its tanh and the gradient that reads it (`rt-keep-gelu-factor`)
case(
    GeluTanhOp,
    lambda r: [adv(r, (5, 3))],
    lambda x: [as32(gelu64(x)), as32(gelu_tanh64(x))],
    rt=lambda ins: RtForm({}, [((5, 3), np.float32), ((5, 3), np.float32)]),
    rtol=1e-5,
    atol=1e-6,
)
case(
    GeluGradTanhOp,
    lambda r: (lambda x: [adv(r, (5, 3)), x, as32(gelu_tanh64(x))])(adv(r, (5, 3))),
    lambda dy, x, t: [as32(f64(dy) * gelu_grad64(x))],
    rt=lambda ins: RtForm({}, [((5, 3), np.float32)]),
    rtol=1e-5,
    atol=1e-5,
)

case(
    GeluErfKeepOp,
    lambda r: [adv(r, (5, 3))],
    lambda x: [as32(geluerf64(x)), geluerf_factor64(x)],
    rt=lambda ins: RtForm({}, [((5, 3), np.float32), ((5, 3), np.float64)]),
    rtol=1e-6,
    atol=1e-7,
)
case(
    GeluErfGradKeptOp,
    lambda r: (lambda x: [adv(r, (5, 3)), x, geluerf_factor64(x)])(adv(r, (5, 3))),
    lambda dy, x, h: [as32(f64(dy) * geluerf_grad64(x))],
    rt=lambda ins: RtForm({}, [((5, 3), np.float32)]),
    rtol=1e-6,
    atol=1e-6,
)

# softmax with the scores' scale and causal mask as its prologue, its gradient with the scale
_MASK = np.triu(np.full((3, 4), -1e9, np.float32), k=1)
_SCALE_MASK = [("popxl.mul", [0, 1], {}), ("popxl.add", [-1, 2], {})]
case(
    SoftmaxFusedOp,
    lambda r: [adv(r, (2, 3, 4), big=1e2), scalar(0.5), _MASK],
    lambda x, s, m: [as32(softmax64(f64(x) * 0.5 + f64(m), -1))],
    rt=lambda ins: RtForm({"axis": -1, "steps": _steps_attr(_SCALE_MASK)}, [((2, 3, 4), np.float32)]),
    rtol=1e-5,
    atol=1e-7,
)
case(
    SoftmaxGradFusedOp,
    lambda r: [adv(r, (2, 3, 4)), as32(softmax64(r.standard_normal((2, 3, 4)), -1)), scalar(0.25)],
    lambda dy, y, s: [as32(f64(y) * (f64(dy) - (f64(dy) * f64(y)).sum(-1, keepdims=True)) * 0.25)],
    rt=lambda ins: RtForm({"axis": -1, "steps": _steps_attr([("popxl.mul", [-1, 2], {})])}, [((2, 3, 4), np.float32)]),
    rtol=1e-5,
    atol=1e-5,
)

# softmax, reductions
case(
    P.SoftmaxOp, lambda r: [adv(r, (5, 4))], lambda x: [as32(softmax64(x, 1))], props={"axis": 1}, atol=1e-7, rtol=1e-5
)
case(
    P.SoftmaxOp,
    lambda r: [adv(r, (5, 4), big=1e3) + 1000.0],
    lambda x: [as32(softmax64(x, 0))],
    props={"axis": 0},
    atol=1e-7,
    rtol=1e-5,
    label="logits-near-1000",
)
case(
    P.LogSoftmaxOp,
    lambda r: [adv(r, (5, 4))],
    lambda x: [as32((lambda z: z - np.log(np.exp(z).sum(1, keepdims=True)))(f64(x) - f64(x).max(1, keepdims=True)))],
    props={"axis": 1},
    rtol=1e-5,
    atol=1e-4,
)
case(
    P.SoftmaxGradOp,
    lambda r: [adv(r, (5, 4)), probs(r, (5, 4))],
    lambda dy, y: [as32(f64(y) * (f64(dy) - (f64(dy) * f64(y)).sum(1, keepdims=True)))],
    props={"axis": 1},
    rtol=1e-5,
    atol=1e-4,
)
case(P.CumsumOp, lambda r: [adv(r, (5, 3))], lambda x: [as32(np.cumsum(f64(x), 0))], props={"dim": 0}, atol=1e-3)
case(
    P.CumsumOp,
    lambda r: [adv(r, (5, 3))],
    lambda x: [as32(np.flip(np.cumsum(np.flip(f64(x), 1), 1), 1))],
    props={"dim": 1, "reverse": True},
    atol=1e-3,
    label="reverse",
)
for _cls, _fn in (
    (P.ReduceSumOp, np.sum),
    (P.ReduceMeanOp, np.mean),
    (P.ReduceMaxOp, np.max),
    (P.ReduceMinOp, np.min),
    (P.ReduceProdOp, np.prod),
):
    gen = unit if _cls is P.ReduceProdOp else adv
    case(
        _cls,
        lambda r, g=gen: [g(r, (5, 3, 2))],
        lambda x, f=_fn: [as32(f(f64(x), axis=(0, 2)))],
        props={"axis": (0, 2)},
        rtol=1e-5,
        atol=1e-4,
    )
    case(
        _cls,
        lambda r, g=gen: [g(r, (5, 3, 2))],
        lambda x, f=_fn: [as32(f(f64(x), axis=1, keepdims=True))],
        props={"axis": (1,), "keepdims": True},
        rtol=1e-5,
        atol=1e-4,
        label="keepdims",
    )
for _cls, _fn in ((P.ArgmaxOp, np.argmax), (P.ArgminOp, np.argmin)):
    case(
        _cls,
        lambda r: [np.round(adv(r, (5, 3)))],  # many ties: the first index wins
        lambda x, f=_fn: [f(x, axis=0).astype(np.int32)],
        props={"axis": 0},
    )


def _max_grad(x, y, dy, axis):
    # upstream's ReduceMaxGrad: every element equal to the maximum gets the whole gradient
    kshape = tuple(1 if i in axis else s for i, s in enumerate(x.shape))
    return [np.where(x == y.reshape(kshape), dy.reshape(kshape), 0).astype(np.float32)]


case(
    P.ReduceMaxGradOp,
    lambda r: (lambda x: [x, x.max(1), adv(r, (5,))])(np.round(adv(r, (5, 3)))),
    lambda x, y, dy: _max_grad(x, y, dy, (1,)),
    props={"axis": (1,)},
)
case(
    P.ReduceProdGradOp,
    lambda r: [np.round(unit(r, (5, 3)) * 2), adv(r, (5,))],
    lambda x, dy: [as32(_prod_others(x, 1) * f64(dy)[:, None])],
    props={"axis": (1,)},
    rtol=1e-5,
    atol=1e-4,
)

# shape ops
case(P.ReshapeOp, lambda r: [adv(r, (5, 3))], lambda x: [x.reshape(3, 5)], result_types=[((3, 5), np.float32)])
case(P.SqueezeOp, lambda r: [adv(r, (5, 1, 3))], lambda x: [x.reshape(5, 3)], props={"axes": (1,)})
case(P.TransposeOp, lambda r: [adv(r, (5, 3, 2))], lambda x: [x.transpose(2, 0, 1).copy()], props={"perm": (2, 0, 1)})
case(
    P.ExpandOp,
    lambda r: [adv(r, (5, 1))],
    lambda x: [np.broadcast_to(x, (2, 5, 3)).copy()],
    result_types=[((2, 5, 3), np.float32)],
)
case(
    P.ReduceToShapeOp,
    lambda r: [adv(r, (2, 5, 3))],
    lambda x: [as32(f64(x).sum(0).sum(1, keepdims=True))],
    result_types=[((5, 1), np.float32)],
    rtol=1e-5,
    atol=1e-4,
)
case(
    P.ConcatOp,
    lambda r: [adv(r, (5, 3)), adv(r, (5, 2))],
    lambda a, b: [np.concatenate([a, b], 1)],
    props={"axis": 1},
)
case(
    P.SliceOp,
    lambda r: [adv(r, (5, 4))],
    lambda x: [x[1:5:2, 0:3].copy()],
    props={"start": (1, 0), "stop": (5, 3), "step": (2, 1), "axes": (0, 1)},
)
case(
    P.SliceGradOp,
    lambda r: [adv(r, (2, 3))],
    lambda dy: [(lambda z: (z.__setitem__((slice(1, 5, 2), slice(0, 3)), dy), z)[1])(np.zeros((5, 4), np.float32))],
    props={"start": (1, 0), "stop": (5, 3), "step": (2, 1), "axes": (0, 1)},
    result_types=[((5, 4), np.float32)],
)
case(
    P.GatherOp,
    lambda r: [adv(r, (5, 3)), ints(r, (2, 4), -5, 5)],
    lambda d, i: [np.take(d, i, axis=0)],
    props={"axis": 0},
)
case(
    P.GatherGradOp,
    lambda r: [adv(r, (3, 4)), ints(r, (4,), -3, 3)],  # repeated indices add up
    lambda dy, i: [(lambda z: (np.add.at(z.T, i, f64(dy).T), as32(z))[1])(np.zeros((3, 3)))],
    props={"axis": 1},
    result_types=[((3, 3), np.float32)],
    rtol=1e-5,
    atol=1e-4,
)
case(
    P.TakeAlongAxisOp,
    lambda r: [adv(r, (5, 3)), ints(r, (5, 2), 0, 3)],
    lambda d, i: [np.take_along_axis(d, i.astype(np.int64), 1)],
    props={"axis": 1},
)
case(
    P.OnehotOp,
    lambda r: [ints(r, (5, 3), -4, 4), np.array([-0.5, 2.0], np.float32)],
    lambda i, v: [np.where(np.arange(4) == np.where(i < 0, i + 4, i)[..., None], v[1], v[0]).astype(np.float32)],
    props={"num_classes": 4, "axis": -1},
)
case(
    P.DynamicSliceOp,
    lambda r: [adv(r, (5, 3, 4)), np.array([r.integers(0, 4), r.integers(0, 2)], np.uint32)],
    lambda t, i: [t[i[0] : i[0] + 2, :, i[1] : i[1] + 3].copy()],
    props={"axes": (0, 2), "sizes": (2, 3)},
)


def _dyn_update(t, i, u):
    out = t.copy()
    out[i[0] : i[0] + 2, :, i[1] : i[1] + 3] = u
    return [out]


for _cls in (P.DynamicUpdateOp, P.DynamicUpdateInplaceOp):
    case(
        _cls,
        lambda r: [adv(r, (5, 3, 4)), np.array([r.integers(0, 4), r.integers(0, 2)], np.uint32), adv(r, (2, 3, 3))],
        _dyn_update,
        props={"axes": (0, 2), "sizes": (2, 3)},
    )
case(
    P.InitOp,
    lambda r: [],
    lambda: [np.zeros((5, 3), np.float32)],
    props={"init_type": "zero"},
    result_types=[((5, 3), np.float32)],
)
case(
    P.HistogramOp,
    lambda r: [adv(r, (5, 3))],
    lambda x: [
        np.bincount(np.searchsorted([-1.0, 0.0, 2.0], np.abs(f64(x)).reshape(-1), "right"), minlength=4).astype(
            np.uint32
        )
    ],
    props={"levels": (-1.0, 0.0, 2.0), "absolute_of_input": True},
)


def _topk(x, k, axis, largest):
    keys = -f64(x) if largest else f64(x)
    order = np.argsort(keys, axis=axis, kind="stable")
    top = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, top, axis), top.astype(np.int32)]


case(P.TopkOp, lambda r: [np.round(adv(r, (5, 6)))], lambda x: _topk(x, 3, 1, True), props={"k": 3, "axis": 1})
case(
    P.TopkOp,
    lambda r: [np.round(adv(r, (5, 6)))],
    lambda x: _topk(x, 2, 0, False),
    props={"k": 2, "axis": 0, "largest": False},
    label="smallest",
)
case(
    P.ScatterOp,
    lambda r: [adv(r, (5, 3)), np.array([[4, 0, 2], [1, 3, 0]], np.int32), adv(r, (2, 3))],
    lambda d, i, v: [(lambda o: (np.put_along_axis(o[:, :3], i.astype(np.int64), v, 0), o)[1])(d.copy())],
    props={"axis": 0},
)
for _red in ("sum", "max", "min", "none"):
    case(
        P.ScatterReduceOp,
        lambda r: [np.round(adv(r, (5, 3))), np.array([0, 3, 0, 1, 3], np.int32)],  # ties, an untouched row
        lambda d, i, red=_red: [as32(_loop_scatter_reduce(d, i, 0, 4, red))],
        props={"axis": 0, "axis_size": 4, "reduction": _red},
        label=_red,
        rtol=1e-6,
        atol=1e-4,
    )
case(
    P.ScatterReduceOp,
    lambda r: [adv(r, (5, 3)), ints(r, (5, 3), 0, 4), adv(r, (4, 3))],
    lambda d, i, init: [as32(_loop_scatter_reduce(d, i, 0, 4, "max", init))],
    props={"axis": 0, "axis_size": 4, "reduction": "max"},
    label="initial",
)
case(
    P.ScatterReduceGradOp,
    lambda r: [
        adv(r, (4, 3)),
        np.round(adv(r, (5, 3))),
        np.array([0, 3, 0, 1, 3], np.int32),
        np.zeros((4, 3), np.float32),
    ],
    None,  # the forward output comes from the kernel; checked against its own reference
    props={"axis": 0, "axis_size": 4, "reduction": "sum", "wrt": "data"},
    result_types=[((5, 3), np.float32)],
)

# losses
case(
    P.NllLossOp,
    lambda r: [probs(r, (5, 4)), ints(r, (5,), 0, 4)],
    lambda p, lab: [as32(_nll(p, lab, "mean", None, False)[3])],
    props={"reduction": "mean"},
    rtol=1e-5,
)
case(
    P.NllLossOp,
    lambda r: [probs(r, (5, 4)), np.array([0, 3, 2, 3, 1], np.int32)],
    lambda p, lab: [as32(_nll(p, lab, "none", 3, False)[3])],
    props={"reduction": "none", "ignore_index": 3},
    rtol=1e-5,
    label="ignore",
)


def _nll_grad(p, lab, dloss, red, ignore, log_prob):
    _, keep, n, _ = _nll(p, lab, red, ignore, log_prob)
    p2 = f64(p).reshape(-1, p.shape[-1])
    lab1 = lab.reshape(-1).astype(np.int64)
    g = -f64(dloss).reshape(-1) * np.ones(lab1.size)
    if red == "mean":
        g = g / n
    rows = np.arange(lab1.size)
    if not log_prob:
        g = g / p2[rows, np.where(keep, lab1, 0)]
    out = np.zeros_like(p2)
    out[rows, np.where(keep, lab1, 0)] = np.where(keep, g, 0)
    return [as32(out.reshape(p.shape))]


case(
    P.NllLossGradOp,
    lambda r: [probs(r, (5, 4)), np.array([0, 3, 2, 3, 1], np.int32), scalar(0.5)],
    lambda p, lab, d: _nll_grad(p, lab, d, "mean", 3, False),
    props={"reduction": "mean", "ignore_index": 3},
    rtol=1e-5,
)


def _nll_softmax_grad(p, lab, red, ignore):
    loss, keep, n, total = _nll(p, lab, red, ignore, False)
    p2 = f64(p).reshape(-1, p.shape[-1])
    lab1 = lab.reshape(-1).astype(np.int64)
    d = p2.copy()
    d[np.arange(lab1.size), np.where(keep, lab1, 0)] -= 1
    d[~keep] = 0
    if red == "mean":
        d /= n
    return [as32(total), as32(d.reshape(p.shape))]


case(
    P.NllLossWithSoftmaxGradOp,
    lambda r: [probs(r, (5, 4)), ints(r, (5,), 0, 4)],
    lambda p, lab: _nll_softmax_grad(p, lab, "mean", None),
    props={"reduction": "mean"},
    rtol=1e-5,
    atol=1e-7,
)
case(
    P.NllLossWithSoftmaxGradOp,
    lambda r: [probs(r, (5, 4)), np.array([0, 3, 2, 3, 1], np.int32)],
    lambda p, lab: _nll_softmax_grad(p, lab, "sum", 3),
    props={"reduction": "sum", "ignore_index": 3},
    rtol=1e-5,
    atol=1e-7,
    label="ignore",
)

# in-place updates
_T = (5, 3)


def _update(cls: KernelClass, fn, gen_x=adv, props=None, extra=(), label=""):
    case(
        cls,
        lambda r: [adv(r, _T), gen_x(r, _T), *[e(r) for e in extra]],
        lambda t, x, *e: [as32(fn(f64(t), f64(x), *e))],
        props=props or {},
        rtol=1e-5,
        atol=1e-4,
        label=label,
    )


_update(P.AccumulateOp, lambda t, x: t + 0.5 * x, props={"f": 0.5})
_update(P.AccumulateOp, lambda t, x, f: t + f64(f) * x, extra=[lambda r: scalar(-0.25)], label="factor-tensor")
_update(P.AccumulateSquareOp, lambda t, x: t + 0.5 * x * x, props={"f": 0.5})
_update(P.AccumulateMeanOp, lambda t, x: t * (2.0 / 3.0) + x / 3.0, props={"step": 2.0})
_update(P.AccumulateMovingAverageOp, lambda t, x: 0.25 * t + 0.75 * x, props={"f": 0.25})
_update(P.AccumulateMovingAverageSquareOp, lambda t, x: 0.25 * t + 0.75 * x * x, props={"f": 0.25})
_update(P.CopyVarUpdateOp, lambda t, x: x)
case(P.AccumulatorScaleOp, lambda r: [adv(r, _T)], lambda t: [as32(f64(t) * 0.5)], props={"f": 0.5})
case(P.AccumulatorZeroOp, lambda r: [adv(r, _T)], lambda t: [np.zeros(_T, np.float32)])


def _sparse(t, x, idx):
    out = f64(t).copy()
    np.add.at(out.T, idx.astype(np.int64), 0.5 * f64(x).T)  # along axis 1
    return [as32(out)]


case(
    P.SparseAccumulateOp,
    lambda r: [adv(r, (5, 4)), adv(r, (5, 3)), np.array([2, -1, 2], np.int32)],  # repeats, a negative index
    _sparse,
    props={"axis": 1, "f": 0.5},
    rtol=1e-5,
    atol=1e-4,
)
for _cls in (P.IncrementModOp, P.IncrementModInplaceOp):
    case(
        _cls,
        lambda r: [ints(r, (5, 3), 0, 7).astype(np.float32)],
        lambda t: [as32(np.fmod(f64(t) + 1.5, 4.0))],
        props={"increment": 1.5, "modulus": 4.0},
    )


def _updater_case(cls: KernelClass, kind: str) -> None:
    names = ("weight_decay", "beta1", "epsilon") if kind == "adamax" else ("weight_decay", "beta1", "beta2", "epsilon")
    vals = {"weight_decay": 0.01, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-3}
    case(
        cls,
        lambda r: [unit(r, _T), np.abs(unit(r, _T)), adv(r, _T), scalar(float(r.integers(0, 5)))],
        lambda m, v, w, t: [
            as32(f64(t) + 1),  # time_step, incremented in place
            as32(_adam64(m, v, w, float(t) + 1, 0.01, 0.9, 0.99, 1e-3, kind)),
        ],
        props={n: vals[n] for n in names},
        rtol=1e-5,
        atol=1e-5,
    )


_updater_case(P.AdamUpdaterOp, "adam")
_updater_case(P.LambUpdaterOp, "lamb")
_updater_case(P.AdamaxUpdaterOp, "adamax")


def _avu(t, x, r1, r2):
    n1, n2 = math.sqrt(float(r1)), math.sqrt(float(r2))
    ratio = n1 / n2 if n1 and n2 else 1.0
    return [as32(f64(t) - 0.1 * ratio * f64(x))]


case(
    P.AdamVarUpdateOp,
    lambda r: [adv(r, _T), adv(r, _T), scalar(float(r.uniform(0, 4))), scalar(float(r.uniform(0.5, 4)))],
    _avu,
    props={"learning_rate": 0.1},
    rtol=1e-5,
    atol=1e-3,
)

# random numbers, float8, printing: the straightforward plan on contiguous inputs is the reference
_SEED = lambda r: np.array(r.integers(0, 2**32, 2), np.uint32)  # noqa: E731
case(P.ModifyRandomSeedOp, lambda r: [_SEED(r), np.array(r.integers(0, 100), np.uint32)])
case(P.RandomUniformOp, lambda r: [_SEED(r)], props={"low": -1.0, "high": 2.0}, result_types=[((5, 3), np.float32)])
case(P.RandomNormalOp, lambda r: [_SEED(r)], props={"mean": 0.5, "std": 2.0}, result_types=[((5, 3), np.float32)])
case(P.DropoutOp, lambda r: [adv(r, (5, 3)), _SEED(r)], props={"ratio": 0.25})
case(P.ShapedDropoutOp, lambda r: [adv(r, (5, 3)), _SEED(r)], props={"shape": (5, 1), "ratio": 0.25})
_E4 = np.dtype("float8_e4m3fnuz")
case(
    P.Pow2ScaleCastToFp8Op,
    lambda r: [adv(r, (5, 3), big=300.0), np.array(r.integers(-2, 3), np.int32)],
    result_types=[((5, 3), _E4)],
)
case(
    P.Pow2ScaleCastFromFp8Op,
    lambda r: [adv(r, (5, 3), big=100.0).astype(_E4), np.array(r.integers(-2, 3), np.int32)],
    result_types=[((5, 3), np.float16)],
)
case(
    P.MatmulPow2ScaledOp,
    lambda r: [unit(r, (5, 4)).astype(_E4), unit(r, (4, 3)).astype(_E4), np.array(r.integers(-2, 3), np.int32)],
)
case(P.PrintTensorOp, lambda r: [adv(r, (5, 3))], lambda x: [x], props={"title": "kernel views"})

# convolutions, pooling, resampling: loop references from the ops' own tests
_CONV = {"stride": (2, 1), "pads": (1, 0, 2, 1), "dilation": (1, 2), "groups": 2}
case(
    P.ConvOp,
    lambda r: [adv(r, (2, 4, 7, 6), big=10.0), adv(r, (6, 2, 3, 2), big=10.0)],
    lambda x, w: [as32(ref_conv(x, w, **_CONV))],
    props=_CONV,
    rtol=1e-5,
    atol=1e-3,
)
_CONVT = {"stride": (2, 1), "pads": (1, 0, 0, 1), "dilation": (1, 1), "groups": 2, "output_padding": (1, 0)}
case(
    P.ConvTransposeOp,
    lambda r: [adv(r, (2, 4, 4, 3), big=10.0), adv(r, (4, 3, 3, 2), big=10.0)],
    lambda x, w: [as32(ref_conv_transpose(x, w, **_CONVT))],
    props=_CONVT,
    rtol=1e-5,
    atol=1e-3,
)
case(
    P.ConvWeightGradOp,
    lambda r: [adv(r, (2, 6, 4, 5), big=10.0), adv(r, (2, 4, 7, 6), big=10.0)],
    None,
    props={**_CONV, "kernel": (3, 2)},
    rtol=1e-5,
    atol=1e-3,
)
_POOL = {"kernel": (3, 2), "stride": (2, 1), "pads": (1, 0, 1, 1), "dilation": (1, 1), "ceil_mode": True}
case(
    P.MaxPoolOp,
    lambda r: [np.round(adv(r, (2, 3, 7, 5)))],
    lambda x: [as32(ref_pool(x, **_POOL, mode="max"))],
    props=_POOL,
)
case(
    P.AveragePoolOp,
    lambda r: [adv(r, (2, 3, 7, 5))],
    lambda x: [as32(ref_pool(x, **_POOL, mode="avg", include_pad=False))],
    props={**_POOL, "count_include_pad": False},
    rtol=1e-5,
    atol=1e-4,
)
case(P.MaxPoolGradOp, lambda r: [adv(r, (2, 3, 4, 5)), np.round(adv(r, (2, 3, 7, 5)))], None, props=_POOL)
case(
    P.AveragePoolGradOp,
    lambda r: [adv(r, (2, 3, 4, 5))],
    None,
    props={**_POOL, "count_include_pad": True},
    result_types=[((2, 3, 7, 5), np.float32)],
)
case(P.InterpolateOp, lambda r: [adv(r, (1, 2, 3, 4))], props={"scales": (1.0, 1.0, 2.0, 1.5), "mode": "linear"})
case(
    P.InterpolateGradOp,
    lambda r: [adv(r, (1, 2, 6, 6))],
    props={"scales": (1.0, 1.0, 2.0, 1.5), "mode": "linear"},
    result_types=[((1, 2, 3, 4), np.float32)],
)
_ROIS = np.array([[0.0, 0.0, 7.0, 7.0], [2.5, 1.0, 6.0, 4.5], [-2.0, 3.0, 20.0, 6.0]], np.float32)
case(
    P.RoiAlignOp,
    lambda r: [
        adv(r, (2, 3, 8, 9), big=10.0),
        _ROIS + r.uniform(0, 0.5, _ROIS.shape).astype(np.float32),
        np.array([0, 1, 1], np.int32),
    ],
    lambda t, rois, b: [as32(ref_roi_align(t, rois, b, (2, 3), 0.75, 2))],
    props={"output_size": (2, 3), "spatial_scale": 0.75, "sampling_ratio": 2},
    rtol=1e-5,
    atol=1e-4,
)
case(
    P.RoiAlignGradOp,
    lambda r: [adv(r, (3, 3, 2, 3)), _ROIS, np.array([0, 1, 1], np.int32)],
    props={"output_size": (2, 3), "spatial_scale": 0.75, "sampling_ratio": 2},
    result_types=[((2, 3, 8, 9), np.float32)],
)

# remote buffers: (buffer[, offset]) -> tensor; (tensor[, offset]) -> buffer entry
case(
    I.RemoteLoadOp,
    lambda r: [adv(r, (3, 5, 2))],
    lambda store: [store[1].copy()],
    rt=lambda ins: RtForm({"buffer": "rb", "offset": 1}, [((5, 2), np.float32)]),
)
case(
    I.RemoteLoadOp,
    lambda r: [adv(r, (3, 5, 2)), np.array(r.integers(0, 3), np.int32)],
    lambda store, k: [store[int(k)].copy()],
    rt=lambda ins: RtForm({"buffer": "rb"}, [((5, 2), np.float32)]),
    label="offset-tensor",
)
case(
    I.RemoteLoadInplaceOp,
    lambda r: [adv(r, (3, 5, 2)), np.array(r.integers(0, 3), np.int32)],
    lambda store, k: [store[int(k)].copy()],
    rt=lambda ins: RtForm({"buffer": "rb"}, [((5, 2), np.float32)]),
)


# the buffer is the kernel's output (one entry written): of one entry, so written in full
case(
    I.RemoteStoreOp,
    lambda r: [adv(r, (5, 2)), np.array(0, np.int32)],
    lambda t, k: [t[None].copy()],
    rt=lambda ins: RtForm({"buffer": "rb"}, [((1, 5, 2), np.float32)]),
)

# replica collectives (2 replicas; 15 elements: not divisible by the group)
_G = R.ReplicaGroupingAttr(1, 2)


def _rep(shape: Shape, gen=adv):
    return lambda r: [gen(r, (2, *shape))]


for _op, _fn in (("add", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min), ("mul", np.prod)):
    case(
        R.AllReduceOp,
        _rep((5, 3), unit if _op == "mul" else adv),
        lambda x, f=_fn: [as32(np.broadcast_to(f(f64(x), axis=0), x.shape))],
        props={"op": _op, "grouping": _G},
        replicas=2,
        label=_op,
        rtol=1e-6,
        atol=1e-4,
    )
case(
    R.AllReduceOp,
    _rep((5, 3)),
    lambda x: [as32(np.broadcast_to((f64(x) ** 2).sum(0), x.shape))],
    props={"op": "square_add", "grouping": _G},
    replicas=2,
    label="square_add",
    rtol=1e-6,
    atol=1e-2,
)
case(
    R.AllReduceInplaceOp,
    _rep((5, 3)),
    lambda x: [as32(np.broadcast_to(f64(x).sum(0), x.shape))],
    props={"op": "add", "grouping": _G},
    replicas=2,
    atol=1e-4,
)
case(R.AllReduceIdenticalInputsOp, _rep((5, 3)), lambda x: [x.copy()], props={"op": "add", "grouping": _G}, replicas=2)
case(
    R.AllReduceIdenticalGradInputsOp,
    _rep((5, 3)),
    lambda x: [as32(np.broadcast_to(f64(x).sum(0), x.shape))],
    props={"op": "add", "grouping": _G},
    replicas=2,
    atol=1e-4,
)
case(
    R.AllGatherOp,
    _rep((5, 3)),
    lambda x: [np.broadcast_to(x, (2, *x.shape)).copy()],
    props={"grouping": _G, "axis": 0, "new_axis": True},
    replicas=2,
)
case(
    R.AllGatherOp,
    _rep((5, 3)),
    lambda x: [np.broadcast_to(np.concatenate(list(x), 1), (2, 5, 6)).copy()],
    props={"grouping": _G, "axis": 1, "new_axis": False},
    replicas=2,
    label="concat",
)


def _shards(flat: np.ndarray, r: int) -> np.ndarray:
    s = -(-flat.size // r)
    padded = np.zeros(s * r, flat.dtype)
    padded[: flat.size] = flat
    return padded.reshape(r, s)


case(
    R.ReduceScatterOp,
    _rep((5, 3)),
    lambda x: [as32(_shards(f64(x).sum(0).reshape(-1), 2))],  # 15 elements: shards of 8, the last padded
    rt=lambda ins: RtForm({"op": "add", "grouping": _G}, [((8,), np.float32)]),  # the dialect op refuses 15
    replicas=2,
    atol=1e-4,
)
case(
    R.ShardedSliceOp,
    _rep((5, 3)),
    lambda x: [np.stack([_shards(x[i].reshape(-1), 2)[i] for i in range(2)])],
    rt=lambda ins: RtForm({"grouping": _G}, [((8,), np.float32)]),
    replicas=2,
)
case(
    R.SliceOp,
    _rep((4, 3)),
    lambda x: [np.stack([np.split(x[i], 2, 0)[i] for i in range(2)])],
    props={"grouping": _G, "axis": 0},
    replicas=2,
)
case(
    AllReduceUpdateOp,
    lambda r: [adv(r, (2, 5, 3)), np.broadcast_to(adv(r, (5, 3)), (2, 5, 3)).copy()],
    lambda g, w: [None, as32(f64(w) + 0.5 * np.broadcast_to(f64(g).mean(0), w.shape))],
    rt=lambda ins: RtForm({"op": "mean", "scale": 0.5, "grouping": _G}, [0, 1]),
    replicas=2,
    atol=1e-4,
)
case(
    AllReduceGemmUpdateOp,
    lambda r: [adv(r, (2, 4, 5)), adv(r, (2, 4, 3)), np.broadcast_to(adv(r, (5, 3)), (2, 5, 3)).copy()],
    lambda a, b, w: [as32(f64(w) + 0.5 * np.broadcast_to(np.einsum("rki,rkj->ij", f64(a), f64(b)) / 2, w.shape))],
    rt=lambda ins: RtForm({"op": "mean", "scale": 0.5, "grouping": _G, "trans_a": True, "trans_b": False}, [2]),
    replicas=2,
    atol=1e-4,
)


# ------------------------------------------------------------------------------------
# Custom ops: a NumPy definition registered for these cases (xl.dialects.custom_ops)
# ------------------------------------------------------------------------------------

register_custom_op(
    CustomOpDefinition(
        "KernelCaseAffine",
        forward=lambda x, w, *, k: x * w + k,
        grad=lambda dy, x, w, *, k: (dy * w, None),
    ),
    replace=True,
)
case(
    P.CustomOp,
    lambda r: [adv(r, (4, 3)), adv(r, (4, 3))],
    lambda x, w: [(f64(x) * f64(w) + 2.0).astype(np.float32)],
    props={"op_type": "KernelCaseAffine", "attrs": P.attributes_attr({"k": 2.0})},
    result_types=[((4, 3), np.float32)],
    rtol=1e-5,
)
case(
    P.CustomGradOp,
    lambda r: [adv(r, (4, 3)), adv(r, (4, 3)), adv(r, (4, 3))],
    lambda dy, x, w: [(f64(dy) * f64(w)).astype(np.float32), np.zeros((4, 3), np.float32)],
    props={"op_type": "KernelCaseAffine", "attrs": P.attributes_attr({"k": 2.0}), "num_output_grads": 1},
    result_types=[((4, 3), np.float32), ((4, 3), np.float32)],
    rtol=1e-5,
)


# ------------------------------------------------------------------------------------
# Group normalisation (one op with its statistics, and its gradient)
# ------------------------------------------------------------------------------------


def _gn_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, g: int):
    n, c = x.shape[:2]
    xg = f64(x).reshape(n, g, -1)
    m = xg.mean(axis=2, keepdims=True)
    inv = 1 / np.sqrt(((xg - m) ** 2).mean(axis=2, keepdims=True) + 1e-5)
    x_hat = ((xg - m) * inv).reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    return x_hat, m.reshape(-1), inv.reshape(-1), bshape


def _gn(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    x_hat, m, inv, bshape = _gn_ref(x, w, b, 2)
    y = x_hat * f64(w).reshape(bshape) + f64(b).reshape(bshape)
    return [y.astype(np.float32), m.astype(np.float32), inv.astype(np.float32)]


def _gn_grad(x: np.ndarray, w: np.ndarray, m: np.ndarray, inv: np.ndarray, dy: np.ndarray) -> list[np.ndarray]:
    n, c = x.shape[:2]
    xg = f64(x).reshape(n, 2, -1)
    i = f64(inv).reshape(n, 2, 1)
    x_hat = (xg - f64(m).reshape(n, 2, 1)) * i
    dyc = f64(dy).reshape(n, c, -1)
    g = (dyc * f64(w).reshape(1, c, 1)).reshape(n, 2, -1)
    dx = i * (g - g.mean(axis=2, keepdims=True) - x_hat * (g * x_hat).mean(axis=2, keepdims=True))
    dw = (dyc * x_hat.reshape(n, c, -1)).sum(axis=(0, 2))
    return [dx.reshape(x.shape).astype(np.float32), dw.astype(np.float32), dyc.sum(axis=(0, 2)).astype(np.float32)]


def _gn_grad_inputs(r: np.random.Generator) -> list[np.ndarray]:
    x = unit(r, (3, 4, 5))
    _, m, inv, _ = _gn_ref(x, x[0, :, 0], x[0, :, 0], 2)
    return [x, unit(r, (4,)), m.astype(np.float32), inv.astype(np.float32), unit(r, (3, 4, 5))]


case(
    P.GroupNormOp,
    lambda r: [unit(r, (3, 4, 5)), unit(r, (4,)), unit(r, (4,))],
    _gn,
    props={"num_groups": 2, "epsilon": 1e-5},
    rtol=1e-5,
    atol=1e-5,
)
case(
    P.GroupNormGradOp,
    _gn_grad_inputs,
    _gn_grad,
    props={"num_groups": 2, "epsilon": 1e-5},
    rtol=1e-4,
    atol=1e-5,
)
