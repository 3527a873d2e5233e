"""The matmul of the generated plan: every float matmul on BLAS, one GEMM where the maths allows.

NumPy's `matmul` calls BLAS once per matrix of a stack (the loop is in C), but only when
every operand's last two axes are "BLAS-able" (one of them unit-stride, the other's stride
a multiple of the item size and at least that axis's length) and the output's rows are;
otherwise it runs its element loop for the whole stack, about 100x slower. float16 has no
BLAS path at all. The plan's matmul therefore:

- multiplies a stack of matrices by one matrix (`[B, T, K] @ [K, N]`, batch axes of the
  right operand all 1) as one `[B*T, K] @ [K, N]` GEMM when both the stack and the output
  can be viewed so (measured 1.5x faster at `[16, 64, 64] @ [64, 256]`: BLAS blocks one
  large problem better than 16 small ones);
- copies an operand NumPy would not give BLAS into a contiguous scratch first, and lets
  BLAS write a scratch when the output's rows are not BLAS-able;
- sums the leading axes of a reduction to shape (a bias gradient, `[B*T, C] -> [C]`) as
  one gemv `ones @ x` when that is faster than `np.add.reduce` (`row_sum_lines`);
- computes a float16 matmul in float32: both operands widened exactly (`xl.runtime.float16`),
  one float32 GEMM, the result rounded once to float16 (see `xl.runtime.kernels.core`'s
  matmul kernel for what this means numerically; the straightforward kernel does the same).

```python
lines = matmul_lines(g, a, b, out, "b0", "b1", "b2")  # None: the kernel is used
```
"""

from __future__ import annotations

import numpy as np

from xl.runtime.codegen import Gen, as_view
from xl.runtime.float16 import widen

_BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _blas_rows(stride_major: int, stride_unit: int, inner: int, itemsize: int) -> bool:
    return stride_unit == itemsize and stride_major % itemsize == 0 and stride_major // itemsize >= inner


def blas_operand(x: np.ndarray) -> bool:
    """NumPy's matmul gives the matrices of `x` (its last two axes) to BLAS: row-major or
    column-major with a leading dimension at least the row (column) length."""
    m, n = x.shape[-2:]
    sm, sn = x.strides[-2:]
    return _blas_rows(sm, sn, n, x.itemsize) or _blas_rows(sn, sm, m, x.itemsize)


def blas_output(x: np.ndarray) -> bool:
    """NumPy's matmul lets BLAS write the matrices of `x`: row-major rows only."""
    n = x.shape[-1]
    sm, sn = x.strides[-2:]
    return _blas_rows(sm, sn, n, x.itemsize)


def one_gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """`(a2, b2, out2)`: 2-D views computing the stacked product `a @ b` as one GEMM, when `a`
    is a stack (more than 2 axes), `b` one matrix (its batch axes all 1) and the stack's and
    the output's rows can be viewed as one matrix each; else None."""
    if a.ndim <= 2 or any(d != 1 for d in b.shape[:-2]):
        return None
    a2 = as_view(a, (-1, a.shape[-1]))
    b2 = as_view(b, b.shape[-2:])
    o2 = as_view(out, (-1, out.shape[-1]))
    if a2 is None or b2 is None or o2 is None or a2.shape[0] != o2.shape[0]:
        return None
    return a2, b2, o2


def matmul_lines(g: Gen, a: np.ndarray, b: np.ndarray, out: np.ndarray, an: str, bn: str, on: str) -> list[str] | None:
    """Lines computing `out[...] = a @ b` (bound arrays `a`, `b`, `out` named `an`, `bn`,
    `on`), or None when the kernel should run (1-D operands, empty matrices, other dtypes)."""
    dt = out.dtype
    if not (a.dtype == b.dtype == dt and (dt in _BLAS_DTYPES or dt == np.float16)):
        return None
    if a.ndim < 2 or b.ndim < 2 or 0 in a.shape or 0 in b.shape or out.size == 0:
        return None
    mm, copyto = g.fn(np.matmul), g.fn(np.copyto)
    folded = one_gemm(a, b, out)
    if folded is not None:
        a, b, out = folded
        an, bn, on = g.view(a), g.view(b), g.view(out)
    lines: list[str] = []
    if dt == np.float16:
        _, wa = g.scratch(a.shape, np.float32)
        _, wb = g.scratch(b.shape, np.float32)
        _, wo = g.scratch(out.shape, np.float32)
        return [
            widen(g, a, wa),
            widen(g, b, wb),
            f"{mm}({wa}, {wb}, {wo})",
            f"{copyto}({on}, {wo}, 'unsafe')",
        ]
    if not blas_operand(a):
        _, s = g.scratch(a.shape, dt)
        lines.append(f"{copyto}({s}, {an})")
        an = s
    if not blas_operand(b):
        _, s = g.scratch(b.shape, dt)
        lines.append(f"{copyto}({s}, {bn})")
        bn = s
    if not blas_output(out):
        _, s = g.scratch(out.shape, dt)
        return [*lines, f"{mm}({an}, {bn}, {s})", f"{copyto}({on}, {s})"]
    if (
        a.ndim == 2
        and b.ndim == 2
        and a.flags.c_contiguous
        and b.flags.f_contiguous
        and not b.flags.c_contiguous
        and a.shape[0] <= 64
        and min(b.shape) >= 128
    ):
        # A @ B with B a transposed view and few rows in A (a backward matmul through a
        # weight, `dy @ W.T`): OpenBLAS is about 2x faster on the transposed problem
        # W @ dy.T with an M x K output; the transposing copy of the small result is cheap.
        ta, t = g.scratch((out.shape[1], out.shape[0]), dt)
        return [f"{mm}({g.view(b.T)}, {g.view(a.T)}, {t})", f"{copyto}({on}, {g.view(ta.T)})"]
    return [*lines, f"{mm}({an}, {bn}, {on})"]


# Below this many columns, a sum over rows is faster as `ones @ x` (BLAS gemv) than as
# `np.add.reduce(x, 0)`, which adds row by row and pays ~35 ns per row: measured 3 us
# against 39 us for [1024, 64] (a bias gradient), 7 against 13 us for [256, 768], equal
# at [2048, 1024], and 65 against 58 us for [256, 3072].
GEMV_MAX_COLUMNS = 1024


def row_sum_lines(g: Gen, x: np.ndarray, out: np.ndarray, rows: int) -> list[str] | None:
    """Lines writing the sum over the first `rows`-many-elements axes of `x` into `out`
    (e.g. a bias gradient: `[B, T, C] -> [C]`) as one gemv `ones @ x2d`, or None when the
    reduction is better left to `np.add.reduce` (float16, few rows, many columns, or no
    2-D view). Each column is summed in the dtype, by BLAS, in its order."""
    if not (x.dtype == out.dtype and x.dtype in _BLAS_DTYPES) or rows < 2 or out.size > GEMV_MAX_COLUMNS:
        return None
    if rows * out.size != x.size or out.size == 0:
        return None
    x2 = as_view(x, (rows, out.size))
    o1 = as_view(out, (out.size,))
    if x2 is None or o1 is None or not blas_operand(x2) or not o1.flags.c_contiguous:
        return None
    ones = np.ones(rows, x.dtype)
    ones.flags.writeable = False
    return [f"{g.fn(np.matmul)}({g.view(ones)}, {g.view(x2)}, {g.view(o1)})"]
