"""Gradient rules of the `popxl` tensor ops, used by the `autodiff` pass.

A rule maps the gradients of an op's results to gradients of its operands:

```python
@grad_rule(MulOp)
def _mul(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> list[SSAValue | None]:
    (dy,) = dys
    lhs, rhs = op.operands
    return [
        b.sum_to(b.v(MulOp, dy, b.fwd(rhs)), lhs.type) if b.needs(lhs) else None,
        b.sum_to(b.v(MulOp, dy, b.fwd(lhs)), rhs.type) if b.needs(rhs) else None,
    ]
```

`dys[i]` is the gradient of result i (`None`: zero). The rule returns one entry
per operand (`None`: no gradient), computing only what `b.needs(operand)` asks for.
It emits ops into the gradient graph through the builder: `b.fwd(v)` makes a
forward value available there (as an activation or an input of the forward graph),
`b.op` / `b.v` build ops (by class, results inferred unless types are
given), `b.const(x, dtype)` a scalar constant and `b.sum_to(g, type)` sums a
broadcast gradient back to an operand type.

Rules are registered by op class; `grad_rule` refuses an op class that declares
`NoGradient` (no gradient flows through it: comparison, logical, integer and random
ops, `detach`) or `NotDifferentiable` (autodiff refuses a gradient through it), and a
second rule for the same class. `tests/dialects/test_op_registry.py` checks that every op of
every dialect has exactly one of: a rule, `NoGradient`, `NotDifferentiable`. The rule
for `call.call` lives in the pass (`xl.passes.autodiff`: it needs the module).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from xl.dialects.ipu import CopyOp as IpuCopyOp
from xl.dialects.popxl import (
    AbsOp,
    AddOp,
    CastOp,
    ClipOp,
    ConcatOp,
    CosOp,
    CumsumOp,
    DivOp,
    DynamicSliceOp,
    DynamicUpdateOp,
    EqualOp,
    ErfOp,
    ExpandOp,
    ExpOp,
    FmodOp,
    GatherGradOp,
    GatherOp,
    GeluErfGradOp,
    GeluErfOp,
    GeluGradOp,
    GeluOp,
    GreaterOp,
    IdentityOp,
    LogicalOrOp,
    LogOp,
    MatmulOp,
    MaximumOp,
    MinimumOp,
    MulOp,
    NegOp,
    NllLossGradOp,
    NllLossOp,
    PowOp,
    PrintTensorOp,
    ReduceMaxGradOp,
    ReduceMaxOp,
    ReduceMeanOp,
    ReduceMinOp,
    ReduceSumOp,
    ReduceToShapeOp,
    ReluGradOp,
    ReluOp,
    ReshapeOp,
    ScaledAddOp,
    SigmoidOp,
    SignOp,
    SinOp,
    SliceGradOp,
    SliceOp,
    SoftmaxGradOp,
    SoftmaxOp,
    SqrtOp,
    SqueezeOp,
    SubOp,
    SwishOp,
    TanhOp,
    TransposeOp,
    WhereOp,
    op_props,
)
from xl.dialects.traits import NoGradient, NotDifferentiable, has_no_gradient
from xl.dialects.utils import dtype_of, shape_of, tensor_type

Grads = Sequence[SSAValue | None]


class GradBuilder(Protocol):
    """What a rule may use to emit the gradient computation."""

    def fwd(self, value: SSAValue) -> SSAValue:
        """The forward value `value`, available in the gradient graph."""
        ...

    def needs(self, value: SSAValue) -> bool:
        """Whether this operand of the current op needs a gradient."""
        ...

    def op(
        self,
        op: type[Operation],
        *operands: SSAValue,
        result_types: Sequence[Attribute] | None = None,
        **props: Any,
    ) -> Operation:
        """Builds and inserts an op of class `op`; results inferred unless given."""
        ...

    def v(
        self,
        op: type[Operation],
        *operands: SSAValue,
        result_type: Attribute | None = None,
        **props: Any,
    ) -> SSAValue:
        """`op(...)` for a single-result op: returns the result."""
        ...

    def const(self, value: float, dtype: Any) -> SSAValue:
        """A scalar constant."""
        ...

    def zeros(self, type: Attribute) -> SSAValue:
        """A zero tensor of `type`."""
        ...

    def sum_to(self, g: SSAValue, type: Attribute) -> SSAValue:
        """`g` summed over broadcast dimensions down to `type` (no-op when equal)."""
        ...


GradRule = Callable[[GradBuilder, Operation, list[SSAValue | None]], Grads]

GRAD_RULES: dict[type[Operation], GradRule] = {}
"""Gradient rule per op class."""


def grad_rule(*op_classes: type[Operation]) -> Callable[[GradRule], GradRule]:
    """Registers the decorated function as the gradient rule of `op_classes`."""
    for c in op_classes:
        if not (isinstance(c, type) and issubclass(c, Operation)):
            raise TypeError(f"grad_rule: {c!r} is not an op class")
        for trait in (NoGradient, NotDifferentiable):
            if c.has_trait(trait):
                raise TypeError(f"grad_rule: {c.name} declares {trait.__name__}; it cannot have a rule")

    def deco(f: GradRule) -> GradRule:
        for c in op_classes:
            if c in GRAD_RULES:
                raise TypeError(f"grad_rule: {c.name} already has a gradient rule")
            GRAD_RULES[c] = f
        return f

    return deco


def get_grad_rule(op: Operation | type[Operation]) -> GradRule | None:
    """The gradient rule registered for the op's class, or None."""
    return GRAD_RULES.get(op if isinstance(op, type) else type(op))


