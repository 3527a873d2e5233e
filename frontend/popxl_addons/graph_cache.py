"""`GraphCache`: reuse one graph for calls with equal arguments (popxl_addons/graph_cache.py).

The key is (the hash of the function or module (`Module.__hash__` when a module defines
it), current virtual IPU and tile set, and a hash of the arguments) where a tensor or
`TensorSpec` hashes as (shape, dtype, meta_shape), so two variables of the same shape and
dtype share one optimizer graph. Caches are per Ir.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import popxl
import popxl.ops as ops
from popxl.context import get_current_context
from popxl_addons.dot_tree import DotTree
from popxl_addons.graph import BoundGraph, GraphWithNamedArgs

__all__ = ["GraphCache", "function"]


def _context_key() -> tuple[int, bool]:
    """The current virtual IPU and whether ops go to the IO tiles: graphs differ between them."""
    ctx = get_current_context()
    return (ctx.ipu_id, ctx.io_tile_set)


def _arg_key(value: Any) -> Any:
    """A hashable stand-in for an argument of `create_graph`."""
    if isinstance(value, popxl.Tensor | popxl.TensorSpec):
        meta = tuple(getattr(value, "meta_shape", ()) or ())
        return ("tensor", tuple(value.shape), str(value.dtype), meta)
    if isinstance(value, GraphWithNamedArgs):
        return ("gwna", id(value.graph), _arg_key(value.args))
    if isinstance(value, BoundGraph):
        return ("bound", id(value.graph), tuple(sorted((id(k), _arg_key(v)) for k, v in value.args.items())))
    if isinstance(value, popxl.Graph):
        return ("graph", id(value))
    if isinstance(value, DotTree):
        return ("tree", type(value).__name__, tuple((k, _arg_key(v)) for k, v in value.to_dict().items()))
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_arg_key(v) for v in value))
    if isinstance(value, Mapping):
        return ("dict", tuple((_arg_key(k), _arg_key(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return (type(value).__name__, value)


def _fn_key(fn: Any) -> Any:
    """The function's part of a cache key: its hash, as upstream, so that two modules whose
    `__hash__` says they build the same graph share it (a module without its own `__hash__`
    hashes by identity); an unhashable callable by identity."""
    try:
        return ("hash", hash(fn))
    except TypeError:
        return ("id", id(fn))


class GraphCache:
    """Creates graphs with `ir.create_graph`, reusing one for equal (fn, context, args)."""

    def __init__(self) -> None:
        self._graphs: weakref.WeakKeyDictionary[Any, dict[Any, Any]] | dict = weakref.WeakKeyDictionary()
        self._modules: weakref.WeakKeyDictionary[Any, dict[Any, Any]] | dict = weakref.WeakKeyDictionary()

    @staticmethod
    def _per_ir(store: Any, ir: Any) -> dict[Any, Any]:
        try:
            return store.setdefault(ir, {})
        except TypeError:  # Ir not weak-referenceable or hashable: key by id
            return store.setdefault(("ir", id(ir)), {})

    @staticmethod
    def _key(fn: Any, args: tuple, kwargs: Mapping[str, Any]) -> tuple:
        return (
            _fn_key(fn),
            _context_key(),
            tuple(_arg_key(a) for a in args),
            tuple(sorted((k, _arg_key(v)) for k, v in kwargs.items())),
        )

    def create_graph(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`popxl.gir().create_graph(fn, *args, **kwargs)`, cached."""
        ir = popxl.gir()
        cache = self._per_ir(self._graphs, ir)
        key = self._key(fn, args, kwargs)
        hit = cache.get(key)
        if hit is not None:
            return hit[0]
        graph = ir.create_graph(fn, *args, **kwargs)
        cache[key] = (graph, fn)  # keep fn alive so id(fn) stays unique
        return graph

    def _create_module_graph(self, module: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """`module._create_graph(...)` cached: returns copies of (factories, GraphWithNamedArgs)."""
        ir = popxl.gir()
        cache = self._per_ir(self._modules, ir)
        key = self._key(module, args, kwargs)
        hit = cache.get(key)
        if hit is None:
            facts, graph = module._create_graph(*args, **kwargs)
            cache[key] = (facts, graph, module)
        else:
            facts, graph, _ = hit
        return facts.copy(), graph.copy()

    def clear(self) -> None:
        """Forget every cached graph and module."""
        self._graphs = weakref.WeakKeyDictionary()
        self._modules = weakref.WeakKeyDictionary()


_default_cache = GraphCache()


def function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: outline `fn` as a (cached) graph and call it with the given tensors."""
    if not callable(fn):
        raise TypeError(f"addons.function: expected a callable, got {type(fn).__name__}")

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        graph = _default_cache.create_graph(fn, *args, **kwargs)
        tensors = [a for a in args if isinstance(a, popxl.Tensor)]
        tensors += [v for v in kwargs.values() if isinstance(v, popxl.Tensor)]
        outs = ops.call(graph, *tensors)
        if len(outs) == 1:
            return outs[0]
        return outs if outs else None

    return wrapper
