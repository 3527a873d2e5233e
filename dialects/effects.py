"""Memory effects and the in-place interface shared by the `graph`, `popxl` and `call` dialects.

An op that updates some of its operands in place declares it with one trait,
`InPlaceInterface` (MLIR: an op interface); `written_operands(op)` asks it:

```python
@irdl_op_definition
class ScaledAddInplaceOp(PopxlOp):
    name = "popxl.scaled_add_"
    traits = traits_def(WritesOperands((0,)))   # updates operand 0
```

`WritesOperands(indices)` is the static form; ops whose written operands depend on the
instance (an optional `time_step`, a by-reference input of the called graph) implement
`InPlaceInterface.written_operands(op)` themselves. Everything that asks "does this op
write that tensor" (CSE/DCE effects, `autodiff`, `functionalize`, `inline`, the lowering
to `rt`) goes through `written_operands` / `is_written`.

Effects: `TensorOpEffect` reads the operands and writes the written ones; an op whose
result is later updated in place reports unknown effects (CSE never merges a tensor
that is mutated afterwards); `AllocEffect` is a fresh tensor.

How an op's kernel writes its buffers (what the `rt` passes and the runtime ask):

- every kernel that updates no operand in place overwrites its results fully, without
  reading them, unless the class declares `PartialWrite()` (it may leave part of a result
  as it was: `popxl.init` in `undef` mode, a remote store of one entry, padding written
  once); `rt-reuse-buffers` and `rt-fold-all-reduce` rely on it
  (`xl.dialects.rt_kernels.writes_results_fully`);
- `RereadsInputs()`: the kernel reads its inputs again after writing its output
  (`xl.fused`), so even an input that is the output array itself must be copied first
  (`xl.runtime.aliasing`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from xdsl.ir import Operation, SSAValue
from xdsl.traits import EffectInstance, MemoryEffect, MemoryEffectKind, OpTrait


class InPlaceInterface(OpTrait, ABC):
    """The op updates some of its operands in place."""

    @abstractmethod
    def written_operands(self, op: Operation) -> tuple[int, ...]:
        """Indices of the operands `op` updates in place."""
        raise NotImplementedError


@dataclass(frozen=True)
class WritesOperands(InPlaceInterface):
    """The op always updates operands `indices` in place (default: its first operand)."""

    indices: tuple[int, ...] = (0,)

    def written_operands(self, op: Operation) -> tuple[int, ...]:
        return self.indices

    def verify(self, op: Operation) -> None:
        from xdsl.utils.exceptions import VerifyException

        for w in self.indices:
            if not 0 <= w < len(op.operands):
                raise VerifyException(f"{op.name}: writes operand {w}, but has {len(op.operands)} operands")


# The in-place trait of each op class (traits belong to the class; xDSL's `get_trait`
# scans them on every call, and the effect queries ask this for every use of a value).
_IN_PLACE: dict[type[Operation], InPlaceInterface | None] = {}


def written_operands(op: Operation) -> tuple[int, ...]:
    """Indices of the operands `op` updates in place (() for ops without `InPlaceInterface`)."""
    cls = type(op)
    try:
        t = _IN_PLACE[cls]
    except KeyError:
        t = _IN_PLACE[cls] = cls.get_trait(InPlaceInterface)
    return () if t is None else t.written_operands(op)


def writes_operand(op: Operation, index: int) -> bool:
    """Whether `op` updates operand `index` in place."""
    return index in written_operands(op)


def is_written(value: SSAValue) -> bool:
    """Whether some op updates `value` in place (an in-place op or a by-ref call input)."""
    return any(use.index in written_operands(use.operation) for use in value.uses)


@dataclass(frozen=True)
class PartialWrite(OpTrait):
    """The op's kernel may leave part of a result as it was (not every element written every call)."""


def is_partial_write(op: Operation | type[Operation]) -> bool:
    return (op if isinstance(op, type) else type(op)).has_trait(PartialWrite)


@dataclass(frozen=True)
class RereadsInputs(OpTrait):
    """The op's kernel reads its inputs again after it has written its output."""


def rereads_inputs(op: Operation | type[Operation]) -> bool:
    return (op if isinstance(op, type) else type(op)).has_trait(RereadsInputs)


class AllocEffect(MemoryEffect):
    """A fresh tensor: removable when unused, never merged with another."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        return {EffectInstance(MemoryEffectKind.ALLOC, r) for r in op.results}


_ALLOCATES: dict[type[Operation], bool] = {}


def _allocates(cls: type[Operation]) -> bool:
    a = _ALLOCATES.get(cls)
    if a is None:
        a = _ALLOCATES[cls] = cls.has_trait(AllocEffect)
    return a


class TensorOpEffect(MemoryEffect):
    """Reads the operands; writes the operands of `written_operands(op)`.

    An op whose result is later updated in place reports unknown effects, so that
    CSE never merges a tensor that is mutated afterwards. Ops that also have the
    `AllocEffect` trait (`popxl.init`) get their effects from that trait alone:
    an allocation is never merged anyway. Ops with both written operands and
    results (the `*_updater` ops) report read + write.
    """

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        if _allocates(type(op)):
            return set()
        if any(is_written(r) for r in op.results):
            return None
        effects: set[EffectInstance] = set()
        if op.operands:
            effects.add(EffectInstance(MemoryEffectKind.READ))
        if written_operands(op):
            effects.add(EffectInstance(MemoryEffectKind.WRITE))
        return effects


class ValueEffect(MemoryEffect):
    """Value semantics for tensor-producing ops outside `popxl` (`graph.variable`, ...):
    the same effects as `TensorOpEffect`, returned as a fresh set."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        effects = TensorOpEffect.get_effects(op)
        return None if effects is None else set(effects)
