"""In-place ops return a new tensor that aliases their input, as PopXL documents: `c =
ops.add_(a, b)` gives `c`, a tensor of its own id in the graph (PopART's in-place op output),
while `a += b` leaves the name `a` bound to `a` (a variable stays that variable). Reading the
returned tensor later gives the updated values.

The cases are derived from the public API: every function of `popxl.ops`,
`popxl.ops.var_updates` and `popxl.ops.collectives` whose name ends in `_` (and the
variable updates without one) must have a builder below, so an in-place op added later is
covered or this test fails naming it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import popxl
from popxl import ops

A = np.arange(6, dtype=np.float32).reshape(2, 3) / 7 + 0.25
B = np.full((2, 3), 0.5, np.float32)

# name -> (build: (a, b) -> result, NumPy value of the result, or None when it is not an
# update of `a` in place: a view of another shape / a tensor of its own)
Build = Callable[[popxl.Tensor, popxl.Tensor], popxl.Tensor]


def _step() -> popxl.Tensor:
    return popxl.variable(np.float32(2.0), name="step")


CASES: dict[str, tuple[Build, np.ndarray | None]] = {
    "exp_": (lambda a, b: ops.exp_(a), np.exp(A)),
    "relu_": (lambda a, b: ops.relu_(a - 0.5), None),
    "gelu_": (lambda a, b: ops.gelu_(a), None),
    "geluerf_": (lambda a, b: ops.geluerf_(a), None),
    "swish_": (lambda a, b: ops.swish_(a), A / (1 + np.exp(-A))),
    "add_": (lambda a, b: ops.add_(a, b), A + B),
    "reshape_": (lambda a, b: ops.reshape_(a, (3, 2)), None),
    "flatten_": (lambda a, b: ops.flatten_(a), None),
    "transpose_": (lambda a, b: ops.transpose_(a), None),
    "concat_": (lambda a, b: ops.concat_([a, b], 0), None),
    "slice_": (lambda a, b: ops.slice_(a, 0, 1, axis=0), None),
    "dynamic_update_": (
        lambda a, b: ops.dynamic_update_(a, popxl.constant(np.array([1], np.uint32)), b[:1], [0], [1]),
        np.concatenate([A[:1], B[:1]]),
    ),
    "detach_": (lambda a, b: ops.detach_(a), None),
    "increment_mod_": (lambda a, b: ops.increment_mod_(a, 1.0, 2.0), np.fmod(A + 1, 2)),
    "scaled_add_": (lambda a, b: ops.scaled_add_(a, b, 0.5, 2.0), 0.5 * A + 2 * B),
    "remote_load_": (
        lambda a, b: ops.remote_load_(popxl.remote_buffer((2, 3), popxl.float32, 1), 0, a),
        None,  # the entry was never stored: its value is not defined
    ),
    "accumulate_": (lambda a, b: ops.var_updates.accumulate_(a, b, f=0.5), A + 0.5 * B),
    "accumulate_mean_": (lambda a, b: ops.var_updates.accumulate_mean_(a, b, 2), A * 2 / 3 + B / 3),
    "accumulate_moving_average_": (
        lambda a, b: ops.var_updates.accumulate_moving_average_(a, b, f=0.9),
        0.9 * A + 0.1 * B,
    ),
    "accumulate_moving_average_square_": (
        lambda a, b: ops.var_updates.accumulate_moving_average_square_(a, b, f=0.9),
        0.9 * A + 0.1 * B * B,
    ),
    "accumulate_square_": (lambda a, b: ops.var_updates.accumulate_square_(a, b, f=2.0), A + 2 * B * B),
    "accumulator_scale_": (lambda a, b: ops.var_updates.accumulator_scale_(a, 0.5), 0.5 * A),
    "accumulator_zero_": (lambda a, b: ops.var_updates.accumulator_zero_(a), np.zeros_like(A)),
    "copy_var_update_": (lambda a, b: ops.var_updates.copy_var_update_(a, b), B),
    "sparse_accumulate_": (
        lambda a, b: ops.var_updates.sparse_accumulate_(a, b[:1], popxl.constant(np.array([1], np.uint32))),
        np.concatenate([A[:1], A[1:] + B[:1]]),
    ),
    "adam_var_update": (
        lambda a, b: ops.var_updates.adam_var_update(a, b, popxl.constant(1.0), popxl.constant(1.0), learning_rate=0.5),
        A - 0.5 * B,
    ),
    "replicated_all_reduce_": (lambda a, b: ops.collectives.replicated_all_reduce_(a), A),
}
# Updaters compute a new tensor (their time step is updated on the side): not in-place ops.
NOT_IN_PLACE = {"adam_updater", "lamb_updater", "adamax_updater"}


def test_every_in_place_function_has_a_case() -> None:
    public = {n for n in ops.__all__ if n.endswith("_")}
    public |= set(ops.var_updates.__all__) - NOT_IN_PLACE
    public |= {n for n in ops.collectives.__all__ if n.endswith("_")}
    assert sorted(public - set(CASES)) == []
    assert sorted(set(CASES) - public) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_in_place_op_returns_a_new_tensor(name: str) -> None:
    build, expected = CASES[name]
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence():
        a = popxl.variable(A, name="a")
        b = popxl.variable(B, name="b")
        r = build(a, b)
        assert isinstance(r, popxl.Tensor) and r is not a and r is not b
        assert not isinstance(r, popxl.Variable)  # PopART's op output, not the variable
        assert r.id not in (a.id, b.id)
        d2h = popxl.d2h_stream(r.shape, r.dtype, name="out")
        ops.host_store(d2h, r)
    tensors = g.tensors
    assert r in tensors and tensors.index(a) < tensors.index(r)
    assert g.get_tensor(r.id) is r
    assert len({t.id for t in tensors}) == len(tensors)
    assert a in g.variables and b in g.variables and r not in g.variables
    if expected is None:
        return
    assert r.shape == a.shape and r.dtype == a.dtype
    with popxl.Session(ir, "ipu_model") as s:
        out = s.run()[d2h]
        np.testing.assert_allclose(out, expected, rtol=1e-6)
        np.testing.assert_allclose(s.get_tensor_data(a), expected, rtol=1e-6)


def test_iadd_keeps_the_variable_and_counts_the_new_tensor() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(A, name="a")
        b = popxl.variable(B, name="b")
        before = a
        a += b
        assert a is before and isinstance(a, popxl.Variable)
        c = ops.add_(a, b)
    # a, b, the output of `a += b`, c
    assert len(g.tensors) == 4 and len(g.variables) == 2
    assert c in g.tensors
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        np.testing.assert_allclose(s.get_tensor_data(a), A + 2 * B, rtol=1e-6)


def test_later_ops_read_the_update_through_the_returned_tensor() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        a = popxl.variable(A, name="a")
        c = ops.var_updates.accumulate_(a, popxl.constant(B), f=2.0)
        d = c * 3.0
        d2h = popxl.d2h_stream(d.shape, d.dtype, name="d")
        ops.host_store(d2h, d)
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_allclose(s.run()[d2h], 3 * (A + 2 * B), rtol=1e-6)


def test_subgraph_in_place_op_returns_a_tensor_of_the_subgraph() -> None:
    ir = popxl.Ir()

    def fn(x: popxl.Tensor) -> popxl.Tensor:
        y = ops.add_(x, 1.0)
        assert y.graph is popxl.gcg() and y is not x
        return y

    with ir.main_graph:
        sg = ir.create_graph(fn, popxl.TensorSpec((2, 3), popxl.float32))
    assert len(sg.outputs) == 1
    # the input, the constant 1.0 and the add's output
    assert len(sg.tensors) == 3 and len(sg.constants) == 1


def test_adam_var_update_without_learning_rate_keeps_the_weight() -> None:
    """PopXL's default learning rate is PopART's default optimizer value, 0."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence():
        a = popxl.variable(A, name="a")
        b = popxl.variable(B, name="b")
        r = ops.var_updates.adam_var_update(a, b, popxl.constant(1.0), popxl.constant(4.0), None, 10.0)
    assert len(g.tensors) == 5 and r in g.tensors  # a, b, the two constants, the update's output
    with popxl.Session(ir, "ipu_model") as s:
        s.run()
        np.testing.assert_array_equal(s.get_tensor_data(a), A)
