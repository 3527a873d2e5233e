"""Op properties as Python values: the conversion both ways (`popxl` ops, `rt.kernel` parameters).

```python
to_attr(0.5)      # FloatAttr(0.5, f64);   from_attr(...) == 0.5
to_attr((1, 0))   # array<i64: 1, 0>;      from_attr(...) == (1, 0)
to_attr((0.5, 2.0))  # array<f64: 0.5, 2.0>; from_attr(...) == (0.5, 2.0)
to_attr(True)     # 1 : i1
```

Used by `PopxlOp.make` (keyword properties), `op_props` and the lowering to `rt`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute

SEGMENTS = "operandSegmentSizes"
"""The property holding the number of operands per operand definition."""


def to_attr(value: Any) -> Attribute:
    """Python value -> property attribute (int: i64, float: f64, bool: i1, tuple: array<i64>,
    a tuple with a float: array<f64>)."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, bool | np.bool_):
        return IntegerAttr(int(value), IntegerType(1))
    if isinstance(value, int | np.integer):
        return IntegerAttr(int(value), i64)
    if isinstance(value, float | np.floating):
        return FloatAttr(float(value), f64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, tuple | list):
        if any(isinstance(v, float | np.floating) for v in value):
            return DenseArrayBase.from_list(f64, [float(v) for v in value])
        return DenseArrayBase.from_list(i64, [int(v) for v in value])
    raise TypeError(f"cannot store {value!r} as an op property")


def from_attr(attr: Attribute) -> Any:
    """Property attribute -> Python value (inverse of `to_attr`)."""
    if isinstance(attr, IntegerAttr):
        if attr.type == IntegerType(1):
            return bool(attr.value.data)
        return int(attr.value.data)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, DenseArrayBase):
        if isinstance(attr.elt_type, IntegerType):
            return tuple(int(v) for v in attr.get_values())
        return tuple(float(v) for v in attr.get_values())
    return attr
