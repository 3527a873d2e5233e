"""A gemm that accumulates into its output: ``C = alpha * op(A) @ op(B) + beta * C``.

NumPy's `matmul` cannot accumulate, so an SGD update folded into the weight-gradient
matmul needs BLAS directly. We call the CBLAS `?gemm` of the OpenBLAS that NumPy itself
is linked against (through ctypes), so the plan shares NumPy's BLAS thread pool; a second
BLAS (e.g. scipy's) would start a competing pool of spinning threads and, on a small
machine, slow every matmul down. Pointers, strides and flags are fixed when the plan is
built (buffers never move), so a call costs about as much as `np.matmul(..., out=)`.

When no CBLAS can be found, `gemm_acc` falls back to `np.matmul` into a scratch buffer
followed by an in-place update (the same maths, one more pass over `C`).
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable

import numpy as np

from xl.runtime.kernels.core import running_mean_factors

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _find_cblas() -> dict[np.dtype, Callable[..., None]]:
    """`{float32: sgemm, float64: dgemm}` from NumPy's bundled OpenBLAS, or `{}`."""
    if os.environ.get("XL_NO_CBLAS"):
        return {}
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    candidates = sorted(glob.glob(os.path.join(libdir, "*openblas*.so*")))
    candidates += sorted(glob.glob(os.path.join(os.path.dirname(np.__file__), ".dylibs", "*openblas*")))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix, int_t in (
            ("scipy_cblas_", "64_", ctypes.c_int64),
            ("cblas_", "64_", ctypes.c_int64),
            ("scipy_cblas_", "", ctypes.c_int),
            ("cblas_", "", ctypes.c_int),
        ):
            fns: dict[np.dtype, Callable[..., None]] = {}
            for letter, dtype, scalar in (
                ("s", np.float32, ctypes.c_float),
                ("d", np.float64, ctypes.c_double),
            ):
                fn = getattr(lib, f"{prefix}{letter}gemm{suffix}", None)
                if fn is None:
                    break
                fn.restype = None
                fn.argtypes = [
                    ctypes.c_int, ctypes.c_int, ctypes.c_int,
                    int_t, int_t, int_t,
                    scalar, ctypes.c_void_p, int_t,
                    ctypes.c_void_p, int_t,
                    scalar, ctypes.c_void_p, int_t,
                ]  # fmt: skip
                fns[np.dtype(dtype)] = fn
            if len(fns) == 2:
                return fns
    return {}


_CBLAS = _find_cblas()


def has_cblas() -> bool:
    return bool(_CBLAS)


