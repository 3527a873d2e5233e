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
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import sub
from typing import cast

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, SymbolRefAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import CallOp
from xl.dialects.graph import ConstantOp, GraphOp, MainGraphOp, OutputOp, VariableOp
from xl.dialects.popxl import written_operands


class OutlineError(ValueError):
    """Bad options for the `outline` pass."""


# -- step 1: the op sequence -----------------------------------------------------------


class _Signatures:
    """Signature ids of ops, kept across rounds: ops get the same id when they agree in name,
    properties, attributes, operand and result types; ids are numbered in order of first
    occurrence. Hashing an attribute is recursive (and many ops share their type objects),
    so each attribute object is mapped once to the number of its equality class and a
    signature is a tuple of small ints."""

    def __init__(self) -> None:
        self.of_op: dict[int, int] = {}  # id(op) -> signature id
        self.ids: dict[tuple, int] = {}  # signature -> id
        self.by_id: dict[int, int] = {}  # id(attribute) -> its class number
        self.by_value: dict[Attribute, int] = {}  # attribute -> its class number
        self.alive: list[object] = []  # the ops and attributes whose ids are keys above

    def compute(self, op: Operation, operands: Sequence[SSAValue]) -> int:
        props, attrs = op.properties, op.attributes
        if len(props) > 1:
            prop_names = tuple(sorted(props))
            values = [props[k] for k in prop_names]
        else:
            prop_names = tuple(props)
            values = list(props.values())
        attr_names: tuple[str, ...] = ()
        if attrs:
            attr_names = tuple(sorted(attrs))
            values += [attrs[k] for k in attr_names]
        values += [v.type for v in operands]
        values += [r.type for r in op.results]
        by_id = self.by_id
        classes = [by_id.get(id(a), -1) for a in values]
        if -1 in classes:
            for i, c in enumerate(classes):
                if c == -1:
                    a = values[i]
                    classes[i] = by_id[id(a)] = self.by_value.setdefault(a, len(self.by_value))
                    self.alive.append(a)
        key = (op.name, prop_names, attr_names, len(operands), *classes)
        sig = self.of_op[id(op)] = self.ids.setdefault(key, len(self.ids))
        self.alive.append(op)
        return sig


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
    # (position, result index) -> the last position using that result (a separator's for a
    # use by an op outside the sequence); per position, the last using any of its results
    last: dict[tuple[int, int], int] = field(default_factory=dict)
    reach: list[int] = field(default_factory=list)


_SKIP, _SEPARATOR, _OP = 0, 1, 2  # how `_build_sequence` treats an op class


def _kind(op: Operation) -> int:
    if isinstance(op, VariableOp | ConstantOp):
        return _SKIP  # stays in place (no operands); its result becomes an input
    return _SEPARATOR if isinstance(op, OutputOp) else _OP


def _build_sequence(blocks: Sequence[Block], barriers: set[int], signatures: _Signatures) -> _Sequence:
    """`barriers`: ids of the calls created by the pass (kept alive by the IR). Operands are
    defined before their uses (as the verifier checks)."""
    seq = _Sequence()
    ops, sig, srcs, last, reach = seq.ops, seq.sig, seq.srcs, seq.last, seq.reach
    where: dict[int, tuple[int, int]] = {}  # id(result) -> (position, result index)
    get = where.get
    of_op = signatures.of_op
    kinds: dict[type, int] = {}
    n_separators = 0
    for block in blocks:
        for op in block.ops:
            kind = kinds.get(type(op))
            if kind is None:
                kind = kinds[type(op)] = _kind(op)
            if kind == _SKIP:
                continue
            q = len(ops)
            if kind == _SEPARATOR or op.regions or id(op) in barriers:
                for user in op.walk():  # its uses count as uses after any run
                    for v in user.operands:
                        s = get(id(v))
                        if s is not None:
                            last[s] = reach[s[0]] = q
                n_separators += 1
                ops.append(None)
                sig.append(-n_separators)
                srcs.append(())
                reach.append(-1)
                continue
            operands = op.operands
            # an op of the sequence: (position, result index); else the value's id
            ss = tuple([get(id(v), id(v)) for v in operands])
            for s in ss:
                if type(s) is tuple:
                    last[s] = reach[s[0]] = q
            for r in op.results:
                where[id(r)] = (q, r.index)
            g = of_op.get(id(op))
            ops.append(op)
            sig.append(g if g is not None else signatures.compute(op, operands))
            srcs.append(ss)
            reach.append(-1)
        n_separators += 1
        ops.append(None)
        sig.append(-n_separators)
        srcs.append(())
        reach.append(-1)
    return seq


