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

from xl.runtime.kernels.registry import DataRangeError

__all__ = [
    "GraphBuildError",
    "GraphTypeError",
    "PopartException",
    "PoplarApplicationRuntimeError",
    "PoplarException",
    "PoplarRuntimeError",
    "RunDataError",
    "UndefinedValue",
]


class UndefinedValue(Exception):
    """A property that has no value yet, such as the IPU or tile set of a tensor that no op
    produces or uses (`Tensor.ipu`, `Tensor.tile_set`)."""


class PopartException(RuntimeError):
    """The checks PopART makes when an op or a call is added to a graph (shape and type
    inference, call signatures) raise this type there; `popart.popart_exception` is this
    class, so programs that catch PopART's exception catch xl's `GraphBuildError`."""


class GraphBuildError(ValueError, PopartException):
    """An op or call that cannot be built (its operands' shapes or dtypes, a graph's
    signature): a `ValueError`, and `popart.popart_exception` as in PopXL, where PopART's
    op setup finds these."""


class GraphTypeError(GraphBuildError, TypeError):
    """An op whose operands' dtypes must agree but do not: a `TypeError` as in PopXL (and a
    `GraphBuildError`: a ValueError and `popart.popart_exception`)."""


class PoplarException(RuntimeError):
    """Poplar's error type (`popart.poplar_exception`)."""


class PoplarRuntimeError(PoplarException):
    """An error while a program runs (`popart.poplar_runtime_error`)."""


class PoplarApplicationRuntimeError(PoplarRuntimeError):
    """An error of the program itself while it runs, such as a value out of the range an op
    takes (`popart.poplar_application_runtime_error`)."""


class RunDataError(DataRangeError, PoplarApplicationRuntimeError):
    """What `Session.run` raises for a value read at run time outside the range its op
    takes (an index, a label, a float8 scale): the runtime's `DataRangeError` (a
    ValueError), and `popart.poplar_application_runtime_error` as in PopXL."""
