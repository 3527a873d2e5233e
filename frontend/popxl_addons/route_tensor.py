"""`route_tensor_into_graph` / `is_subgraph` (popxl_addons/route_tensor.py).

Gives a graph access to a tensor of a graph that calls it (directly or through other
graphs), by adding a graph input to every graph on the call paths in between and the
tensor (or the previous graph's new input) as an operand of every call site:

```python
with main:
    a = popxl.variable(1.0)
    ops.call(sg)
with sg:
    a_sg = route_tensor_into_graph(a)        # a new input of sg; the call passes `a`
```

`call.call` and `call.repeat` call sites are extended (a new input of a repeat body is
loop invariant); with `modified=True` the new inputs are by reference, so in-place
updates of the routed tensor reach the original.
"""

from __future__ import annotations

import weakref

import popxl
from popxl import bridge

__all__ = ["route_tensor_into_graph", "is_subgraph"]


def is_subgraph(parent: popxl.Graph, subgraph: popxl.Graph) -> bool:
    """Whether `subgraph` is `parent` or is called from it (transitively)."""
    seen: set[str] = set()
    stack = [parent]
    while stack:
        g = stack.pop()
        if g == subgraph:
            return True
        if g.name in seen:
            continue
        seen.add(g.name)
        stack.extend(g.called_graphs)
    return False


def _graphs_on_paths(start: popxl.Graph, target: popxl.Graph) -> list[popxl.Graph]:
    """The graphs on some call path from `start` to `target` (both excluded), callers
    before callees."""
    reaches: dict[str, bool] = {}

    def reach(g: popxl.Graph, active: frozenset[str]) -> bool:
        if g == target:
            return True
        if g.name in reaches:
            return reaches[g.name]
        if g.name in active:
            return False
        r = False
        for c in g.called_graphs:
            r = reach(c, active | {g.name}) or r
        reaches[g.name] = r
        return r

    reach(start, frozenset())
    order: list[popxl.Graph] = []
    seen: set[str] = set()

    def visit(g: popxl.Graph) -> None:
        for c in g.called_graphs:
            if c != target and reaches.get(c.name) and c.name not in seen:
                seen.add(c.name)
                order.append(c)
                visit(c)

    visit(start)
    return order


def route_tensor_into_graph(
    tensor: popxl.Tensor, graph: popxl.Graph | None = None, modified: bool = False
) -> popxl.Tensor:
    """`tensor` as a tensor of `graph` (default: the current graph).

    If `tensor` is already in `graph` it is returned. Otherwise `graph` must be called
    (transitively) from the tensor's graph: every graph on the call paths between them
    gets one new input for it (reused on later calls) and every call site passes it.
    `modified=True` makes those inputs by reference. ValueError if `graph` is not
    reachable, or if a call site comes before the tensor is defined.
    """
    from xl.dialects.call import CallOp, RepeatOp, call_sites

    if not isinstance(tensor, popxl.Tensor):
        raise TypeError(f"route_tensor_into_graph: expected a Tensor, got {type(tensor).__name__}")
    if graph is None:
        graph = popxl.gcg()
    if tensor in graph:
        return tensor
    src = tensor.graph
    if not is_subgraph(src, graph):
        raise ValueError(
            f"route_tensor_into_graph: {tensor.name!r} is not in the graph {graph.name!r}. "
            f"Additionally, the tensor is not in a known parent graph so cannot be moved into the "
            f"graph (graph {src.name!r} does not call {graph.name!r})"
        )
    ir = graph.ir
    routes: dict[popxl.Graph, popxl.Tensor] = {src: tensor}
    cache: dict = _route_cache(ir)
    order = [*_graphs_on_paths(src, graph), graph]
    sites = call_sites(bridge.module_of(ir))
    for g in order:
        key = (bridge.value_of(tensor), g.name)
        if key in cache:
            routes[g] = cache[key]
            continue
        with g:
            new_in = popxl.graph_input(tensor.shape, tensor.dtype, tensor.name, by_ref=modified)
        routes[g] = new_in
        cache[key] = new_in
        for site in sites.get(g.name, []):
            if not isinstance(site, CallOp | RepeatOp):
                raise ValueError(
                    f"route_tensor_into_graph: graph {g.name!r} is called by a {site.name}; only "
                    "call.call and call.repeat call sites can be given a new input"
                )
            parent = site.parent_op()
            caller = bridge.graph_of(ir, parent) if parent is not None else None
            outer = None if caller is None else next((r for cg, r in routes.items() if cg == caller), None)
            if caller is None or outer is None:
                raise ValueError(
                    f"route_tensor_into_graph: graph {g.name!r} is also called from graph "
                    f"{caller.name if caller is not None else '?'!r}, which {tensor.name!r} cannot reach"
                )
            v = bridge.value_of(outer)
            owner = v.owner
            if isinstance(owner, bridge.Operation) and owner.parent_block() is site.parent_block():
                if not owner.is_before_in_block(site):
                    raise ValueError(
                        f"route_tensor_into_graph: {tensor.name!r} is defined after a call of graph "
                        f"{g.name!r} in graph {caller.name!r}; create it before the call"
                    )
            site.operands = (*site.operands, v)
    return routes[graph]


# {ir: {(routed value, graph name): the graph's input for it}}: routing the same tensor
# into the same graph again reuses the input
_CACHES: weakref.WeakKeyDictionary[popxl.Ir, dict] = weakref.WeakKeyDictionary()


def _route_cache(ir: popxl.Ir) -> dict:
    return _CACHES.setdefault(ir, {})
