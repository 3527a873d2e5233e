"""`outline`: repeated isomorphic op sequences become one `graph.graph` and `call.call`s.

```mlir
// before: two identical layers (matmul, add, gelu) in one graph
graph.h2d_stream @x : tensor<2x4xf32>
graph.d2h_stream @y : tensor<2x4xf32>
graph.main {
  %w1 = graph.variable "w1" : tensor<4x4xf32>
  %b1 = graph.variable "b1" : tensor<4xf32>
  %w2 = graph.variable "w2" : tensor<4x4xf32>
  %b2 = graph.variable "b2" : tensor<4xf32>
  %x = graph.host_load @x : tensor<2x4xf32>
  %m1 = popxl.matmul %x, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a1 = popxl.add %m1, %b1 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %g1 = popxl.gelu %a1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %m2 = popxl.matmul %g1, %w2 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a2 = popxl.add %m2, %b2 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %g2 = popxl.gelu %a2 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  graph.host_store @y, %g2 : tensor<2x4xf32>
}
// after `xl-opt -p 'outline{min-ops=3}'` (stream declarations unchanged)
graph.graph @outlined(%x: tensor<2x4xf32> {graph.name = "x"},
                      %w1: tensor<4x4xf32> {graph.name = "w1"},
                      %b1: tensor<4xf32> {graph.name = "b1"}) -> tensor<2x4xf32> {
  %m1 = popxl.matmul %x, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %a1 = popxl.add %m1, %b1 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %g1 = popxl.gelu %a1 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  graph.output %g1 : tensor<2x4xf32>
}
graph.main {
  %w1 = graph.variable "w1" : tensor<4x4xf32>
  %b1 = graph.variable "b1" : tensor<4xf32>
  %w2 = graph.variable "w2" : tensor<4x4xf32>
  %b2 = graph.variable "b2" : tensor<4xf32>
  %x = graph.host_load @x : tensor<2x4xf32>
  %g1 = call.call @outlined(%x, %w1, %b1)
      : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %g2 = call.call @outlined(%g1, %w2, %b2)
      : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  graph.host_store @y, %g2 : tensor<2x4xf32>
}
```

What is outlined. A *candidate* is a contiguous run of L >= `min-ops` ops of one block
(a `graph.graph` body or `graph.main`; `graph=G` restricts the pass to graph @G). Two runs
are *isomorphic* when their ops agree one to one in name, properties, attributes, operand
and result types, and their operands are wired the same way: an operand defined by the
k-th op of one run is defined by the k-th op of the other (same result index), and the
operands defined outside the runs correspond one to one (the same outside value used
twice in one run is the same outside value in the other, distinct ones are distinct).
`graph.variable` and `graph.constant` ops are not part of runs (they stay where they are;
a run may span them): their results, like every value defined before a run, become inputs
of the outlined graph. The terminator and `call.call`s created by this pass are never
part of runs.

Semantics kept. A run is contiguous in its block, so replacing it by one call at the
position of its last op keeps the order of all ops, side effects included (in-place
updates, `graph.host_load` / `graph.host_store`, calls). An outside value that an op of
the run updates in place (an in-place op, or a by-reference input of a call) becomes a
`graph.by_ref` input, so the update still reaches the caller's tensor; the other inputs
are read only. A value defined in a run and used after it (by any occurrence) becomes an
output; outputs are always values defined inside the graph. `inline` gives back an
equivalent program.

Choice (greedy by saved ops). A group of `c` non-overlapping isomorphic runs of `L` ops
saves `(c - 1) * L - c` ops (the ops removed minus the calls added; the graph body counts
once). Ties prefer fewer graph inputs + outputs, then the later first occurrence (so that
in a stack of layers where the first one differs, the runs are whole layers). Rounds
repeat until a round takes nothing; the bodies of graphs created by the pass and the calls
it created are not searched again. A round:

1. Each eligible op gets a signature id (name, properties, attributes, operand and result
   types; cached across rounds); the blocks become one integer sequence with a unique
   separator at each block end and at each op that cannot be outlined. O(n).
2. Suffix array (prefix doubling, O(n log^2 n)) and LCP array (Kasai, O(n)) of that
   sequence; every LCP interval (an internal node of the suffix tree, at most n - 1 of
   them, O(n) by one stack pass) is a set P of positions whose next l signatures agree.
3. Branch and bound over the intervals, by a max-heap of upper bounds on what they can
   save: first min((|P| - 1) * l, span(P)) - 2 (span from sparse-table range min/max over
   the suffix array, O(1)); when popped, the exact packing bound of the positions still
   free (O(|P|)); once some group is taken, also the free ops of the span (Fenwick tree,
   O(log n)). Examining an interval computes the canonical wiring of each free position's
   run (L = l, and L = the smallest gap between positions when smaller, so that
   overlapping repeats still give non-overlapping runs), groups positions by it and picks
   non-overlapping runs left to right: O(|P| * L). Found groups wait in a max-heap by
   saved ops; the best is taken as soon as it saves more than any unexamined interval
   could, after dropping its runs that overlap groups already taken. The round ends when
   both heaps are empty; the taken groups are then rewritten, each in O(c * L).

Complexity: O(n log^2 n) per round plus the examined intervals' O(|P| * L): in the worst
case O(n^2), in practice few intervals are examined (a chain of 10,000 identical ops: one
round, 100 calls of a 100-op graph). Measured (benchmarks/outline.py, shared 2-core
machine): 1,000-op graphs 0.3-1.7 s, 10,000-op graphs 2-8 s.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import CallOp
from xl.dialects.graph import ConstantOp, GraphOp, MainGraphOp, OutputOp, VariableOp
from xl.dialects.popxl import written_operands


class OutlineError(ValueError):
    """Bad options for the `outline` pass."""


# -- step 1: the op sequence -----------------------------------------------------------


def _signature(op: Operation) -> tuple:
    return (
        op.name,
        tuple(sorted(op.properties.items())),
        tuple(sorted(op.attributes.items())),
        tuple(o.type for o in op.operands),
        tuple(r.type for r in op.results),
    )


def _written(op: Operation) -> set[int]:
    """Operand indices `op` updates in place (in-place ops, by-reference call inputs)."""
    out = set(written_operands(op))
    by_ref = getattr(op, "operand_is_by_ref", None)
    if by_ref is not None:
        out.update(i for i in range(len(op.operands)) if by_ref(i))
    return out


@dataclass
class _Sequence:
    """All blocks' eligible ops as one sequence; `sig[g] < 0` is a separator."""

    ops: list[Operation | None] = field(default_factory=list)
    sig: list[int] = field(default_factory=list)
    # per position: for each operand, (producer position, result index) or the value's id
    srcs: list[tuple] = field(default_factory=list)


