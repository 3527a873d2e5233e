"""NumPy helpers to lay out host data for replicas (popxl_addons/array_munging.py).

```python
shard(np.arange(8).reshape(4, 2), 2, 0)      # (2, 2, 2): rows 0-1, rows 2-3
unshard(shard(x, 2, 1), 1)                   # == x
repeat(np.arange(6).reshape(2, 3), 2, 0)     # (2, 2, 3): the array twice on a new axis 0
tensor_parallel_input(np.arange(4), 2, 4)    # [[0, 0, 1, 1], [2, 2, 3, 3]]
```
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from popxl.bridge import check_int

__all__ = [
    "shard",
    "unshard_arrays",
    "unshard",
    "repeat",
    "repeat_axis",
    "split2D",
    "shard2D",
    "unshard2D",
    "repeat_shard",
    "tensor_parallel_input",
    "tensor_parallel_output",
    "pad_axis",
    "squeeze_safe",
    "handle_negative_axis",
]


def handle_negative_axis(x: np.ndarray, axis: int) -> int:
    """`axis` as a non-negative axis of `x` (IndexError if out of range or `x` is 0-d)."""
    axis = check_int(axis, "handle_negative_axis", "axis")
    if x.ndim == 0:
        raise IndexError("Array is 0-dimensional")
    if axis > x.ndim - 1 or axis < -x.ndim:
        raise IndexError(f"Axis is out of range. Axis: {axis}. Array Rank: {x.ndim}")
    return axis + x.ndim if axis < 0 else axis


def _ints(what: str, **args: int) -> list[int]:
    """Each of `args` (name -> value) as an int (not a bool; TypeError naming `what` and the name)."""
    return [check_int(v, what, name) for name, v in args.items()]


def _check_divides(x: np.ndarray, n: int, axis: int, what: str) -> None:
    if n <= 0 or x.shape[axis] % n:
        raise ValueError(f"{what}: axis {axis} of length {x.shape[axis]} cannot be split into {n} equal shards")


def shard(x: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Split `x` into `n` equal parts along `axis`, stacked on a new first axis:
    shape `(n, ..., x.shape[axis] // n, ...)`."""
    n = check_int(n, "shard", "n")
    axis = handle_negative_axis(x, check_int(axis, "shard", "axis"))
    _check_divides(x, n, axis, "shard")
    return np.stack(np.split(x, n, axis=axis))


def unshard_arrays(xs: list[np.ndarray], axis: int) -> np.ndarray:
    """Concatenate arrays of shape `(1, ...)` along `axis` (of the arrays without their
    first axis) and drop the first axis."""
    axis = check_int(axis, "unshard_arrays", "axis")
    if len(xs) > 1 and any(x.ndim != xs[0].ndim for x in xs[1:]):
        raise ValueError(f"All arrays must be of the same rank. Ranks: {','.join(str(x.ndim) for x in xs)}")
    axis = axis + 1 if axis >= 0 else handle_negative_axis(xs[0], axis)
    return np.concatenate(xs, axis=axis).squeeze(0)


def unshard(x: np.ndarray, axis: int) -> np.ndarray:
    """Inverse of `shard`: the shards on the first axis concatenated along `axis`
    (an axis of one shard)."""
    axis = check_int(axis, "unshard", "axis")
    return unshard_arrays(np.split(x, x.shape[0], axis=0), axis)


def repeat(x: np.ndarray, n: int, axis: int = 0) -> np.ndarray:
    """`x` repeated `n` times along a new axis inserted at `axis`."""
    n, axis = check_int(n, "repeat", "n"), check_int(axis, "repeat", "axis")
    return np.repeat(np.expand_dims(x, axis), n, axis=axis)


def repeat_axis(x: np.ndarray, n: int, axis: int = 0) -> np.ndarray:
    """`x` tiled `n` times along its existing `axis` (`[a, b]` -> `[a, b, a, b]`)."""
    n, axis = check_int(n, "repeat_axis", "n"), check_int(axis, "repeat_axis", "axis")
    reps = [1] * x.ndim
    reps[axis] = n
    return np.tile(x, reps)


def split2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int) -> list[list[np.ndarray]]:
    """`x` split into `n_1` parts along `axis_1`, each split into `n_2` along `axis_2`."""
    n_1, n_2, axis_1, axis_2 = _ints("split2D", n_1=n_1, n_2=n_2, axis_1=axis_1, axis_2=axis_2)
    return [np.split(a, n_2, axis_2) for a in np.split(x, n_1, axis_1)]


def shard2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int) -> np.ndarray:
    """`split2D` stacked on a new first axis (`n_1 * n_2` shards, `axis_1` outermost)."""
    n_1, n_2, axis_1, axis_2 = _ints("shard2D", n_1=n_1, n_2=n_2, axis_1=axis_1, axis_2=axis_2)
    return np.stack([a for row in split2D(x, n_1, n_2, axis_1, axis_2) for a in row])


