"""An op on operands of a dtype it cannot compute is built, as in PopXL, and the program is
refused when a `Session` compiles it, with the op's message (`emit` builds ops inside
`xl.dialects.popxl.deferred_dtype_checks`). Operands whose dtypes disagree are still
refused when the op is created (a TypeError, as upstream).

Also PopART's view of such graphs (`popart._internal.ir`): variables are tensors, not ops,
and the updaters / variable updates report `isOptimizerOp()`.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
import xl.dialects.popxl as dialect
from xl.dialects.popxl import deferred_dtype_checks

# every elementwise unary op of the dialect that computes on floats only, with its popxl.ops function
FLOAT_UNARY = sorted(
    (
        c
        for c in vars(dialect).values()
        if inspect.isclass(c) and issubclass(c, dialect.UnaryOp) and c is not dialect.UnaryOp and c.DTYPE_KINDS == "f"
    ),
    key=lambda c: c.name,
)


def test_the_registry_is_covered() -> None:
    assert len(FLOAT_UNARY) >= 10
    for cls in FLOAT_UNARY:  # each one is a public op (its popxl.ops function has the op's short name)
        assert callable(getattr(ops, cls.name.split(".", 1)[1])), cls.name


def _refused(ir: popxl.Ir, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        popxl.Session(ir, "ipu_model")


@pytest.mark.parametrize("cls", FLOAT_UNARY, ids=lambda c: c.name)
def test_float_unary_ops_on_ints_are_built_then_refused(cls: type[dialect.UnaryOp]) -> None:
    fn = getattr(ops, cls.name.split(".", 1)[1])
    ir = popxl.Ir()
    with ir.main_graph:
        f = fn(popxl.variable(np.ones(3, np.float32)))  # the op's types on floats, for comparison
        x = popxl.variable(np.arange(3, dtype=np.int32))
        y = fn(x)
        assert (y.shape, y.dtype) == (f.shape, popxl.int32)  # the type the op would have: its input's
        z = y + 1  # later ops build on it
        ops.host_store(popxl.d2h_stream(z.shape, z.dtype, "z"), z)
    _refused(ir, f"{cls.name}: input must be a floating point tensor, got (3,) int32")


def test_optimizer_loss_and_random_ops_on_wrong_dtypes() -> None:
    """The upstream programs this follows: updaters of int variables, float labels, dropout
    and swish of ints. Each builds; each program is refused with its op's message."""
    cases = []
    for build, message in (
        (lambda: ops.var_updates.adam_updater(popxl.variable(1), popxl.variable(2)), "popxl.adam_updater: m must be"),
        (
            lambda: ops.var_updates.lamb_updater(popxl.variable(1), popxl.variable(2)),
            "popxl.lamb_updater: m must be",
        ),
        (
            lambda: ops.nll_loss_with_softmax_grad(
                popxl.variable(np.ones((2, 3), np.float32)), popxl.variable(np.ones(2, np.float32))
            )[0],
            "popxl.nll_loss_with_softmax_grad: labels must be an integer tensor",
        ),
        (
            lambda: ops.dropout(popxl.variable(np.arange(3)), popxl.variable(np.zeros(2, np.uint32)), 0.5),
            "popxl.dropout: input must be a floating point tensor",
        ),
        (lambda: ops.swish(popxl.variable(3)), "popxl.swish: input must be a floating point tensor"),
        (
            lambda: popxl.variable(np.ones((2, 3), np.float32)) @ popxl.variable(np.ones((3, 4), np.float16)),
            "popxl.matmul: operand dtypes differ: (2, 3) float32, (3, 4) float16",
        ),
    ):
        ir = popxl.Ir()
        with ir.main_graph:
            out = build()
        cases.append((ir, out, message))
    shapes = [(out.shape, out.dtype) for _, out, _ in cases]
    assert shapes == [
        ((), popxl.int32),
        ((), popxl.int32),
        ((), popxl.float32),
        ((3,), popxl.int32),
        ((), popxl.int32),
        ((2, 4), popxl.float32),  # matmul: lhs's dtype, as PopXL
    ]
    for ir, _, message in cases:
        _refused(ir, message)


def test_dtype_mismatch_and_other_checks_stay_at_creation() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(3, np.float32))
        i = popxl.variable(np.ones(3, np.int32))
        with pytest.raises(TypeError, match="popxl.add: operand dtypes differ"):
            _ = a + i
        with pytest.raises(ValueError, match="cannot reshape"):
            a.reshape((4,))
        with pytest.raises(ValueError, match=r"popxl\.matmul"):
            _ = a.reshape((1, 3)) @ a.reshape((1, 3))


def test_the_dialect_context_collects_and_verify_still_refuses() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(3, dtype=np.int32))
    with deferred_dtype_checks() as errors:
        op = dialect.GeluOp.make([x._value])
    assert [str(e) for e in errors] == ["popxl.gelu: input must be a floating point tensor, got (3,) int32"]
    with pytest.raises(VerifyException, match="popxl.gelu: input must be a floating point tensor"):
        dialect.GeluOp.make([x._value])  # outside the context: refused at once
    with pytest.raises(VerifyException, match="popxl.gelu: input must be a floating point tensor"):
        op.verify()


def test_popart_view_variables_are_tensors_and_optimizer_ops() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        m = popxl.variable(np.ones(2, np.float32), name="m")
        v = popxl.variable(np.ones(2, np.float32), name="v")
        w = popxl.variable(np.ones(2, np.float32), name="w")
        t = popxl.variable(np.float32(1), name="t")
        u1 = ops.var_updates.adam_updater(m, v)
        u2 = ops.var_updates.lamb_updater(m, v, time_step=t, beta1=0.9, beta2=0.99)
        u3 = ops.var_updates.adamax_updater(m, v, time_step=t, epsilon=1e-6)
        ops.var_updates.accumulate_(m, u1 + u2 + u3)
        ops.var_updates.copy_var_update_(w, v)
    got = g._pb_graph.getOps()
    assert [o.opType() for o in got] == [
        "AdamUpdater",
        "AdamUpdater",
        "AdamUpdater",
        "Add",
        "Add",
        "Accumulate",
        "CopyVarUpdate",
    ]
    assert [o.isOptimizerOp() for o in got] == [True, True, True, False, False, True, True]
    assert all(isinstance(o, _ir.op.AdamUpdaterOp) for o in got[:3])
