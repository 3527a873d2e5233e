"""Random programs: the optimised plan gives the straightforward plan's results.

Hypothesis draws short programs over (4, 4) tensors mixing elementwise ops,
matmuls, views (reshape/transpose) and in-place updates of variables, so that
fusion, views, buffer reuse and update folding meet aliasing they must respect. Both plans
agree to `CHAIN_TOL` (`tests/helpers/plan_tolerance.py`: the few float32 ulps each op may round
differently, added up over the chain).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import popxl
import popxl.ops as ops
from tests.helpers.plan_tolerance import CHAIN_TOL
from xl.compiler import compile_module

N = 4
OPS = ("add", "sub", "mul", "gelu", "relu", "tanh", "matmul", "transpose", "reshape", "softmax",
       "scaled_add_", "matmul_update")  # fmt: skip


def build(program: list[tuple[str, int, int, float]]) -> popxl.Ir:
    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    with ir.main_graph:
        x_stream = popxl.h2d_stream((N, N), popxl.float32, "x")
        w = [popxl.variable(rng.normal(size=(N, N)).astype(np.float32) * 0.5, name=f"w{i}") for i in range(2)]
        pool = [ops.host_load(x_stream), *w]
        for kind, i, j, c in program:
            a, b = pool[i % len(pool)], pool[j % len(pool)]
            if kind == "add":
                pool.append(a + b)
            elif kind == "sub":
                pool.append(a - b)
            elif kind == "mul":
                pool.append(a * c)
            elif kind in ("gelu", "relu", "tanh"):
                pool.append(getattr(ops, kind)(a))
            elif kind == "matmul":
                pool.append(a @ b)
            elif kind == "transpose":
                pool.append(a.T)
            elif kind == "reshape":
                pool.append(a.reshape((N * N,)).reshape((N, N)))
            elif kind == "softmax":
                pool.append(ops.softmax(a, axis=-1))
            elif kind == "scaled_add_":
                ops.scaled_add_(w[i % 2], b, b=-c)
            else:  # matmul_update: SGD-like update with a matmul gradient
                ops.scaled_add_(w[j % 2], a.T @ b, b=-0.1 * c)
        outs = pool[-3:]
        streams = []
        for k, t in enumerate(outs):
            s = popxl.d2h_stream(t.shape, t.dtype, f"out{k}")
            ops.host_store(s, t)
            streams.append(s)
    return ir


programs = st.lists(
    st.tuples(
        st.sampled_from(OPS),
        st.integers(0, 30),
        st.integers(0, 30),
        st.floats(0.1, 1.0),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_optimised_plan_equals_straightforward(program):
    ir = build(program)
    x = np.random.default_rng(1).normal(size=(N, N)).astype(np.float32)
    results = []
    for optimize in (True, False):
        exe = compile_module(ir._module, optimize=optimize)
        outs = [exe.run({"x": x + step}) for step in range(2)]
        results.append((outs, {k: v.copy() for k, v in exe.state.items()}))
    (oa, sa), (ob, sb) = results
    for a, b in zip(oa, ob, strict=True):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], **CHAIN_TOL, err_msg=k)
    for k in sa:
        np.testing.assert_allclose(sa[k], sb[k], **CHAIN_TOL, err_msg=k)
