"""Helpers of the replica tests: run a one-input program on R replicas through `popxl.Session`.

`ReplicatedGrad(R, shape, cshape, body)` builds `loss = body(ir, x, c)` (x and c loaded per
replica from host streams), its gradient graph (`transforms.autodiff`, seed 1.0 on every
replica) and returns, per run, every replica's loss and `dx`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from popxl import transforms


class ReplicatedGrad:
    """`loss_r = body(ir, x_r, c_r)` on R replicas and its gradient `d loss_r / d x_r`."""

    def __init__(
        self,
        replicas: int,
        shape: tuple[int, ...],
        cshape: tuple[int, ...],
        body: Callable[[popxl.Ir, popxl.Tensor, popxl.Tensor], popxl.Tensor],
        dtype: Any = popxl.float64,
    ):
        self.replicas = replicas
        self.ir = ir = popxl.Ir(replication=replicas)
        with ir.main_graph:
            self.xs = popxl.h2d_stream(shape, dtype, "x")
            self.cs = popxl.h2d_stream(cshape, dtype, "c")
            x = ops.host_load(self.xs)
            c = ops.host_load(self.cs)
            g = ir.create_graph(lambda x, c: body(ir, x, c), x, c)
            info = transforms.autodiff(g, grads_required=[g.inputs[0]])
            call = ops.call_with_info(g, x, c)
            loss = call.outputs[0]  # activations the gradient needs follow
            seed = popxl.constant(np.ones(loss.shape, dtype.as_numpy()), dtype)
            (dx,) = ops.call(info.graph, seed, inputs_dict=info.inputs_dict(call))
            self.loss_s = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
            self.dx_s = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
            ops.host_store(self.loss_s, loss)
            ops.host_store(self.dx_s, dx)
        self.session = popxl.Session(ir, "ipu_model")

    def run(self, x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(loss per replica `[R]`, dx per replica `[R, *shape]`)."""
        with self.session:
            out = self.session.run({self.xs: x, self.cs: c})
        return np.asarray(out[self.loss_s]).reshape(self.replicas), out[self.dx_s]

    def losses(self, x: np.ndarray, c: np.ndarray) -> np.ndarray:
        return self.run(x, c)[0]


def finite_difference(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar `f` at every element of `x`."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp = x.copy()
        xm = x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def runtime_has_collectives() -> bool:
    """Whether the runtime runs replica collectives (a kernel registered for all-reduce)."""
    try:
        from xl.dialects.replica import AllReduceOp
        from xl.runtime.kernels.collectives import COLLECTIVES
    except ImportError:
        return False
    return AllReduceOp in COLLECTIVES
