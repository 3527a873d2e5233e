"""4-bit group quantisation (FlexGen, https://arxiv.org/abs/2303.06865):
`popxl_addons.ops.group_quantize_decompress` and its NumPy counterparts.

A float matrix is cut along one axis into groups of `group_size` values; each group is
stored as 4-bit integers `q` in `[0, 16)` with a scale and a bias, `value ~ q * scale +
bias` (bias the group's minimum, scale its range / 15). Four 4-bit integers are packed
into one uint16, the first in the top nibble: `[aaaa|bbbb|cccc|dddd]`.

```python
packed, scale, bias = group_quantize_compress_numpy(w, group_size=64, dim=-1)
w16 = group_quantize_decompress(packed_t, scale_t, bias_t)     # on the device
```

The device op unpacks with integer division and remainder and rescales with popxl ops:
differentiable in the scale and the bias (the packed integers have no gradient).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import popxl
import popxl.ops as ops

__all__ = [
    "group_quantize_compress_numpy",
    "group_quantize_decompress",
    "group_quantize_decompress_numpy",
]

_SHIFTS = (12, 8, 4, 0)  # nibble 0 is the top one


def _move_last(t: Any, dim: int, transpose: Any) -> Any:
    """Move the last axis of `t` to position `dim` (dim == -1: unchanged)."""
    if dim == -1:
        return t
    perm = list(range(len(t.shape)))
    last = perm.pop(-1)
    perm.insert(dim, last)
    return transpose(t, perm)


def group_quantize_decompress(
    t: popxl.Tensor, group_scale: popxl.Tensor, group_bias: popxl.Tensor, dim: int = -1
) -> popxl.Tensor:
    """Unpack and rescale a 4-bit group-quantised matrix.

    Args:
        t: packed uint16 `(rows, groups, ids)`, four 4-bit values per element.
        group_scale: `(rows, groups, 1)` or `(rows, groups)`, float16 or float32.
        group_bias: as `group_scale`.
        dim: where the decompressed axis goes: -1 (last) gives `(rows, groups * ids * 4)`;
            another value moves that axis there (e.g. 0: `(groups * ids * 4, rows)`).

    Returns:
        `q * group_scale + group_bias` of the dtype of `group_scale`.
    """
    what = "addons.ops.group_quantize_decompress"
    for arg, x in (("t", t), ("group_scale", group_scale), ("group_bias", group_bias)):
        if not isinstance(x, popxl.Tensor):
            raise TypeError(f"{what}: {arg} must be a popxl Tensor, got {type(x).__name__}")
    if t.rank != 3:
        raise NotImplementedError(
            f"{what}: 4-bit decompression currently supported only for packed tensors with rank 3, got {t.shape}"
        )
    if t.dtype != popxl.uint16:
        raise TypeError(f"{what}: t must hold packed uint16 values, got {t.dtype.name}")
    rows, groups, ids = t.shape
    params = []
    for arg, x in (("group_scale", group_scale), ("group_bias", group_bias)):
        if tuple(x.shape) not in ((rows, groups, 1), (rows, groups)):
            raise ValueError(
                f"{what}: {arg} must have the shape ({rows}, {groups}, 1) or ({rows}, {groups}), got {x.shape}"
            )
        params.append(x if x.rank == 3 else x.reshape((rows, groups, 1)))
    scale, bias = params
    if scale.dtype != bias.dtype or scale.dtype not in (popxl.float16, popxl.float32):
        raise TypeError(
            f"{what}: group_scale and group_bias must be both float16 or both float32, got "
            f"{scale.dtype.name} and {bias.dtype.name}"
        )
    if not isinstance(dim, int) or isinstance(dim, bool) or not -2 <= dim < 2:
        raise ValueError(f"{what}: dim must be an axis of the 2-D result (-2, -1, 0 or 1), got {dim!r}")

    packed = ops.cast(t, popxl.int32)
    sixteen = popxl.constant(np.int32(16))
    nibbles = [
        ops.fmod(packed if s == 0 else packed / popxl.constant(np.int32(1 << s)), sixteen).reshape(
            (rows, groups, ids, 1)
        )
        for s in _SHIFTS
    ]
    q = ops.concat(nibbles, axis=3).reshape((rows, groups, ids * 4))
    out = (ops.cast(q, scale.dtype) * scale + bias).reshape((rows, groups * ids * 4))
    return _move_last(out, dim, ops.transpose)


def group_quantize_decompress_numpy(
    t: np.ndarray, group_scale: np.ndarray, group_bias: np.ndarray, dim: int = -1
) -> np.ndarray:
    """NumPy decompression: packed uint16 `(*lead, groups, ids)`, scale and bias
    `(*lead, groups, 1)` -> `(*lead, groups * ids * 4)` of the scale's dtype, the last axis
    then moved to `dim` (unless -1)."""
    t = np.asarray(t)
    *lead, groups, ids = t.shape
    q = np.stack([(t >> s) & 15 for s in _SHIFTS], axis=-1).reshape(*lead, groups, ids * 4)
    scale = np.asarray(group_scale)
    out = (q.astype(scale.dtype) * scale + np.asarray(group_bias)).reshape(*lead, groups * ids * 4)
    return _move_last(out, dim, np.transpose)


def group_quantize_compress_numpy(
    t: np.ndarray, group_size: int, dim: int = -1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantise `t` in groups of `group_size` consecutive values along axis `dim`.

    Returns `(packed, scale, bias)`: the axis `dim` moved last and cut into groups, packed
    uint16 `(*other, groups, group_size // 4)`, float16 scale and bias `(*other, groups, 1)`
    (bias the group's minimum, scale (max - min) / 15, both rounded to float16; a group of
    equal values gets scale 0 and all its integers 0). ValueError for non-finite values or
    a `group_size` that is not a positive multiple of 4 dividing the axis.
    """
    t = np.asarray(t)
    if dim != -1:
        perm = list(range(t.ndim))
        perm.append(perm.pop(dim))
        t = t.transpose(perm)
    *lead, cols = t.shape
    if not isinstance(group_size, int) or group_size <= 0 or group_size % 4 or cols % group_size:
        raise ValueError(
            f"group_quantize_compress_numpy: group_size must be a positive multiple of 4 dividing the axis of "
            f"size {cols}, got {group_size!r}"
        )
    if not np.isfinite(t).all():
        raise ValueError("Cannot compress t which contains non-finite values")
    groups = t.reshape(*lead, cols // group_size, group_size)
    hi = groups.max(-1, keepdims=True).astype(np.float16)
    lo = groups.min(-1, keepdims=True).astype(np.float16)
    scale = (hi - lo) / np.float16(15)
    safe = np.where(scale == 0, np.float16(1), scale)
    q = np.clip(np.round((groups - lo) / safe), 0, 15).astype(np.uint16)
    q = q.reshape(*lead, cols // group_size, group_size // 4, 4)
    packed = np.zeros(q.shape[:-1], np.uint16)
    for k, s in enumerate(_SHIFTS):
        packed |= q[..., k] << np.uint16(s)
    return packed, scale, lo