# -- step 2: suffix array, LCP, intervals -----------------------------------------------


def suffix_array(s: Sequence[int]) -> list[int]:
    """Suffix array of an integer sequence by prefix doubling (O(n log^2 n), vectorised)."""
    n = len(s)
    if n == 0:
        return []
    rank = np.unique(np.asarray(s, dtype=np.int64), return_inverse=True)[1].astype(np.int64)
    sa = np.argsort(rank, kind="stable")
    k = 1
    second = np.empty(n, dtype=np.int64)
    while True:
        second[: n - k] = rank[k:] if k < n else rank[:0]
        second[max(n - k, 0) :] = -1
        sa = np.lexsort((second, rank))
        r1, r2 = rank[sa], second[sa]
        step = np.empty(n, dtype=np.int64)
        step[0] = 0
        np.not_equal(r1[1:], r1[:-1], out=step[1:])
        step[1:] |= r2[1:] != r2[:-1]
        new = np.empty(n, dtype=np.int64)
        new[sa] = np.cumsum(step)
        rank = new
        if int(new[sa[-1]]) == n - 1 or k >= n:
            return sa.tolist()
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


def range_min_max(a: Sequence[int], lb: Sequence[int], rb: Sequence[int]) -> tuple[list[int], list[int]]:
    """min and max of a[lb[i] : rb[i] + 1] for each i (sparse tables, O(n log n) to build,
    O(1) per range, vectorised)."""
    if not len(lb):
        return [], []
    lo = [np.asarray(a, dtype=np.int64)]
    hi = [lo[0]]
    while (2 << (len(lo) - 1)) <= len(a):
        h = 1 << (len(lo) - 1)
        lo.append(np.minimum(lo[-1][:-h], lo[-1][h:]))
        hi.append(np.maximum(hi[-1][:-h], hi[-1][h:]))
    left = np.asarray(lb, dtype=np.int64)
    right = np.asarray(rb, dtype=np.int64)
    level = np.frexp(right - left + 1)[1].astype(np.int64) - 1  # floor(log2(size))
    right = right - (np.int64(1) << level) + 1
    out_lo = np.empty(len(left), dtype=np.int64)
    out_hi = np.empty(len(left), dtype=np.int64)
    for j in np.unique(level).tolist():
        sel = level == j
        ls, rs = left[sel], right[sel]
        out_lo[sel] = np.minimum(lo[j][ls], lo[j][rs])
        out_hi[sel] = np.maximum(hi[j][ls], hi[j][rs])
    return out_lo.tolist(), out_hi.tolist()


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
    """(offset, result index) of the results of the runs used after (or outside) them."""
    outs: set[tuple[int, int]] = set()
    ops, last, reach = seq.ops, seq.last, seq.reach
    for p in starts:
        end = p + length
        for g in range(p, end):
            if reach[g] >= end:
                n = len(ops[g].results)  # pyright: ignore[reportOptionalMemberAccess]
                outs.update((g - p, r) for r in range(n) if last.get((g, r), -1) >= end)
    return sorted(outs)


def _pick(positions: list[int], length: int) -> list[int]:
    """Greedy non-overlapping runs of `length` ops at `positions` (ascending), left to right."""
    chosen: list[int] = []
    i, n = 0, len(positions)
    while i < n:
        p = positions[i]
        chosen.append(p)
        i = bisect_left(positions, p + length, i + 1)
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


def _packing_bound(positions: list[int], length: int, gap: int) -> int:
    """The most runs of `length` ops at `positions` (ascending, no two closer than `gap`) can
    save if all were isomorphic."""
    c = len(positions) if length <= gap else len(_pick(positions, length))
    return max(0, (c - 1) * length - c)


