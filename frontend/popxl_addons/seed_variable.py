"""`addons.seed_variable`: a variable holding the random seed (popxl_addons/seed_variable.py).

```python
seed_v, seed = addons.seed_variable(1984)
seed, step_seed = ops.split_random_seed(seed)     # a fresh seed for this step
x = ops.dropout(x, step_seed, p=0.1)
```

Upstream keeps the seed in a remote variable loaded when weights go to the device and
stored back when they return to the host, so that it works with replica groupings; xl
has no remote memory, so the seed is an ordinary main-graph variable and the tensor
returned for use in the program is that variable itself (in-place updates of it are
what `Session.get_tensor_data(seed_v)` reads back, as upstream's store-back gives).
"""

from __future__ import annotations

from typing import Any

import popxl
from popxl.bridge import describe

__all__ = ["seed_variable"]


def seed_variable(seed: int, replica_grouping: Any | None = None) -> tuple[popxl.Variable, popxl.Tensor]:
    """A `uint32[2]` seed variable named 'random_seed' initialised with
    `popxl.create_seeds(seed, replicas=replica_grouping.num_groups)`.

    Args:
        seed: the host seed.
        replica_grouping: replicas in one group share a seed (default: a group per
            replica, `ir.replica_grouping(group_size=1)`).

    Returns `(variable, tensor)`: the variable (for `Session.get_tensor_data` /
    `write_variable_data`) and the tensor to use in the main graph.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"addons.seed_variable: seed must be an int, got {describe(seed)}")
    g = popxl.gcg()
    if g != g.ir.main_graph:
        raise ValueError(f"addons.seed_variable: seed variables live in the main graph, not in graph {g.name!r}")
    ir = g.ir
    if replica_grouping is None:
        replica_grouping = ir.replica_grouping(group_size=1)
    num_groups = int(getattr(replica_grouping, "num_groups", 1))
    values = popxl.create_seeds(seed, replicas=num_groups)
    var = popxl.variable(
        values,
        popxl.uint32,
        name="random_seed",
        replica_grouping=replica_grouping if num_groups > 1 else None,
    )
    return var, var
