"""Dense x constant-sparse matmul (popxl_addons.ops.static_sparse_ops): inference with a
fixed sparsity pattern, the sparse right-hand side given as a CSR matrix.

Upstream plans a `popsparse` static matmul for the pattern; here the CSR matrix becomes a
dense constant (in the dtype of the left-hand side) and the product is `ops.matmul`, so
the gradient in the left-hand side is there too. Only the CSR arrays are read (`data`,
`indices`, `indptr`, as `scipy.sparse.csr_matrix` has them): SciPy is not needed.

```python
y = dense_const_sparse_matmul(x, csr_matrix(w_sparse), output_cols=w_sparse.shape[1])
```
"""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
import popxl.ops as ops

__all__ = ["dense_const_sparse_matmul", "random_sparse"]


def random_sparse(dense: np.ndarray, density: float = 0.5) -> np.ndarray:
    """Zero each element of `dense` (in place, and returned) with probability `1 - density`,
    keeping at least one; drawn from NumPy's global random state (`np.random.seed`), one
    Bernoulli draw per element as upstream's `scipy.stats.bernoulli`."""
    if not 0.0 <= density <= 1.0:
        raise ValueError(f"random_sparse: density must be in [0, 1], got {density!r}")
    drop = np.random.binomial(1, 1.0 - density, size=dense.shape).astype(np.bool_)
    if drop.all():
        drop.reshape(-1)[0] = False
    dense[drop] = 0
    return dense


def csr_to_dense(rhs: Any, output_cols: int, what: str) -> np.ndarray:
    """The float32 `(rows, output_cols)` matrix of a CSR matrix (`data`, `indices`, `indptr`)."""
    try:
        data = np.asarray(rhs.data, dtype=np.float32).reshape(-1)
        cols = np.asarray(rhs.indices, dtype=np.int64).reshape(-1)
        indptr = np.asarray(rhs.indptr, dtype=np.int64).reshape(-1)
    except AttributeError:
        raise TypeError(
            f"{what}: rhs must be a CSR matrix (data, indices, indptr), e.g. scipy.sparse.csr_matrix; "
            f"got {type(rhs).__name__}"
        ) from None
    rows = indptr.size - 1
    if rows < 0 or indptr[0] != 0 or (np.diff(indptr) < 0).any() or indptr[-1] != data.size or cols.size != data.size:
        raise ValueError(f"{what}: rhs is not a valid CSR matrix (indptr {indptr.tolist()[:8]}..., {data.size} values)")
    if cols.size and (cols.min() < 0 or cols.max() >= output_cols):
        raise ValueError(f"{what}: rhs has a column index {int(cols.max())} outside output_cols={output_cols}")
    dense = np.zeros((rows, output_cols), np.float32)
    np.add.at(dense, (np.repeat(np.arange(rows), np.diff(indptr)), cols), data)
    return dense


def dense_const_sparse_matmul(lhs: popxl.Tensor, rhs: Any, output_cols: int) -> popxl.Tensor:
    """`lhs @ rhs` for a dense `lhs` `(m, k)` (or `(1, m, k)`) and a constant sparse `rhs`
    `(k, output_cols)` given as a CSR matrix; float16 or float32, the result of the dtype
    of `lhs`, `(m, output_cols)` (or `(1, m, output_cols)`)."""
    what = "addons.ops.dense_const_sparse_matmul"
    if not isinstance(lhs, popxl.Tensor):
        raise TypeError(f"{what}: lhs must be a popxl Tensor, got {type(lhs).__name__}")
    if lhs.dtype not in (popxl.float16, popxl.float32):
        raise RuntimeError(f"{what}: dtype {lhs.dtype} not currently supported (float16 or float32)")
    if lhs.rank not in (2, 3) or (lhs.rank == 3 and lhs.shape[0] != 1):
        raise ValueError(f"{what}: lhs must be (m, k) or (1, m, k) (one group), got {lhs.shape}")
    if not isinstance(output_cols, int) or isinstance(output_cols, bool) or output_cols < 1:
        raise ValueError(f"{what}: output_cols must be a positive int, got {output_cols!r}")
    dense = csr_to_dense(rhs, output_cols, what)
    if dense.shape[0] != lhs.shape[-1]:
        raise ValueError(f"{what}: rhs has {dense.shape[0]} rows, lhs {lhs.shape} has {lhs.shape[-1]} columns")
    return ops.matmul(lhs, popxl.constant(dense.astype(lhs.dtype.as_numpy()), lhs.dtype, name="sparse_rhs"))