def _build_sequence(
    blocks: Sequence[Block],
    barriers: set[Operation],
    sig_cache: dict[Operation, int],
    sig_ids: dict[tuple, int],
) -> _Sequence:
    """`sig_cache` (op -> signature id) and `sig_ids` (signature -> id) persist across rounds."""
    seq = _Sequence()
    pos: dict[Operation, int] = {}
    sep = -1

    def separator() -> None:
        nonlocal sep
        seq.ops.append(None)
        seq.sig.append(sep)
        seq.srcs.append(())
        sep -= 1

    for block in blocks:
        for op in block.ops:
            if isinstance(op, VariableOp | ConstantOp):
                continue  # stays in place; its result becomes an input
            if isinstance(op, OutputOp) or op in barriers or op.regions:
                separator()
                continue
            srcs: list[tuple[int, int] | int] = []
            for v in op.operands:
                p = pos.get(v.owner)  # pyright: ignore[reportArgumentType]
                # an op of the sequence: (position, result index); else the value's id
                srcs.append((p, v.index) if p is not None else id(v))  # pyright: ignore[reportAttributeAccessIssue]
            sig = sig_cache.get(op)
            if sig is None:
                sig = sig_cache[op] = sig_ids.setdefault(_signature(op), len(sig_ids))
            pos[op] = len(seq.ops)
            seq.ops.append(op)
            seq.sig.append(sig)
            seq.srcs.append(tuple(srcs))
        separator()
    return seq


