"""`popart._internal.ir.op`: PopART's op classes, one per PopART op type that an xl op
becomes. The type is the xl op class's fact (`popart_type`: its `PopartType` trait, else
derived from its name); the class is named as PopART's C++ class: `<type>Op`, but for the
types PopART names otherwise (`_CLASS_NAMES`: `Sub` -> `SubtractOp`,
`GroupNormalization` -> `GroupNormOp`, ...). Every class derives from `Op`; an object of
one is what `Graph.getOps()` gives for an op of a graph.

```python
import popart._internal.ir as _ir

_ir.op.MatMulOp.opType  # 'MatMul'
```
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from xdsl.ir import Operation
from xdsl.irdl import IRDLOperation
from xdsl.traits import IsTerminator

from xl.dialects import get_all_dialects
from xl.dialects import graph as _graph
from xl.dialects.traits import popart_op_part, popart_type

__all__ = ["Op", "OptimizerValue", "op_class", "op_classes", "op_of", "ops_of"]

_CLASS_NAMES = {
    "Sub": "SubtractOp",
    "Neg": "NegateOp",
    "GroupNormalization": "GroupNormOp",
    "GroupNormalizationGrad": "GroupNormGradOp",
    "BatchNormalization": "BatchNormOp",
    "OneHot": "OnehotOp",
    "IsInf": "IsInf",
    "IsNaN": "IsNaN",
    "PopartSparseAccumulate": "SparseAccumulateOp",
    "PopartTiedGather": "TiedGatherOp",
}
"""PopART's C++ class of the op types whose class is not `<type>Op`."""

_COMPOSED = ("Split",)
"""PopART op types that xl builds from several ops of its own (`popxl.ops.split`: slices),
marked by the frontend with `xl.dialects.traits.POPART_OP_ATTR`; with those of the public
ops decorated `@composed` (`popxl.ops._utils.COMPOSED_TYPES`: `IsInf`, `ReduceL2`, ...)."""

_OPTIMIZER_TYPES = frozenset(
    {
        "AdamUpdater",
        "AdamVarUpdate",
        "Accumulate",
        "AccumulatorScale",
        "AccumulatorZero",
        "CopyVarUpdate",
        "PopartSparseAccumulate",
    }
)
"""The op types whose PopART class reports `isOptimizerOp()`: the updaters and the variable
updates (PopART's `VarUpdateOp` subclasses)."""

_LOWERED = {"rt"}
"""Dialects of lowered programs: never in a popxl graph."""


class Op:
    """A PopART op of a graph (what `Graph.getOps()` gives): `id`, `opType()`, `name()`;
    `xl_op` is the xl op it stands for, `xl_ops` all of them (more than one for an op that
    xl builds from several, such as a `SplitOp` from its slices)."""

    opType_: ClassVar[str] = ""

    def __init__(self, xl_op: Operation, index: int) -> None:
        self.xl_op = xl_op
        self.xl_ops = [xl_op]
        self.id = index

    @classmethod
    def opType(cls) -> str:
        """The PopART op type (`MatMul`, `Sub`, ...)."""
        return cls.opType_

    def name(self) -> str:
        return self.xl_op.name

    def isOptimizerOp(self) -> bool:  # noqa: N802  (PopART's name)
        """Whether the op is an optimizer op: an updater or a variable update."""
        return self.opType_ in _OPTIMIZER_TYPES

    getName = name

    def getAxis(self) -> int:  # noqa: N802  (PopART's name)
        """The op's `axis` (`SparseAccumulate`, `Gather`, ...); AttributeError for an op without one."""
        axis = getattr(self.xl_op, "axis", None)
        if axis is None:
            raise AttributeError(f"{type(self).__name__} has no axis")
        return int(axis.value.data) if hasattr(axis, "value") else int(axis)

    def getFactor(self) -> OptimizerValue:  # noqa: N802  (PopART's name)
        """The factor of a variable update (`AccumulatorScale`, `Accumulate`, ...), as PopART's
        `OptimizerValue`: the number when it is a constant, 0.0 and not const when a tensor;
        an accumulator zeroing scales by 0. AttributeError for an op without a factor."""
        op = self.xl_op
        if getattr(op, "f_tensor", None) is not None:
            return OptimizerValue(0.0, False)
        f = getattr(op, "f", None)
        if f is not None:
            return OptimizerValue(float(f.value.data), True)
        if isinstance(op, IRDLOperation) and "f" in op.get_irdl_definition().properties:
            return OptimizerValue(1.0, True)  # the default factor
        if self.opType_ == "AccumulatorScale":  # `accumulator_zero_`
            return OptimizerValue(0.0, True)
        raise AttributeError(f"{type(self).__name__} has no factor")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id}: {self.xl_op.name}>"


