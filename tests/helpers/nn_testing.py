"""Helpers of the neural-network op tests (tests/runtime/test_ops_nn_*.py): run a popxl function
and its gradient (popxl.transforms.autodiff) in a Session."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import popxl
from popxl import ops, transforms


def run_fwd_bwd(
    fn: Callable[..., popxl.Tensor],
    inputs: Sequence[np.ndarray],
    dy: np.ndarray | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """`fn(*inputs)` in a subgraph called from the main graph, and the gradients of
    `sum(fn(*inputs) * dy)` with respect to every input (autodiff of the subgraph).

    Returns `(y, [d input_i], dy)`; `dy` is random normal when not given.
    """
    ir = popxl.Ir()
    with ir.main_graph:
        vs = [popxl.variable(np.asarray(a), name=f"in{i}") for i, a in enumerate(inputs)]
        graph = ir.create_graph(fn, *[v.spec for v in vs])
        info = ops.call_with_info(graph, *vs)
        (y,) = info.outputs
        if dy is None:
            dy = np.random.default_rng(seed).standard_normal(y.shape).astype(y.dtype.as_numpy())
        grad_info = transforms.autodiff(graph)
        dyt = popxl.constant(dy, name="dy")
        grads = ops.call(grad_info.graph, dyt, inputs_dict=grad_info.inputs_dict(info))
        streams = []
        for t in (y, *grads):
            s = popxl.d2h_stream(t.shape, t.dtype)
            ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    arrays = [out[s] for s in streams]
    return arrays[0], arrays[1:], dy


def run_fwd(fn: Callable[..., popxl.Tensor], inputs: Sequence[np.ndarray]) -> np.ndarray:
    """`fn(*inputs)` built in the main graph on variables, run once in a Session."""
    ir = popxl.Ir()
    with ir.main_graph:
        vs = [popxl.variable(np.asarray(a), name=f"in{i}") for i, a in enumerate(inputs)]
        y = fn(*vs)
        s = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(s, y)
    with popxl.Session(ir, "cpu") as session:
        return session.run()[s]