# -- step 2: suffix array, LCP, intervals -----------------------------------------------


def suffix_array(s: Sequence[int]) -> list[int]:
    """Suffix array of an integer sequence by prefix doubling (O(n log^2 n))."""
    n = len(s)
    ranks = {v: i for i, v in enumerate(sorted(set(s)))}
    rank = [ranks[v] for v in s]
    sa = sorted(range(n), key=rank.__getitem__)
    k = 1
    while True:
        key = [(rank[i], rank[i + k] if i + k < n else -1) for i in range(n)]
        sa.sort(key=key.__getitem__)
        new = [0] * n
        r = 0
        prev = key[sa[0]] if n else None
        for i in sa:
            if key[i] != prev:
                r += 1
                prev = key[i]
            new[i] = r
        rank = new
        if r == n - 1 or k >= n:
            return sa
        k *= 2


def lcp_array(s: Sequence[int], sa: Sequence[int]) -> list[int]:
    """lcp[i] = common prefix length of suffixes sa[i - 1] and sa[i] (Kasai)."""
    n = len(s)
    rank = [0] * n
    for i, p in enumerate(sa):
        rank[p] = i
    lcp = [0] * n
    h = 0
    for p in range(n):
        r = rank[p]
        if r == 0:
            h = 0
            continue
        q = sa[r - 1]
        while p + h < n and q + h < n and s[p + h] == s[q + h] and s[p + h] >= 0:
            h += 1
        lcp[r] = h
        if h:
            h -= 1
    return lcp


def lcp_intervals(lcp: Sequence[int], min_len: int) -> list[tuple[int, int, int]]:
    """(l, lb, rb): suffix array ranges whose suffixes share exactly l >= min_len leading
    symbols (the internal nodes of the suffix tree)."""
    out: list[tuple[int, int, int]] = []
    stack: list[tuple[int, int]] = [(0, 0)]  # (lcp, lb)
    n = len(lcp)
    for i in range(1, n + 1):
        cur = lcp[i] if i < n else 0
        lb = i - 1
        while cur < stack[-1][0]:
            l, lb = stack.pop()
            if l >= min_len:
                out.append((l, lb, i - 1))
        if cur > stack[-1][0]:
            stack.append((cur, lb))
    return out


class _RangeMinMax:
    """O(1) min / max over ranges of a list (sparse tables)."""

    def __init__(self, a: Sequence[int]):
        self.lo = [list(a)]
        self.hi = [list(a)]
        j = 1
        while (1 << j) <= len(a):
            h = 1 << (j - 1)
            plo, phi = self.lo[-1], self.hi[-1]
            m = len(a) - (1 << j) + 1
            self.lo.append([min(plo[i], plo[i + h]) for i in range(m)])
            self.hi.append([max(phi[i], phi[i + h]) for i in range(m)])
            j += 1

    def span(self, lb: int, rb: int) -> tuple[int, int]:
        j = (rb - lb + 1).bit_length() - 1
        lo, hi = self.lo[j], self.hi[j]
        e = rb - (1 << j) + 1
        return min(lo[lb], lo[e]), max(hi[lb], hi[e])


# -- step 3: examining candidates -------------------------------------------------------


@dataclass
class _Group:
    length: int
    starts: list[int]  # positions of the chosen non-overlapping runs, ascending
    n_inputs: int
    outputs: list[tuple[int, int]]  # (offset in run, result index), ascending
    positions: list[int]  # every position where an isomorphic run starts

    @property
    def saved(self) -> int:
        return (len(self.starts) - 1) * self.length - len(self.starts)

    def rank(self) -> tuple[int, int, int]:
        return (self.saved, -(self.n_inputs + len(self.outputs)), self.starts[0])


