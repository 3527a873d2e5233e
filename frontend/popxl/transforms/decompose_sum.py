"""`popxl.transforms.decompose_sum` (PopXL's DecomposeSum transform).

Upstream, autodiff adds the gradient contributions of a tensor used several times with
one PopART `Sum` op of N inputs, which keeps every contribution alive until the last is
computed; `decompose_sum(graph)` rewrites each such Sum into a chain of two-input adds, in
the order the contributions are produced, so each can be freed once added.

xl's autodiff (`xl.passes.autodiff`) already builds that chain: each contribution is
added to the running gradient with a two-input `popxl.add` as soon as it exists, and xl
has no N-input sum op. So the graph is already in the form the transform produces, and
`decompose_sum` checks its argument and returns the graph unchanged (same ops, same
numbers).

```python
grad_graph = popxl.transforms.autodiff(fwd_graph)
grad_graph = popxl.transforms.decompose_sum(grad_graph)
```
"""

from __future__ import annotations

from popxl.graph import Graph

__all__ = ["decompose_sum"]


def decompose_sum(graph: Graph) -> Graph:
    """Decompose the N-input sums of `graph` into chains of two-input adds (already so in
    xl: see the module's docstring); returns `graph`."""
    if not isinstance(graph, Graph):
        raise TypeError(f"popxl.transforms.decompose_sum: expected a popxl.Graph, got {type(graph).__name__}")
    return graph
