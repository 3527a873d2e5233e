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
import inspect
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import popxl
from popxl import bridge
from popxl.transforms.autodiff import GradGraphInfo
from popxl_addons.dot_tree import DotTree
from popxl_addons.graph import GraphWithNamedArgs
from popxl_addons.graph_cache import GraphCache
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.variable_factory import (
    NamedVariableFactories,
    VariableFactory,
    add_replica_sharded_variable_input,
    add_variable_input,
)
from xl.dialects.call import CallSiteError, add_graph_outputs
from xl.dialects.graph import GraphOp

__all__ = ["Module", "NameScopeMeta", "create_grad_graph_info"]

_BUILD_GRAD_CONTEXT: list[Module] = []

# graphs built from modules with `build_grad`: {ir: {graph name}}. autodiff refuses to
# differentiate through them unless their gradient graph is supplied
# (`called_graphs_grad_info`), as upstream's `setCanBeRecursivelyAutodiffed(False)`.
_NOT_RECURSIVELY_AUTODIFFABLE: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


@contextmanager
def _build_grad_context(module: Module) -> Iterator[None]:
    _BUILD_GRAD_CONTEXT.append(module)
    try:
        yield
    finally:
        _BUILD_GRAD_CONTEXT.pop()


def _current_build_grad_module() -> Module | None:
    return _BUILD_GRAD_CONTEXT[-1] if _BUILD_GRAD_CONTEXT else None


def mark_not_recursively_autodiffable(graph: popxl.Graph) -> None:
    """Record that `graph` must not be differentiated by autodiff (it has a `build_grad`)."""
    _NOT_RECURSIVELY_AUTODIFFABLE.setdefault(graph.ir, set()).add(graph.name)


def check_recursively_autodiffable(graph: popxl.Graph, called_graphs_grad_info: Mapping[Any, Any]) -> None:
    """Raise ValueError if `graph`, or a graph it calls (transitively) that autodiff would
    differentiate itself, comes from a module with `build_grad` and has no gradient graph
    in `called_graphs_grad_info`."""
    marked = _NOT_RECURSIVELY_AUTODIFFABLE.get(graph.ir)
    if not marked:
        return
    given = {g.name for g in called_graphs_grad_info}
    seen: set[str] = {graph.name}
    stack = [c for c in graph.called_graphs if c.name not in given]
    while stack:
        g = stack.pop()
        if g.name in seen:
            continue
        seen.add(g.name)
        if g.name in marked and g.name not in given:
            raise ValueError(
                f"autodiff: graph {g.name!r} is marked as unsafe to autodiff: it was built from a "
                "module that defines build_grad; pass its gradient graph in called_graphs_grad_info "
                "(GraphWithNamedArgs.called_graphs_grad_info, filled by Module.call_module)"
            )
        stack.extend(c for c in g.called_graphs if c.name not in given)


class Aux:
    """`module.aux`: forward tensors (or other values) that `build` keeps for `build_grad`.

    In `build`, `self.aux["x"] = x` stores a tensor of the forward graph. In `build_grad`,
    `self.aux["x"]` is a gradient graph input connected to that tensor (the tensor becomes a
    forward output if it is not a forward input). Reading an item anywhere else raises.
    Non-tensor values are returned as stored.
    """

    def __init__(self) -> None:
        self._dict: dict[str, Any] = {}
        self._grad_to_fwd: dict[popxl.Tensor, popxl.Tensor] = {}
        self._key_to_tensor: dict[str, popxl.Tensor] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"aux keys are str, not {type(key).__name__}")
        self._dict[key] = value

    def __getitem__(self, key: str) -> Any:
        module = _current_build_grad_module()
        if module is None or module.aux is not self:
            raise RuntimeError(
                f"aux[{key!r}]: you can only get items within the `build_grad` method, which "
                "must be called via `create_grad_graph` or `autodiff` (you can only get items "
                "within the `build_graph` method)"
            )
        if key not in self._dict:
            raise KeyError(f"aux has no item {key!r}; items: {list(self._dict)}")
        value = self._dict[key]
        if not isinstance(value, popxl.Tensor):
            return value
        if key in self._key_to_tensor:
            return self._key_to_tensor[key]
        t = popxl.graph_input(value.shape, value.dtype, key, False, value.meta_shape or None)
        self._key_to_tensor[key] = t
        self._grad_to_fwd[t] = value
        return t

    def __contains__(self, key: object) -> bool:
        return key in self._dict

    def __len__(self) -> int:
        return len(self._dict)

    def keys(self) -> list[str]:
        return list(self._dict)

    def tensors(self) -> dict[str, popxl.Tensor]:
        """The stored forward tensors by key."""
        return {k: v for k, v in self._dict.items() if isinstance(v, popxl.Tensor)}

    def copy(self) -> Aux:
        new = Aux()
        new._dict = dict(self._dict)
        new._grad_to_fwd = dict(self._grad_to_fwd)
        new._key_to_tensor = dict(self._key_to_tensor)
        return new

    def __repr__(self) -> str:
        return f"Aux({self._dict!r})"