def _wiring(seq: _Sequence, p: int, length: int) -> tuple:
    """Canonical wiring of the run [p, p + length): internal operands by (offset, result
    index), outside ones by order of first use."""
    ext: dict[object, int] = {}
    key = []
    srcs = seq.srcs
    end = p + length
    for g in range(p, end):
        for s in srcs[g]:
            if type(s) is tuple and s[0] >= p:
                key.append((s[0] - p, s[1]))
            else:
                key.append(-1 - ext.setdefault(s, len(ext)))
    return tuple(key)


def _outputs(seq: _Sequence, starts: Sequence[int], length: int) -> list[tuple[int, int]]:
    outs: set[tuple[int, int]] = set()
    for p in starts:
        run = seq.ops[p : p + length]
        inside = set(run)
        for k, op in enumerate(run):
            assert op is not None
            for r in op.results:
                if any(u.operation not in inside for u in r.uses):
                    outs.add((k, r.index))
    return sorted(outs)


def _pick(positions: list[int], length: int) -> list[int]:
    chosen: list[int] = []
    end = -1
    for p in sorted(positions):
        if p >= end:
            chosen.append(p)
            end = p + length
    return chosen


def _examine(seq: _Sequence, positions: list[int], length: int) -> list[_Group]:
    """The groups of isomorphic runs of `length` ops at `positions` that save something."""
    by_wiring: dict[tuple, list[int]] = {}
    for p in positions:
        by_wiring.setdefault(_wiring(seq, p, length), []).append(p)
    out: list[_Group] = []
    for key, ps in by_wiring.items():
        if len(ps) < 2:
            continue
        starts = _pick(ps, length)
        c = len(starts)
        if c < 2 or (c - 1) * length - c <= 0:
            continue
        n_inputs = -min((k for k in key if type(k) is int), default=0)
        out.append(_Group(length, starts, n_inputs, _outputs(seq, starts, length), ps))
    return out


def _packing_bound(positions: list[int], lengths: Sequence[int]) -> int:
    """The most `lengths` runs at `positions` can save if all were isomorphic."""
    best = 0
    for length in lengths:
        c = len(_pick(positions, length))
        best = max(best, (c - 1) * length - c)
    return best


def select_groups(seq: _Sequence, min_ops: int) -> list[_Group]:
    """Greedy choice of groups of non-overlapping isomorphic runs of >= `min_ops` ops, best
    first: a group is taken once no unexamined interval can beat it (its bound is lower),
    after dropping its runs that overlap groups already taken."""
    s = seq.sig
    if len(s) < 2:
        return []
    sa = suffix_array(s)
    lcp = lcp_array(s, sa)
    rmq = _RangeMinMax(sa)
    # (-bound, refined?, l, lb, rb): a cheap bound first; refined by packing when popped
    heap: list[tuple[int, bool, int, int, int]] = []
    for l, lb, rb in lcp_intervals(lcp, min_ops):
        lo, hi = rmq.span(lb, rb)
        bound = min((rb - lb) * l, hi - lo) - 2
        if bound > 0:
            heap.append((-bound, False, l, lb, rb))
    heapq.heapify(heap)
    pending: list[tuple[tuple[int, int, int], int, _Group]] = []  # max-heap by rank
    count = 0
    covered = bytearray(len(s))  # 1 where a taken run lies
    fenwick = [0] * (len(s) + 1)  # covered positions, for counting free ones in a span

    def n_covered(end: int) -> int:  # covered positions in [0, end)
        total = 0
        while end > 0:
            total += fenwick[end]
            end &= end - 1
        return total

    def cover(p: int, length: int) -> None:
        covered[p : p + length] = b"\x01" * length
        for i in range(p + 1, p + length + 1):
            while i <= len(s):
                fenwick[i] += 1
                i += i & -i

    def free(positions: list[int], length: int) -> list[int]:
        if not taken:
            return positions
        return [p for p in positions if covered.find(1, p, p + length) < 0]

    taken: list[_Group] = []
    while heap or pending:
        if pending and (not heap or -pending[0][0][0] > -heap[0][0]):
            _, _, g = heapq.heappop(pending)
            starts = _pick(free(g.positions, g.length), g.length)
            if starts != g.starts:  # some runs overlap a group taken before
                c = len(starts)
                if c >= 2 and (c - 1) * g.length - c > 0:
                    g = _Group(g.length, starts, g.n_inputs, _outputs(seq, starts, g.length), g.positions)
                    count += 1
                    heapq.heappush(pending, (tuple(-x for x in g.rank()), count, g))  # pyright: ignore[reportArgumentType]
                continue
            for p in starts:
                cover(p, g.length)
            taken.append(g)
            continue
        neg_bound, refined, l, lb, rb = heapq.heappop(heap)
        if taken:  # c runs of L ops fit in the free ops of the span: saved < free ops
            lo, hi = rmq.span(lb, rb)
            end = min(hi + l, len(s))
            cap = (end - lo) - (n_covered(end) - n_covered(lo)) - 2
            if cap < -neg_bound:
                if cap > 0:
                    heapq.heappush(heap, (-cap, refined, l, lb, rb))
                continue
        positions = sorted(sa[lb : rb + 1])
        gap = min(b - a for a, b in zip(positions, positions[1:]))
        lengths = sorted({l, max(min_ops, min(l, gap))})
        if not refined:
            bound = max(_packing_bound(free(positions, n), [n]) for n in lengths)
            if bound > 0:
                heapq.heappush(heap, (-bound, True, l, lb, rb))
            continue
        for length in lengths:
            for g in _examine(seq, free(positions, length), length):
                count += 1
                heapq.heappush(pending, (tuple(-x for x in g.rank()), count, g))  # pyright: ignore[reportArgumentType]
    return taken


