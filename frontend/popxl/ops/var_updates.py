"""`popxl.ops.var_updates`: in-place variable updates and optimizer updaters.

Factors (`f`, `beta1`, ...) may be Python floats or scalar Tensors: a float becomes
an op property, a Tensor an extra operand.
"""

from __future__ import annotations

from typing import Any

from popxl.ops._utils import emit1, emit_inplace, factor, to_tensor, wrap_public_ops
from popxl.tensor import Tensor

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
    """`t += f * X` in place (f defaults to 1)."""
    return emit_inplace("popxl.accumulate_", [t, _x(t, X)], f=factor(f))


def accumulate_square_(t: Tensor, X: Tensor, f: Factor = 1.0) -> Tensor:
    """`t += f * X^2` in place."""
    return emit_inplace("popxl.accumulate_square_", [t, _x(t, X)], f=factor(f))


def accumulate_mean_(t: Tensor, X: Tensor, step: Factor) -> Tensor:
    """`t = t * step / (step + 1) + X / (step + 1)` in place (running mean)."""
    return emit_inplace("popxl.accumulate_mean_", [t, _x(t, X)], step=factor(step))


def accumulate_moving_average_(t: Tensor, X: Tensor, f: Factor) -> Tensor:
    """`t = f * t + (1 - f) * X` in place."""
    return emit_inplace("popxl.accumulate_moving_average_", [t, _x(t, X)], f=factor(f))


def accumulate_moving_average_square_(t: Tensor, X: Tensor, f: Factor) -> Tensor:
    """`t = f * t + (1 - f) * X^2` in place."""
    return emit_inplace("popxl.accumulate_moving_average_square_", [t, _x(t, X)], f=factor(f))


def accumulator_scale_(t: Tensor, f: Factor) -> Tensor:
    """`t *= f` in place."""
    return emit_inplace("popxl.accumulator_scale_", [t], f=factor(f))


def accumulator_zero_(t: Tensor) -> Tensor:
    """`t = 0` in place."""
    return emit_inplace("popxl.accumulator_zero_", [t])


def sparse_accumulate_(
    t: Tensor,
    X: Tensor,
    indices: Tensor,
    axis: int = 0,
    f: Factor | None = None,
    W: Tensor | None = None,
) -> Tensor:
    """`t[indices along axis] += f * X` in place (repeated indices add up; `W` ignored)."""
    from popxl import dtypes

    idx = to_tensor(indices, dtypes.int32)
    return emit_inplace("popxl.sparse_accumulate_", [t, _x(t, X), idx], axis=int(axis), f=factor(f))


def _updater(
    op_name: str,
    m: Tensor,
    v: Tensor,
    weight: Tensor | None,
    time_step: Tensor | None,
    **factors: Any,
) -> Tensor:
    ops: list[Tensor | None] = [m, v, weight, time_step]
    props = {k: factor(f) for k, f in factors.items()}
    return emit1(op_name, ops, **props)


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
    """Adam update term `mc / (sqrt(vc) + eps) + wd * w`; bias-corrected (and
    `time_step` incremented in place) when `time_step` is given."""
    return _updater(
        "popxl.adam_updater", acc_first_order, acc_second_order, weight, time_step,
        weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
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
    """LAMB update term (same maths as `adam_updater`)."""
    return _updater(
        "popxl.lamb_updater", acc_first_order, acc_second_order, weight, time_step,
        weight_decay=weight_decay, beta1=beta1, beta2=beta2, epsilon=epsilon,
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
    """AdaMax update term; increments `time_step` in place when given."""
    return _updater(
        "popxl.adamax_updater", acc_first_order, acc_second_order, weight, time_step,
        weight_decay=weight_decay, beta1=beta1, epsilon=epsilon,
    )


def adam_var_update(
    t: Tensor,
    x: Tensor,
    r1: Tensor,
    r2: Tensor,
    learning_rate: Factor | None = None,
    max_weight_norm: Factor | None = None,
) -> Tensor:
    """`t -= learning_rate * ratio(r1, r2) * x` in place (LAMB weight update)."""
    return emit_inplace(
        "popxl.adam_var_update", [t, x, r1, r2],
        learning_rate=factor(learning_rate), max_weight_norm=factor(max_weight_norm),
    )


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """`t = X` in place."""
    return emit_inplace("popxl.copy_var_update_", [t, _x(t, X)])


wrap_public_ops(globals(), __all__, "popxl.ops.var_updates")
