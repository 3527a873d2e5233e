"""Which ops of a concurrent step wait for which: happens-before edges between streams.

`analyse(root, streams)` takes the tree of executed ops (`xl.runtime.stream_tree`). Two
accesses to overlapping memory from different streams of which one writes keep their
serial order:

- if the first comes before the second in the same iteration (same block instance), the
  second waits for the end of the first's enclosing node in that block;
- otherwise (the first is later in a loop body, or in the other branch of an `rt.if`), the
  second waits, inside the innermost common `rt.loop`, for the first's node at the
  previous iteration (loop-carried), and before that loop for the previous iteration of
  the next enclosing loop, and so on.

Each stream has a monotonic counter, bumped only after the ops another stream waits for
(the ops marked `signal`); `analyse` counts the bumps (`end`: every stream's count after a
node, `LoopNode.per_iter`: per iteration) and pads the branch of an `rt.if` with fewer
bumps (`IfNode.pad_then` / `pad_other`) so the count after the `if` is static. It attaches
the waits to the nodes they precede (`node.waits[B]`: (stream A, awaited node, loop taken
at its previous iteration or None)), which `xl.runtime.stream_emit` turns into code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from xl.runtime.stream_tree import IfNode, LoopNode, OpNode

# ancestry of an op: [(container, index in it, node)] from the program body down to the op
Anc = list[tuple[list[Any], int, Any]]


def _ancestries(nodes: list[Any], prefix: Anc, out: dict[int, Anc]) -> None:
    for i, n in enumerate(nodes):
        here = [*prefix, (nodes, i, n)]
        if isinstance(n, OpNode):
            out[id(n)] = here
        elif isinstance(n, LoopNode):
            _ancestries(n.body, here, out)
        else:
            _ancestries(n.then, here, out)
            _ancestries(n.other, here, out)


def _edges(x: OpNode, ax: Anc, y: OpNode, ay: Anc) -> Iterator[tuple[Any, Any, Any]]:
    """The waits making `y` (stream B) follow the latest instance of `x` (stream A) that
    precedes it in serial order: (node to wait before, node whose end is awaited, loop
    taken at its previous iteration or None)."""
    d = 0
    n = min(len(ax), len(ay))
    while d < n and ax[d][2] is ay[d][2]:
        node = ax[d][2]
        if isinstance(node, IfNode) and d + 1 < n and ax[d + 1][0] is not ay[d + 1][0]:
            break  # different branches of one `if`
        d += 1
    if d < n and ax[d][2] is not ay[d][2] and ax[d][1] < ay[d][1]:
        yield ay[d][2], ax[d][2], None  # earlier in the same iteration
        return
    # loop-carried: from the previous iteration of each enclosing common loop
    level = d
    while True:
        loops = [lv for lv in range(level) if isinstance(ax[lv][2], LoopNode)]
        if not loops:
            return
        dl = loops[-1]
        yield ay[dl + 1][2], ax[dl + 1][2], ax[dl][2]
        level = dl


def analyse(root: list[Any], streams: int) -> None:
    """Find the cross-stream dependencies of the tree, mark the signalling ops, count the
    bumps and attach the waits (`node.waits[B]`: (stream A, awaited node, shifted loop))."""
    anc: dict[int, Anc] = {}
    _ancestries(root, [], anc)
    ops: list[OpNode] = []

    def collect(nodes: list[Any]) -> None:
        for n in nodes:
            if isinstance(n, OpNode):
                ops.append(n)
            elif isinstance(n, LoopNode):
                collect(n.body)
            else:
                collect(n.then)
                collect(n.other)

    collect(root)
    by_base: dict[Any, list[tuple[int, int, int, bool]]] = {}
    for i, op in enumerate(ops):
        for (key, lo, hi), w in op.acc:
            by_base.setdefault(key, []).append((i, lo, hi, w))
    pairs: set[tuple[int, int]] = set()
    for accs in by_base.values():
        if len(accs) < 2 or not any(w for *_, w in accs):
            continue
        for p in range(len(accs)):
            i, lo, hi, w = accs[p]
            for q in range(p + 1, len(accs)):
                j, lo2, hi2, w2 = accs[q]
                if (w or w2) and i != j and ops[i].stream != ops[j].stream and lo < hi2 and lo2 < hi:
                    pairs.add((i, j) if i < j else (j, i))
    for i, j in pairs:
        for a, b in ((i, j), (j, i)):
            x, y = ops[a], ops[b]
            for before, awaited, shifted in _edges(x, anc[id(x)], y, anc[id(y)]):
                x.signal = True
                before.waits.setdefault(y.stream, set()).add((x.stream, awaited, shifted))
    _count(root, [0] * streams)


def _count(nodes: list[Any], c: list[int]) -> None:
    for n in nodes:
        if isinstance(n, OpNode):
            if n.signal:
                c[n.stream] += 1
        elif isinstance(n, LoopNode):
            start = list(c)
            _count(n.body, c)
            n.per_iter = [c[s] - start[s] for s in range(len(c))]
            for s in range(len(c)):
                c[s] = start[s] + n.count * n.per_iter[s]
        else:
            start = list(c)
            ct, ce = list(c), list(c)
            _count(n.then, ct)
            _count(n.other, ce)
            for s in range(len(c)):
                c[s] = max(ct[s], ce[s])
            n.pad_then = [c[s] - ct[s] for s in range(len(c))]
            n.pad_other = [c[s] - ce[s] for s in range(len(c))]
            del start
        n.end = list(c)