class VarGrads:
    """`module.var_grad`: in `build_grad`, `self.var_grad["w"] = dw` sets the gradient of
    the module's named input `w` (checked against its shape); usable only there."""

    def __init__(self, variables: Mapping[str, popxl.Tensor] | None = None) -> None:
        self._dict: dict[str, popxl.Tensor] = {}
        self._vars = dict(variables) if variables is not None else None

    def _check_context(self) -> None:
        module = _current_build_grad_module()
        if module is None or module.var_grad is not self or self._vars is None:
            raise RuntimeError(
                "var_grad: you can only use `var_grad` within the `build_grad` method, which "
                "must be called via `create_grad_graph` or `autodiff` (only within the "
                "`build_graph` method)"
            )

    def __getitem__(self, key: str) -> popxl.Tensor:
        self._check_context()
        return self._dict[key]

    def __setitem__(self, key: str, tensor: Any) -> None:
        self._check_context()
        assert self._vars is not None
        if not isinstance(tensor, popxl.Tensor):
            raise TypeError(f"var_grad[{key!r}]: Not a tensor: {tensor!r}")
        if key not in self._vars:
            raise KeyError(f"var_grad: Not a variable: {key!r}. Possible inputs: {list(self._vars)}")
        var = self._vars[key]
        if tuple(var.shape) != tuple(tensor.shape) or tuple(var.meta_shape or ()) != tuple(tensor.meta_shape or ()):
            raise ValueError(
                f"var_grad[{key!r}]: Shape or meta-shape of Tensor does not match variable. "
                f"Tensor shape: {tensor.shape} meta-shape {tensor.meta_shape}. "
                f"Variable shape {var.shape} meta-shape {var.meta_shape}."
            )
        self._dict[key] = tensor

    def __contains__(self, key: object) -> bool:
        return key in self._dict

    def __repr__(self) -> str:
        return f"VarGrads({self._dict!r})"


def _normalise_grad_info(fwd: Any, grad: Any) -> tuple[popxl.Graph, Any]:
    g = fwd if isinstance(fwd, popxl.Graph) else getattr(fwd, "graph", None)
    if not isinstance(g, popxl.Graph):
        raise TypeError(
            f"called_graphs_grad_info: keys must be Graphs, GraphWithNamedArgs or BoundGraphs, got {type(fwd).__name__}"
        )
    info = grad if isinstance(grad, GradGraphInfo) else getattr(grad, "grad_graph_info", None)
    if not isinstance(info, GradGraphInfo):
        raise TypeError(
            "called_graphs_grad_info: values must be GradGraphInfo or gradient GraphWithNamedArgs, "
            f"got {type(grad).__name__}"
        )
    return g, info


def normalise_called_graphs_grad_info(mapping: Mapping[Any, Any] | None) -> dict[popxl.Graph, Any]:
    """{graph-like: grad-info-like} as {popxl.Graph: GradGraphInfo}."""
    if mapping is not None and not isinstance(mapping, Mapping):
        raise TypeError(f"called_graphs_grad_info must map graphs to GradGraphInfo, got {type(mapping).__name__}")
    return dict(_normalise_grad_info(f, g) for f, g in (mapping or {}).items())


