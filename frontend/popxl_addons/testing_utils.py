"""Testing helpers (popxl_addons/testing_utils.py): run a module on NumPy data.

```python
(y,) = run_module(Linear(2), TensorInput(x_np, popxl.float32),
                  weights=lambda v: {v.weight: w_np, v.bias: b_np})
```
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

import popxl
from popxl_addons.module import Module
from popxl_addons.named_tensors import NamedTensors
from popxl_addons.ops.host_io import host_store

__all__ = ["TensorInput", "run_module", "ops_of_type"]


def ops_of_type(ops: Iterable[Any], op_type: type) -> int:
    """How many of `ops` are instances of `op_type` (e.g. IR op classes of a graph's block)."""
    return sum(1 for op in ops if isinstance(op, op_type))


class TensorInput:
    """NumPy (or other host) data to become a variable input of `run_module`; `dtype`
    defaults to the data's (float64 becomes float32, as `popxl.variable` does)."""

    def __init__(self, data: Any, dtype: popxl.dtype | None = None) -> None:
        if dtype is not None and not isinstance(dtype, popxl.dtype):
            raise TypeError(f"TensorInput: dtype must be a popxl.dtype, got {type(dtype).__name__}")
        self.data = data
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"TensorInput(shape={np.shape(self.data)}, dtype={self.dtype})"


def run_module(
    module: Module,
    *args: Any,
    weights: Callable[[NamedTensors], Mapping[Any, np.ndarray]] | Mapping[Any, np.ndarray] | None = None,
    **kwargs: Any,
) -> list[np.ndarray]:
    """Build `module` into a graph of a new Ir, call it and return its outputs as NumPy arrays.

    `TensorInput` arguments become main-graph variables passed to the graph; other
    arguments are passed to `build` as they are. `weights`: {variable: data} (or a function
    of the module's variables returning it) written before the run.
    """
    if not isinstance(module, Module):
        raise TypeError(f"run_module: expected an addons.Module, got {type(module).__name__}")

    def to_var(a: Any) -> Any:
        if isinstance(a, TensorInput):
            return popxl.variable(a.data, dtype=a.dtype)
        return a

    ir = popxl.Ir()
    with ir.main_graph:
        new_args = [to_var(a) for a in args]
        new_kwargs = {k: to_var(v) for k, v in kwargs.items()}
        facts, graph = module.create_graph(*new_args, **new_kwargs)
        variables = facts.init()
        t_args = [a for a in new_args if isinstance(a, popxl.Tensor)]
        t_kwargs = {k: a for k, a in new_kwargs.items() if isinstance(a, popxl.Tensor)}
        by_name: dict[Any, Any] = {}
        for k, t in t_kwargs.items():
            match = [g for g in graph.graph.inputs if g.name.split("/")[-1] == k]
            if len(match) != 1:
                raise ValueError(f"run_module: the graph of {type(module).__name__} has no input named {k!r}")
            by_name[match[0]] = t
        outputs = graph.bind(variables).call(*t_args, args=by_name)
        streams = [host_store(o) for o in outputs]
    with popxl.Session(ir, "cpu") as session:
        if weights is not None:
            w = weights(variables) if callable(weights) else weights
            session.write_variables_data(dict(w))
        outs = session.run()
    return [outs[s] for s in streams]
