"""Per-op facts that passes, the runtime and the frontend ask about an op, as op traits.

```python
@irdl_op_definition
class GeluOp(_UnaryFloatOp):
    name = "popxl.gelu"
    traits = traits_def(Elementwise())
```

- `Elementwise()`: every result element depends only on the same (broadcast) element of
  the operands; such ops may be fused and may write into an input's storage.
- `ViewLike()`: the single result may be a view of the single operand (no data moves).
- `NoGradient()`: `autodiff` gives no gradient through the op (comparisons, integer and
  random ops, `detach`, constants, host loads): its results never need one.
- `NotDifferentiable()`: the op has no gradient rule; `autodiff` refuses a graph where
  a gradient must flow through it (gradient ops themselves, in-place updates, ...).
  Every other op has a rule registered by class in `xl.passes.grad_rules`
  (`@grad_rule(GeluOp)`); `tests/dialects/test_op_registry.py` checks that each op of each
  dialect is in exactly one of the three cases.
- `Internal()`: built by passes only (the `*_grad` ops, `reduce_to_shape`); every
  other `popxl` op has a `popxl.ops` function.
- `AcceptsViews()`: the op's kernel reads its operands (and writes its written operands)
  through whatever strides and offset NumPy gives them, so the runtime may hand it a
  strided view (`rt.view`: a transposed or reshaped buffer) instead of a contiguous
  copy. Without it, a kernel only ever sees C-contiguous arrays: `rt-views` keeps a
  reshape/transpose a copying kernel when one of its readers does not declare it.
  `tests/runtime/test_kernel_views.py` feeds every declaring kernel transposed, sliced,
  reshaped-of-transposed and offset views.
- `CrossReplica()`: a collective between replicas (`xl.dialects.replica`); the lowering
  and the runtime recognise collectives by it (`is_cross_replica`).
- `Flops(count)`: the floating-point operations of one execution of the op's kernel,
  `count(input_shapes, result_shapes, props)` (`popxl.matmul`: 2 M N K; the convolutions:
  2 x the multiply-adds), as torch.profiler's `with_flops` counts them; read by the
  profiler once when a plan is built (`flop_count`), never per step.
- `PopartType("MatMul")`: the PopART op type `print_schedule` shows, when it is not the
  CamelCase of the op name (`popxl.reduce_sum` -> `ReduceSum`, `popxl.relu_` ->
  `ReluInplace`); see `popart_type`. A frontend call that emits several ops for one PopART
  op (`popxl.ops.split`: slices) marks them with `POPART_OP_ATTR`.

The in-place interface (`InPlaceInterface`, `WritesOperands`) and the memory effects
live in `xl.dialects.effects`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, StringAttr
from xdsl.ir import Operation
from xdsl.traits import OpTrait


@dataclass(frozen=True)
class Elementwise(OpTrait):
    """Each result element depends only on the same (broadcast) element of the operands."""


@dataclass(frozen=True)
class ViewLike(OpTrait):
    """The single result may be a view of the single operand."""


@dataclass(frozen=True)
class NoGradient(OpTrait):
    """`autodiff` propagates no gradient through the op (its results need none)."""


@dataclass(frozen=True)
class NotDifferentiable(OpTrait):
    """No gradient rule: `autodiff` refuses when a gradient must flow through the op."""


@dataclass(frozen=True)
class Internal(OpTrait):
    """Built by passes only (gradient ops, `reduce_to_shape`): no `popxl.ops` function."""


@dataclass(frozen=True)
class PopartType(OpTrait):
    """The PopART op type name of the op (when it differs from the derived one)."""

    type_name: str


OpLike = Operation | type[Operation]


def _cls(op: OpLike) -> type[Operation]:
    return op if isinstance(op, type) else type(op)


def is_elementwise(op: OpLike) -> bool:
    return _cls(op).has_trait(Elementwise)


def is_view_like(op: OpLike) -> bool:
    return _cls(op).has_trait(ViewLike)


def has_no_gradient(op: OpLike) -> bool:
    return _cls(op).has_trait(NoGradient)


def is_not_differentiable(op: OpLike) -> bool:
    return _cls(op).has_trait(NotDifferentiable)


def derived_popart_type(op_name: str) -> str:
    """CamelCase of the op name without its dialect, `Inplace` for a trailing `_`."""
    base = op_name.split(".", 1)[-1]
    inplace = base.endswith("_")
    camel = "".join(p[:1].upper() + p[1:] for p in base.rstrip("_").split("_") if p)
    return camel + ("Inplace" if inplace else "")


def popart_type(op: OpLike) -> str:
    """The PopART op type of an op or op class (`PopartType` trait, else derived)."""
    cls = _cls(op)
    t = cls.get_trait(PopartType)
    return t.type_name if t is not None else derived_popart_type(cls.name)


POPART_OP_ATTR = "popart.op"
"""Discardable attribute of the ops that one frontend call emits together for a single PopART
op: `["Split", part, parts]` on each of the `popxl.slice` ops of `popxl.ops.split` (PopART's one
`SplitOp` with `parts` outputs). `popart._internal.ir` reports such a group as one op.

