"""`AdamOptimizerStep`: one Adam(W) step for one variable (popxl_addons/optimizers/adam.py).

```python
from popxl_addons.optimizers.adam import AdamOptimizerStep

optimizer = AdamOptimizerStep(cache=True)          # one graph per (shape, dtype, kwargs)
state, step = optimizer.create_graph(var, grad.spec, lr=1e-3, weight_decay=0.0)
step.bind(state.init()).call(var, grad)            # var updated in place
```

State (named inputs, all by reference): `first_order` (`first_order_dtype`, default float16),
`second_order` (float32), `step` (float32 scalar; only with `bias_correction`). For a
replica-sharded `var` (with a `meta_shape`) the moments are replica-sharded likewise.

Maths (in this order, `popxl.in_sequence`):

    g = grad * (1 / loss_scaling) * (global_norm_max / max(global_norm, global_norm_max))
    first_order  = beta1 * first_order  + (1 - beta1) * g          # accumulate_moving_average_
    second_order = beta2 * second_order + (1 - beta2) * g^2        # accumulate_moving_average_square_
    u = adam_updater(first_order, second_order, weight=var, time_step=step, ...)
      = mc / (sqrt(vc) + eps) + weight_decay * var                 # mc, vc bias-corrected; step += 1
    var = var - lr * u                                             # scaled_add_

which is `torch.optim.AdamW` (decoupled weight decay).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl_addons.module import Module

__all__ = ["AdamOptimizerStep"]

Scalar = float | popxl.Tensor


class AdamOptimizerStep(Module):
    """One Adam step for a variable (see the module docstring)."""

    @popxl.in_sequence()
    def build(
        self,
        var: popxl.TensorByRef,
        grad: popxl.Tensor,
        replica_grouping: Any | None = None,
        *,
        lr: Scalar,
        beta1: Scalar = 0.9,
        beta2: Scalar = 0.999,
        eps: Scalar = 1e-5,
        weight_decay: Scalar = 1e-2,
        first_order_dtype: Any = popxl.float16,
        bias_correction: bool = True,
        loss_scaling: Scalar = 1,
        global_norm: popxl.Tensor | None = None,
        global_norm_max: Scalar | None = None,
    ) -> None:
        """Update `var` in place from `grad` by one Adam step (see the module docstring); the
        moments (`first_order`, `second_order`) and `step` become variables of the module.
        `grad` is first scaled by `scale_grad(grad, loss_scaling, global_norm, global_norm_max)`."""
        grad = self.scale_grad(grad, loss_scaling, global_norm, global_norm_max)

        first_order = self._state(var, "first_order", first_order_dtype, replica_grouping)
        ops.var_updates.accumulate_moving_average_(first_order, grad, f=beta1)

        second_order = self._state(var, "second_order", popxl.float32, replica_grouping)
        ops.var_updates.accumulate_moving_average_square_(second_order, grad, f=beta2)

        step = None
        if bias_correction:
            step = self.add_variable_input(
                "step",
                partial(np.zeros, ()),
                popxl.float32,
                by_ref=True,
                replica_grouping=replica_grouping,
            )

        updater = ops.var_updates.adam_updater(
            first_order,
            second_order,
            weight=var,
            weight_decay=weight_decay,
            time_step=step,
            beta1=beta1,
            beta2=beta2,
            epsilon=eps,
        )
        ops.scaled_add_(var, updater, b=-lr)

    # -- helpers ---------------------------------------------------------------------------
    def _state(self, var: popxl.Tensor, name: str, dtype: Any, replica_grouping: Any) -> popxl.Tensor:
        """A by-reference zero-initialised state input shaped like `var` (sharded like it)."""
        meta = tuple(getattr(var, "meta_shape", ()) or ())
        if meta:
            shard_over = max(1, math.prod(meta) // max(1, math.prod(var.shape)))
            return self.add_replica_sharded_variable_input(
                name,
                partial(np.zeros, meta),
                dtype,
                by_ref=True,
                replica_grouping=replica_grouping,
                shard_over=shard_over,
            )
        return self.add_variable_input(
            name, partial(np.zeros, var.shape), dtype, by_ref=True, replica_grouping=replica_grouping
        )

    @staticmethod
    def scale_grad(
        grad: popxl.Tensor,
        loss_scaling: Scalar = 1,
        global_norm: popxl.Tensor | None = None,
        global_norm_max: Scalar | None = None,
    ) -> popxl.Tensor:
        """`grad / loss_scaling`, clipped by global norm when `global_norm` is given:
        times `global_norm_max / max(global_norm, global_norm_max)`."""
        if (global_norm is None) != (global_norm_max is None):
            raise ValueError("AdamOptimizerStep: global_norm and global_norm_max must be given together")
        scale: Any = None
        if isinstance(loss_scaling, popxl.Tensor):
            scale = 1.0 / ops.cast(loss_scaling, popxl.float32)
        elif loss_scaling != 1:
            scale = 1.0 / float(loss_scaling)
        if global_norm is not None:
            gn = ops.cast(global_norm, popxl.float32)
            if isinstance(global_norm_max, popxl.Tensor):
                gnm = ops.cast(global_norm_max, popxl.float32)
            else:
                gnm = popxl.constant(np.float32(global_norm_max), popxl.float32)
            clip = gnm / ops.maximum(gn, gnm)
            scale = clip if scale is None else clip * scale
        if scale is None:
            return grad
        if isinstance(scale, popxl.Tensor):
            return grad * ops.cast(scale, grad.dtype)
        return grad * popxl.constant(np.asarray(scale, dtype=grad.dtype.as_numpy()), grad.dtype)
