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


def check_tensor_ipu_and_tile_set(**tensors: Tensor) -> None:
    """All tensors given are on the same virtual IPU and tile set (ValueError naming the
    first two that differ)."""
    first: tuple[str, Tensor] | None = None
    for name, t in tensors.items():
        if first is None:
            first = (name, t)
            continue
        fname, f = first
        if (t.ipu, t.tile_set) != (f.ipu, f.tile_set):
            raise ValueError(
                f"check_tensor_ipu_and_tile_set: {fname} ({f.id}) is on IPU {f.ipu}, tile set {f.tile_set!r} "
                f"and {name} ({t.id}) on IPU {t.ipu}, tile set {t.tile_set!r}"
            )
