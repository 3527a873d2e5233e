"""`popxl.custom_ops`: run a program's custom (C++ PopART) op on NumPy, under the name the
program uses.

An op written in C++ for PopART and bound with pybind11 (upstream applications build them
with `cppimport`) cannot run in xl. `custom_op(op_type, forward, grad=...)` registers a
NumPy implementation of it (`xl.dialects.custom_ops`) and returns a `CustomOpDef`, which
builds the op (a `popxl.custom` op carrying `op_type` and the attributes) in two ways:

- called from popxl code: `RotaryPosEmbedOp(x, sin, cos, rotary_dim=16)` returns the
  output tensor (a tuple when `num_outputs > 1`);
- as the PopART binding the program calls, unchanged:
  `RotaryPosEmbedOp.createOpInGraph(g._pb_graph, {0: x.id, ...}, {0: g._create_tensor_id("y")},
  rotary_dim, settings)` followed by `ctx._op_created(op)` and
  `popxl.Tensor._from_pb_tensor(op.outTensor(0))`. The attribute values come positionally
  in the order of `attributes=`, then the op settings.

So a program whose binding module is `rotary_pos_embed_binding` (compiled from
`rotary_pos_embed_binding.cpp`) runs as written when a Python module of that name defines
`RotaryPosEmbedOp = custom_op("RotaryPosEmbedOp", ...)` (docs/custom_ops.md). `autodiff`
differentiates the op with `grad`; without one, a gradient through it is refused.

```python
import numpy as np
from popxl.custom_ops import custom_op

Scale = custom_op("Scale", forward=lambda x, *, factor: factor * x,
                  grad=lambda dy, x, *, factor: (factor * dy,), attributes=("factor",))
with ir.main_graph:
    y = Scale(x, factor=2.0)
```
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from popxl.context import gcg
from popxl.graph import Graph
from popxl.ops._utils import emit
from popxl.tensor import Tensor
from xl.dialects.custom_ops import CustomOpDefinition, Spec, register_custom_op
from xl.dialects.popxl import CustomOp, attributes_attr
from xl.dialects.utils import tensor_type

__all__ = ["CustomOpDef", "CustomOpHandle", "custom_op"]


class CustomOpHandle:
    """What `CustomOpDef.createOpInGraph` returns, as PopART's op object is used:
    `outTensor(i)` (for `popxl.Tensor._from_pb_tensor`), `opid`, `getGraph()`."""

    def __init__(self, op_type: str, outputs: Sequence[Tensor], graph: Graph) -> None:
        self.opid = op_type
        self._outputs = tuple(outputs)
        self._graph = graph

    def outTensor(self, index: int) -> Tensor:
        """Output `index` of the op; IndexError naming the op when it has no such output."""
        if not 0 <= index < len(self._outputs):
            raise IndexError(f"custom op {self.opid!r}: no output {index} (it has {len(self._outputs)})")
        return self._outputs[index]

    def getGraph(self) -> Graph:
        """The graph the op was created in."""
        return self._graph

    def __repr__(self) -> str:
        return f"<custom op {self.opid!r} -> {', '.join(t.id for t in self._outputs)}>"


class CustomOpDef:
    """A custom op with a NumPy implementation (made by `custom_op`): call it on tensors,
    or through `createOpInGraph` as the program's PopART binding."""

    def __init__(self, definition: CustomOpDefinition, attributes: Sequence[str]) -> None:
        self.definition = definition
        self.attributes = tuple(attributes)

    @property
    def op_type(self) -> str:
        """The op type the program calls the op by (`"RotaryPosEmbedOp"`)."""
        return self.definition.op_type

    def __call__(self, *inputs: Tensor, names: Sequence[str] | None = None, **attributes: Any) -> Any:
        """Builds the op on `inputs` in the current graph; the output tensor, or a tuple of
        them when the op has several."""
        outs = self._build(list(inputs), attributes, names)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def createOpInGraph(
        self, graph: Any, inputs: Mapping[int, str], outputs: Mapping[int, str], *args: Any
    ) -> CustomOpHandle:
        """PopART's binding form: `graph` (`g._pb_graph` or a popxl Graph), input and output
        tensor ids by index, the attribute values in the order of `attributes`, then
        (optionally) the op settings."""
        what = f"{self.op_type}.createOpInGraph"
        g = graph.popxl_graph if hasattr(graph, "popxl_graph") else graph
        if not isinstance(g, Graph):
            raise TypeError(f"{what}: expected a graph (g._pb_graph), got {type(graph).__name__}")
        n = len(self.attributes)
        if len(args) not in (n, n + 1):
            raise TypeError(
                f"{what}: expected {n} attribute value(s) ({', '.join(self.attributes) or 'none'}) "
                f"then optional settings, got {len(args)} argument(s)"
            )
        attrs = dict(zip(self.attributes, args[:n]))
        ins = _by_index(what, "inputs", inputs)
        outs = _by_index(what, "outputs", outputs)
        if len(outs) != self.definition.num_outputs:
            raise ValueError(f"{what}: {len(outs)} output id(s) given, the op has {self.definition.num_outputs}")
        tensors = []
        for i, tid in enumerate(ins):
            try:
                tensors.append(g.get_tensor(tid))
            except ValueError:
                raise ValueError(f"{what}: input {i}: graph {g.name!r} has no tensor {tid!r}") from None
        if gcg() is not g:
            raise ValueError(f"{what}: graph {g.name!r} is not the current graph {gcg().name!r}")
        return CustomOpHandle(self.op_type, self._build(tensors, attrs, outs), g)

    def _build(self, inputs: list[Tensor], attributes: dict[str, Any], names: Sequence[str] | None) -> list[Tensor]:
        what = f"custom op {self.op_type!r}"
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"{what}: input {i} is a {type(t).__name__}, not a popxl Tensor")
        unknown = sorted(set(attributes) - set(self.attributes))
        if unknown:
            raise TypeError(f"{what}: unknown attribute(s) {unknown}; it has {list(self.attributes)}")
        missing = [a for a in self.attributes if a not in attributes]
        if missing:
            raise TypeError(f"{what}: missing attribute(s) {missing}")
        specs: list[Spec] = [(tuple(t.shape), t.dtype._compute_np()) for t in inputs]
        out_specs = self.definition.specs(specs, dict(attributes))
        result_types = [tensor_type(s, dt) for s, dt in out_specs]
        return emit(
            CustomOp,
            inputs,
            result_types,
            list(names) if names is not None else None,
            op_type=self.op_type,
            attrs=attributes_attr(dict(attributes)),
        )

    def __repr__(self) -> str:
        return f"CustomOpDef({self.op_type!r}, attributes={self.attributes})"


