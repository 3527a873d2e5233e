"""What a view kernel's output is: the one definition of a view.

`rt-views` checks chains of views with `view_array` (on stride-only stand-ins) and both
plans bind view outputs with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def view_array(
    kernel: str, x: np.ndarray, shape: tuple[int, ...], perm: Sequence[int] | None
) -> np.ndarray | None:
    """The NumPy view of `x` that a view kernel's output is bound to, or None when NumPy
    cannot express it without copying (e.g. flattening a transposed view)."""
    if kernel == "popxl.transpose":
        order = tuple(int(a) for a in perm) if perm is not None else tuple(range(x.ndim))[::-1]
        if sorted(order) != list(range(x.ndim)):
            return None
        v = x.transpose(order)
    elif kernel in ("popxl.reshape", "popxl.squeeze"):
        try:
            v = np.reshape(x, shape, copy=False)
        except ValueError:
            return None
    else:
        return None
    return v if v.shape == tuple(shape) else None