class CalledGraphsGradInfo:
    """`module.called_graphs_grad_info`: the gradient graphs of the graphs this module (and
    its submodules) called with `call_module`; `consolidate()` merges them (this module's
    own entries win)."""

    def __init__(self, owner: Module) -> None:
        self._owner = weakref.ref(owner)
        self.map: dict[popxl.Graph, Any] = {}

    def add(self, fwd_graph: Any, grad_graph: Any) -> None:
        g, info = _normalise_grad_info(fwd_graph, grad_graph)
        self.map[g] = info

    def update(self, mapping: Mapping[Any, Any] | None) -> None:
        self.map.update(normalise_called_graphs_grad_info(mapping))

    def consolidate(self) -> dict[popxl.Graph, Any]:
        out: dict[popxl.Graph, Any] = {}
        owner = self._owner()
        if owner is not None:
            for sub in owner._submodules.values():
                out.update(sub.called_graphs_grad_info.consolidate())
        out.update(self.map)
        return out

    def clear(self) -> None:
        self.map = {}
        owner = self._owner()
        if owner is not None:
            for sub in owner._submodules.values():
                sub.called_graphs_grad_info.clear()

    def __len__(self) -> int:
        return len(self.consolidate())

    def __repr__(self) -> str:
        return f"CalledGraphsGradInfo({self.consolidate()!r})"


def _scoped_build(build: Any) -> Any:
    @functools.wraps(build)
    def build_in_scope(self: Module, *args: Any, **kwargs: Any) -> Any:
        scope = self.__dict__.get("_name_scope")
        if scope:
            with popxl.name_scope(scope):
                return build(self, *args, **kwargs)
        return build(self, *args, **kwargs)

    # a marker on the function object, so a build already wrapped is not wrapped again
    build_in_scope._addons_scoped = True  # pyright: ignore[reportAttributeAccessIssue]
    return build_in_scope


class NameScopeMeta(type):
    """Wraps `build` so it runs inside `popxl.name_scope(module._name_scope)` when set."""

    def __new__(mcs, name: str, bases: tuple, namespace: dict, **kwargs: Any):
        build = namespace.get("build")
        if build is not None and callable(build) and not getattr(build, "_addons_scoped", False):
            namespace["build"] = _scoped_build(build)
        return super().__new__(mcs, name, bases, namespace, **kwargs)