def unshard2D(x: np.ndarray, n_1: int, n_2: int, axis_1: int, axis_2: int) -> np.ndarray:
    """Inverse of `shard2D`."""
    n_1, n_2, axis_1, axis_2 = _ints("unshard2D", n_1=n_1, n_2=n_2, axis_1=axis_1, axis_2=axis_2)
    if x.shape[0] != n_1 * n_2:
        raise ValueError(f"unshard2D: first axis has {x.shape[0]} shards, expected {n_1} * {n_2}")
    parts = np.split(x, x.shape[0], axis=0)
    rows = [unshard_arrays(parts[i * n_2 : (i + 1) * n_2], axis_2) for i in range(n_1)]
    return np.concatenate(rows, axis=axis_1)


def repeat_shard(
    x: np.ndarray, n_repeats: int, n_shards: int, shard_axis: int, sharded_tensor: str = "contiguous"
) -> np.ndarray:
    """`shard(x, n_shards, shard_axis)` repeated `n_repeats` times: 'contiguous' repeats
    the whole set of shards (`s0 s1 s0 s1`), 'strided' each shard (`s0 s0 s1 s1`)."""
    n_repeats, n_shards, shard_axis = _ints(
        "repeat_shard", n_repeats=n_repeats, n_shards=n_shards, shard_axis=shard_axis
    )
    y = shard(x, n_shards, shard_axis)
    if sharded_tensor == "contiguous":
        return repeat_axis(y, n_repeats, 0)
    if sharded_tensor == "strided":
        return np.repeat(y, n_repeats, axis=0)
    raise ValueError(f"sharded_tensor should be either 'contiguous' or 'strided'. Not: {sharded_tensor!r}")


def _check_tp(tp: int, rf: int, what: str) -> None:
    _ints(what, tp=tp, rf=rf)
    if not tp <= rf:
        raise ValueError(f"tensor parallel factor `tp` is not less than replication factor `rf`: {tp} > {rf}")
    if rf % tp:
        raise ValueError(
            f"tensor parallel factor `tp` does not equally divide replication factor `rf`: rf/tp={rf / tp}"
        )


def tensor_parallel_input(
    input_data: np.ndarray, tp: int, rf: int, repeat_fn: Callable[[np.ndarray, int], np.ndarray] | None = None
) -> np.ndarray:
    """Host data `[n, *data_shape]` laid out `[num_host_transfers, rf, *data_shape]` so that
    each group of `tp` consecutive replicas gets the same sample (replica `i` of a group
    gets `repeat_fn(sample, i)` when given); size-1 leading axes are squeezed."""
    _check_tp(tp, rf, "tensor_parallel_input")
    data = np.expand_dims(input_data, axis=1)
    copies = [repeat_fn(data.copy(), i) if repeat_fn else data for i in range(tp)]
    out = np.concatenate(copies, axis=1).reshape(-1, rf, *input_data.shape[1:])
    return squeeze_safe(out, [0, 1])


def tensor_parallel_output(
    output_data: np.ndarray,
    num_host_transfers: int,
    tp: int,
    rf: int,
    data_shape: tuple[int, ...],
    tp_identical: bool = True,
    true_num_host_transfers: int | None = None,
) -> np.ndarray:
    """Session output `[num_host_transfers, rf, *data_shape]` as `[samples, *data_shape]`
    (the first replica of each tensor-parallel group), or `[samples, tp, *data_shape]` when
    not `tp_identical`; `true_num_host_transfers` drops unused transfer slots."""
    _check_tp(tp, rf, "tensor_parallel_output")
    num_host_transfers = check_int(num_host_transfers, "tensor_parallel_output", "num_host_transfers")
    if true_num_host_transfers is not None:
        true_num_host_transfers = check_int(
            true_num_host_transfers, "tensor_parallel_output", "true_num_host_transfers"
        )
    out = np.asarray(output_data).reshape(num_host_transfers, rf // tp, tp, *data_shape)
    if true_num_host_transfers is not None:
        out = out[:true_num_host_transfers]
    out = out.reshape(-1, tp, *data_shape)
    return out[:, 0] if tp_identical else out


def pad_axis(x: np.ndarray, n: int, axis: int, value: int | float = 0) -> np.ndarray:
    """`x` padded at the end of `axis` with `value` to length `n`."""
    n, axis = check_int(n, "pad_axis", "n"), check_int(axis, "pad_axis", "axis")
    if x.shape[axis] > n:
        raise ValueError(f"pad_axis: axis {axis} has length {x.shape[axis]} > {n}")
    padding = [(0, 0)] * x.ndim
    padding[axis] = (0, n - x.shape[axis])
    return np.pad(x, padding, constant_values=value)


def squeeze_safe(x: np.ndarray, axis: int | Sequence[int] | None = None) -> np.ndarray:
    """`np.squeeze`, but axes in `axis` that are not of size 1 are left alone."""
    if axis is None:
        return np.squeeze(x)
    axes = [axis] if isinstance(axis, int | np.integer) else list(axis)
    axes = [check_int(a, "squeeze_safe", "axis") for a in axes]
    for ax in sorted({handle_negative_axis(x, a) for a in axes}, reverse=True):
        if x.shape[ax] == 1:
            x = np.squeeze(x, axis=ax)
    return x
