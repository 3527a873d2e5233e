"""Which op class an `rt.kernel` implements, resolved once at compile time.

`rt.kernel "popxl.gelu"` carries the name of the high-level op it implements. Kernels,
plan templates and the `rt` passes are registered by op class (`@kernel(GeluOp)`); the
name is resolved to the class through the registered dialects (`xl.dialects`), so there
is no table of op names to keep in sync. Kernels that only `rt` optimisation passes
create (`xl.gemm_acc`, `xl.fused`) have no dialect op: they are `RtKernel` subclasses,
registered by defining them.

```python
from xl.runtime.registry import kernel_class
from xl.dialects.popxl import GeluOp

assert kernel_class("popxl.gelu") is GeluOp
```
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.ir import Operation

from xl.dialects import get_all_dialects
from xl.dialects.traits import AcceptsViews, Elementwise, ViewLike

KernelClass = type[Operation] | type["RtKernel"]


class RtKernel:
    """A kernel that the `rt` optimisations create and no dialect defines.

    Subclasses name the kernel (`name = "xl.gemm_acc"`) and state its facts as class
    attributes, as op classes do with traits.
    """

    name: ClassVar[str]
    elementwise: ClassVar[bool] = False
    full_write: ClassVar[bool] = False
    # Reads its inputs again after writing its output, so not even an input that is the
    # output array itself is safe (runtime/aliasing.py).
    rereads_inputs: ClassVar[bool] = False
    # Reads its inputs through any NumPy strides (the `AcceptsViews` trait of op classes).
    accepts_views: ClassVar[bool] = False

    _by_name: ClassVar[dict[str, type[RtKernel]]] = {}

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        if cls.name in RtKernel._by_name:
            raise TypeError(f"rt kernel '{cls.name}' is defined twice")
        RtKernel._by_name[cls.name] = cls


class GemmAccKernel(RtKernel):
    """`c = alpha * op(a) @ op(b) + beta * c` (`rt-fold-update`)."""

    name = "xl.gemm_acc"
    accepts_views = True


class FusedKernel(RtKernel):
    """A chain of elementwise steps writing one output (`rt-fuse-elementwise`)."""

    name = "xl.fused"
    full_write = True
    rereads_inputs = True
    accepts_views = True


class AllReduceUpdateKernel(RtKernel):
    """`w += scale * reduce(g over the group)` on every replica, a replica collective
    (`rt-fold-all-reduce`; `g` is left holding a partial sum)."""

    name = "xl.all_reduce_update"
    accepts_views = True


_OPS: dict[str, type[Operation]] | None = None


def _ops() -> dict[str, type[Operation]]:
    global _OPS
    if _OPS is None:
        ops: dict[str, type[Operation]] = {}
        for factory in get_all_dialects().values():
            for cls in factory().operations:
                ops[cls.name] = cls
        _OPS = ops
    return _OPS


def kernel_class(name: str) -> KernelClass | None:
    """The op class (or `RtKernel`) an `rt.kernel` of this name implements; None if none."""
    cls = _ops().get(name)
    if cls is not None:
        return cls
    return RtKernel._by_name.get(name)


def is_elementwise(cls: KernelClass | None) -> bool:
    """Each output element depends only on the same (broadcast) element of the inputs."""
    if cls is None:
        return False
    if issubclass(cls, RtKernel):
        return cls.elementwise
    return cls.has_trait(Elementwise)


def is_view_like(cls: KernelClass | None) -> bool:
    """The single output may be a NumPy view of the single input."""
    return cls is not None and not issubclass(cls, RtKernel) and cls.has_trait(ViewLike)


def accepts_views(cls: KernelClass | None) -> bool:
    """The kernel reads its operands through any NumPy strides (`AcceptsViews`): the
    optimised plan may give it a strided view instead of a contiguous buffer."""
    if cls is None:
        return False
    if issubclass(cls, RtKernel):
        return cls.accepts_views
    return cls.has_trait(AcceptsViews)
