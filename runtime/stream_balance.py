"""Which stream runs each op of a concurrent step: the busy IPU's work shared with an idle worker.

A concurrent step gives each worker the ops of its virtual IPUs (`xl.runtime.placement`).
When one IPU holds most of the work (seed 003's pipeline: stages 0 and 2 and the optimiser
steps of the two larger layers on IPU 0), the other worker idles while it waits. Where an op
runs does not change what it computes: the same kernel over the same buffers, after the same
writes (`xl.runtime.stream_deps` keeps every dependent access in serial order whichever
stream makes it), so a stream may take ops of another IPU and the step stays bit-identical
to the serial plan.

`balance(root, streams)` decides statically, from a simulation of the step: the op
executions in serial order (loops unrolled, both branches of an `rt.if`), each stream
running its ops in that order, an op taking `OpNode.cost` (`kernel_cost` units, ~0.25 ns)
plus `OP_OVERHEAD` after its stream's previous op and the ops it depends on (`SYNC` later
when those ran on another stream). The ops of the program's top level (not in a loop or
branch: one decision is one execution) worth moving (`MOVE_MIN_COST`) are the candidates,
each alone and with the later top-level ops of its stream that depend on it (a chain moved
whole does not wait across streams at each link); each round moves the candidate, to the
stream, that ends the simulated step earliest, if at least `MARGIN` earlier than without,
until none does (or `MAX_WORK` simulated executions). Whole-step simulation sees what a
per-op choice would not: an op moved away makes its dependents on the home stream wait, and
the other stream runs it before its own later ops. The result depends only on the program
and the buffers' shapes, never on timings: the same plan every time.

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
MARGIN = 2 * SYNC  # a move must end the simulated step at least this much earlier
MAX_SIMULATED = 50_000  # op executions simulated at most (larger steps: no moves)
MAX_WORK = 1_000_000  # simulated executions over all the trials (~1 s; the costliest candidates kept)


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


# one earlier access of a memory base: (first byte, end byte, writes, execution index)
Access = tuple[int, int, bool, int]


class _Step:
    """The step's op executions in serial order (loops unrolled), with the earlier
    executions each one follows (an access of overlapping memory, one of them writing)."""

    def __init__(self, root: list[Any]) -> None:
        self.nodes: list[OpNode] = []
        self.top: list[bool] = []
        self.deps: list[list[int]] = []
        seen: dict[Any, list[Access]] = {}  # base -> earlier accesses
        for node, top in _executions(root, True):
            i = len(self.nodes)
            self.nodes.append(node)
            self.top.append(top)
            deps: set[int] = set()
            for (key, lo, hi), w in node.acc:
                for a in seen.get(key, ()):
                    if (w or a[2]) and lo < a[1] and a[0] < hi:
                        deps.add(a[3])
            self.deps.append(sorted(deps))
            for (key, lo, hi), w in node.acc:
                accs = seen.setdefault(key, [])
                if w:  # a later access that follows a covered one also follows this write
                    accs[:] = [a for a in accs if not (lo <= a[0] and a[1] <= hi)]
                accs.append((lo, hi, w, i))
        self.cost = [n.cost + OP_OVERHEAD for n in self.nodes]

    def makespan(self, streams: int, moves: dict[int, int]) -> float:
        """When the last stream ends, with the top-level nodes `moves` names (by id) on
        other streams than their IPU's: each stream runs its ops in serial order, an op
        starts after its stream's previous op and the ops it follows (`SYNC` later when
        they ran on another stream)."""
        free = [0.0] * streams
        end: list[float] = []
        where: list[int] = []
        for i, node in enumerate(self.nodes):
            s = moves.get(id(node), node.stream)
            t = free[s]
            for j in self.deps[i]:
                r = end[j] + (SYNC if where[j] != s else 0.0)
                if r > t:
                    t = r
            t += self.cost[i]
            end.append(t)
            where.append(s)
            free[s] = t
        return max(free)


def balance(root: list[Any], streams: int) -> dict[Operation, int]:
    """The ops of `root` (the tree of `xl.runtime.stream_tree`, each `OpNode` on its IPU's
    stream) that another stream should run, by the search of the module docstring."""
    if streams < 2 or _count(root, MAX_SIMULATED) > MAX_SIMULATED:
        return {}
    step = _Step(root)
    n = len(step.nodes)
    movable = [i for i, node in enumerate(step.nodes) if step.top[i] and node.op is not None]
    seeds = [i for i in movable if step.nodes[i].cost >= MOVE_MIN_COST]
    keep = max(1, MAX_WORK // max(1, 2 * n * (streams - 1)))
    if len(seeds) > keep:  # the costliest ones
        seeds = sorted(sorted(seeds, key=lambda i: -step.cost[i])[:keep])
    groups = {tuple(g) for i in seeds for g in ([i], _dependents(step, movable, i))}
    moves: dict[int, int] = {}  # id(node) -> stream
    best = step.makespan(streams, moves)
    budget = MAX_WORK
    while budget > 0:
        choice: tuple[float, tuple[int, ...], int] | None = None
        for g in sorted(groups):
            home = step.nodes[g[0]].stream
            for s in range(streams):
                if s == home or any(moves.get(id(step.nodes[j]), home) != home for j in g):
                    continue
                trial = {**moves, **{id(step.nodes[j]): s for j in g}}
                span = step.makespan(streams, trial)
                budget -= n
                if span <= best - MARGIN and (choice is None or span < choice[0]):
                    choice = (span, g, s)
        if choice is None:
            break
        best, g, s = choice
        for j in g:
            moves[id(step.nodes[j])] = s
    return {node.op: moves[id(node)] for node in step.nodes if id(node) in moves and node.op is not None}


def _dependents(step: _Step, movable: list[int], i: int) -> list[int]:
    """Op `i` with the later top-level ops of its stream that depend on it, directly or not
    (moved together, a chain does not wait across streams at each link)."""
    group = {i}
    home = step.nodes[i].stream
    for j in movable:
        if j > i and step.nodes[j].stream == home and any(d in group for d in step.deps[j]):
            group.add(j)
    return sorted(group)
