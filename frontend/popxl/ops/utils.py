"""`popxl.ops.utils`: the argument checks PopXL's own ops use, for ops written outside popxl
(custom ops, popxl_addons), with upstream's keyword-argument signatures.

```python
from popxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set

g = popxl.gcg()
check_in_graph(g, t=t, sin=sin, cos=cos)  # ValueError naming the tensor not in g
check_tensor_ipu_and_tile_set(t=t, sin=sin)  # ValueError when on different IPUs / tile sets
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from popxl.ops._utils import check_in_graph as _check_in_graph

if TYPE_CHECKING:
    from popxl.graph import Graph
    from popxl.tensor import Tensor

__all__ = ["check_in_graph", "check_tensor_ipu_and_tile_set"]


def check_in_graph(graph: Graph, **tensors: Tensor) -> None:
    """Every tensor given is a tensor of `graph` (TypeError for a non-tensor, ValueError
    naming the argument otherwise)."""
    for name, t in tensors.items():
        _check_in_graph(graph, [t], f"check_in_graph: {name}")


def _placement(t: Tensor) -> tuple[int | None, str | None]:
    """`(ipu, tile set)` of `t`; None for what cannot be known yet (a graph input no op uses:
    `UndefinedValue`), which upstream leaves out of the check."""
    try:
        return t.ipu, t.tile_set
    except Exception as e:
        if type(e).__name__ == "UndefinedValue":
            return None, None
        raise


def check_tensor_ipu_and_tile_set(**tensors: Tensor) -> None:
    """All tensors given whose placement is known are on the same virtual IPU, and on the
    same tile set (ValueError naming the first two that differ); a tensor whose IPU or
    tile set is not known yet is skipped, as upstream."""
    known = {name: (t, *_placement(t)) for name, t in tensors.items()}
    for k, what in ((1, "IPU"), (2, "tile set")):
        placed = [(name, v[0], v[k]) for name, v in known.items() if v[k] is not None]
        for name, t, p in placed[1:]:
            name0, t0, p0 = placed[0]
            if p != p0:
                raise ValueError(
                    f"check_tensor_ipu_and_tile_set: the input tensors `{name0}` ({t0.id}) and `{name}` "
                    f"({t.id}) are located on different {what}s: {p0!r} != {p!r}"
                )
