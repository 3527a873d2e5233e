"""`popxl.testing`: helpers for tests of code written on popxl: `get_all_dtypes()`,
`get_all_int_dtypes(include_signed=True, include_unsigned=True)`.

```python
from popxl.testing import get_all_dtypes

for dt in get_all_dtypes():
    ...
```
"""

from __future__ import annotations

import popxl.dtypes as _d

__all__ = ["get_all_dtypes", "get_all_int_dtypes"]

_SIGNED = [_d.int8, _d.int16, _d.int32, _d.int64]
_UNSIGNED = [_d.uint8, _d.uint16, _d.uint32, _d.uint64]
_FLOAT = [_d.float8_143, _d.float8_152, _d.float16, _d.float32, _d.float64]
_COMPLEX = [_d.complex64, _d.complex128]


def get_all_int_dtypes(include_signed: bool = True, include_unsigned: bool = True) -> list[_d.dtype]:
    """The integer dtypes: signed (int8 ... int64), then unsigned (uint8 ... uint64)."""
    return (_SIGNED if include_signed else []) + (_UNSIGNED if include_unsigned else [])


def get_all_dtypes() -> list[_d.dtype]:
    """Every popxl dtype but bool: the integers, the floats (float8 first), the complex
    types."""
    return get_all_int_dtypes() + _FLOAT + _COMPLEX