```mlir
%a = popxl.slice %t {start = array<i64: 0>, stop = array<i64: 2>, axes = array<i64: 0>,
                     popart.op = ["Split", 0 : i64, 2 : i64]} : (tensor<4x2xf32>) -> tensor<2x2xf32>
```
"""


POPART_INTERNAL_ATTR = "popart.internal"
"""Discardable unit attribute of a part of a composed PopART op (`POPART_OP_ATTR`) whose
results are steps inside that op, not among the tensors the frontend call returned (the
`popxl.abs` and the constant of `popxl.ops.isinf`, which PopART computes in its one `IsInf`
op): `popxl.Graph.tensors` does not list them, as PopART's graph has no such tensors.

```mlir
%a = popxl.abs %t {popart.op = ["IsInf", 0 : i64, 3 : i64], popart.internal} : (tensor<2xf32>) -> tensor<2xf32>
```
"""


def is_popart_internal(op: Operation) -> bool:
    """Whether `op` is an internal part of a composed PopART op (`POPART_INTERNAL_ATTR`)."""
    return POPART_INTERNAL_ATTR in op.attributes


def popart_op_part(op: Operation) -> tuple[str, int, int] | None:
    """`(type, part, parts)` when `op` is part `part` of a PopART op made of `parts` ops
    (`POPART_OP_ATTR`), else None."""
    a = op.attributes.get(POPART_OP_ATTR)
    if not isinstance(a, ArrayAttr) or len(a.data) != 3:
        return None
    t, k, n = a.data
    if not (isinstance(t, StringAttr) and isinstance(k, IntegerAttr) and isinstance(n, IntegerAttr)):
        return None
    return t.data, k.value.data, n.value.data


@dataclass(frozen=True)
class CrossReplica(OpTrait):
    """A collective between replicas (`xl.dialects.replica`): its result on one replica
    depends on the operands of the other replicas of its `grouping`. Lowering and the
    runtime recognise collectives by this trait."""


def is_cross_replica(op: OpLike) -> bool:
    return _cls(op).has_trait(CrossReplica)


@dataclass(frozen=True)
class AcceptsViews(OpTrait):
    """The kernel reads (and writes) its operands through any NumPy strides and offset:
    the runtime may give it strided views instead of contiguous buffers."""


def accepts_views(op: OpLike) -> bool:
    return _cls(op).has_trait(AcceptsViews)


Shape = tuple[int, ...]


@dataclass(frozen=True)
class Flops(OpTrait):
    """The floating-point operations one execution of the op's kernel performs:
    `count(input_shapes, result_shapes, props)`, the shapes of the kernel's inputs and
    results in operand order and the op's properties (an `rt.kernel`'s `params`)."""

    count: Callable[[Sequence[Shape], Sequence[Shape], Mapping[str, Any]], int]


def flop_count(op: OpLike, inputs: Sequence[Shape], results: Sequence[Shape], props: Mapping[str, Any]) -> int | None:
    """The `Flops` of one execution of `op` (an op or op class) on these shapes; None when
    the op declares none (its work is not counted in FLOPs, as torch.profiler does for
    everything but matrix products and convolutions)."""
    t = _cls(op).get_trait(Flops)
    return None if t is None else int(t.count(inputs, results, props))
