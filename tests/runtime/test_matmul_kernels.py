"""`popxl.matmul` in both plans against float64 NumPy, for the layouts and dtypes the plan
treats differently (`xl.runtime.plan_matmul`): attention-shaped stacks of strided views, a
stack times one matrix (one GEMM), operands and outputs NumPy would not give BLAS (copied
to scratch), the few-rows transposed product, broadcast batch axes, float16 through float32.

Error bounds are the standard ones for a dot product of length K summed in precision u
(`gamma_K = K u / (1 - K u)` times `|a| @ |b|`); float16 adds half a float16 ulp of the
result for the final rounding (its products are exact in float32 and summed in float32).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.ir import Attribute, Block, Region, SSAValue

from xl.dialects import rt
from xl.dialects.popxl import MatmulOp
from xl.dialects.utils import memref_type
from xl.runtime.codegen import Gen
from xl.runtime.executable import _Compiler
from xl.runtime.plan import PlanBuilder
from xl.runtime.plan_matmul import blas_operand, blas_output, matmul_lines, one_gemm
from xl.runtime.streams import StreamIn, StreamOut

UNIT = {np.float16: 2.0**-24, np.float32: 2.0**-24, np.float64: 2.0**-53}  # float16 sums in float32


def run_kernel(
    name: str, ins: list[np.ndarray], outs: list[np.ndarray], optimize: bool, attrs: dict[str, Attribute] | None = None
) -> Callable[[], None]:
    """One `rt.kernel` `name` (with `attrs`) bound to these arrays (views allowed), built in
    the optimised or the straightforward plan and run once; returns what runs it again."""
    block = Block()
    vals: list[SSAValue] = []
    for x in (*ins, *outs):
        alloc = rt.AllocOp(memref_type(x.shape, x.dtype))
        block.add_op(alloc)
        vals.append(alloc.result)
    block.add_op(rt.KernelOp(name, vals[: len(ins)], vals[len(ins) :], dict(attrs or {})))
    rt.ProgramOp(Region(block), rt.ProgramOp.program_attributes(1, 1))
    preset = dict(zip(vals, (*ins, *outs)))

    def bind(self, v: SSAValue, arr: np.ndarray, hint: str, base: type) -> None:
        base.bind(self, v, preset.get(v, arr), hint)

    if optimize:
        builder = type("B", (PlanBuilder,), {"bind": lambda s, v, x, h: bind(s, v, x, h, PlanBuilder)})(
            StreamIn, StreamOut
        )
        for op in block.ops:
            builder.visit(op, 0)
        step, _ = builder.finish()
    else:
        c = type("C", (_Compiler,), {"bind": lambda s, v, x, h: bind(s, v, x, h, _Compiler)})()
        closures = list(c.compile_block(block))

        def step() -> None:
            for k in closures:
                k()

    step()
    return step


def run_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, optimize: bool) -> None:
    run_kernel(MatmulOp.name, [a, b], [out], optimize)


def check(a: np.ndarray, b: np.ndarray, out: np.ndarray, optimize: bool) -> None:
    out[...] = np.nan
    run_matmul(a, b, out, optimize)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    k = a.shape[-1]
    u = UNIT[a.dtype.type]
    gamma = k * u / (1 - k * u)
    tol = gamma * (np.abs(a64) @ np.abs(b64))
    if out.dtype == np.float16:
        mag = np.abs(want) + tol
        ulp = np.maximum(2.0 ** (np.floor(np.log2(np.maximum(mag, 2.0**-14))) - 10), 2.0**-24)
        tol = tol + 0.5 * ulp
    err = np.abs(out.astype(np.float64) - want)
    assert np.all(np.isfinite(out)), "output not fully written"
    assert np.all(err <= tol * (1 + 1e-9) + 1e-300), (float((err - tol).max()), out.dtype, optimize)


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _heads(x: np.ndarray, b: int, t: int, h: int, d: int) -> np.ndarray:
    """(B*T, H*D) rows as a (B, H, T, D) view, as attention splits heads."""
    return x.reshape(b, t, h, d).transpose(0, 2, 1, 3)


DTYPES = [np.float32, np.float64, np.float16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_attention_stacks_of_views(dtype: type, optimize: bool) -> None:
    rng = np.random.default_rng(0)
    bsz, t, h, d = 3, 10, 4, 6
    q = _heads(_data(rng, (bsz * t, h * d), dtype), bsz, t, h, d)
    kt = _heads(_data(rng, (bsz * t, h * d), dtype), bsz, t, h, d).transpose(0, 1, 3, 2)
    check(q, kt, np.empty((bsz, h, t, t), dtype), optimize)  # Q @ K^T
    p = _data(rng, (bsz, h, t, t), dtype)
    v = _heads(_data(rng, (bsz * t, h * d), dtype), bsz, t, h, d)
    check(p, v, np.empty((bsz, h, t, d), dtype), optimize)  # P @ V
    check(p.transpose(0, 1, 3, 2), q, np.empty((bsz, h, t, d), dtype), optimize)  # P^T @ dY


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_stack_times_one_matrix(dtype: type, optimize: bool) -> None:
    rng = np.random.default_rng(1)
    a = _data(rng, (4, 7, 5), dtype)
    w = _data(rng, (5, 9), dtype)
    check(a, w, np.empty((4, 7, 9), dtype), optimize)
    check(a, w.T.copy().T, np.empty((4, 7, 9), dtype), optimize)  # a column-major matrix
    check(a, w.reshape(1, 5, 9), np.empty((4, 7, 9), dtype), optimize)  # batch axes of 1
    check(a, w.reshape(1, 1, 5, 9), np.empty((1, 4, 7, 9), dtype), optimize)
    # a stack that cannot be viewed as one matrix: BLAS per matrix
    check(_data(rng, (7, 4, 5), dtype).transpose(1, 0, 2), w, np.empty((4, 7, 9), dtype), optimize)
    # broadcast batch axes on either side
    check(_data(rng, (1, 7, 5), dtype), _data(rng, (3, 5, 9), dtype), np.empty((3, 7, 9), dtype), optimize)
    check(np.broadcast_to(_data(rng, (7, 5), dtype), (3, 7, 5)), w, np.empty((3, 7, 9), dtype), optimize)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_operands_and_outputs_blas_cannot_take(dtype: type, optimize: bool) -> None:
    rng = np.random.default_rng(2)
    a = _data(rng, (6, 2 * 5), dtype)[:, ::2]  # no unit stride
    b = _data(rng, (2 * 5, 3 * 4), dtype)[::2, ::3]
    assert not blas_operand(a) and not blas_operand(b)
    out = np.empty((6, 2 * 4), dtype)[:, ::2]
    assert not blas_output(out)
    check(a, b, out, optimize)
    check(a, b, np.empty((4, 6), dtype).T, optimize)  # column-major output
    sa = _data(rng, (2, 6, 2 * 5), dtype)[..., ::2]
    check(sa, b, np.empty((2, 6, 4), dtype), optimize)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_two_dimensional(dtype: type, optimize: bool) -> None:
    rng = np.random.default_rng(3)
    check(_data(rng, (9, 13), dtype), _data(rng, (13, 5), dtype), np.empty((9, 5), dtype), optimize)
    # few rows times a transposed weight (`dy @ W.T`): the plan computes W @ dy.T
    w = _data(rng, (160, 130), dtype)
    check(_data(rng, (8, 130), dtype), w.T, np.empty((8, 160), dtype), optimize)
    # vectors (1-D operands are NumPy's own matmul)
    check(_data(rng, (13,), dtype), _data(rng, (13, 5), dtype), np.empty((5,), dtype), optimize)


def test_float16_never_reaches_numpys_half_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy's float16 matmul is an element loop (~100x slower than BLAS): neither plan may
    call np.matmul on float16 arrays."""
    rng = np.random.default_rng(4)
    seen: list[np.dtype] = []
    real = np.matmul

    def spy(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        seen.extend(np.asarray(x).dtype for x in args[:2])
        return real(*args, **kw)

    monkeypatch.setattr(np, "matmul", spy)
    for optimize in (False, True):
        a, b = _data(rng, (2, 8, 16), np.float16), _data(rng, (16, 4), np.float16)
        check(a, b, np.empty((2, 8, 4), np.float16), optimize)
    assert seen and np.dtype(np.float16) not in seen, seen


def test_plan_uses_one_gemm_and_scratch_copies() -> None:
    """What the optimised plan generates: a stack times a matrix is one 2-D matmul; an
    operand without unit stride is copied first."""
    g = Gen()
    a, w, out = np.zeros((4, 7, 5), np.float32), np.zeros((5, 9), np.float32), np.zeros((4, 7, 9), np.float32)
    folded = one_gemm(a, w, out)
    assert folded is not None and [x.shape for x in folded] == [(28, 5), (5, 9), (28, 9)]
    assert all(np.shares_memory(x, y) for x, y in zip(folded, (a, w, out)))
    lines = matmul_lines(g, a, w, out, "A", "W", "O")
    assert lines is not None and len(lines) == 1
    args = lines[0].split("(", 1)[1].rstrip(")").split(", ")
    assert [g.ns[n].shape for n in args] == [(28, 5), (5, 9), (28, 9)]
    # not foldable: a transposed stack
    assert one_gemm(a.transpose(1, 0, 2), w, np.zeros((7, 4, 9), np.float32)) is None
    lines = matmul_lines(g, np.zeros((6, 10), np.float32)[:, ::2], w, np.zeros((6, 9), np.float32), "A", "W", "O")
    assert lines is not None and len(lines) == 2 and "copyto" in lines[0]
