"""`popxl.tensorlocation`: where a tensor lives and where an op runs (PopXL's module path).

`TensorStorage`, `ReplicatedTensorSharding` and `TensorLocation` describe a variable's
memory (they are `popxl.remote_buffer`'s classes); `TileSet` names a set of tiles
(`Compute`, `IO`, `Undefined`) and `ExecutionContext` the part of a program an op belongs
to (`Normal`, ... `Subgraph`), with PopART's members and values.

```python
from popxl.tensorlocation import TensorLocation, TensorStorage, TileSet

loc = TensorLocation(TensorStorage.OffChip)
TileSet.IO.value  # 1
```
"""

from __future__ import annotations

from enum import Enum

from popxl.remote_buffer import ReplicatedTensorSharding, TensorLocation, TensorStorage

__all__ = ["ExecutionContext", "ReplicatedTensorSharding", "TensorLocation", "TensorStorage", "TileSet"]


class TileSet(Enum):
    """A set of tiles: the compute tiles, the IO tiles (`popxl.io_tiles()`), or none."""

    Compute = 0
    IO = 1
    Undefined = 2

    @classmethod
    def _from_name(cls, name: str | None) -> TileSet:
        """The member of a `Tensor.tile_set` string ("compute" / "io"); None is Undefined."""
        return {"compute": cls.Compute, "io": cls.IO, None: cls.Undefined}[name]


class ExecutionContext(Enum):
    """The part of a program an op runs in: the main program (`Normal`), after the gradient
    accumulation loop, in the weights / optimizer transfer fragments, or in a subgraph."""

    Normal = 0
    AccumulateOuterFragment = 1
    WeightsFromHostFragment = 2
    WeightsToHostFragment = 3
    OptimizerFromHostFragment = 4
    Subgraph = 5