class OptimizerValue:
    """PopART's `OptimizerValue`: `val()` and `isConst()`."""

    def __init__(self, value: float, const: bool) -> None:
        self._value = value
        self._const = const

    def val(self) -> float:
        return self._value

    def isConst(self) -> bool:  # noqa: N802  (PopART's name)
        return self._const

    def __repr__(self) -> str:
        return f"OptimizerValue({self._value}, isConst={self._const})"


def _class_name(type_name: str) -> str:
    return _CLASS_NAMES.get(type_name, f"{type_name}Op")


def _build() -> dict[str, type[Op]]:
    classes: dict[str, type[Op]] = {}
    for dname, factory in get_all_dialects().items():
        if dname in _LOWERED:
            continue
        for cls in factory().operations:
            t = popart_type(cls)
            name = _class_name(t)
            if name not in classes:
                classes[name] = type(name, (Op,), {"opType_": t, "__module__": __name__})
    import popxl.ops  # noqa: F401  (its public ops register the types they compose)
    from popxl.ops._utils import COMPOSED_TYPES

    for t in (*_COMPOSED, *COMPOSED_TYPES.values()):
        name = _class_name(t)
        classes.setdefault(name, type(name, (Op,), {"opType_": t, "__module__": __name__}))
    return classes


_CLASSES = _build()


def op_classes() -> dict[str, type[Op]]:
    """Every PopART op class, by class name."""
    return dict(_CLASSES)


def op_class(xl_op: Operation | type[Operation]) -> type[Op]:
    """The PopART op class of an xl op or op class."""
    return _CLASSES[_class_name(popart_type(xl_op))]


def op_of(xl_op: Operation, index: int) -> Op | None:
    """The PopART op object of `xl_op` (None for a constant, a variable or a terminator,
    which are not PopART ops: PopART's constants and variables are tensors). An op marked
    as a part of a composed op (`POPART_OP_ATTR`) gives an object of that op's class;
    `ops_of` joins the parts."""
    if isinstance(xl_op, _graph.ConstantOp | _graph.VariableOp) or xl_op.has_trait(IsTerminator):
        return None
    part = popart_op_part(xl_op)
    if part is not None and _class_name(part[0]) in _CLASSES:
        return _CLASSES[_class_name(part[0])](xl_op, index)
    return op_class(xl_op)(xl_op, index)


def ops_of(xl_ops: Iterable[Operation]) -> list[Op]:
    """The PopART ops of a block's ops in program order (`Graph.getOps()`): one object per
    op, but the consecutive parts of one composed op (part 0, 1, ... of `parts`, marked with
    `POPART_OP_ATTR`) are one object, numbered as its first part."""
    out: list[Op] = []
    open_part: tuple[str, int, int] | None = None  # (type, last part, parts) of out[-1]
    for i, xop in enumerate(xl_ops):
        part = popart_op_part(xop)
        if part is not None and open_part is not None and part[1] > 0:
            t, k, n = open_part
            if (part[0], part[1] - 1, part[2]) == (t, k, n):
                out[-1].xl_ops.append(xop)
                open_part = part if part[1] + 1 < n else None
                continue
        o = op_of(xop, i)
        if o is None:
            continue
        out.append(o)
        open_part = part if part is not None and part[1] + 1 < part[2] else None
    return out


class _SubModule:
    """`_ir.op.exchange`, `_ir.op.collectives`, `_ir.op.dynamic`: PopART binds some op classes
    in these sub-modules (`_ir.op.exchange.RemoteLoadOp`); each gives the same classes as
    `_ir.op` itself."""

    def __init__(self, name: str) -> None:
        self.__name__ = f"{__name__}.{name}"

    def __getattr__(self, name: str) -> Any:
        return _class_or_error(name, self.__name__)

    def __repr__(self) -> str:
        return f"<module {self.__name__!r}>"


_SUBMODULES = {n: _SubModule(n) for n in ("exchange", "collectives", "dynamic")}


def _class_or_error(name: str, where: str) -> type[Op]:
    cls = _CLASSES.get(name)
    if cls is None:
        import difflib

        close = difflib.get_close_matches(name, list(_CLASSES), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise AttributeError(f"{where} has no {name!r}: no xl op becomes a PopART op of that class{hint}")
    return cls


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return _SUBMODULES[name]
    return _class_or_error(name, __name__)