def has_no_grad(op: Operation | type[Operation]) -> bool:
    """Whether no gradient flows through the op (its `NoGradient` trait)."""
    return has_no_gradient(op)


# ------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------


def _t(v: SSAValue) -> TensorType:
    assert isinstance(v.type, TensorType)
    return v.type


def _shape(v: SSAValue) -> tuple[int, ...]:
    return shape_of(v.type)


def _dt(v: SSAValue) -> Any:
    return dtype_of(v.type)


def _mul(b: GradBuilder, x: SSAValue, y: SSAValue) -> SSAValue:
    return b.v(MulOp, x, y)


def _neg(b: GradBuilder, x: SSAValue) -> SSAValue:
    return b.v(NegOp, x)


def _scale(b: GradBuilder, x: SSAValue, s: float) -> SSAValue:
    if s == 1.0:
        return x
    if s == -1.0:
        return _neg(b, x)
    return _mul(b, x, b.const(s, _dt(x)))


def _unary_dx(f: Callable[[GradBuilder, Operation, SSAValue], SSAValue]) -> GradRule:
    def rule(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
        (dy,) = dys
        assert dy is not None
        if not b.needs(op.operands[0]):
            return [None]
        return [f(b, op, dy)]

    return rule


# ------------------------------------------------------------------------------------
# elementwise binary
# ------------------------------------------------------------------------------------


def _binary(
    dl: Callable[[GradBuilder, Operation, SSAValue], SSAValue] | None,
    dr: Callable[[GradBuilder, Operation, SSAValue], SSAValue] | None,
) -> GradRule:
    def rule(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
        (dy,) = dys
        assert dy is not None
        lhs, rhs = op.operands[0], op.operands[1]
        out: list[SSAValue | None] = [None, None]
        if dl is not None and b.needs(lhs):
            out[0] = b.sum_to(dl(b, op, dy), lhs.type)
        if dr is not None and b.needs(rhs):
            out[1] = b.sum_to(dr(b, op, dy), rhs.type)
        return out

    return rule


def _x(op: Operation) -> SSAValue:
    return op.operands[0]


def _y(op: Operation) -> SSAValue:
    return op.operands[1]


grad_rule(AddOp)(_binary(lambda b, op, dy: dy, lambda b, op, dy: dy))
grad_rule(SubOp)(_binary(lambda b, op, dy: dy, lambda b, op, dy: _neg(b, dy)))
grad_rule(MulOp)(
    _binary(
        lambda b, op, dy: _mul(b, dy, b.fwd(_y(op))),
        lambda b, op, dy: _mul(b, dy, b.fwd(_x(op))),
    )
)


def _div_rhs(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d(x/y)/dy = -x / y^2 = -(out / y)
    y = b.fwd(_y(op))
    return _neg(b, _mul(b, dy, b.v(DivOp, b.fwd(op.results[0]), y)))


grad_rule(DivOp)(_binary(lambda b, op, dy: b.v(DivOp, dy, b.fwd(_y(op))), _div_rhs))


def _pow_lhs(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d(x^e)/dx = e * x^(e-1)
    x, e = b.fwd(_x(op)), b.fwd(_y(op))
    em1 = b.v(SubOp, e, b.const(1.0, _dt(e)))
    return _mul(b, dy, _mul(b, e, b.v(PowOp, x, em1)))


def _pow_rhs(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d(x^e)/de = x^e * log(x)
    return _mul(b, dy, _mul(b, b.fwd(op.results[0]), b.v(LogOp, b.fwd(_x(op)))))


grad_rule(PowOp)(_binary(_pow_lhs, _pow_rhs))


def _mask(b: GradBuilder, cond: SSAValue, dtype: Any) -> SSAValue:
    return b.v(CastOp, cond, result_type=tensor_type(_shape(cond), dtype))


def _max_rhs_mask(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # ties go to the lhs: rhs gets the gradient where rhs > lhs
    return _mask(b, b.v(GreaterOp, b.fwd(_y(op)), b.fwd(_x(op))), _dt(dy))


@grad_rule(MaximumOp, MinimumOp)
def _maximum(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    lhs, rhs = op.operands[0], op.operands[1]
    x, y = b.fwd(lhs), b.fwd(rhs)
    # rhs wins strictly (max: rhs > lhs, min: lhs > rhs); ties go to the lhs
    cmp = (y, x) if isinstance(op, MaximumOp) else (x, y)
    m = _mask(b, b.v(GreaterOp, *cmp), _dt(dy))
    g_r = _mul(b, dy, m)
    out: list[SSAValue | None] = [None, None]
    if b.needs(lhs):
        out[0] = b.sum_to(b.v(SubOp, dy, g_r), lhs.type)
    if b.needs(rhs):
        out[1] = b.sum_to(g_r, rhs.type)
    return out


@grad_rule(ScaledAddOp)
def _scaled_add(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    p = op_props(op)
    x, y = op.operands[0], op.operands[1]
    return [
        b.sum_to(_scale(b, dy, p["a"]), x.type) if b.needs(x) else None,
        b.sum_to(_scale(b, dy, p["b"]), y.type) if b.needs(y) else None,
    ]


@grad_rule(WhereOp)
def _where(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    cond, lhs, rhs = op.operands[0], op.operands[1], op.operands[2]
    c = b.fwd(cond)
    zero = b.const(0.0, _dt(dy))
    out: list[SSAValue | None] = [None, None, None]
    if b.needs(lhs):
        out[1] = b.sum_to(b.v(WhereOp, c, dy, zero), lhs.type)
    if b.needs(rhs):
        out[2] = b.sum_to(b.v(WhereOp, c, zero, dy), rhs.type)
    return out


# ------------------------------------------------------------------------------------
# elementwise unary
# ------------------------------------------------------------------------------------

grad_rule(NegOp)(_unary_dx(lambda b, op, dy: _neg(b, dy)))
grad_rule(IdentityOp)(_unary_dx(lambda b, op, dy: dy))
grad_rule(AbsOp)(_unary_dx(lambda b, op, dy: _mul(b, dy, b.v(SignOp, b.fwd(_x(op))))))
grad_rule(ReluOp)(_unary_dx(lambda b, op, dy: b.v(ReluGradOp, dy, b.fwd(_x(op)))))
grad_rule(GeluOp)(_unary_dx(lambda b, op, dy: b.v(GeluGradOp, dy, b.fwd(_x(op)))))
grad_rule(ExpOp)(_unary_dx(lambda b, op, dy: _mul(b, dy, b.fwd(op.results[0]))))
grad_rule(LogOp)(_unary_dx(lambda b, op, dy: b.v(DivOp, dy, b.fwd(_x(op)))))
grad_rule(SqrtOp)(_unary_dx(lambda b, op, dy: b.v(DivOp, _scale(b, dy, 0.5), b.fwd(op.results[0]))))
grad_rule(CosOp)(_unary_dx(lambda b, op, dy: _neg(b, _mul(b, dy, b.v(SinOp, b.fwd(_x(op)))))))
grad_rule(SinOp)(_unary_dx(lambda b, op, dy: _mul(b, dy, b.v(CosOp, b.fwd(_x(op))))))


def _tanh(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    y = b.fwd(op.results[0])
    one_minus = b.v(SubOp, b.const(1.0, _dt(y)), _mul(b, y, y))
    return _mul(b, dy, one_minus)


def _sigmoid(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    y = b.fwd(op.results[0])
    return _mul(b, dy, _mul(b, y, b.v(SubOp, b.const(1.0, _dt(y)), y)))


grad_rule(TanhOp)(_unary_dx(_tanh))
grad_rule(SigmoidOp)(_unary_dx(_sigmoid))


def _swish(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d(x sigmoid(x)) = s + x s (1 - s) = s (1 + x (1 - s))
    x = b.fwd(_x(op))
    s = b.v(SigmoidOp, x)
    one = b.const(1.0, _dt(x))
    t = b.v(AddOp, one, _mul(b, x, b.v(SubOp, one, s)))
    return _mul(b, dy, _mul(b, s, t))


grad_rule(SwishOp)(_unary_dx(_swish))


def _cast(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    x = op.operands[0]
    if x.type == dy.type:
        return dy
    return b.v(CastOp, dy, result_type=x.type)


grad_rule(CastOp)(_unary_dx(_cast))


# ------------------------------------------------------------------------------------
# linear algebra, NN
# ------------------------------------------------------------------------------------


def _swap_last2(b: GradBuilder, v: SSAValue) -> SSAValue:
    r = len(_shape(v))
    perm = (*range(r - 2), r - 1, r - 2)
    return b.v(TransposeOp, v, perm=perm)


def _reshape(b: GradBuilder, v: SSAValue, shape: Sequence[int]) -> SSAValue:
    shape = tuple(shape)
    if _shape(v) == shape:
        return v
    return b.v(ReshapeOp, v, result_type=tensor_type(shape, _dt(v)))


@grad_rule(MatmulOp)
def _matmul(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    lhs, rhs = op.operands[0], op.operands[1]
    a_shape, b_shape = _shape(lhs), _shape(rhs)
    a2 = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b2 = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    # the result with the contracted 1-D dims put back
    out_shape = list(_shape(op.results[0]))
    if len(b_shape) == 1:
        out_shape.append(1)
    if len(a_shape) == 1:
        out_shape.insert(len(out_shape) - 1, 1)
    g = _reshape(b, dy, out_shape)
    out: list[SSAValue | None] = [None, None]
    if b.needs(lhs):
        bt = _swap_last2(b, _reshape(b, b.fwd(rhs), b2))
        da = b.v(MatmulOp, g, bt)
        da = b.sum_to(da, tensor_type(a2, _dt(lhs)))
        out[0] = _reshape(b, da, a_shape)
    if b.needs(rhs):
        at = _swap_last2(b, _reshape(b, b.fwd(lhs), a2))
        db = b.v(MatmulOp, at, g)
        db = b.sum_to(db, tensor_type(b2, _dt(rhs)))
        out[1] = _reshape(b, db, b_shape)
    return out


@grad_rule(CumsumOp)
def _cumsum(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """x_j contributes to y_i for every i at or after j (before j when reversed): the
    gradient is the cumsum of dy in the other direction."""
    (dy,) = dys
    assert dy is not None
    if not b.needs(op.operands[0]):
        return [None]
    p = op_props(op)
    return [b.v(CumsumOp, dy, dim=p["dim"], reverse=not p.get("reverse", False))]


@grad_rule(SoftmaxOp)
def _softmax(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    if not b.needs(op.operands[0]):
        return [None]
    axis = op_props(op)["axis"]
    return [b.v(SoftmaxGradOp, dy, b.fwd(op.results[0]), axis=axis)]


# ------------------------------------------------------------------------------------
# shape ops
# ------------------------------------------------------------------------------------


@grad_rule(ReshapeOp, SqueezeOp)
def _reshape_rule(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    return [_reshape(b, dy, _shape(x)) if b.needs(x) else None]


@grad_rule(TransposeOp)
def _transpose(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    perm = op_props(op)["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [b.v(TransposeOp, dy, perm=tuple(inv))]


def _reduced_axes(op: Operation) -> tuple[int, ...]:
    p = op_props(op)
    rank = len(_shape(op.operands[0]))
    axes = p.get("axis")
    if axes is None:
        return tuple(range(rank))
    return tuple(sorted(a % max(rank, 1) for a in axes))


def _keep_shape(op: Operation) -> tuple[int, ...]:
    """The reduced result's shape with the reduced dims kept (as size 1)."""
    axes = _reduced_axes(op)
    return tuple(1 if i in axes else d for i, d in enumerate(_shape(op.operands[0])))


def _expand_to(b: GradBuilder, v: SSAValue, type: Attribute) -> SSAValue:
    if v.type == type:
        return v
    return b.v(ExpandOp, v, result_type=type)


@grad_rule(ReduceSumOp, ReduceMeanOp)
def _reduce_sum(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    g = _reshape(b, dy, _keep_shape(op))
    if isinstance(op, ReduceMeanOp):
        n = 1
        for a in _reduced_axes(op):
            n *= _shape(x)[a]
        g = _scale(b, g, 1.0 / max(n, 1))
    return [_expand_to(b, g, x.type)]


@grad_rule(ReduceMaxOp, ReduceMinOp)
def _reduce_max(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    # every element equal to the extremum gets the whole gradient (PopART's ReduceMaxGrad /
    # ReduceMinGrad: a mask of the positions equal to the output, times dy)
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    props = {k: v for k, v in op_props(op).items() if k in ("axis", "keepdims")}
    y = op.results[0]
    if isinstance(op, ReduceMaxOp):
        return [b.v(ReduceMaxGradOp, b.fwd(x), b.fwd(y), dy, **props)]
    keep = _keep_shape(op)
    y_full = _expand_to(b, _reshape(b, b.fwd(y), keep), x.type)
    m = _mask(b, b.v(EqualOp, b.fwd(x), y_full), _dt(x))
    return [_mul(b, _expand_to(b, _reshape(b, dy, keep), x.type), m)]


@grad_rule(ExpandOp)
def _expand(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    return [b.sum_to(dy, x.type) if b.needs(x) else None]


@grad_rule(ReduceToShapeOp)
def _reduce_to_shape(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    # dy has the (reduced) result shape; right-align it against x, keeping reduced dims
    xs, ys = _shape(x), _shape(dy)
    aligned = (1,) * (len(xs) - len(ys)) + ys
    return [_expand_to(b, _reshape(b, dy, aligned), x.type)]


@grad_rule(ConcatOp)
def _concat(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    rank = len(_shape(dy))
    axis = op_props(op)["axis"] % max(rank, 1)
    out: list[SSAValue | None] = []
    start = 0
    for x in op.operands:
        n = _shape(x)[axis]
        if b.needs(x):
            out.append(
                b.v(
                    SliceOp,
                    dy,
                    result_type=x.type,
                    start=(start,),
                    stop=(start + n,),
                    axes=(axis,),
                )
            )
        else:
            out.append(None)
        start += n
    return out


@grad_rule(SliceOp)
def _slice(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    props = {k: v for k, v in op_props(op).items()}
    return [b.v(SliceGradOp, dy, result_type=x.type, **props)]


@grad_rule(GatherOp)
def _gather(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x, idx = op.operands[0], op.operands[1]
    if not b.needs(x):
        return [None, None]
    props = op_props(op)
    # zero_oor: the indices the forward gather gave zeros for get no gradient (the kernel)
    zero_oor = {"zero_oor": True} if props.get("zero_oor") else {}
    return [b.v(GatherGradOp, dy, b.fwd(idx), result_type=x.type, axis=props["axis"], **zero_oor), None]


# ------------------------------------------------------------------------------------
# losses
# ------------------------------------------------------------------------------------


@grad_rule(NllLossOp)
def _nll_loss(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    probs, labels = op.operands[0], op.operands[1]
    if not b.needs(probs):
        return [None, None]
    props = op_props(op)
    g = b.v(NllLossGradOp, b.fwd(probs), b.fwd(labels), dy, **props)
    return [g, None]


@grad_rule(DynamicSliceOp)
def _dynamic_slice(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x, index = op.operands[0], op.operands[1]
    if not b.needs(x):
        return [None, None]
    props = {k: v for k, v in op_props(op).items() if k in ("axes", "sizes")}
    g = b.v(DynamicUpdateOp, b.zeros(x.type), b.fwd(index), dy, **props)
    return [g, None]


@grad_rule(DynamicUpdateOp)
def _dynamic_update(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x, index, upd = op.operands[0], op.operands[1], op.operands[2]
    props = {k: v for k, v in op_props(op).items() if k in ("axes", "sizes")}
    out: list[SSAValue | None] = [None, None, None]
    if b.needs(x):
        out[0] = b.v(DynamicUpdateOp, dy, b.fwd(index), b.zeros(upd.type), **props)
    if b.needs(upd):
        out[2] = b.v(DynamicSliceOp, dy, b.fwd(index), **props)
    return out


@grad_rule(IpuCopyOp)
def _ipu_copy(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """The gradient goes back where the value came from: an `ipu.copy` the other way
    (placed on the source IPU)."""
    (dy,) = dys
    assert dy is not None and isinstance(op, IpuCopyOp)
    back = b.op(IpuCopyOp, dy, source=op.destination.value.data, destination=op.source.value.data)
    return [back.results[0]]


# ------------------------------------------------------------------------------------
# More elementwise ops: erf, geluerf, fmod, clip; print_tensor
# ------------------------------------------------------------------------------------

grad_rule(GeluErfOp)(_unary_dx(lambda b, op, dy: b.v(GeluErfGradOp, dy, b.fwd(_x(op)))))


def _erf(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d erf(x)/dx = 2 / sqrt(pi) exp(-x^2)
    x = b.fwd(_x(op))
    e = b.v(ExpOp, _neg(b, _mul(b, x, x)))
    return _mul(b, dy, _scale(b, e, 2.0 / math.sqrt(math.pi)))


grad_rule(ErfOp)(_unary_dx(_erf))


def _fmod_rhs(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # fmod(x, y) = x - trunc(x / y) y: d/dy = -trunc(x / y) = -(x - fmod(x, y)) / y
    x, y = b.fwd(_x(op)), b.fwd(_y(op))
    q = b.v(DivOp, b.v(SubOp, x, b.fwd(op.results[0])), y)
    return _neg(b, _mul(b, dy, q))


grad_rule(FmodOp)(_binary(lambda b, op, dy: dy, _fmod_rhs))


def _clip(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # dy where min <= x <= max (bounds included), 0 outside
    x = b.fwd(_x(op))
    p = op_props(op)
    outside: SSAValue | None = None
    if "max" in p and p["max"] != math.inf:
        outside = b.v(GreaterOp, x, b.const(p["max"], _dt(x)))
    if "min" in p and p["min"] != -math.inf:
        below = b.v(GreaterOp, b.const(p["min"], _dt(x)), x)
        outside = below if outside is None else b.v(LogicalOrOp, outside, below)
    if outside is None:
        return dy
    return b.v(WhereOp, outside, b.const(0.0, _dt(dy)), dy)


grad_rule(ClipOp)(_unary_dx(_clip))


@grad_rule(PrintTensorOp)
def _print_tensor(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """The gradient passes through; with `print_gradient` it is printed, titled
    `<title>_gradient` (as PopART), in the same format."""
    (dy,) = dys
    assert dy is not None
    if not b.needs(op.operands[0]):
        return [None]
    p = op_props(op)
    if not p.get("print_gradient", False):
        return [dy]
    p["title"] = f"{p['title']}_gradient"
    p.pop("print_self", None)
    p.pop("print_gradient", None)
    return [b.v(PrintTensorOp, dy, **p)]


# Gradient rules kept in their own modules register themselves on import.
from xl.passes import grad_rules_custom as _grad_rules_custom  # noqa: E402,F401
from xl.passes import grad_rules_nn as _grad_rules_nn  # noqa: E402,F401
from xl.passes import grad_rules_random as _grad_rules_random  # noqa: E402,F401
from xl.passes import grad_rules_replica as _grad_rules_replica  # noqa: E402,F401
