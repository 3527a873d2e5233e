"""`popxl.tensorlocation`: where a tensor lives and where an op runs (PopXL's module path).

`TensorStorage`, `ReplicatedTensorSharding` and `TensorLocation` describe a variable's
memory (`Variable.location_info`, `popxl.remote_buffer` imports them); `TileSet` names a set of tiles
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

from popxl._checks import describe

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


class TensorStorage(Enum):
    """Whether a tensor is stored on chip (tile memory) or off chip (streaming memory)."""

    OnChip = "OnChip"
    OffChip = "OffChip"


class ReplicatedTensorSharding(Enum):
    """Whether a tensor is sharded over replicas."""

    On = "On"
    Off = "Off"


class TensorLocation:
    """The memory characteristics of a tensor: storage and replicated tensor sharding."""

    def __init__(
        self,
        storage: TensorStorage = TensorStorage.OnChip,
        replicated_tensor_sharding: ReplicatedTensorSharding = ReplicatedTensorSharding.Off,
    ) -> None:
        if not isinstance(storage, TensorStorage):
            raise TypeError(f"TensorLocation: storage must be a TensorStorage, got {describe(storage)}")
        if not isinstance(replicated_tensor_sharding, ReplicatedTensorSharding):
            raise TypeError(
                "TensorLocation: replicated_tensor_sharding must be a ReplicatedTensorSharding, "
                f"got {describe(replicated_tensor_sharding)}"
            )
        self._storage = storage
        self._replicated_tensor_sharding = replicated_tensor_sharding

    @property
    def storage(self) -> TensorStorage:
        """`TensorStorage.OnChip` or `OffChip` (a remote buffer)."""
        return self._storage

    @property
    def replicated_tensor_sharding(self) -> ReplicatedTensorSharding:
        """`ReplicatedTensorSharding.On` when each replica holds a shard, else `Off`."""
        return self._replicated_tensor_sharding

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorLocation)
            and self._storage == other._storage
            and self._replicated_tensor_sharding == other._replicated_tensor_sharding
        )

    def __hash__(self) -> int:
        return hash((self._storage, self._replicated_tensor_sharding))

    def __repr__(self) -> str:
        return (
            f"TensorLocation(storage={self._storage.name}, "
            f"replicated_tensor_sharding={self._replicated_tensor_sharding.name})"
        )