class Module(popxl.Module, metaclass=NameScopeMeta):
    """Base class of addons layers and models.

    Args:
        cache: False (default) for a new graph per `create_graph`; True or a `GraphCache`
            to reuse one graph for calls with the same argument shapes, dtypes and kwargs.
        grad_inlining_error: what to do when a module that defines `build_grad` is inlined:
            'error', 'warning' or 'none'.
    """

    # Set by `_init_state` (also for subclasses whose __init__ does not call Module.__init__).
    _variable_factories: NamedVariableFactories
    _named_inputs: NamedTensors
    aux: Aux
    var_grad: VarGrads
    _submodules: dict[str, Module]
    called_graphs_grad_info: CalledGraphsGradInfo
    _name_scope: str | None
    _graph_cache: GraphCache | None
    _grad_inlining_error: str

    def __init__(
        self,
        cache: bool | GraphCache | None = False,
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
            raise ValueError(
                f"grad_inlining_error should be one of 'error', 'warning', 'none'. Not: {grad_inlining_error!r}"
            )
        object.__setattr__(self, "_grad_inlining_error", grad_inlining_error)
        if cache is not None and self.implements_grad_graph:
            raise ValueError(
                f"You cannot use graph caching if you have implemented `build_grad` ({type(self).__name__})."
            )

    def _init_state(self) -> None:
        d = vars(self)
        if "_variable_factories" in d:
            return
        object.__setattr__(self, "_variable_factories", NamedVariableFactories())
        object.__setattr__(self, "_named_inputs", NamedTensors())
        object.__setattr__(self, "aux", Aux())
        object.__setattr__(self, "var_grad", VarGrads())
        object.__setattr__(self, "_submodules", {})
        object.__setattr__(self, "called_graphs_grad_info", CalledGraphsGradInfo(self))
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

    def _add_submodule(self, name: str, module: Module) -> None:
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
    def submodules(self) -> dict[str, Module]:
        """The direct submodules by attribute name (a copy)."""
        return dict(self._submodules)

    def get(self, key: str | int) -> Any:
        """The submodule under `key` (dotted keys walk into nested submodules; ints index lists),
        else the attribute of that name (the tensors of `from_variable_factories`).
        Typed `Any`: it is an instance of the user's subclass, with its own attributes."""
        if isinstance(key, int) and not isinstance(key, bool):
            if key < 0:
                numeric = sorted(int(k) for k in self._submodules if k.isdigit())
                if not numeric or numeric[-1] + 1 + key < 0:
                    raise KeyError(key)
                key = numeric[-1] + 1 + key
            key = str(key)
        if not isinstance(key, str):
            raise TypeError(f"Module.get: keys are str or int, not {type(key).__name__}")
        first, _, rest = key.partition(".")
        if first not in self._submodules:
            if not rest and first in self.__dict__:
                return self.__dict__[first]
            raise KeyError(key)
        mod = self._submodules[first]
        return mod.get(rest) if rest else mod

    def __getitem__(self, key: str | int) -> Any:
        return self.get(key)

    @classmethod
    def from_list(cls, modules: Iterable[Module]) -> _ModuleList:
        """A module holding `modules` as submodules '0', '1', ...; iterable and indexable."""
        m = _ModuleList()
        for i, mod in enumerate(modules):
            setattr(m, str(i), mod)
        return m

    # -- building --------------------------------------------------------------------
    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Create the module's ops and variables in the current graph and return its outputs (override it)."""
        raise NotImplementedError(f"{type(self).__name__} must implement build()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Inline: run `build` in the current graph."""
        self._init_state()
        if self.implements_grad_graph:
            msg = (
                f"You are calling {type(self).__name__} directly but `build_grad` has been "
                "implemented: inlined, its `build_grad` is not used when autodiff runs. Create a "
                "graph of the module and call that graph instead (e.g. `self.call_module(module)(x)`). "
                "To disable this guardrail set `grad_inlining_error` to 'none'"
            )
            if self._grad_inlining_error == "error":
                raise RuntimeError(msg)
            if self._grad_inlining_error == "warning":
                warnings.warn(msg, UserWarning, stacklevel=2)
        return self.build(*args, **kwargs)

    @property
    def implements_grad_graph(self) -> bool:
        """Whether this module's class overrides `build_grad`."""
        return type(self).build_grad is not Module.build_grad

    def build_grad(self, *args: Any, **kwargs: Any) -> Any:
        """Override to define the gradient graph of `build` (see `create_grad_graph`): takes
        the gradients of the forward outputs (positional parameters only, in `grads_provided`
        order; the `*args, **kwargs` here only leave overrides free to name them), returns the
        gradients of the forward inputs that are not named variables, sets
        `self.var_grad[name]` for the named ones and reads forward tensors from `self.aux`."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement the `build_grad` method to create a gradient graph"
        )

    def create_graph(self, *args: Any, **kwargs: Any) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        """Build the module into a new graph.

        Tensor / `TensorSpec` arguments become graph inputs (see `popxl.Ir.create_graph`).
        Returns the factories of the named inputs and the `GraphWithNamedArgs`.
        """
        self._init_state()  # also for subclasses whose __init__ does not call Module.__init__
        if self._graph_cache is not None:
            return self._graph_cache._create_module_graph(self, *args, **kwargs)
        return self._create_graph(*args, **kwargs)

    def _create_graph(self, *args: Any, **kwargs: Any) -> tuple[NamedVariableFactories, GraphWithNamedArgs]:
        # A module may already hold named inputs (e.g. it was inlined into the graph its
        # parent is building): keep them aside while building this graph.
        saved_f = self._variable_factories.to_dict()
        saved_t = self._named_inputs.to_dict()
        saved_aux = self.aux
        saved_called = {m: dict(m.called_graphs_grad_info.map) for m in self._walk()}
        self._reset()
        try:
            graph = popxl.gir().create_graph(self, *args, **kwargs)
            facts = self._variable_factories.copy()
            named = self._named_inputs.copy()
            aux = self.aux.copy()
            called = self.called_graphs_grad_info.consolidate()
        finally:
            self._reset()
            for k, f in saved_f.items():
                self._variable_factories.insert(k, f, overwrite=True)
            for k, t in saved_t.items():
                self._named_inputs.insert(k, t, overwrite=True)
            object.__setattr__(self, "aux", saved_aux)
            for m, saved_map in saved_called.items():
                m.called_graphs_grad_info.map = saved_map
        if self.implements_grad_graph:
            mark_not_recursively_autodiffable(graph)
        _prune_empty(facts)
        _prune_empty(named)
        return facts, GraphWithNamedArgs(graph, named, from_module=self, aux=aux, called_graphs_grad_info=called)

    def _walk(self) -> list[Module]:
        """This module and its submodules, recursively."""
        out: list[Module] = []
        stack: list[Module] = [self]
        while stack:
            m = stack.pop()
            if any(m is o for o in out):
                continue
            out.append(m)
            stack.extend(m._submodules.values())
        return out

    def _reset(self) -> None:
        """Forget the named inputs, aux tensors and called gradient graphs of the last build
        (nested trees stay, emptied)."""
        self._variable_factories._clear()
        self._named_inputs._clear()
        self.called_graphs_grad_info.clear()
        object.__setattr__(self, "aux", Aux())
        object.__setattr__(self, "var_grad", VarGrads())

    # -- user-defined gradients ------------------------------------------------------------
    def create_grad_graph(
        self,
        fwd_graph: GraphWithNamedArgs,
        grads_provided: Iterable[popxl.Tensor] | None = None,
        grads_required: Iterable[popxl.Tensor] | None = None,
    ) -> GraphWithNamedArgs:
        """The gradient graph of `fwd_graph` built by `self.build_grad`.

        `build_grad` receives one gradient per tensor of `grads_provided` (default: every
        forward output), returns the gradients of the non-variable tensors of
        `grads_required` (default: every forward input) in order, and sets
        `self.var_grad[name]` for each required named input. `self.aux[key]` gives it
        the forward tensor stored under `key` in `build`: a forward input is connected
        directly, any other tensor becomes an extra output of the forward graph (the call
        sites of `fwd_graph` get the new output). The gradient graph's outputs are the
        non-variable gradients then the variable gradients, each connected to its
        forward input in the returned `grad_graph_info`.
        """
        req = self._grad_request(fwd_graph, grads_provided, grads_required)
        aux = fwd_graph.aux.copy() if isinstance(fwd_graph.aux, Aux) else Aux()
        object.__setattr__(self, "aux", aux)
        object.__setattr__(self, "var_grad", VarGrads(fwd_graph.args.to_dict()))
        try:
            with _build_grad_context(self):
                grad = req.fwd.ir.create_graph(self.build_grad, *[t.spec for t in req.provided])
            self._check_grad_outputs(grad, req)
            with grad:  # the variable gradients follow build_grad's outputs
                for k in req.var_required:
                    popxl.graph_output(self.var_grad._dict[k])
            info = GradGraphInfo.create(req.fwd, grad, *_grad_connections(req, aux, type(self).__name__))
        finally:
            self._reset()
        return GraphWithNamedArgs.from_grad_graph(info)

    def _grad_request(
        self,
        fwd_graph: GraphWithNamedArgs,
        grads_provided: Iterable[popxl.Tensor] | None,
        grads_required: Iterable[popxl.Tensor] | None,
    ) -> _GradRequest:
        """The arguments of `create_grad_graph`, checked against each other and against the
        signature of `build_grad` (one positional parameter per provided gradient)."""
        who = type(self).__name__
        if not self.implements_grad_graph:
            raise RuntimeError(
                f"{who}: the default implementation of `build_grad` needs to be overridden to use `create_grad_graph`"
            )
        if not isinstance(fwd_graph, GraphWithNamedArgs):
            raise TypeError(
                f"create_grad_graph: fwd_graph must be a GraphWithNamedArgs, got {type(fwd_graph).__name__}"
            )
        fwd = fwd_graph.graph
        params = inspect.signature(self.build_grad).parameters
        for pname, param in params.items():
            if param.kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                raise TypeError(
                    f"{who}.build_grad: the `build_grad` method signature must only "
                    "have a fixed number of positional parameters as inputs. "
                    f"Not a positional parameter: {pname}"
                )
        provided = _check_tensors(grads_provided, fwd.outputs, fwd, "grads_provided", "a output of `fwd_graph`")
        required = _check_tensors(grads_required, fwd.inputs, fwd, "grads_required", "a input of `fwd_graph`")
        if len(params) != len(provided):
            raise ValueError(
                f"{who}.build_grad takes {len(params)} gradients but grads_provided "
                f"has {len(provided)} tensors: they do not match the signature of `build_grad`"
            )
        name_of = {t: k for k, t in fwd_graph.args.to_dict().items()}
        return _GradRequest(
            fwd,
            provided,
            {name_of[t]: t for t in required if t in name_of},
            [t for t in required if t not in name_of],
        )

    def _check_grad_outputs(self, grad: popxl.Graph, req: _GradRequest) -> None:
        """What `build_grad` built: a gradient for every required named input (in
        `self.var_grad`) and, as outputs, one of the shape, meta-shape and dtype of each
        required non-variable input."""
        who = type(self).__name__
        missing = [k for k in req.var_required if k not in self.var_grad]
        if missing:
            raise ValueError(
                f"{who}.build_grad: Not all variable gradients have been "
                "specified in self.var_grad. If you do not want to output all gradients "
                f"specify `grads_required` when calling autodiff. Variables missing gradients: {missing}"
            )
        outs, nonvar = list(grad.outputs), req.nonvar_required
        if len(outs) > len(nonvar):
            raise ValueError(
                f"{who}.build_grad: Too many outputs in the grad graph: it returns "
                f"{len(outs)} tensors, `grads_required` has {len(nonvar)} non-variable inputs. "
                "If you do not want to output all gradients specify `grads_required` when calling autodiff."
            )
        if len(outs) < len(nonvar):
            missing_in = [t.name for t in nonvar[len(outs) :]]
            raise ValueError(
                f"{who}.build_grad: Not all forward graph inputs have been "
                f"specified as outputs in the grad graph: it returns {len(outs)} tensors, "
                f"`grads_required` has {len(nonvar)} non-variable inputs. Outputs missing "
                f"(gradients of): {missing_in}"
            )
        for i, (o, r) in enumerate(zip(outs, nonvar)):
            if tuple(o.shape) != tuple(r.shape) or tuple(o.meta_shape or ()) != tuple(r.meta_shape or ()):
                raise ValueError(
                    f"{who}.build_grad: Shape or meta-shape of output Tensor at "
                    f"position {i} does not match the `grad_required` at position {i} ({r.name!r}). "
                    f"Output Tensor shape: {o.shape} meta-shape {o.meta_shape}. "
                    f"Grad required shape {r.shape} meta-shape {r.meta_shape}."
                )
            if o.dtype != r.dtype:
                raise ValueError(
                    f"{who}.build_grad: output Tensor at position {i} is "
                    f"{o.dtype}, the gradient of {r.name!r} must be {r.dtype}"
                )

    def call_module(
        self,
        module: Module,
        name: str | None = None,
        autodiff: str = "auto",
        grads_provided: Any = None,
        grads_required: Any = None,
    ) -> _CallModule:
        """Outline `module` and call it from the graph being built:
        `(y,) = self.call_module(Linear(4))(x)`.

        The call creates the module's graph, adds its variables as named inputs of this
        module under `name` (default: the module's class name), creates its gradient graph
        now if `autodiff` asks for it ('auto': only when the module defines `build_grad`;
        'build_grad' / 'autodiff': always, with that method; 'none': never) and records it in
        `self.called_graphs_grad_info` for when this module's graph is differentiated, then
        calls the graph. Returns the graph's outputs (without the ones autodiff added).
        `grads_provided` / `grads_required`: functions of the forward `GraphWithNamedArgs`
        returning the tensors to pass to its autodiff.
        """
        if not isinstance(module, Module):
            raise TypeError(f"call_module: expected an addons.Module, got {type(module).__name__}")
        if autodiff not in ("auto", "build_grad", "autodiff", "none"):
            raise ValueError(
                f"call_module: autodiff must be 'auto', 'build_grad', 'autodiff' or 'none', not {autodiff!r}"
            )
        return _CallModule(self, module, name, autodiff, grads_provided, grads_required)

    @classmethod
    def from_variable_factories(cls, inputs: Iterable[VariableFactory]) -> Module:
        """A module whose named inputs '0', '1', ... come from `inputs` (also attributes)."""
        m = cls()
        for i, f in enumerate(inputs):
            if not isinstance(f, VariableFactory):
                raise TypeError(f"from_variable_factories: item {i} is a {type(f).__name__}, not a VariableFactory")
            t = m.add_variable_factory(f, name=str(i))
            object.__setattr__(m, str(i), t)
        return m

    # -- named inputs ------------------------------------------------------------------
    def _check_free(self, name: str, overwrite: bool) -> None:
        if not overwrite and name in self._variable_factories:
            existing = self._variable_factories.get(name)
            if not (isinstance(existing, NamedVariableFactories) and existing.len_flat() == 0):
                raise ValueError(
                    f"{type(self).__name__} already has a named input '{name}'; pass overwrite=True to replace it"
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
        shard_over: int | None = None,
        overwrite: bool = False,
    ) -> Any:
        """Like `add_variable_input`, but the input is one replica's shard of the data."""
        name = str(name)
        self._check_free(name, overwrite)
        tensor, vf = add_replica_sharded_variable_input(name, data_iter, dtype, by_ref, replica_grouping, shard_over)
        return self._add_named(name, vf, tensor, overwrite)

    def add_variable_factory(
        self, variable_f: VariableFactory, name: str | None = None, overwrite: bool = False
    ) -> Any:
        """Add a named input for an existing factory."""
        name = str(name if name is not None else variable_f.name)
        if not name or name == "None":
            raise ValueError("add_variable_factory: the factory has no name; pass name=")
        self._check_free(name, overwrite)
        tensor = variable_f._graph_input(name)
        return self._add_named(name, variable_f, tensor, overwrite)

    def add_variable_inputs(
        self, name: str | int, variable_f: NamedVariableFactories, overwrite: bool = False
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


class _CallModule:
    """The callable `Module.call_module` returns."""

    def __init__(
        self,
        caller: Module,
        callee: Module,
        name: str | None,
        autodiff: str,
        grads_provided: Any,
        grads_required: Any,
    ) -> None:
        self.caller = caller
        self.callee = callee
        self.name = str(name) if name is not None else type(callee).__name__
        self.autodiff = autodiff
        self.grads_provided = grads_provided
        self.grads_required = grads_required
        self.graph: GraphWithNamedArgs | None = None
        self.grad_graph: GraphWithNamedArgs | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> tuple:
        facts, graph = self.callee.create_graph(*args, **kwargs)
        named = self.caller.add_variable_inputs(self.name, facts)
        self.caller.called_graphs_grad_info.update(graph.called_graphs_grad_info)
        n_out = len(graph.graph.outputs)
        if not (self.autodiff == "none" or (self.autodiff == "auto" and not self.callee.implements_grad_graph)):
            provided = self.grads_provided(graph) if callable(self.grads_provided) else self.grads_provided
            required = self.grads_required(graph) if callable(self.grads_required) else self.grads_required
            self.grad_graph = graph.autodiff(method=self.autodiff, grads_provided=provided, grads_required=required)
            self.caller.called_graphs_grad_info.add(graph, self.grad_graph)
        # autodiff first: it can add outputs to the forward graph
        outs = graph.bind(named).call(*args, **kwargs)
        self.graph = graph
        return tuple(outs[:n_out])


def _index_in(t: popxl.Tensor, ts: list[popxl.Tensor]) -> int | None:
    for i, c in enumerate(ts):
        if c is t or c == t:
            return i
    return None


def _input_index(t: popxl.Tensor, inputs: list[popxl.Tensor]) -> int:
    """The position of `t` in `inputs` (a required gradient, checked by `_check_tensors`)."""
    idx = _index_in(t, inputs)
    assert idx is not None, f"{t.name!r} is not a forward graph input"
    return idx


def _check_tensors(
    tensors: Iterable[popxl.Tensor] | None, candidates: tuple, graph: popxl.Graph, what: str, where: str
) -> list[popxl.Tensor]:
    if tensors is None:
        return list(candidates)
    out: list[popxl.Tensor] = []
    for t in tensors:
        if not isinstance(t, popxl.Tensor) or _index_in(t, list(candidates)) is None:
            raise ValueError(f"A Tensor specified in `{what}` is not {where} {graph.name!r} or not a Tensor: {t!r}")
        if any(o is t or o == t for o in out):
            raise ValueError(f"A Tensor has been specified more than once in `{what}`: {t.name!r}")
        out.append(t)
    return out


@dataclass
class _GradRequest:
    """What `Module.create_grad_graph` is asked for: the gradients provided (forward
    outputs) and the gradients required, of named inputs (by name) and of the others."""

    fwd: popxl.Graph
    provided: list[popxl.Tensor]
    var_required: dict[str, popxl.Tensor]
    nonvar_required: list[popxl.Tensor]


def _grad_connections(req: _GradRequest, aux: Aux, who: str) -> tuple[list[tuple[str, int]], list[int]]:
    """The `GradGraphInfo` connections of a gradient graph built by `build_grad`: its inputs
    are the provided gradients, then the aux tensors it read (a forward input is connected
    directly; any other tensor becomes a forward output, added once with the call sites
    updated); its outputs are the non-variable gradients, then the variable ones."""
    fwd = req.fwd
    fwd_inputs = list(fwd.inputs)
    fwd_outputs = list(fwd.outputs)
    expected_inputs: list[tuple[str, int]] = [("fwd_grad", fwd_outputs.index(t)) for t in req.provided]
    new_outputs: list[popxl.Tensor] = []
    for f_t in aux._grad_to_fwd.values():
        if f_t.graph != fwd:
            raise ValueError(f"{who}: aux tensor {f_t.name!r} is not a tensor of the forward graph {fwd.name!r}")
        idx = _index_in(f_t, fwd_inputs)
        if idx is not None:
            expected_inputs.append(("fwd_input", idx))
            continue
        idx = _index_in(f_t, fwd_outputs)
        if idx is None:
            idx = len(fwd_outputs)  # (fwd_outputs holds the new outputs too)
            new_outputs.append(f_t)
            fwd_outputs.append(f_t)
        expected_inputs.append(("fwd_output", idx))
    expected_outputs = [_input_index(t, fwd_inputs) for t in (*req.nonvar_required, *req.var_required.values())]
    if new_outputs:
        _add_forward_outputs(fwd, new_outputs)
    return expected_inputs, expected_outputs


def _add_forward_outputs(graph: popxl.Graph, tensors: list[popxl.Tensor]) -> None:
    """Make `tensors` extra outputs of `graph`; its existing call sites get the results."""
    op = bridge.graph_op(graph)
    if not isinstance(op, GraphOp):
        raise ValueError(f"create_grad_graph: the forward graph {graph.name!r} is the main graph")
    try:
        add_graph_outputs(bridge.module_of(graph.ir), op, [bridge.value_of(t) for t in tensors])
    except CallSiteError as e:
        raise ValueError(f"create_grad_graph: {e}") from None


def create_grad_graph_info(
    ir: Any,
    fwd_graph: popxl.Graph,
    grad_graph: popxl.Graph,
    grad_input_to_fwd_output: Mapping[popxl.Tensor, popxl.Tensor],
    grad_output_to_fwd_input: Mapping[popxl.Tensor, popxl.Tensor],
    fwd_tensors: Iterable[popxl.Tensor],
) -> Any:
    """A `GradGraphInfo` for a hand-built gradient graph (upstream's helper).

    `grad_input_to_fwd_output`: each gradient graph input, in order, with the forward
    tensor it relates to: its gradient (a forward output), or, for tensors in
    `fwd_tensors`, the tensor itself (a forward input or output). `grad_output_to_fwd_input`:
    each gradient graph output with the forward input it is the gradient of.
    """
    fwd_in = list(fwd_graph.inputs)
    fwd_out = list(fwd_graph.outputs)
    fwd_set = list(fwd_tensors)
    expected_inputs: list[tuple[str, int]] = []
    for _g_in, f_t in grad_input_to_fwd_output.items():
        as_fwd = _index_in(f_t, fwd_set) is not None
        i_out = _index_in(f_t, fwd_out)
        if as_fwd:
            i_in = _index_in(f_t, fwd_in)
            if i_in is not None:
                expected_inputs.append(("fwd_input", i_in))
                continue
        if i_out is None:
            raise ValueError(
                f"create_grad_graph_info: tensor {f_t.name!r} is not an output of graph {fwd_graph.name!r}"
            )
        expected_inputs.append(("fwd_output" if as_fwd else "fwd_grad", i_out))
    expected_outputs: list[int] = []
    for _g_out, f_t in grad_output_to_fwd_input.items():
        i_in = _index_in(f_t, fwd_in)
        if i_in is None:
            raise ValueError(f"create_grad_graph_info: tensor {f_t.name!r} is not an input of graph {fwd_graph.name!r}")
        expected_outputs.append(i_in)
    return GradGraphInfo.create(fwd_graph, grad_graph, expected_inputs, expected_outputs)


def _prune_empty(tree: Any) -> None:
    """Drop emptied subtrees left by `_clear` from a snapshot."""
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
