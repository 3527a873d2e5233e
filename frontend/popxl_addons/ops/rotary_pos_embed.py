"""Rotary positional embeddings (RoPE, RoFormer: https://arxiv.org/abs/2104.09864):
`popxl_addons.ops.rotary_pos_embed`, with the sin / cos tables it takes.

The first `rotary_dim` hidden values of each head are read as `rotary_dim / 2` complex
numbers `(x[2i], x[2i+1])`; the one at sequence position `m` is rotated by the angle
`m * theta_i`, `theta_i = base ** (-2i / rotary_dim)`; the other values pass unchanged.

```python
sin, cos = trig_table_constants(seq_len, rotary_dim)
q = rotary_pos_embed(q, sin, cos, rotary_dim)        # q: (batch, seq, heads, head_dim)
```

Built from popxl ops (slices, products, a concat), so its gradient is the inverse
rotation of the incoming gradient, as upstream's gradient op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
import popxl.ops as ops

__all__ = ["rotary_pos_embed", "trig_table_constants", "trig_tables"]


def trig_tables(
    seq_len: int, rotary_dim: int, base: int = 10000, np_dtype: Any = "float32"
) -> tuple[np.ndarray, np.ndarray]:
    """`(sin, cos)` of the angles `m * theta_i` as `(seq_len, rotary_dim // 2)` arrays of
    `np_dtype`: `m` the position, `theta_i = base ** (-2i / rotary_dim)`."""
    theta = base ** (-np.arange(0, rotary_dim, 2).astype(np_dtype) / rotary_dim)
    angles = np.outer(np.arange(seq_len).astype(np_dtype), theta)
    return np.sin(angles), np.cos(angles)


def trig_table_constants(
    seq_len: int, rotary_dim: int, base: int = 10000, dtype: popxl.dtype = popxl.float32
) -> tuple[popxl.Tensor, popxl.Tensor]:
    """`trig_tables` as popxl constants of `dtype`."""
    sin, cos = trig_tables(seq_len, rotary_dim, base, dtype.as_numpy())
    return popxl.constant(sin, dtype), popxl.constant(cos, dtype)


def rotary_pos_embed(
    t: popxl.Tensor, sin: popxl.Tensor, cos: popxl.Tensor, rotary_dim: int | None = None
) -> popxl.Tensor:
    """`t` with RoPE applied to its first `rotary_dim` hidden values per head.

    Args:
        t: `(batch, seq, heads, head_dim)`.
        sin, cos: `(seq, rotary_dim // 2)` or `(1 or batch, seq, rotary_dim // 2)` tables
            (`trig_tables`), of the dtype of `t`.
        rotary_dim: how many hidden values to rotate, even (default: all of `head_dim`).

    Returns:
        The rotated tensor, the shape and dtype of `t`.
    """
    what = "addons.ops.rotary_pos_embed"
    for arg, x in (("t", t), ("sin", sin), ("cos", cos)):
        if not isinstance(x, popxl.Tensor):
            raise TypeError(f"{what}: {arg} must be a popxl Tensor, got {type(x).__name__}")
    if t.rank != 4:
        raise ValueError(f"{what}: t should have rank 4 (batch, seq, heads, head_dim), got shape {t.shape}")
    batch, seq, heads, hidden = t.shape
    rotary_dim = rotary_dim or hidden
    if not isinstance(rotary_dim, int) or rotary_dim % 2 or not 0 < rotary_dim <= hidden:
        raise ValueError(f"{what}: rotary_dim must be an even number in (0, {hidden}], got {rotary_dim!r}")
    half = rotary_dim // 2
    tables = []
    for arg, x in (("sin", sin), ("cos", cos)):
        if x.rank == 2:
            x = x.reshape((1, *x.shape))
        if x.rank != 3 or x.shape[0] not in (1, batch) or tuple(x.shape[1:]) != (seq, half):
            raise ValueError(
                f"{what}: {arg} must have the shape ({seq}, {half}) or (1 or {batch}, {seq}, {half}), got {x.shape}"
            )
        if x.dtype != t.dtype:
            raise TypeError(f"{what}: {arg} must have the dtype of t ({t.dtype.name}), got {x.dtype.name}")
        tables.append(x.reshape((x.shape[0], seq, 1, half)))
    s, c = tables

    rotated = t if rotary_dim == hidden else ops.slice(t, start=0, stop=rotary_dim, axis=3)
    pairs = rotated.reshape((batch, seq, heads, half, 2))
    real = ops.slice(pairs, start=0, stop=1, axis=4).reshape((batch, seq, heads, half))
    imag = ops.slice(pairs, start=1, stop=2, axis=4).reshape((batch, seq, heads, half))
    out_real = real * c - imag * s
    out_imag = imag * c + real * s
    shape = (batch, seq, heads, half, 1)
    out = ops.concat([out_real.reshape(shape), out_imag.reshape(shape)], axis=4).reshape(
        (batch, seq, heads, rotary_dim)
    )
    if rotary_dim == hidden:
        return out
    return ops.concat([out, ops.slice(t, start=rotary_dim, stop=hidden, axis=3)], axis=3)
