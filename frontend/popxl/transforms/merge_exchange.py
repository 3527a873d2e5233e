"""`popxl.transforms.merge_exchange` and `io_tile_exchange` (PopXL's exchange merging).

On an IPU, `merge_exchange()` combines the remote loads/stores and host loads/stores created
inside it into one exchange so that they run in parallel; `io_tile_exchange()` also puts
them on the IO tiles and, with `verify_overlap=True`, refuses (RuntimeError) when more than
one op would remain after merging, since that prevents overlapping the exchange with compute.

On the NumPy runtime there is nothing to overlap: the exchanges run one after another in
program order, which gives the same values (each copies distinct data). So the merge itself
changes nothing; what is kept is the grouping (`merged_ops`) and the check, counted as
upstream: the exchange ops (`ipu.remote_load`, `ipu.remote_load_`, `ipu.remote_store`,
`graph.host_load`, `graph.host_store`) count as one op unless one needs another's result
(then as one op per dependent step), `popxl.init` and constants (tensors, not ops,
upstream) as none, every other op as one.

```python
with popxl.transforms.io_tile_exchange():
    x = ops.remote_load(buffer, 0)
    ops.host_store(stream, y)
```
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from xdsl.ir import Operation, SSAValue

from popxl.context import gcg, in_sequence, io_tiles
from xl.dialects.graph import ConstantOp, HostLoadOp, HostStoreOp
from xl.dialects.ipu import REMOTE_ACCESS_OPS
from xl.dialects.popxl import InitOp

__all__ = ["io_tile_exchange", "merge_exchange"]

EXCHANGE_OPS = (*REMOTE_ACCESS_OPS, HostLoadOp, HostStoreOp)
"""The op classes `merge_exchange` combines."""


class MergedExchange:
    """What a `merge_exchange()` block recorded: every op created in the current graph
    (`ops`) and the exchange ops among them (`exchanges`, merged into one upstream)."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []

    @property
    def exchanges(self) -> list[Operation]:
        return [op for op in self.ops if isinstance(op, EXCHANGE_OPS) and op.parent is not None]

    def remaining(self) -> list[Operation]:
        """The ops left after merging, as upstream counts them: exchanges merged into one
        op (the first stands for it) until an exchange depends, directly or through other
        ops, on a result of that merged op, which then starts the next one; no `popxl.init`
        or constant; every other op."""
        out: list[Operation] = []
        merged: set[SSAValue] | None = None  # the values depending on the current merged op
        for op in self.ops:
            if op.parent is None or isinstance(op, InitOp | ConstantOp):
                continue
            depends = merged is not None and any(v in merged for v in op.operands)
            if isinstance(op, EXCHANGE_OPS):
                if merged is None or depends:
                    merged = set()
                    out.append(op)
                merged.update(op.results)
                continue
            if depends and merged is not None:
                merged.update(op.results)
            out.append(op)
        return out


@contextmanager
def merge_exchange() -> Iterator[MergedExchange]:
    """Merge the remote/host loads and stores created inside into one exchange (upstream);
    only ops of the current graph are concerned. Combine with `popxl.in_sequence(False)`,
    as upstream recommends (see `io_tile_exchange`). Yields the `MergedExchange` record."""
    graph = gcg()
    record = MergedExchange()
    handle = graph.register_op_created_hook(record.ops.append)
    try:
        yield record
    finally:
        graph.remove_op_created_hook(handle)


@contextmanager
def io_tile_exchange(verify_overlap: bool = True) -> Iterator[MergedExchange]:
    """`io_tiles()`, `merge_exchange()` and `in_sequence(False)` together. With
    `verify_overlap`, RuntimeError when more than one op remains after the merge (listing
    them), as upstream."""
    if not isinstance(verify_overlap, bool):
        raise TypeError(f"io_tile_exchange: verify_overlap must be a bool, got {type(verify_overlap).__name__}")
    with io_tiles(), merge_exchange() as record, in_sequence(False):
        yield record
    if verify_overlap:
        remaining = record.remaining()
        if len(remaining) > 1:
            names = "\n   ".join(_describe(op) for op in remaining)
            raise RuntimeError(
                "More than one Op remained after `io_tile_exchange`. This will prevent overlap "
                f"with following compute. Remaining Ops:\n   {names}"
            )


def _describe(op: Operation) -> str:
    if isinstance(op, EXCHANGE_OPS):
        return "MergeExchange (the loads and stores)"
    return op.name
