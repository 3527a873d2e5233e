"""`popart._internal.ir` (upstream `_ir`): PopART's graph and op classes, as PopXL programs
and their tests use them: `graph._pb_graph` is a `Graph` whose `getOps()` gives one object
per op of the graph, an instance of the PopART op class the popxl call became
(`_ir.op.MatMulOp`, `_ir.op.AddOp`, ...), so a test can count a layer's ops by type:

```python
import popart._internal.ir as _ir
from popxl_addons.testing_utils import ops_of_type

ops = graph._pb_graph.getOps()
assert ops_of_type(ops, _ir.op.MatMulOp) == 2
```

The PopART op type of each xl op is a fact of its op class (`xl.dialects.traits
.popart_type`); `popart._internal.ir.op` names the class of each type. Constants and a
graph's output terminator are not PopART ops (constants are tensors there) and are not
listed. A popxl call that xl builds from several ops where PopART has one counts once
(`ops.split`: one `_ir.op.SplitOp`, whose `xl_ops` are its slices). A custom op
(`popxl.custom_ops`) is an instance of `_ir.op.CustomOp` with its `opType()`.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from popart._internal.ir import op
from popart._internal.ir.op import Op, ops_of

if TYPE_CHECKING:
    from popxl.graph import Graph as PopxlGraph

__all__ = ["Graph", "Op", "op"]


class Graph:
    """PopART's graph of a popxl Graph (`graph._pb_graph`): `id`, `getOps()`,
    `getOpIds()`, `popxl_graph` (the popxl Graph itself)."""

    def __init__(self, graph: PopxlGraph) -> None:
        self._ref = weakref.ref(graph)

    @property
    def popxl_graph(self) -> PopxlGraph:
        g = self._ref()
        if g is None:
            raise RuntimeError("_pb_graph: its popxl Graph no longer exists")
        return g

    @property
    def id(self) -> str:
        return self.popxl_graph.name

    def getOps(self) -> list[Op]:
        """One PopART op object per op of the graph, in program order (constants and the
        output terminator left out, as in PopART; the slices of one `ops.split` are its one
        `SplitOp`)."""
        return ops_of(self.popxl_graph._block.ops)

    def getOpIds(self) -> list[int]:
        return [o.id for o in self.getOps()]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and other._ref() is self._ref()

    def __hash__(self) -> int:
        return id(self._ref())

    def __repr__(self) -> str:
        return f"<popart._internal.ir.Graph {self.id!r}>"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"xl's popart._internal.ir.Graph has no {name!r}: it provides id, getOps(), getOpIds(), popxl_graph"
        )
