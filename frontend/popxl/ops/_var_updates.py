"""The implementation of `popxl.ops.var_updates` (re-exported there, with its documentation)."""

from __future__ import annotations

from typing import Any

from popxl.ops._utils import as_int, emit1, emit_inplace, factor, to_tensor, wrap_public_ops
from popxl.tensor import Tensor
from xl.dialects.popxl import (
    AccumulateMeanOp,
    AccumulateMovingAverageOp,
    AccumulateMovingAverageSquareOp,
    AccumulateOp,
    AccumulateSquareOp,
    AccumulatorScaleOp,
    AccumulatorZeroOp,
    AdamaxUpdaterOp,
    AdamUpdaterOp,
    AdamVarUpdateOp,
    CopyVarUpdateOp,
    LambUpdaterOp,
    PopxlOp,
    SparseAccumulateOp,
)

__all__ = [
    "accumulate_",
    "accumulate_mean_",
    "accumulate_moving_average_",
    "accumulate_moving_average_square_",
    "accumulate_square_",
    "accumulator_scale_",
    "accumulator_zero_",
    "adam_updater",
    "adam_var_update",
    "adamax_updater",
    "copy_var_update_",
    "lamb_updater",
    "sparse_accumulate_",
]

Factor = float | int | Tensor


def _x(t: Tensor, X: Any) -> Tensor:
    return to_tensor(X, t.dtype)


def accumulate_(t: Tensor, X: Tensor, f: Factor | None = None) -> Tensor:
    """`t += f * X` in place (`f` defaults to 1); returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(AccumulateOp, [t, _x(t, X)], f=factor(f))


def accumulate_square_(t: Tensor, X: Tensor, f: Factor = 1.0) -> Tensor:
    """`t += f * X**2` in place; returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(AccumulateSquareOp, [t, _x(t, X)], f=factor(f))


def accumulate_mean_(t: Tensor, X: Tensor, step: Factor) -> Tensor:
    """Running mean: `t = t * step / (step + 1) + X / (step + 1)` in place, where `step` is
    the number of values averaged into `t` so far; returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(AccumulateMeanOp, [t, _x(t, X)], step=factor(step))


def accumulate_moving_average_(t: Tensor, X: Tensor, f: Factor) -> Tensor:
    """Moving average `t = f * t + (1 - f) * X` in place; returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(AccumulateMovingAverageOp, [t, _x(t, X)], f=factor(f))


def accumulate_moving_average_square_(t: Tensor, X: Tensor, f: Factor) -> Tensor:
    """Moving average of squares `t = f * t + (1 - f) * X**2` in place; returns the updated
    `t` (a new tensor aliasing it)."""
    return emit_inplace(AccumulateMovingAverageSquareOp, [t, _x(t, X)], f=factor(f))


def accumulator_scale_(t: Tensor, f: Factor) -> Tensor:
    """`t *= f` in place (`f = 0` zeroes `t`); returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(AccumulatorScaleOp, [t], f=factor(f))


def accumulator_zero_(t: Tensor) -> Tensor:
    """`t = 0` in place; returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(AccumulatorZeroOp, [t])


def sparse_accumulate_(
    t: Tensor,
    X: Tensor,
    indices: Tensor,
    axis: int = 0,
    f: Factor | None = None,
    W: Tensor | None = None,
) -> Tensor:
    """`t[indices] += f * X` along `axis` in place (`X` holds one slice per index; repeated
    indices add up; int32 `indices`); returns the updated `t` (a new tensor aliasing it).
    `W` (upstream: a tied weight to gather the update into) is accepted and ignored."""
    from popxl import dtypes

    idx = to_tensor(indices, dtypes.int32)
    return emit_inplace(SparseAccumulateOp, [t, _x(t, X), idx], axis=as_int(axis, "axis"), f=factor(f))


