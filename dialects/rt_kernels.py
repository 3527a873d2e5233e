"""The kernels of the `rt` dialect: the op class an `rt.kernel` implements, and the kernels
that only `rt` optimisations create.

`rt.kernel "popxl.gelu"` names the high-level op it implements; `kernel_class` resolves the
name to that op class through the registered dialects, so whatever a pass or the runtime
asks about a kernel is answered by its class (traits, `xl.dialects.traits`), never by a
table of names. The kernels that `rt` passes make out of several ops belong to no
high-level dialect: they are the op classes below, which carry their facts as traits like
any other op class (they name kernels; no operation of theirs is ever built):

- `xl.gemm_acc` (`GemmAccOp`, made by `rt-fold-update`);
- `xl.fused` (`FusedOp`, made by `rt-fuse-elementwise`);
- `xl.softmax` / `xl.softmax_grad` (`SoftmaxFusedOp`, `SoftmaxGradFusedOp`, made by `rt-fuse-softmax`);
- `xl.gelu_tanh` / `xl.gelu_grad_tanh` (`GeluTanhOp`, `GeluGradTanhOp`) and `xl.geluerf_keep` /
  `xl.geluerf_grad_kept` (`GeluErfKeepOp`, `GeluErfGradKeptOp`), made by `rt-keep-gelu-factor`;
- `xl.all_reduce_update` (`AllReduceUpdateOp`, made by `rt-fold-all-reduce`);
- `xl.all_reduce_gemm_update` (`AllReduceGemmUpdateOp`, made by `rt-fold-all-reduce-gemm`).

```python
from xl.dialects.popxl import GeluOp
from xl.dialects.rt_kernels import FusedOp, kernel_class, writes_results_fully

assert kernel_class("popxl.gelu") is GeluOp
assert kernel_class("xl.fused") is FusedOp and writes_results_fully(FusedOp)
```

Also the rt vocabulary that passes and the runtime share: what a view kernel's output is
(`view_array`, the one definition of a view) and the source attributes of a fused kernel
(`fused_source_attrs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Operation
from xdsl.irdl import IRDLOperation, irdl_op_definition, traits_def

from xl.dialects import get_all_dialects
from xl.dialects.effects import InPlaceInterface, RereadsInputs, WritesOperands, is_partial_write
from xl.dialects.popxl import GeluErfGradOp, GeluErfOp, GeluGradOp, GeluOp, TransposeOp
from xl.dialects.rt import GRAPH_ATTR, SOURCE_ATTR
from xl.dialects.traits import (
    AcceptsViews,
    CrossReplica,
    Elementwise,
    Flops,
    PopartType,
    is_view_like,
    popart_type,
)

KernelClass = type[Operation]


def gemm_acc_flops(inputs: Sequence[tuple[int, ...]], results: Sequence[tuple[int, ...]], props: Any) -> int:
    """The product's 2 M N K, as `popxl.matmul`'s (the scaled accumulation into `c` is not
    counted, as torch counts `addmm`): `c` is `(M, N)`, K the contracting dim of `op(a)`."""
    k = inputs[0][0] if props.get("trans_a") else inputs[0][1]
    return 2 * results[0][0] * results[0][1] * k


@irdl_op_definition
class GemmAccOp(IRDLOperation):
    """`c = alpha * op(a) @ op(b) + beta * c` (2-D, one float dtype; `op` transposes when
    `trans_a` / `trans_b`): a matmul folded with the SGD update of a weight by its result
    (or with a bias add) by `rt-fold-update`. Inputs `(a, b, c)`, `c` written in place.

    ```mlir
    rt.kernel "xl.gemm_acc"(%x, %dy, %w) -> (%w)
        {alpha = -5.000000e-02 : f64, beta = 1.000000e+00 : f64, trans_a = true, trans_b = false}
        : (memref<2x4xf32>, memref<2x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
    ```

    With a fourth input, a one-element step counter `s` read when the kernel runs, there
    are no `alpha` / `beta` attributes: `alpha = 1 / (s + 1)`, `beta = s / (s + 1)`, the
    running mean of the products (`popxl.accumulate_mean_` of a matmul's result, folded),
    rounded as that kernel rounds it (`c * beta` plus the product scaled by `alpha`):

    ```mlir
    rt.kernel "xl.gemm_acc"(%x, %dy, %acc, %n) -> (%acc) {trans_a = true, trans_b = false}
        : (memref<2x4xf32>, memref<2x3xf32>, memref<4x3xf32>, memref<f32>) -> memref<4x3xf32>
    ```
    """

    name = "xl.gemm_acc"
    traits = traits_def(WritesOperands((2,)), AcceptsViews(), Flops(gemm_acc_flops))


@irdl_op_definition
class FusedOp(IRDLOperation):
    """A chain of elementwise kernels writing one output (`rt-fuse-elementwise`): `steps`
    lists each step's kernel, its arguments (input index, -1 the previous step's result)
    and its parameters. Every step writes the output, and later steps read the inputs
    again, so an input may not share storage with the output (`RereadsInputs`).

    ```mlir
    rt.kernel "xl.fused"(%z) -> (%t)
        {steps = [{kernel = "popxl.gelu", args = array<i64: 0>}, {kernel = "popxl.tanh", args = array<i64: -1>}]}
        : (memref<2x3xf32>) -> memref<2x3xf32>
    ```
    """

    name = "xl.fused"
    # its steps are elementwise kernels, and every elementwise kernel accepts views
    traits = traits_def(RereadsInputs(), AcceptsViews())


@irdl_op_definition
class SoftmaxFusedOp(IRDLOperation):
    """`softmax(prologue(inputs))` along `axis` (`rt-fuse-softmax`): the elementwise kernels
    of `steps` (as `xl.fused`'s: each writes the output, `-1` its previous value) compute the
    scores in the output buffer, the softmax normalises them in place. An attention's
    `matmul -> mul(scale) -> add(mask) -> softmax` without the scores' own buffer. Rows whose
    shift must be recomputed run the prologue again, so an input may not share storage with
    the output (`RereadsInputs`).

    ```mlir
    rt.kernel "xl.softmax"(%qk, %scale, %mask) -> (%p)
        {axis = -1 : i64, steps = [{kernel = "popxl.mul", args = array<i64: 0, 1>},
                                   {kernel = "popxl.add", args = array<i64: -1, 2>}]}
        : (memref<2x4x8x8xf32>, memref<f32>, memref<8x8xf32>) -> memref<2x4x8x8xf32>
    ```
    """

    name = "xl.softmax"
    traits = traits_def(RereadsInputs(), AcceptsViews())


@irdl_op_definition
class SoftmaxGradFusedOp(IRDLOperation):
    """`epilogue(softmax_grad(dy, y))` along `axis` (`rt-fuse-softmax`): inputs `(dy, y,
    *others)`; the softmax gradient is written to the output, then the elementwise kernels
    of `steps` update it in place (`-1` the output, `k >= 0` input k), e.g. the scale of
    an attention's scores. Later steps read inputs after the output is written
    (`RereadsInputs`).

    ```mlir
    rt.kernel "xl.softmax_grad"(%dy, %y, %scale) -> (%dx)
        {axis = -1 : i64, steps = [{kernel = "popxl.mul", args = array<i64: -1, 2>}]}
        : (memref<2x4x8x8xf32>, memref<2x4x8x8xf32>, memref<f32>) -> memref<2x4x8x8xf32>
    ```
    """

    name = "xl.softmax_grad"
    traits = traits_def(RereadsInputs(), AcceptsViews())


@irdl_op_definition
class GeluGradTanhOp(IRDLOperation):
    """`popxl.gelu_grad` reading `t = tanh(u)` from `xl.gelu_tanh` (`rt-keep-gelu-factor`):
    inputs `(dy, x, t)`, the bits of `popxl.gelu_grad(dy, x)`.

    ```mlir
    rt.kernel "xl.gelu_grad_tanh"(%dy, %x, %t) -> (%dx)
        : (memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
    ```
    """

    name = "xl.gelu_grad_tanh"
    traits = traits_def(Elementwise(), AcceptsViews(), PopartType(popart_type(GeluGradOp)))
    REPLACES: ClassVar[KernelClass] = GeluGradOp


@irdl_op_definition
class GeluTanhOp(IRDLOperation):
    """`popxl.gelu` (tanh approximation) that also writes the `t = tanh(u)` it computes,
    `u = sqrt(2/pi) (x + 0.044715 x^3)`, for `xl.gelu_grad_tanh` to read instead of
    computing it again (`rt-keep-gelu-factor`). Results `(y, t)`, the bits of `popxl.gelu`'s
    and of the `t` inside `popxl.gelu_grad`.

    ```mlir
    rt.kernel "xl.gelu_tanh"(%x) -> (%y, %t) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
    ```
    """

    name = "xl.gelu_tanh"
    traits = traits_def(Elementwise(), AcceptsViews(), PopartType(popart_type(GeluOp)))  # profiles show Gelu
    REPLACES: ClassVar[KernelClass] = GeluOp  # the kernel `rt-keep-gelu-factor` turns into this one
    GRADIENT: ClassVar[type[GeluGradTanhOp]] = GeluGradTanhOp  # ... and the gradient kernels of its input into this
    KEEPS_FLOAT64: ClassVar[bool] = False  # the kept factor has the result's type


@irdl_op_definition
class GeluErfGradKeptOp(IRDLOperation):
    """`popxl.geluerf_grad` reading `h = 0.5 (1 + erf(x / sqrt(2)))` (float64) from
    `xl.geluerf_keep` (`rt-keep-gelu-factor`): inputs `(dy, x, h)`, the bits of
    `popxl.geluerf_grad(dy, x)`.

    ```mlir
    rt.kernel "xl.geluerf_grad_kept"(%dy, %x, %h) -> (%dx)
        : (memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf64>) -> memref<2x3xf32>
    ```
    """

    name = "xl.geluerf_grad_kept"
    traits = traits_def(Elementwise(), AcceptsViews(), PopartType(popart_type(GeluErfGradOp)))
    REPLACES: ClassVar[KernelClass] = GeluErfGradOp


@irdl_op_definition
class GeluErfKeepOp(IRDLOperation):
    """`popxl.geluerf` that also writes the float64 factor `h = 0.5 (1 + erf(x / sqrt(2)))`
    it computes (`y = h x`), for `xl.geluerf_grad_kept` to read instead of computing the
    erf again (`rt-keep-gelu-factor`). Results `(y, h)`, the bits of `popxl.geluerf`'s.

    ```mlir
    rt.kernel "xl.geluerf_keep"(%x) -> (%y, %h) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf64>)
    ```
    """

    name = "xl.geluerf_keep"
    traits = traits_def(Elementwise(), AcceptsViews(), PopartType(popart_type(GeluErfOp)))
    REPLACES: ClassVar[KernelClass] = GeluErfOp
    GRADIENT: ClassVar[type[GeluErfGradKeptOp]] = GeluErfGradKeptOp
    KEEPS_FLOAT64: ClassVar[bool] = True


@irdl_op_definition
class AllReduceUpdateOp(IRDLOperation):
    """`w += scale * reduce(g over the group)` on every replica, a replica collective made
    by `rt-fold-all-reduce` from an all-reduce of a gradient and the SGD update it feeds
    (`op` add or mean). Inputs `(g, w)`, both written (`g` is left holding a partial sum).

    ```mlir
    rt.kernel "xl.all_reduce_update"(%g, %w) -> (%g, %w)
        {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean", scale = -5.000000e-02 : f64}
        : (memref<4x3xf32>, memref<4x3xf32>) -> (memref<4x3xf32>, memref<4x3xf32>)
    ```
    """

    name = "xl.all_reduce_update"
    traits = traits_def(WritesOperands((0, 1)), CrossReplica(), AcceptsViews())
    # the weight every member updates: (input index, output index)
    UPDATED_WEIGHT: ClassVar[tuple[int, int]] = (1, 1)


@irdl_op_definition
class AllReduceGemmUpdateOp(IRDLOperation):
    """`w += scale * reduce(op(a) @ op(b) over the group)` on every replica (`op` add or
    mean; `op(a)` transposes when `trans_a`, `op(b)` when `trans_b`): an `xl.all_reduce_update`
    with the weight-gradient matmul that fed it, made by `rt-fold-all-reduce-gemm`. The
    replicas of a process sum their products into one buffer (an accumulating gemm each)
    instead of each writing its own gradient for the collective to read back. Inputs
    `(a, b, w)`, output `w`.

    ```mlir
    rt.kernel "xl.all_reduce_gemm_update"(%x, %dy, %w) -> (%w)
        {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "mean", scale = -5.000000e-02 : f64,
         trans_a = true, trans_b = false}
        : (memref<8x4xf32>, memref<8x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
    ```
    """

    name = "xl.all_reduce_gemm_update"
    traits = traits_def(WritesOperands((2,)), CrossReplica(), AcceptsViews(), Flops(gemm_acc_flops))
    UPDATED_WEIGHT: ClassVar[tuple[int, int]] = (2, 0)


def replica_update_weight(cls: KernelClass | None) -> tuple[int, int] | None:
    """(input index, output index) of the weight a fused replica update (`xl.all_reduce_update`,
    `xl.all_reduce_gemm_update`) adds the group's reduced gradient to; None for other kernels."""
    return getattr(cls, "UPDATED_WEIGHT", None) if cls is not None else None


# the gelu kernels that keep a factor for their gradients (`rt-keep-gelu-factor`)
KEEPING_GELUS: tuple[type[GeluTanhOp] | type[GeluErfKeepOp], ...] = (GeluTanhOp, GeluErfKeepOp)

RT_KERNEL_OPS: tuple[KernelClass, ...] = (
    GemmAccOp,
    FusedOp,
    AllReduceUpdateOp,
    AllReduceGemmUpdateOp,
    SoftmaxFusedOp,
    SoftmaxGradFusedOp,
    GeluTanhOp,
    GeluGradTanhOp,
    GeluErfKeepOp,
    GeluErfGradKeptOp,
)

_BY_NAME: dict[str, KernelClass] | None = None


def _by_name() -> dict[str, KernelClass]:
    global _BY_NAME
    if _BY_NAME is None:
        ops: dict[str, KernelClass] = {}
        for factory in get_all_dialects().values():
            for cls in factory().operations:
                ops[cls.name] = cls
        for cls in RT_KERNEL_OPS:
            if cls.name in ops:
                raise TypeError(f"rt kernel '{cls.name}' is also an op of a dialect")
            ops[cls.name] = cls
        _BY_NAME = ops
    return _BY_NAME


def kernel_class(name: str) -> KernelClass | None:
    """The op class an `rt.kernel` of this name implements; None if there is none."""
    return _by_name().get(name)


def writes_results_fully(cls: KernelClass | None) -> bool:
    """Kernels of `cls` overwrite every element of each result without reading it first:
    those of op classes that update no operand in place (`InPlaceInterface`) and do not
    declare `PartialWrite`."""
    return cls is not None and cls.get_trait(InPlaceInterface) is None and not is_partial_write(cls)


def view_array(
    cls: KernelClass | None, x: np.ndarray, shape: Sequence[int], perm: Sequence[int] | None
) -> np.ndarray | None:
    """The NumPy view of `x` that the output of a kernel of op class `cls` is bound to, or
    None when `cls` is not view-like (`ViewLike`) or NumPy cannot express the view without
    copying (e.g. flattening a transposed view). `popxl.transpose` permutes the axes
    (`perm`, default reversed); the other view-like ops keep the C order.

    `rt-views` checks chains of views with it on stride-only stand-ins, and both plans bind
    view outputs with it."""
    if cls is None or not is_view_like(cls):
        return None
    if cls is TransposeOp:
        order = tuple(int(a) for a in perm) if perm is not None else tuple(range(x.ndim))[::-1]
        if sorted(order) != list(range(x.ndim)):
            return None
        v = x.transpose(order)
    else:
        try:
            v = np.reshape(x, tuple(shape), copy=False)
        except ValueError:
            return None
    return v if v.shape == tuple(shape) else None


def _str_attr(op: Operation, key: str) -> str | None:
    a = op.attributes.get(key)
    return a.data if isinstance(a, StringAttr) else None


def fused_source_attrs(*ops: Operation) -> dict[str, Attribute]:
    """The source attributes of a kernel an rt pass fuses from `ops` (in program order):
    their sources joined (`MatMul.101+Add.102`, `rt.source`), the first one's graph
    (`rt.graph`)."""
    names: list[str] = []
    for op in ops:
        name = _str_attr(op, SOURCE_ATTR)
        if name and name not in names:
            names.append(name)
    attrs: dict[str, Attribute] = {}
    if names:
        attrs[SOURCE_ATTR] = StringAttr("+".join(names))
    graph = next((g for g in (_str_attr(op, GRAPH_ATTR) for op in ops) if g), None)
    if graph:
        attrs[GRAPH_ATTR] = StringAttr(graph)
    return attrs
