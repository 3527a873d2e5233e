"""`popxl.random_seed`: seeds for the random ops (PopXL's module path; `popxl.create_seeds`
is the same function).

```python
from popxl.random_seed import create_seeds, two_uint32_to_uint64, uint64_to_two_uint32

seeds = create_seeds(1984, batches_per_step=4)  # (4, 2) uint32
```
"""

from __future__ import annotations

from popxl.utils import MAX_UINT64, create_seeds, two_uint32_to_uint64, uint64_to_two_uint32

__all__ = ["MAX_UINT64", "create_seeds", "two_uint32_to_uint64", "uint64_to_two_uint32"]