# -- rewriting --------------------------------------------------------------------------


def _unique_name(module: ModuleOp, base: str) -> str:
    names = {
        op.properties["sym_name"].data  # pyright: ignore[reportAttributeAccessIssue]
        for op in module.body.block.ops
        if "sym_name" in op.properties
    }
    name, i = base, 0
    while name in names:
        i += 1
        name = f"{base}_{i}"
    return name


def _hint(v: SSAValue, fallback: str) -> str:
    return v.name_hint or fallback


def outline_group(module: ModuleOp, seq: _Sequence, group: _Group) -> list[CallOp]:
    """Replace the runs of `group` by calls of one new graph; returns the calls."""
    length = group.length
    first = [op for op in seq.ops[group.starts[0] : group.starts[0] + length]]
    assert all(op is not None for op in first)
    # inputs of the first run, in order of first use
    inside = set(first)
    inputs: list[SSAValue] = []
    seen: set[SSAValue] = set()
    by_ref: dict[SSAValue, bool] = {}
    for op in first:
        assert op is not None
        written = _written(op)
        for i, v in enumerate(op.operands):
            if v.owner in inside:
                continue
            if v not in seen:
                seen.add(v)
                inputs.append(v)
                by_ref[v] = False
            if i in written:
                by_ref[v] = True
    name = _unique_name(module, "outlined")
    out_types = [first[k].results[r].type for k, r in group.outputs]  # pyright: ignore[reportOptionalMemberAccess]
    names = [_hint(v, f"in{i}") for i, v in enumerate(inputs)]
    graph = GraphOp(
        name,
        [v.type for v in inputs],
        out_types,
        input_names=names,
        by_ref=[by_ref[v] for v in inputs],
    )
    block = graph.body.block
    vm: dict[SSAValue, SSAValue] = {}
    for v, arg in zip(inputs, block.args, strict=True):
        if v.name_hint:
            arg.name_hint = v.name_hint
        vm[v] = arg
    for op in first:
        assert op is not None
        block.add_op(op.clone(vm))
    block.add_op(OutputOp([vm[first[k].results[r]] for k, r in group.outputs]))  # pyright: ignore[reportOptionalMemberAccess]
    # the graph goes right before the graph (or main) holding the first run
    holder = first[0].parent_op()  # pyright: ignore[reportOptionalMemberAccess]
    assert holder is not None
    Rewriter.insert_op(graph, InsertPoint.before(holder))

    calls: list[CallOp] = []
    for p in group.starts:
        run = seq.ops[p : p + length]
        run_inside = set(run)
        args: list[SSAValue] = []
        done: set[SSAValue] = set()
        for op in run:
            assert op is not None
            for v in op.operands:
                if v.owner not in run_inside and v not in done:
                    done.add(v)
                    args.append(v)
        assert len(args) == len(inputs)
        last = run[-1]
        assert last is not None
        call = CallOp(name, args, out_types)
        Rewriter.insert_op(call, InsertPoint.after(last))
        for (k, r), res in zip(group.outputs, call.res, strict=True):
            old = run[k].results[r]  # pyright: ignore[reportOptionalMemberAccess]
            res.name_hint = old.name_hint
            old.replace_all_uses_with(res)
        for op in reversed(run):
            assert op is not None
            for r in op.results:  # results used only inside the run
                for use in list(r.uses):
                    assert use.operation in run_inside, "outline: value escapes the run"
            Rewriter.erase_op(op, safe_erase=False)
        calls.append(call)
    return calls


