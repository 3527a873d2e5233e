"""Gradient rules of the `popxl` tensor ops, used by the `autodiff` pass.

A rule maps the gradients of an op's results to gradients of its operands:

```python
@grad_rule("popxl.mul")
def _mul(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> list[SSAValue | None]:
    (dy,) = dys
    lhs, rhs = op.operands
    return [
        b.sum_to(b.v("popxl.mul", dy, b.fwd(rhs)), lhs.type) if b.needs(lhs) else None,
        b.sum_to(b.v("popxl.mul", dy, b.fwd(lhs)), rhs.type) if b.needs(rhs) else None,
    ]
```

`dys[i]` is the gradient of result i (`None`: zero). The rule returns one entry
per operand (`None`: no gradient), computing only what `b.needs(operand)` asks for.
It emits ops into the gradient graph through the builder: `b.fwd(v)` makes a
forward value available there (as an activation or an input of the forward graph),
`b.op` / `b.v` build ops (by class or by op name, results inferred unless types are
given), `b.const(x, dtype)` a scalar constant and `b.sum_to(g, type)` sums a
broadcast gradient back to an operand type.

Ops without a rule are non-differentiable: comparison, logical and integer ops
(their results never need gradients) or an error when a gradient must flow through
them. The rule for `call.call` lives in the pass (it needs the module).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Operation, SSAValue

from xl.dialects.popxl import op_props
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
        op: str | type[Operation],
        *operands: SSAValue,
        result_types: Sequence[Attribute] | None = None,
        **props: Any,
    ) -> Operation:
        """Builds and inserts an op (by class or name); results inferred unless given."""
        ...

    def v(
        self,
        op: str | type[Operation],
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

GRAD_RULES: dict[str, GradRule] = {}
"""Gradient rule per op name."""

NO_GRAD: set[str] = set()
"""Ops with a zero gradient (or outputs that are not differentiable)."""


def grad_rule(*names: str) -> Callable[[GradRule], GradRule]:
    def deco(f: GradRule) -> GradRule:
        for n in names:
            GRAD_RULES[n] = f
        return f

    return deco


def get_grad_rule(op: Operation) -> GradRule | None:
    return GRAD_RULES.get(op.name)


def has_no_grad(op: Operation) -> bool:
    return op.name in NO_GRAD


NO_GRAD.update(
    {
        "popxl.sign",
        "popxl.equal",
        "popxl.greater",
        "popxl.less",
        "popxl.logical_and",
        "popxl.logical_or",
        "popxl.logical_not",
        "popxl.isnan",
        "popxl.isinf",
        "popxl.isfinite",
        "popxl.onehot",
        "popxl.detach",
        "popxl.init",
        "popxl.argmax",
        "popxl.argmin",
        "popxl.ceil",
        "popxl.floor",
        "popxl.detach",
        "popxl.random_uniform",
        "popxl.random_normal",
        "popxl.increment_mod",
        "graph.constant",
        "graph.host_load",
    }
)


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
    return b.v("popxl.mul", x, y)


def _neg(b: GradBuilder, x: SSAValue) -> SSAValue:
    return b.v("popxl.neg", x)


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


GRAD_RULES["popxl.add"] = _binary(lambda b, op, dy: dy, lambda b, op, dy: dy)
GRAD_RULES["popxl.sub"] = _binary(lambda b, op, dy: dy, lambda b, op, dy: _neg(b, dy))
GRAD_RULES["popxl.mul"] = _binary(
    lambda b, op, dy: _mul(b, dy, b.fwd(_y(op))),
    lambda b, op, dy: _mul(b, dy, b.fwd(_x(op))),
)


def _div_rhs(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d(x/y)/dy = -x / y^2 = -(out / y)
    y = b.fwd(_y(op))
    return _neg(b, _mul(b, dy, b.v("popxl.div", b.fwd(op.results[0]), y)))


GRAD_RULES["popxl.div"] = _binary(
    lambda b, op, dy: b.v("popxl.div", dy, b.fwd(_y(op))), _div_rhs
)


def _pow_lhs(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d(x^e)/dx = e * x^(e-1)
    x, e = b.fwd(_x(op)), b.fwd(_y(op))
    em1 = b.v("popxl.sub", e, b.const(1.0, _dt(e)))
    return _mul(b, dy, _mul(b, e, b.v("popxl.pow", x, em1)))


def _pow_rhs(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d(x^e)/de = x^e * log(x)
    return _mul(b, dy, _mul(b, b.fwd(op.results[0]), b.v("popxl.log", b.fwd(_x(op)))))


GRAD_RULES["popxl.pow"] = _binary(_pow_lhs, _pow_rhs)


def _mask(b: GradBuilder, cond: SSAValue, dtype: Any) -> SSAValue:
    return b.v("popxl.cast", cond, result_type=tensor_type(_shape(cond), dtype))


def _max_rhs_mask(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # ties go to the lhs: rhs gets the gradient where rhs > lhs
    return _mask(b, b.v("popxl.greater", b.fwd(_y(op)), b.fwd(_x(op))), _dt(dy))


@grad_rule("popxl.maximum", "popxl.minimum")
def _maximum(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    lhs, rhs = op.operands[0], op.operands[1]
    x, y = b.fwd(lhs), b.fwd(rhs)
    # rhs wins strictly (max: rhs > lhs, min: lhs > rhs); ties go to the lhs
    cmp = (y, x) if op.name == "popxl.maximum" else (x, y)
    m = _mask(b, b.v("popxl.greater", *cmp), _dt(dy))
    g_r = _mul(b, dy, m)
    out: list[SSAValue | None] = [None, None]
    if b.needs(lhs):
        out[0] = b.sum_to(b.v("popxl.sub", dy, g_r), lhs.type)
    if b.needs(rhs):
        out[1] = b.sum_to(g_r, rhs.type)
    return out


@grad_rule("popxl.scaled_add")
def _scaled_add(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    p = op_props(op)
    x, y = op.operands[0], op.operands[1]
    return [
        b.sum_to(_scale(b, dy, p["a"]), x.type) if b.needs(x) else None,
        b.sum_to(_scale(b, dy, p["b"]), y.type) if b.needs(y) else None,
    ]


@grad_rule("popxl.where")
def _where(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    cond, lhs, rhs = op.operands[0], op.operands[1], op.operands[2]
    c = b.fwd(cond)
    zero = b.const(0.0, _dt(dy))
    out: list[SSAValue | None] = [None, None, None]
    if b.needs(lhs):
        out[1] = b.sum_to(b.v("popxl.where", c, dy, zero), lhs.type)
    if b.needs(rhs):
        out[2] = b.sum_to(b.v("popxl.where", c, zero, dy), rhs.type)
    return out


# ------------------------------------------------------------------------------------
# elementwise unary
# ------------------------------------------------------------------------------------

GRAD_RULES["popxl.neg"] = _unary_dx(lambda b, op, dy: _neg(b, dy))
GRAD_RULES["popxl.identity"] = _unary_dx(lambda b, op, dy: dy)
GRAD_RULES["popxl.abs"] = _unary_dx(
    lambda b, op, dy: _mul(b, dy, b.v("popxl.sign", b.fwd(_x(op))))
)
GRAD_RULES["popxl.relu"] = _unary_dx(lambda b, op, dy: b.v("popxl.relu_grad", dy, b.fwd(_x(op))))
GRAD_RULES["popxl.gelu"] = _unary_dx(lambda b, op, dy: b.v("popxl.gelu_grad", dy, b.fwd(_x(op))))
GRAD_RULES["popxl.exp"] = _unary_dx(lambda b, op, dy: _mul(b, dy, b.fwd(op.results[0])))
GRAD_RULES["popxl.log"] = _unary_dx(lambda b, op, dy: b.v("popxl.div", dy, b.fwd(_x(op))))
GRAD_RULES["popxl.sqrt"] = _unary_dx(
    lambda b, op, dy: b.v("popxl.div", _scale(b, dy, 0.5), b.fwd(op.results[0]))
)
GRAD_RULES["popxl.cos"] = _unary_dx(
    lambda b, op, dy: _neg(b, _mul(b, dy, b.v("popxl.sin", b.fwd(_x(op)))))
)
GRAD_RULES["popxl.sin"] = _unary_dx(lambda b, op, dy: _mul(b, dy, b.v("popxl.cos", b.fwd(_x(op)))))


def _tanh(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    y = b.fwd(op.results[0])
    one_minus = b.v("popxl.sub", b.const(1.0, _dt(y)), _mul(b, y, y))
    return _mul(b, dy, one_minus)


def _sigmoid(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    y = b.fwd(op.results[0])
    return _mul(b, dy, _mul(b, y, b.v("popxl.sub", b.const(1.0, _dt(y)), y)))


GRAD_RULES["popxl.tanh"] = _unary_dx(_tanh)
GRAD_RULES["popxl.sigmoid"] = _unary_dx(_sigmoid)


def _swish(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    # d(x sigmoid(x)) = s + x s (1 - s) = s (1 + x (1 - s))
    x = b.fwd(_x(op))
    s = b.v("popxl.sigmoid", x)
    one = b.const(1.0, _dt(x))
    t = b.v("popxl.add", one, _mul(b, x, b.v("popxl.sub", one, s)))
    return _mul(b, dy, _mul(b, s, t))


GRAD_RULES["popxl.swish"] = _unary_dx(_swish)


def _cast(b: GradBuilder, op: Operation, dy: SSAValue) -> SSAValue:
    x = op.operands[0]
    if x.type == dy.type:
        return dy
    return b.v("popxl.cast", dy, result_type=x.type)


GRAD_RULES["popxl.cast"] = _unary_dx(_cast)


# ------------------------------------------------------------------------------------
# linear algebra, NN
# ------------------------------------------------------------------------------------


def _swap_last2(b: GradBuilder, v: SSAValue) -> SSAValue:
    r = len(_shape(v))
    perm = (*range(r - 2), r - 1, r - 2)
    return b.v("popxl.transpose", v, perm=perm)


def _reshape(b: GradBuilder, v: SSAValue, shape: Sequence[int]) -> SSAValue:
    shape = tuple(shape)
    if _shape(v) == shape:
        return v
    return b.v("popxl.reshape", v, result_type=tensor_type(shape, _dt(v)))


@grad_rule("popxl.matmul")
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
        da = b.v("popxl.matmul", g, bt)
        da = b.sum_to(da, tensor_type(a2, _dt(lhs)))
        out[0] = _reshape(b, da, a_shape)
    if b.needs(rhs):
        at = _swap_last2(b, _reshape(b, b.fwd(lhs), a2))
        db = b.v("popxl.matmul", at, g)
        db = b.sum_to(db, tensor_type(b2, _dt(rhs)))
        out[1] = _reshape(b, db, b_shape)
    return out


@grad_rule("popxl.softmax")
def _softmax(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    if not b.needs(op.operands[0]):
        return [None]
    axis = op_props(op)["axis"]
    return [b.v("popxl.softmax_grad", dy, b.fwd(op.results[0]), axis=axis)]


# ------------------------------------------------------------------------------------
# shape ops
# ------------------------------------------------------------------------------------


@grad_rule("popxl.reshape", "popxl.squeeze", "popxl.unsqueeze", "popxl.flatten")
def _reshape_rule(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    return [_reshape(b, dy, _shape(x)) if b.needs(x) else None]


@grad_rule("popxl.transpose")
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
    return [b.v("popxl.transpose", dy, perm=tuple(inv))]


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
    return b.v("popxl.expand", v, result_type=type)


@grad_rule("popxl.reduce_sum", "popxl.reduce_mean")
def _reduce_sum(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    g = _reshape(b, dy, _keep_shape(op))
    if op.name == "popxl.reduce_mean":
        n = 1
        for a in _reduced_axes(op):
            n *= _shape(x)[a]
        g = _scale(b, g, 1.0 / max(n, 1))
    return [_expand_to(b, g, x.type)]


@grad_rule("popxl.reduce_max", "popxl.reduce_min")
def _reduce_max(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    # the gradient is split evenly among the elements equal to the extremum
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    props = {k: v for k, v in op_props(op).items() if k in ("axis", "keepdims")}
    y = op.results[0]
    if op.name == "popxl.reduce_max":
        return [b.v("popxl.reduce_max_grad", b.fwd(x), b.fwd(y), dy, **props)]
    keep = _keep_shape(op)
    y_full = _expand_to(b, _reshape(b, b.fwd(y), keep), x.type)
    m = _mask(b, b.v("popxl.equal", b.fwd(x), y_full), _dt(x))
    count = b.v("popxl.reduce_sum", m, axis=_reduced_axes(op), keepdims=True)
    g = b.v("popxl.div", _reshape(b, dy, keep), count)
    return [_mul(b, _expand_to(b, g, x.type), m)]


@grad_rule("popxl.expand")
def _expand(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    return [b.sum_to(dy, x.type) if b.needs(x) else None]


@grad_rule("popxl.reduce_to_shape")
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


@grad_rule("popxl.concat")
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
                    "popxl.slice",
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


@grad_rule("popxl.slice")
def _slice(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    props = {k: v for k, v in op_props(op).items()}
    return [b.v("popxl.slice_grad", dy, result_type=x.type, **props)]


@grad_rule("popxl.gather")
def _gather(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x, idx = op.operands[0], op.operands[1]
    if not b.needs(x):
        return [None, None]
    axis = op_props(op)["axis"]
    return [b.v("popxl.gather_grad", dy, b.fwd(idx), result_type=x.type, axis=axis), None]


# ------------------------------------------------------------------------------------
# losses
# ------------------------------------------------------------------------------------


@grad_rule("popxl.nll_loss")
def _nll_loss(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    probs, labels = op.operands[0], op.operands[1]
    if not b.needs(probs):
        return [None, None]
    props = op_props(op)
    g = b.v("popxl.nll_loss_grad", b.fwd(probs), b.fwd(labels), dy, **props)
    return [g, None]


@grad_rule("popxl.dynamic_slice")
def _dynamic_slice(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x, index = op.operands[0], op.operands[1]
    if not b.needs(x):
        return [None, None]
    props = {k: v for k, v in op_props(op).items() if k in ("axes", "sizes")}
    g = b.v("popxl.dynamic_update", b.zeros(x.type), b.fwd(index), dy, **props)
    return [g, None]


@grad_rule("popxl.dynamic_update")
def _dynamic_update(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x, index, upd = op.operands[0], op.operands[1], op.operands[2]
    props = {k: v for k, v in op_props(op).items() if k in ("axes", "sizes")}
    out: list[SSAValue | None] = [None, None, None]
    if b.needs(x):
        out[0] = b.v("popxl.dynamic_update", dy, b.fwd(index), b.zeros(upd.type), **props)
    if b.needs(upd):
        out[2] = b.v("popxl.dynamic_slice", dy, b.fwd(index), **props)
    return out
