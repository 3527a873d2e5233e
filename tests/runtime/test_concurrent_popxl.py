"""Random popxl programs on 2-3 virtual IPUs run concurrently == serially == NumPy.

Hypothesis builds chains of ops (add, mul, tanh, scaled matmul, in-place `add_` on
activations and on variables, `call.repeat` of a graph carrying its value across
iterations), each placed on a random IPU with `popxl.ipu(k)`, operands moved with
`copy_to_ipu` when they live on another IPU, a few results stored to the host. The same Ir
runs in a concurrent and in a serial Session (1 BLAS thread for both): outputs and
variables must be equal bit for bit, and equal to a NumPy evaluation of the chain.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits

import popxl
import popxl.ops as ops

SHAPE = (4, 4)
KINDS = ["add", "mul", "tanh", "matmul", "add_", "var_add_", "repeat"]


@st.composite
def programs(draw: Any) -> tuple[int, list[tuple[Any, ...]]]:
    ipus = draw(st.integers(2, 3))
    steps = []
    for _ in range(draw(st.integers(2, 10))):
        steps.append(
            (
                draw(st.sampled_from(KINDS)),
                draw(st.integers(0, 99)),  # operands: indices modulo the values so far
                draw(st.integers(0, 99)),
                draw(st.integers(0, ipus - 1)),
                draw(st.integers(1, 3)),  # repeat count
            )
        )
    return ipus, steps


def _build(ipus: int, steps: list[tuple[Any, ...]], x: np.ndarray, inits: list[np.ndarray]):
    ir = popxl.Ir()
    ref: list[np.ndarray] = []
    where: list[int] = []
    with ir.main_graph, popxl.in_sequence(True):
        xs = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        variables = []
        ref_vars = []
        for k in range(ipus):
            with popxl.ipu(k):
                variables.append(popxl.variable(inits[k], name=f"v{k}"))
            ref_vars.append(inits[k].copy())
        with popxl.ipu(0):
            tensors = [ops.host_load(xs, "x")]
        ref.append(x.copy())
        where.append(0)
        for k in range(ipus):
            tensors.append(variables[k])
            ref.append(ref_vars[k])  # the same array: in-place updates show in both
            where.append(k)

        def on(i: int, ipu: int) -> popxl.Tensor:
            t = tensors[i]
            return t if where[i] == ipu else t.copy_to_ipu(ipu, where[i])

        for kind, a, b, ipu, n in steps:
            a, b = a % len(tensors), b % len(tensors)
            with popxl.ipu(ipu):
                if kind == "add":
                    r, v = on(a, ipu) + on(b, ipu), ref[a] + ref[b]
                elif kind == "mul":
                    r, v = on(a, ipu) * on(b, ipu), ref[a] * ref[b]
                elif kind == "tanh":
                    r, v = ops.tanh(on(a, ipu)), np.tanh(ref[a])
                elif kind == "matmul":
                    r, v = (on(a, ipu) @ on(b, ipu)) * 0.25, (ref[a] @ ref[b]) * np.float32(0.25)
                elif kind == "repeat":
                    body = ir.create_graph(lambda t: ops.tanh(t * 0.5 + 0.25), popxl.TensorSpec(SHAPE, popxl.float32))
                    (r,) = ops.repeat(body, n, on(a, ipu))
                    v = ref[a]
                    for _ in range(n):
                        v = np.tanh(v * np.float32(0.5) + np.float32(0.25))
                elif kind == "var_add_":  # an in-place update of the IPU's variable
                    src = on(a, ipu)
                    ops.add_(variables[ipu], src)
                    ref_vars[ipu] += ref[a]
                    continue
                else:  # add_: in place on a fresh activation of this IPU
                    base = on(a, ipu) * 1.0
                    r = ops.add_(base, on(b, ipu))
                    v = ref[a] * np.float32(1.0) + ref[b]
            tensors.append(r)
            ref.append(np.asarray(v, np.float32))
            where.append(ipu)
        outs = []
        for i in range(max(1, len(tensors) - 3), len(tensors)):
            s = popxl.d2h_stream(SHAPE, popxl.float32, f"out{i}")
            with popxl.ipu(where[i]):
                ops.host_store(s, tensors[i])
            outs.append((s, i))
    return ir, xs, variables, outs, ref, ref_vars


@settings(max_examples=30, deadline=None, derandomize=True)
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_popxl_programs(program: tuple[int, list[tuple[Any, ...]]], seed: int) -> None:
    ipus, steps = program
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    inits = [rng.uniform(-1, 1, SHAPE).astype(np.float32) for _ in range(ipus)]
    ir, xs, variables, outs, ref, ref_vars = _build(ipus, steps, x, inits)
    results = []
    with threadpool_limits(1, "blas"):
        for concurrent in (True, False):
            with popxl.Session(ir, "cpu", concurrent=concurrent) as session:
                got = session.run({xs: x})
                got2 = session.run({xs: x})  # a second step: variables carried over
                results.append(
                    (
                        [got[s] for s, _ in outs],
                        [got2[s] for s, _ in outs],
                        [session.get_tensor_data(v) for v in variables],
                        session._exe.workers,
                    )
                )
    (c1, c2, cv, cw), (s1, s2, sv, sw) = results
    assert sw == 1 and cw >= 1
    event(f"workers={cw}")
    for a, b in zip(c1 + c2 + cv, s1 + s2 + sv):
        assert np.array_equal(a, b)
    # NumPy: the first step's outputs (the variables' values after one step are in ref_vars)
    for (_, i), a in zip(outs, c1):
        np.testing.assert_allclose(a, ref[i], rtol=1e-5, atol=1e-6)
