"""The code of each stream of a concurrent step, from the analysed tree of executed ops.

`Emitter(streams).block(root, s, 0)` writes stream `s`'s lines (`lines[s]`): its own ops'
code, `for` / `if` for the loops and branches it has code in, and the synchronisation that
`xl.runtime.stream_deps.analyse` attached to the tree:

```python
if _c[1] < 3 + 2 * _l4: _w(1, 3 + 2 * _l4)   # wait until stream 1 has bumped 3 + 2*i times
...                                          # the op's code
_c[0] += 1; _n0()                            # bump: another stream waits for this op
```

A wait target is affine in the loop variables (computed at compile time from the serial
order), so waits only target the serial past and cannot deadlock; `_w` and `_n*` are
`xl.runtime.stream_sync.Sync`'s. `kernel_of[s]` maps a line to the kernel it runs (error
messages, profiles) and `cuts[s]` lists the top-level lines where a long stream may be
split into functions.
"""

from __future__ import annotations

from typing import Any

from xl.runtime.stream_tree import IfNode, LoopNode, OpNode


class Emitter:
    """The generated lines of every stream of one replica's step."""

    def __init__(self, streams: int) -> None:
        self.streams = streams
        self.lines: list[list[str]] = [[] for _ in range(streams)]
        self.kernel_of: list[dict[int, int]] = [{} for _ in range(streams)]  # line index -> k
        self.cuts: list[list[int]] = [[] for _ in range(streams)]  # where a chunk may start
        self.loops: list[LoopNode] = []  # enclosing loops while emitting

    def target(self, a: int, awaited: Any, shifted: Any) -> tuple[int, tuple[tuple[str, int], ...]]:
        """The count of stream `a` at the end of `awaited` (at the previous iteration of
        loop `shifted`), as const + sum(coef * loop var) over the enclosing loops."""
        const = awaited.end[a]
        terms = []
        for lp in self.loops:
            k = lp.per_iter[a]
            if k:
                terms.append((lp.var, k))
                if lp is shifted:
                    const -= k
        return const, tuple(terms)

    def block(self, nodes: list[Any], s: int, depth: int) -> int:
        out = self.lines[s]
        start = len(out)
        ind = "    " * depth
        for n in nodes:
            if depth == 0 and not isinstance(n, IfNode):  # (an `if` follows its condition read)
                self.cuts[s].append(len(out))
            merged: dict[tuple[int, tuple[tuple[str, int], ...]], int] = {}
            for a, awaited, shifted in n.waits.get(s, ()):
                const, terms = self.target(a, awaited, shifted)
                key = (a, terms)
                merged[key] = max(merged.get(key, const), const)
            for (a, terms), const in sorted(merged.items()):
                if not terms and const <= 0:
                    continue
                expr = " + ".join([str(const)] + [f"{k} * {v}" for v, k in terms]) if terms else str(const)
                out.append(f"{ind}if _c[{a}] < {expr}: _w({a}, {expr})")
            if isinstance(n, OpNode):
                if n.stream != s:
                    continue
                for line in n.lines:
                    if n.k is not None:
                        self.kernel_of[s][len(out)] = n.k
                    out.append(ind + line)
                if n.signal:
                    out.append(f"{ind}_c[{s}] += 1; _n{s}()")
            elif isinstance(n, LoopNode):
                if s not in n.streams:
                    continue
                out.append(f"{ind}for {n.var} in _range({n.count}):")
                self.loops.append(n)
                if self.block(n.body, s, depth + 1) == 0:
                    out.append(f"{ind}    pass")
                self.loops.pop()
            else:
                if s not in n.streams:
                    continue
                out.append(f"{ind}if {n.cond}:")
                for branch, pad in ((n.then, n.pad_then[s]), (n.other, n.pad_other[s])):
                    if branch is n.other:
                        out.append(f"{ind}else:")
                    emitted = self.block(branch, s, depth + 1)
                    if pad:
                        out.append(f"{ind}    _c[{s}] += {pad}; _n{s}()")
                    elif emitted == 0:
                        out.append(f"{ind}    pass")
        return len(out) - start