def outline(module: ModuleOp, min_ops: int = 3, graph: str | None = None) -> list[str]:
    """Outline repeated runs of `module` (see the module docstring); returns the names of
    the new graphs."""
    if min_ops < 1:
        raise OutlineError(f"outline: min-ops must be >= 1, got {min_ops}")
    holders: list[Operation]
    if graph:
        g = next(
            (op for op in module.body.block.ops if isinstance(op, GraphOp) and op.graph_name == graph),
            None,
        )
        if g is None:
            raise OutlineError(f"outline: no graph @{graph} in the module")
        holders = [g]
    else:
        holders = [op for op in module.body.block.ops if isinstance(op, GraphOp | MainGraphOp)]
    barriers: set[Operation] = set()
    sig_cache: dict[Operation, int] = {}
    sig_ids: dict[tuple, int] = {}
    created: list[str] = []
    while True:
        blocks = [h.regions[0].block for h in holders]
        seq = _build_sequence(blocks, barriers, sig_cache, sig_ids)
        groups = select_groups(seq, min_ops)
        if not groups:
            return created
        for group in groups:
            calls = outline_group(module, seq, group)
            barriers.update(calls)
            created.append(calls[0].callee.root_reference.data)


def count_ops(module: ModuleOp) -> int:
    """The ops of the program once every `call.call` is inlined: the ops of `graph.main`
    (terminators included), where a `call.call` counts the expanded ops of its graph instead
    of itself; `call.repeat` / `call.conditional` count as one op. Without `graph.main`, the
    ops of all graph bodies."""
    graphs = {h.graph_name: h for h in module.body.block.ops if isinstance(h, GraphOp)}
    main = next((h for h in module.body.block.ops if isinstance(h, MainGraphOp)), None)
    if main is None:
        return sum(1 for g in graphs.values() for _ in g.walk()) - len(graphs)
    sizes: dict[str, int] = {}

    def size(holder: Operation) -> int:
        n = 0
        for op in holder.walk():
            if isinstance(op, CallOp):
                name = op.callee.root_reference.data
                g = graphs.get(name)
                if g is None:
                    n += 1
                    continue
                if name not in sizes:
                    sizes[name] = 0  # a recursive call counts 0 (the verifier reports it)
                    sizes[name] = size(g) - 1  # its graph.output is not inlined
                n += sizes[name]
            elif op is not holder:
                n += 1
        return n

    return size(main)


@dataclass(frozen=True)
class OutlinePass(ModulePass):
    """`outline{min-ops=3 graph=G min-program-ops=0}`: repeated op runs of at least
    `min-ops` ops become one graph and calls (every graph and `graph.main`, or only graph
    @G). With `min-program-ops=N` the pass does nothing to a module whose graphs hold
    fewer than N ops once inlined (`count_ops`): the size threshold of the default pipeline."""

    name = "outline"
    min_ops: int = 3
    graph: str | None = None
    min_program_ops: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.min_program_ops > 0 and count_ops(op) < self.min_program_ops:
            if self.min_ops < 1:
                raise OutlineError(f"outline: min-ops must be >= 1, got {self.min_ops}")
            return
        outline(op, self.min_ops, self.graph)