def _operand(a: np.ndarray, trans: bool) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a 2-D operand for row-major CBLAS."""
    item = a.itemsize
    s0, s1 = a.strides
    if a.shape[1] == 1 or s1 == item:  # row-major rows
        if s0 % item == 0 and s0 // item >= max(a.shape[1], 1):
            return (_TRANS if trans else _NO_TRANS), max(s0 // item, 1)
    if a.shape[0] == 1 or s0 == item:  # column-major: its transpose is row-major
        if s1 % item == 0 and s1 // item >= max(a.shape[0], 1):
            return (_NO_TRANS if trans else _TRANS), max(s1 // item, 1)
    return None


def gemm_acc(
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    alpha: float,
    beta: float,
    trans_a: bool = False,
    trans_b: bool = False,
) -> Callable[[], None]:
    """A no-argument callable doing ``c[...] = alpha * op(a) @ op(b) + beta * c``.

    `a`, `b`, `c` are 2-D arrays of one float dtype; `c` must be C-contiguous. The
    arrays are bound now: the callable must only be used while they stay alive. Its
    `xl_bound` is `(gemm_acc, arguments)`: how to bind it again to other arrays
    (`xl.runtime.functions`).
    """
    call = _gemm_acc(a, b, c, alpha, beta, trans_a, trans_b)
    call.__dict__["xl_bound"] = (gemm_acc, (a, b, c, alpha, beta, trans_a, trans_b))
    return call


def _gemm_acc(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float, beta: float, trans_a: bool, trans_b: bool
) -> Callable[[], None]:
    opa = a.T if trans_a else a
    opb = b.T if trans_b else b
    m, k = opa.shape
    k2, n = opb.shape
    if (m, n) != c.shape or k != k2:
        raise ValueError(f"gemm_acc: cannot multiply {opa.shape} by {opb.shape} into {c.shape}")
    fn = _CBLAS.get(c.dtype)
    pa, pb = _operand(a, trans_a), _operand(b, trans_b)
    if (
        fn is not None
        and a.dtype == b.dtype == c.dtype
        and c.flags.c_contiguous
        and pa is not None
        and pb is not None
        and min(m, n, k) > 0
    ):
        args = (
            _ROW_MAJOR, pa[0], pb[0], m, n, k,
            alpha, a.ctypes.data, pa[1], b.ctypes.data, pb[1],
            beta, c.ctypes.data, max(n, 1),
        )  # fmt: skip
        keep = (a, b, c)  # the pointers stay valid while these arrays live

        def call() -> None:
            fn(*args)

        call.__dict__["keep"] = keep
        call.__dict__["xl_args"] = args  # `gemm_acc_mean` passes its own alpha
        call.__dict__["fn"] = fn
        return call
    return _numpy_gemm_acc(opa, opb, c, alpha, beta)


def gemm_acc_mean(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, step: np.ndarray, trans_a: bool = False, trans_b: bool = False
) -> Callable[[], None]:
    """A no-argument callable doing ``c[...] = c * (s / (s + 1)) + op(a) @ op(b) * (1 / (s + 1))``,
    `s` the value of the one-element array `step` when called: the running mean of the
    products after `s` steps (`popxl.accumulate_mean_` of a matmul, folded), bit for bit
    as the two kernels compute it. The gemm scales its product (`alpha`) into a scratch
    buffer; `c` is then scaled and added in two passes. One gemm with `beta = s / (s + 1)`
    would save those passes but round differently (a fused multiply-add), and an optimiser
    such as Adam, normalising nearly cancelled gradients, magnifies that into weight
    differences far above `tests/helpers/plan_tolerance.py`'s. `xl_bound` as `gemm_acc`'s.
    """
    if step.size != 1:
        raise ValueError(f"gemm_acc: the step counter must have one element, not shape {step.shape}")
    tmp = np.empty(c.shape, c.dtype)
    inner = _gemm_acc(a, b, tmp, 1.0, 0.0, trans_a, trans_b)
    args = getattr(inner, "xl_args", None)
    item, mul, add, factors = step.item, np.multiply, np.add, running_mean_factors  # the maths, written once
    if args is not None:
        fn = inner.__dict__["fn"]
        head, tail = args[:6], args[7:]

        def call() -> None:
            new, old = factors(float(item()))
            fn(*head, new, *tail)
            mul(c, old, out=c)
            add(c, tmp, out=c)

    else:
        opa, opb, mm = (a.T if trans_a else a), (b.T if trans_b else b), np.matmul

        def call() -> None:
            new, old = factors(float(item()))
            mm(opa, opb, out=tmp)
            mul(tmp, new, out=tmp)
            mul(c, old, out=c)
            add(c, tmp, out=c)

    call.__dict__["keep"] = (a, b, c, step, tmp)
    call.__dict__["xl_bound"] = (gemm_acc_mean, (a, b, c, step, trans_a, trans_b))
    return call


def _numpy_gemm_acc(opa: np.ndarray, opb: np.ndarray, c: np.ndarray, alpha: float, beta: float) -> Callable[[], None]:
    tmp = np.empty(c.shape, c.dtype)
    mm, mul, add = np.matmul, np.multiply, np.add

    if beta == 1.0:

        def call() -> None:
            mm(opa, opb, out=tmp)
            mul(tmp, alpha, out=tmp)
            add(c, tmp, out=c)

    else:

        def call() -> None:
            mm(opa, opb, out=tmp)
            mul(tmp, alpha, out=tmp)
            mul(c, beta, out=c)
            add(c, tmp, out=c)

    return call
