"""Which stream runs each op of a concurrent step: the busy IPU's work shared with an idle worker.

A concurrent step gives each worker the ops of its virtual IPUs (`xl.runtime.placement`).
When one IPU holds most of the work (seed 003's pipeline: stages 0 and 2 and the optimiser
steps of the two larger layers on IPU 0), the other worker idles while it waits. Where an op
runs does not change what it computes: the same kernel over the same buffers, after the same
writes (`xl.runtime.stream_deps` keeps every dependent access in serial order whichever
stream makes it), so a stream may take ops of another IPU and the step stays bit-identical
to the serial plan.

`balance(root, streams)` is a static list schedule: it simulates the step in serial order
(loops unrolled, both branches of an `rt.if`), each op taking `OpNode.cost` (`kernel_cost`
units, ~0.25 ns) plus `OP_OVERHEAD` on its stream, after the ops it depends on (plus `SYNC`
when they ran on another stream), and gives an op of the program's top level (not in a loop
or branch, so one decision is one execution) to the stream that finishes it first, when that
is at least `MARGIN` earlier than its own stream and the op is worth moving
(`MOVE_MIN_COST`); ops only go to a stream with less work in the whole step, which still has
less than the op's own stream after the move (so no op goes back and forth). The result
depends only on the program and the buffers' shapes, never on timings: the same plan every
time.

```python
moves = balance(tree.root, 2)  # {op: stream} for the ops another stream runs
StreamBuilder(placement, stream_of, ..., moved=moves)  # the step walked again with them
```
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from xdsl.ir import Operation

from xl.runtime.stream_tree import IfNode, LoopNode, OpNode

# in `kernel_cost` units, ~0.25 ns each on this 2-core VM (a 32x784x512 product: 1.03e6 units, 220 us)
OP_OVERHEAD = 20_000.0  # the Python around one kernel call (~5 us)
SYNC = 120_000.0  # waking a stream that waits for another (~30 us)
MOVE_MIN_COST = 400_000.0  # ops cheaper than this (~100 us) stay on their IPU's stream
MARGIN = 2 * SYNC  # a move must finish the op at least this much earlier
MAX_SIMULATED = 50_000  # op executions simulated at most (larger steps: no moves)


def _executions(nodes: list[Any], top: bool) -> Iterator[tuple[OpNode, bool]]:
    """The op nodes in serial order, loops unrolled (with whether the op is at top level)."""
    for n in nodes:
        if isinstance(n, OpNode):
            yield n, top
        elif isinstance(n, LoopNode):
            for _ in range(n.count):
                yield from _executions(n.body, False)
        elif isinstance(n, IfNode):
            yield from _executions(n.then, False)
            yield from _executions(n.other, False)


def _count(nodes: list[Any], limit: int) -> int:
    total = 0
    for n in nodes:
        if isinstance(n, OpNode):
            total += 1
        elif isinstance(n, LoopNode):
            total += n.count * _count(n.body, limit)
        elif isinstance(n, IfNode):
            total += _count(n.then, limit) + _count(n.other, limit)
        if total > limit:
            return total
    return total


def _finish(s: int, free: list[float], deps: list[tuple[float, int]], cost: float) -> float:
    """When an op of `cost` would end on stream `s`, after the accesses it follows."""
    ready = max((t + (SYNC if d != s else 0.0) for t, d in deps), default=0.0)
    return max(free[s], ready) + cost


# one earlier access of a memory base: [first byte, end byte, writes, end time, stream]
Access = list[Any]


def balance(root: list[Any], streams: int) -> dict[Operation, int]:
    """The ops of `root` (the tree of `xl.runtime.stream_tree`, each `OpNode` on its IPU's
    stream) that another stream should run, by the list schedule of the module docstring."""
    if streams < 2 or _count(root, MAX_SIMULATED) > MAX_SIMULATED:
        return {}
    load = [0.0] * streams  # each stream's work (all its executions)
    for node, _ in _executions(root, True):
        load[node.stream] += node.cost + OP_OVERHEAD
    free = [0.0] * streams  # when each stream has finished its ops so far
    seen: dict[Any, list[Access]] = {}  # base -> earlier accesses
    moves: dict[Operation, int] = {}
    for node, top in _executions(root, True):
        home = node.stream if node.op is None else moves.get(node.op, node.stream)
        deps: list[tuple[float, int]] = []  # (end time, stream) of the accesses this op follows
        for (key, lo, hi), w in node.acc:
            for a in seen.get(key, ()):
                if (w or a[2]) and lo < a[1] and a[0] < hi:
                    deps.append((a[3], a[4]))
        cost = node.cost + OP_OVERHEAD
        at = home
        if top and node.op is not None and node.cost >= MOVE_MIN_COST:
            # only to a stream with less work, which keeps less than its own after the move
            to = [s for s in range(streams) if s != home and load[s] + cost < load[home]]
            ends = {s: _finish(s, free, deps, cost) for s in (home, *to)}
            best = min(to, key=lambda s: (ends[s], s), default=home)
            if best != home and ends[best] <= ends[home] - MARGIN:
                at = best
                moves[node.op] = best
                load[home] -= cost
                load[best] += cost
        end = _finish(at, free, deps, cost)
        free[at] = end
        for (key, lo, hi), w in node.acc:
            accs = seen.setdefault(key, [])
            if w:  # a later access that follows a covered one also follows this write
                accs[:] = [a for a in accs if not (lo <= a[0] and a[1] <= hi)]
            accs.append([lo, hi, w, end, at])
    return moves