def select_groups(seq: _Sequence, min_ops: int) -> list[_Group]:
    """Greedy choice of groups of non-overlapping isomorphic runs of >= `min_ops` ops, best
    first: a group is taken once no unexamined interval can beat it (its bound is lower),
    after dropping its runs that overlap groups already taken."""
    s = seq.sig
    if len(s) < 2:
        return []
    sa = suffix_array(s)
    lcp = lcp_array(s, sa)
    intervals = lcp_intervals(lcp, min_ops)
    spans = range_min_max(sa, [lb for _, lb, _ in intervals], [rb for _, _, rb in intervals])
    # (-bound, refined?, l, lb, rb, lo, hi, positions, gap): a cheap bound first, refined
    # by packing when popped; [lo, hi] holds the interval's positions (sorted once refined;
    # no two closer than gap); only the first five ever decide the order
    heap: list[tuple[int, bool, int, int, int, int, int, list[int], int]] = []
    for (l, lb, rb), lo, hi in zip(intervals, *spans, strict=True):
        bound = min((rb - lb) * l, hi - lo) - 2
        if bound > 0:
            heap.append((-bound, False, l, lb, rb, lo, hi, [], 0))
    heapq.heapify(heap)
    pending: list[tuple[tuple[int, int, int], int, _Group]] = []  # max-heap by rank
    count = 0
    n = len(s)
    covered = bytearray(n)  # 1 where a taken run lies

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
                covered[p : p + g.length] = b"\x01" * g.length
            taken.append(g)
            continue
        entry = heapq.heappop(heap)
        neg_bound, refined, l, lb, rb, lo, hi, positions, gap = entry
        if taken:  # c runs of L ops fit in the free ops of the span: saved < free ops
            end = min(hi + l, n)
            cap = (end - lo) - covered.count(1, lo, end) - 2
            if cap < -neg_bound:
                if cap > 0:
                    heapq.heappush(heap, (-cap, *entry[1:]))
                continue
        if not refined:
            positions = sorted(sa[lb : rb + 1])
            gap = min(map(sub, positions[1:], positions))
        lengths = sorted({l, max(min_ops, min(l, gap))})
        if not refined:
            bound = max(_packing_bound(free(positions, length), length, gap) for length in lengths)
            if bound > 0:
                heapq.heappush(heap, (-bound, True, l, lb, rb, lo, hi, positions, gap))
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


def _run_inputs(seq: _Sequence, p: int, length: int) -> tuple[list[SSAValue], list[tuple[int, int]], list[int]]:
    """The values the run [p, p + length) uses from outside it, in order of first use; where
    each is first used: (offset in the run, operand index); the offsets of the ops using
    any. Isomorphic runs use their inputs at the same places."""
    inputs: list[SSAValue] = []
    slots: list[tuple[int, int]] = []
    users: list[int] = []
    seen: set[int] = set()
    ops, srcs = seq.ops, seq.srcs
    for g in range(p, p + length):
        op = ops[g]
        assert op is not None
        outside = False
        for i, (v, s) in enumerate(zip(op.operands, srcs[g], strict=True)):
            if type(s) is not tuple or s[0] < p:
                outside = True
                if id(v) not in seen:
                    seen.add(id(v))
                    inputs.append(v)
                    slots.append((g - p, i))
        if outside:
            users.append(g - p)
    return inputs, slots, users


class _Redirects:
    """Uses to move to new values, applied at once per user (an op using many of them, such
    as a graph's `graph.output`, gets its operand list set once instead of per operand)."""

    def __init__(self) -> None:
        self.users: dict[int, tuple[Operation, dict[int, SSAValue]]] = {}

    def add(self, value: SSAValue, to: SSAValue, skip: set[int]) -> None:
        """Uses of `value` by ops not in `skip` (ids) will use `to`."""
        users = self.users
        for use in value.uses:
            op = use.operation
            if id(op) not in skip:
                entry = users.get(id(op))
                if entry is None:
                    entry = users[id(op)] = (op, {})
                entry[1][use.index] = to

    def apply(self) -> None:
        for op, new in self.users.values():
            if len(new) > 2:
                op.operands = [new.get(i, v) for i, v in enumerate(op.operands)]
            else:
                for i, v in new.items():
                    op.operands[i] = v
        self.users.clear()


