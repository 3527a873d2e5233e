"""The `ipu` dialect: placement on virtual IPUs and copies between them.

Placement is a discardable attribute on any op, `ipu.id`, and the tile set an op
runs on is `ipu.tile_set` ("compute" or "io"):

```mlir
%y = popxl.gelu %x {ipu.id = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
%z = ipu.copy %y {source = 1 : i64, destination = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
```

On the NumPy runtime every virtual IPU shares host memory, so a copy moves no data
between devices; it keeps the program's structure (pipelining reads it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, TensorType, i64
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.utils.exceptions import VerifyException

from xl.dialects.effects import ValueEffect
from xl.dialects.traits import PopartType

IPU_ATTR = "ipu.id"
TILE_SET_ATTR = "ipu.tile_set"


def ipu_of(op: Operation) -> int:
    """The virtual IPU an op is placed on (0 when unplaced)."""
    a = op.attributes.get(IPU_ATTR)
    return a.value.data if isinstance(a, IntegerAttr) else 0


@irdl_op_definition
class CopyOp(IRDLOperation):
    """Copies a tensor from one virtual IPU to another (popxl.ops.ipu_copy).

    ```mlir
    %z = ipu.copy %y {source = 0 : i64, destination = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
    ```
    """

    name = "ipu.copy"
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)
    source = prop_def(IntegerAttr)
    destination = prop_def(IntegerAttr)
    # Reads its input; never merged by CSE when the copy is later updated in place. Its
    # gradient is a copy back (`xl.passes.grad_rules`).
    traits = traits_def(ValueEffect(), PopartType("IpuCopy"))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type($input, $result)"

    def __init__(self, value: SSAValue, source: int, destination: int):
        super().__init__(
            operands=[value],
            result_types=[value.type],
            properties={
                "source": IntegerAttr(source, i64),
                "destination": IntegerAttr(destination, i64),
            },
            attributes={IPU_ATTR: IntegerAttr(destination, i64)},
        )

    @classmethod
    def make(
        cls,
        operands: Sequence[SSAValue],
        result_types: Sequence[Attribute] | None = None,
        *,
        source: int,
        destination: int,
    ) -> CopyOp:
        """Builder used by passes (`GradBuilder.op`): one operand, the result type is its type."""
        (value,) = operands
        return cls(value, source, destination)

    def verify_(self) -> None:
        for key in ("source", "destination"):
            if getattr(self, key).value.data < 0:
                raise VerifyException(f"ipu.copy: {key} IPU must be >= 0")


Ipu = Dialect("ipu", [CopyOp], [])