def _updater(
    cls: type[PopxlOp],
    m: Tensor,
    v: Tensor,
    weight: Tensor | None,
    time_step: Tensor | None,
    **factors: Any,
) -> Tensor:
    # upstream's argument checks (before the operands' dtypes are looked at)
    wd = factors.get("weight_decay")
    if wd is not None and (isinstance(wd, Tensor) or wd != 0.0) and weight is None:
        raise ValueError(f"Weight decay requires weight to not be None. ({cls.name}: weight_decay {wd!r})")
    if cls is AdamaxUpdaterOp:
        if time_step is None:
            raise ValueError(f"AdaMax requires time_step to not be None. ({cls.name})")
    elif time_step is not None and (factors.get("beta1") is None or factors.get("beta2") is None):
        raise ValueError(f"Bias correction requires both beta1 and beta2 to not be None. ({cls.name}: time_step given)")
    ops: list[Tensor | None] = [m, v, weight, time_step]
    props = {k: factor(f) for k, f in factors.items()}
    return emit1(cls, ops, **props)


def adam_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Factor | None = None,
    beta1: Factor | None = None,
    beta2: Factor | None = None,
    epsilon: Factor = 1e-07,
) -> Tensor:
    """The Adam update term `m / (sqrt(v) + epsilon) + weight_decay * weight` (a new tensor
    of `acc_first_order`'s shape; the weight-decay term needs `weight`).

    With `time_step` (a scalar tensor), `m` and `v` are bias-corrected with `beta1`, `beta2`
    (`m / (1 - beta1**step)`, ...) and `time_step` is incremented by 1 in place, as in
    PopART. The accumulators themselves are not updated.
    """
    return _updater(
        AdamUpdaterOp,
        acc_first_order,
        acc_second_order,
        weight,
        time_step,
        weight_decay=weight_decay,
        beta1=beta1,
        beta2=beta2,
        epsilon=epsilon,
    )


def lamb_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Factor | None = None,
    beta1: Factor | None = None,
    beta2: Factor | None = None,
    epsilon: Factor = 1e-07,
) -> Tensor:
    """The LAMB update term: the same maths as `adam_updater` (the LAMB trust ratio is
    applied by `adam_var_update`); increments `time_step` in place when given."""
    return _updater(
        LambUpdaterOp,
        acc_first_order,
        acc_second_order,
        weight,
        time_step,
        weight_decay=weight_decay,
        beta1=beta1,
        beta2=beta2,
        epsilon=epsilon,
    )


def adamax_updater(
    acc_first_order: Tensor,
    acc_second_order: Tensor,
    weight: Tensor | None = None,
    time_step: Tensor | None = None,
    weight_decay: Factor | None = None,
    beta1: Factor = 0.9,
    epsilon: Factor = 1e-07,
) -> Tensor:
    """The AdaMax update term `m / (v + epsilon) + weight_decay * weight` (`v` the
    infinity-norm accumulator); `m` is bias-corrected with `beta1` and `time_step` (required,
    as upstream) incremented in place."""
    return _updater(
        AdamaxUpdaterOp,
        acc_first_order,
        acc_second_order,
        weight,
        time_step,
        weight_decay=weight_decay,
        beta1=beta1,
        epsilon=epsilon,
    )


def adam_var_update(
    t: Tensor,
    x: Tensor,
    r1: Tensor,
    r2: Tensor,
    learning_rate: Factor | None = None,
    max_weight_norm: Factor | None = None,
) -> Tensor:
    """LAMB weight update in place: `t -= learning_rate * ratio * x`, with the trust ratio
    `sqrt(r1) / sqrt(r2)` (`r1 = lamb_square(t)`, `r2 = lamb_square(x)`; 1 when either is
    0), `sqrt(r1)` clipped to `max_weight_norm` when given; returns the updated `t` (a new tensor aliasing it).
    `learning_rate` None is 0 (PopART's default optimizer value: `t` is left as it is)."""
    return emit_inplace(
        AdamVarUpdateOp,
        [t, x, r1, r2],
        learning_rate=factor(0.0 if learning_rate is None else learning_rate),
        max_weight_norm=factor(max_weight_norm),
    )


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """`t = X` in place (`X` broadcast to `t`'s shape); returns the updated `t` (a new tensor aliasing it)."""
    return emit_inplace(CopyVarUpdateOp, [t, _x(t, X)])


wrap_public_ops(globals(), __all__, "popxl.ops.var_updates")