def outline_group(
    module: ModuleOp,
    seq: _Sequence,
    group: _Group,
    in_runs: set[int] | None = None,
    renamed: dict[int, SSAValue] | None = None,
    redirects: _Redirects | None = None,
) -> list[CallOp]:
    """Replace the runs of `group` by calls of one new graph whose body is made of the ops
    of the first run (moved, not copied); returns the calls. The groups of one round are
    rewritten in turn with the same `in_runs` (ids of the ops of all their runs) and
    `renamed` (id of a value a rewritten run defined -> the call result replacing it): uses
    by ops of runs are not redirected, these ops go (or move into a graph) anyway; the
    other uses are moved by `redirects.apply()` once the round is rewritten."""
    if in_runs is None:
        in_runs = {id(op) for p in group.starts for op in seq.ops[p : p + group.length]}
    if renamed is None:
        renamed = {}
    alone = redirects is None
    if redirects is None:
        redirects = _Redirects()
    length = group.length
    p0 = group.starts[0]
    first = cast(list[Operation], seq.ops[p0 : p0 + length])
    used, slots, users = _run_inputs(seq, p0, length)
    inputs = [renamed.get(id(v), v) for v in used]
    number = {id(v): i for i, v in enumerate(used)}
    by_ref = [False] * len(inputs)
    for op in first:
        for i in _written(op):
            k = number.get(id(op.operands[i]))
            if k is not None:
                by_ref[k] = True
    name = _unique_name(module, "outlined")
    out_types = [first[k].results[r].type for k, r in group.outputs]
    graph = GraphOp(
        name,
        [v.type for v in inputs],
        out_types,
        input_names=[v.name_hint or f"in{i}" for i, v in enumerate(inputs)],
        by_ref=by_ref,
    )
    block = graph.body.block
    for v, arg in zip(inputs, block.args, strict=True):
        if v.name_hint:
            arg.name_hint = v.name_hint
    # the graph goes right before the graph (or main) holding the first run
    holder = first[0].parent_op()
    assert holder is not None
    Rewriter.insert_op(graph, InsertPoint.before(holder))

    callee = SymbolRefAttr(name)
    calls: list[CallOp] = []
    for p in group.starts:
        run = cast(list[Operation], seq.ops[p : p + length])
        if p == p0:
            args = inputs
        else:
            args = [run[k].operands[i] for k, i in slots]
            args = [renamed.get(id(v), v) for v in args]
        call = CallOp.create(operands=args, result_types=out_types, properties={"callee": callee})
        Rewriter.insert_op(call, InsertPoint.after(run[-1]))
        calls.append(call)
        # uses after the run take the call's results
        for (k, r), res in zip(group.outputs, call.res, strict=True):
            old = run[k].results[r]
            res.name_hint = old.name_hint
            renamed[id(old)] = res
            redirects.add(old, res, in_runs)
        if p == p0:
            continue
        # the run goes: the values it uses from outside lose those uses; what it defines
        # is used only by runs, which go or move too
        for op in run:
            op.detach()
        for k in users:
            run[k].drop_all_references()
    # the first run becomes the graph body, using the graph's inputs
    args = dict(zip([id(v) for v in used], block.args, strict=True))
    for k in users:
        op = first[k]
        op.operands = [args.get(id(v), v) for v in op.operands]
    for op in first:
        op.detach()
        block.add_op(op)
    block.add_op(OutputOp([first[k].results[r] for k, r in group.outputs]))
    if alone:
        redirects.apply()
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
    barriers: set[int] = set()  # ids of the calls created (alive: they stay in the IR)
    signatures = _Signatures()
    created: list[str] = []
    while True:
        blocks = [h.regions[0].block for h in holders]
        seq = _build_sequence(blocks, barriers, signatures)
        groups = select_groups(seq, min_ops)
        if not groups:
            return created
        in_runs = {id(op) for g in groups for p in g.starts for op in seq.ops[p : p + g.length]}
        renamed: dict[int, SSAValue] = {}
        redirects = _Redirects()
        for group in groups:
            calls = outline_group(module, seq, group, in_runs, renamed, redirects)
            barriers.update(id(c) for c in calls)
            created.append(calls[0].callee.root_reference.data)
        redirects.apply()


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