def _by_index(what: str, kind: str, ids: Mapping[int, str]) -> list[str]:
    if not isinstance(ids, Mapping) or sorted(ids) != list(range(len(ids))):
        raise TypeError(f"{what}: {kind} must map the indices 0..n-1 to tensor ids, got {ids!r}")
    return [str(ids[i]) for i in range(len(ids))]


def custom_op(
    op_type: str,
    forward: Callable[..., Any],
    grad: Callable[..., Any] | None = None,
    *,
    attributes: Sequence[str] = (),
    num_outputs: int = 1,
    output_specs: Callable[[Sequence[Spec], dict[str, Any]], Sequence[Spec]] | None = None,
    replace: bool = True,
) -> CustomOpDef:
    """Registers a NumPy implementation of the custom op `op_type` and returns the op.

    - `forward(*inputs, **attributes)` -> the output array (a tuple of `num_outputs`).
    - `grad(*output_grads, *inputs, **attributes)` -> one entry per input: its gradient
      (shape of the input) or None. Optional; without it autodiff refuses the op.
    - `attributes`: the attribute names, in the order `createOpInGraph` receives them.
    - `output_specs(input_specs, attributes)` -> `(shape, dtype)` of each output; by
      default each output is shaped like input 0.
    - `replace`: a new definition under the same name replaces the old (a module defining
      it imported again); `False` refuses it.
    """
    if isinstance(attributes, str) or not all(isinstance(a, str) for a in attributes):
        raise TypeError(f"custom_op {op_type!r}: attributes must be a sequence of names, got {attributes!r}")
    definition = CustomOpDefinition(op_type, forward, grad, num_outputs, output_specs)
    register_custom_op(definition, replace=replace)
    return CustomOpDef(definition, attributes)
