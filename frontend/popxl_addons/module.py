"""`addons.Module`: layers and models with named variable inputs (popxl_addons/module.py).

```python
class Linear(addons.Module):
    def __init__(self, out_features):
        super().__init__()
        self.out_features = out_features

    def build(self, x):
        w = self.add_variable_input("weight", partial(np.zeros, (x.shape[-1], self.out_features)), x.dtype)
        return x @ w

with ir.main_graph:
    facts, graph = Linear(32).create_graph(popxl.TensorSpec((2, 4), popxl.float32))
    y, = graph.bind(facts.init()).call(x)
```

`create_graph` builds the module into a new graph (via `popxl.gir().create_graph`) and
returns the factories of its named inputs with a `GraphWithNamedArgs`. Calling a module
(`self.fc1(x)`) inlines its `build` into the graph being built; submodule attributes nest
their named inputs under the attribute name (`fc1.weight`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any, Optional, Union

import popxl

from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.graph_cache import GraphCache
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)

__all__ = ["Module", "NameScopeMeta"]

_PopxlModule: type = getattr(popxl, "Module", object)


def _scoped_build(build: Any) -> Any:
    @functools.wraps(build)
    def build_in_scope(self: "Module", *args: Any, **kwargs: Any) -> Any:
        scope = self.__dict__.get("_name_scope")
        name_scope = getattr(popxl, "name_scope", None)
        if scope and name_scope is not None:
            with name_scope(scope):
                return build(self, *args, **kwargs)
        return build(self, *args, **kwargs)

    build_in_scope._addons_scoped = True  # type: ignore[attr-defined]
    return build_in_scope


class NameScopeMeta(type(_PopxlModule)):  # type: ignore[misc]
    """Wraps `build` so it runs inside `popxl.name_scope(module._name_scope)` when set."""

    def __new__(mcs, name: str, bases: tuple, namespace: dict, **kwargs: Any):
        build = namespace.get("build")
        if build is not None and callable(build) and not getattr(build, "_addons_scoped", False):
            namespace["build"] = _scoped_build(build)
        return super().__new__(mcs, name, bases, namespace, **kwargs)


class Module(_PopxlModule, metaclass=NameScopeMeta):
    """Base class of addons layers and models.

    Args:
        cache: False (default) for a new graph per `create_graph`; True or a `GraphCache`
            to reuse one graph for calls with the same argument shapes, dtypes and kwargs.
        grad_inlining_error: what to do when a module that defines `build_grad` is inlined:
            'error', 'warning' or 'none'.
    """

    def __init__(
        self,
        cache: Union[bool, GraphCache, None] = False,
        grad_inlining_error: str = "error",
    ):
        self._init_state()
        if cache is True:
            cache = GraphCache()
        elif cache is False or cache is None:
            cache = None
        elif not isinstance(cache, GraphCache):
            raise TypeError(f"cache must be a bool or a GraphCache, not {type(cache).__name__}")
        object.__setattr__(self, "_graph_cache", cache)
        if grad_inlining_error not in ("error", "warning", "none"):
            raise ValueError("grad_inlining_error must be 'error', 'warning' or 'none'")
        object.__setattr__(self, "_grad_inlining_error", grad_inlining_error)

    def _init_state(self) -> None:
        d = self.__dict__
        if "_variable_factories" in d:
            return
        object.__setattr__(self, "_variable_factories", NamedVariableFactories())
        object.__setattr__(self, "_named_inputs", NamedTensors())
        object.__setattr__(self, "aux", NamedTensors())
        object.__setattr__(self, "_submodules", {})
        d.setdefault("_name_scope", None)
        d.setdefault("_graph_cache", None)
        d.setdefault("_grad_inlining_error", "error")

    # -- submodules ------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._init_state()
            self._add_submodule(name, value)
        elif name in self.__dict__.get("_submodules", {}):
            self._remove_submodule(name)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__.get("_submodules", {}):
            self._remove_submodule(name)
        object.__delattr__(self, name)

    def _add_submodule(self, name: str, module: "Module") -> None:
        module._init_state()
        if name in self._submodules:
            self._remove_submodule(name)
        object.__setattr__(module, "_name_scope", name)
        for tree, sub in (
            (self._variable_factories, module._variable_factories),
            (self._named_inputs, module._named_inputs),
        ):
            if name in tree._map:
                tree._map.pop(name)
            # the same tree object: what the submodule adds later shows up here too
            tree._map[name] = sub
        self._submodules[name] = module

    def _remove_submodule(self, name: str) -> None:
        self._submodules.pop(name, None)
        self._variable_factories._map.pop(name, None)
        self._named_inputs._map.pop(name, None)

    @property
    def submodules(self) -> dict[str, "Module"]:
        return dict(self._submodules)

    def get(self, key: Union[str, int]) -> "Module":
        """The submodule under `key` (dotted keys walk into nested submodules; ints index lists)."""
        if isinstance(key, int) and not isinstance(key, bool):
            if key < 0:
                numeric = sorted(int(k) for k in self._submodules if k.isdigit())
                if not numeric or numeric[-1] + 1 + key < 0:
                    raise KeyError(key)
                key = numeric[-1] + 1 + key
            key = str(key)
        first, _, rest = key.partition(".")
        if first not in self._submodules:
            raise KeyError(key)
        mod = self._submodules[first]
        return mod.get(rest) if rest else mod

    def __getitem__(self, key: Union[str, int]) -> "Module":
        return self.get(key)

    @classmethod
    def from_list(cls, modules: Iterable["Module"]) -> "Module":
        """A module holding `modules` as submodules '0', '1', ...; iterable and indexable."""
        m = _ModuleList()
        for i, mod in enumerate(modules):
            setattr(m, str(i), mod)
        return m

    # -- building --------------------------------------------------------------------
    def build(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement build()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inline: run `build` in the current graph."""
        if self.implements_grad_graph:
            msg = (
                f"{type(self).__name__} defines build_grad, which is ignored when the module is "
                "inlined; use create_graph (or call_module) to use it"
            )
            if self._grad_inlining_error == "error":
                raise RuntimeError(msg)
            if self._grad_inlining_error == "warning":
                import warnings

                warnings.warn(msg, stacklevel=2)
        return self.build(*args, **kwargs)

    @property
    def implements_grad_graph(self) -> bool:
        return type(self).build_grad is not Module.build_grad

    def build_grad(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - hook
        raise NotImplementedError

    def create_graph(self, *args: Any, **kwargs: Any) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        """Build the module into a new graph.

        Tensor / `TensorSpec` arguments become graph inputs (see `popxl.Ir.create_graph`).
        Returns the factories of the named inputs and the `GraphWithNamedArgs`.
        """
        if self._graph_cache is not None:
            return self._graph_cache._create_module_graph(self, *args, **kwargs)
        return self._create_graph(*args, **kwargs)

    def _create_graph(self, *args: Any, **kwargs: Any) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        # A module may already hold named inputs (e.g. it was inlined into the graph its
        # parent is building): keep them aside while building this graph.
        saved_f = self._variable_factories.to_dict()
        saved_t = self._named_inputs.to_dict()
        saved_aux = self.aux.to_dict()
        self._reset()
        try:
            graph = popxl.gir().create_graph(self, *args, **kwargs)
            facts = self._variable_factories.copy()
            named = self._named_inputs.copy()
            aux = self.aux.copy()
        finally:
            self._reset()
            for tree, saved in (
                (self._variable_factories, saved_f),
                (self._named_inputs, saved_t),
                (self.aux, saved_aux),
            ):
                for k, v in saved.items():
                    tree.insert(k, v, overwrite=True)
        _prune_empty(facts)
        _prune_empty(named)
        _prune_empty(aux)
        return facts, GraphWithNamedArgs(graph, named, from_module=self, aux=aux)

    def _reset(self) -> None:
        """Forget the named inputs of the last build (nested trees stay, emptied)."""
        self._variable_factories._clear()
        self._named_inputs._clear()
        self.aux._clear()

    # -- named inputs ------------------------------------------------------------------
    def _check_free(self, name: str, overwrite: bool) -> None:
        if not overwrite and name in self._variable_factories:
            existing = self._variable_factories.get(name)
            if not (isinstance(existing, NamedVariableFactories) and existing.len_flat() == 0):
                raise ValueError(
                    f"{type(self).__name__} already has a named input '{name}'; "
                    "pass overwrite=True to replace it"
                )

    def _add_named(self, name: str, factory: Any, tensor: Any, overwrite: bool) -> Any:
        """Record named input `name`: its factory (or factories) and its tensor(s); returns `tensor`."""
        self._variable_factories.insert(name, factory, overwrite)
        self._named_inputs.insert(name, tensor, overwrite)
        return tensor

    def add_variable_input(
        self,
        name: str,
        data_iter: Any,
        dtype: Any = None,
        by_ref: bool = False,
        replica_grouping: Any = None,
        overwrite: bool = False,
    ) -> Any:
        """Add a named input to the graph being built and a factory for its variable.

        `data_iter`: a callable returning the initial data (e.g. `partial(np.zeros, shape)`),
        an iterable of such data, or a constant array. Dotted names nest.
        """
        name = str(name)
        self._check_free(name, overwrite)
        tensor, vf = add_variable_input(name, data_iter, dtype, by_ref, replica_grouping)
        return self._add_named(name, vf, tensor, overwrite)

    def add_replica_sharded_variable_input(
        self,
        name: str,
        data_iter: Any,
        dtype: Any = None,
        by_ref: bool = False,
        replica_grouping: Any = None,
        shard_over: Optional[int] = None,
        overwrite: bool = False,
    ) -> Any:
        """Like `add_variable_input`, but the input is one replica's shard of the data."""
        name = str(name)
        self._check_free(name, overwrite)
        tensor, vf = add_replica_sharded_variable_input(
            name, data_iter, dtype, by_ref, replica_grouping, shard_over
        )
        return self._add_named(name, vf, tensor, overwrite)

    def add_variable_factory(
        self, variable_f: VariableFactory, name: Optional[str] = None, overwrite: bool = False
    ) -> Any:
        """Add a named input for an existing factory."""
        name = str(name if name is not None else variable_f.name)
        if not name or name == "None":
            raise ValueError("add_variable_factory: the factory has no name; pass name=")
        self._check_free(name, overwrite)
        tensor = variable_f._graph_input(name)
        return self._add_named(name, variable_f, tensor, overwrite)

    def add_variable_inputs(
        self, name: Union[str, int], variable_f: NamedVariableFactories, overwrite: bool = False
    ) -> NamedTensors:
        """Add a named input under `name` for every factory of `variable_f`.

        Used to call another module's graph with this module's own variables:
        `layer = graph.bind(self.add_variable_inputs("layer1", facts))`.
        """
        name = str(name)
        self._check_free(name, overwrite)
        inputs = {k: f._graph_input(f"{name}.{k}") for k, f in variable_f.to_dict().items()}
        named = NamedTensors.from_dict(inputs)
        return self._add_named(name, variable_f.copy(), named, overwrite)

    def __repr__(self) -> str:
        return object.__repr__(self)


def _prune_empty(tree: Any) -> None:
    """Drop emptied subtrees left by `_clear` from a snapshot."""
    from popxl_addons.dot_tree import DotTree

    for k in list(tree._map):
        v = tree._map[k]
        if isinstance(v, DotTree):
            _prune_empty(v)
            if len(v._map) == 0:
                del tree._map[k]


class _ModuleList(Module):
    """Result of `Module.from_list`: submodules '0', '1', ...; calling runs them in sequence."""

    def build(self, *args: Any, **kwargs: Any) -> Any:
        out: Any = args
        for i, m in enumerate(self):
            out = m(*out, **kwargs) if i == 0 else m(*out)
            if not isinstance(out, tuple):
                out = (out,)
        return out[0] if isinstance(out, tuple) and len(out) == 1 else out

    def __iter__(self) -> Iterator[Module]:
        return iter(self._submodules[k] for k in sorted(self._submodules, key=int))

    def __len__(self) -> int:
        return len(self._submodules)
