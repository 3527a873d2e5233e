"""`popxl.errors`: the exception types of PopXL's Python layer.

```python
from popxl.errors import UndefinedValue

with popxl.Ir().main_graph:
    v = popxl.variable(1)
    try:
        v.ipu  # a variable no op uses yet has no IPU
    except UndefinedValue:
        ...
```
"""

from __future__ import annotations

__all__ = ["UndefinedValue"]


class UndefinedValue(Exception):
    """A property that has no value yet, such as the IPU or tile set of a tensor that no op
    produces or uses (`Tensor.ipu`, `Tensor.tile_set`)."""
