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
repeat until a round takes nothing, or until the ops outside the runs taken hold no two
equal runs of `min-ops` ops (the next round's repeats are repeats of those, so it could
not find anything); the bodies of graphs created by the pass and the calls it created
are not searched again. A round:

1. Each eligible op gets a signature id (name, properties, attributes, operand and result
   types; each attribute object hashed once, by identity after; cached across rounds);
   the blocks become one integer sequence with a unique separator at each block end and
   at each op that cannot be outlined, and the operands one integer array (a result of
   an op of the sequence by position and result index, another value by its identity).
   O(n + operands).
2. Suffix array (prefix doubling, O(n log^2 n)) and LCP array (binary lifting over the
   doubling's ranks, O(n log n)) of that sequence, both with NumPy; every LCP interval
   (an internal node of the suffix tree, at most n - 1 of them, O(n) by one stack pass)
   is a set P of positions whose next l signatures agree.
3. Branch and bound over the intervals, by a max-heap of upper bounds on what they can
   save: first min((|P| - 1) * l, span(P)) - 2 (span from sparse-table range min/max over
   the suffix array, all intervals at once); when popped, the exact packing bound of the
   positions still free (O(|P|)); once some group is taken, also the free ops of the span
   (a count over a byte array in C, O(span); at each take the intervals that can no
   longer save anything leave the heap at once, O(intervals) with NumPy). Examining an
   interval computes the canonical wiring of each free position's run (L = l, and L =
   the smallest gap between positions when smaller, so that overlapping repeats still
   give non-overlapping runs; all runs at once with NumPy), groups positions by it and
   picks non-overlapping runs left to right: O(|P| * L). Found groups wait in a max-heap
   by saved ops; the best is taken as soon as it saves more than any unexamined interval
   could, after dropping its runs that overlap groups already taken. The round ends when
   both heaps are empty.
4. Rewriting, each group in O(c * L): the ops of its first run move into the new graph's
   body, the other runs are unlinked from their block (only their ops using outside
   values drop those uses), each run is replaced by a call; uses after the runs take the
   calls' results, moved once per user op when the round's groups are all rewritten.

Complexity: O(n log^2 n) per round plus the examined intervals' O(|P| * L): in the worst
case O(n^2), in practice few intervals are examined (a chain of 10,000 identical ops: one
round, 100 calls of a 100-op graph). Measured (CPU time, shared 2-core machine): on the
default compile's input (after `pipeline,inline{keep-shared=true},hoist-updates`,
`min-ops=6`) mlp-48 (~550 ops in the sequence) ~8 ms, transformer-12 (~1,560) ~15 ms, one
round each; frontend programs of benchmarks/outline.py (`min-ops=3`): mlp-48 ~10 ms,
transformer-12 ~19 ms, 1,000-op graphs 20-40 ms, 10,000-op graphs 0.2-0.6 s.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import sub
from struct import Struct
from typing import cast

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, FloatAttr, IntegerAttr, ModuleOp, StringAttr, SymbolRefAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xl.dialects.call import CallOp
from xl.dialects.graph import ConstantOp, GraphOp, MainGraphOp, OutputOp, VariableOp
from xl.dialects.popxl import written_operands
from xl.passes.outline_dce import remove_dead_ops


class OutlineError(ValueError):
    """Bad options for the `outline` pass."""


_F64 = Struct("<d")  # a float's bits


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
        self.by_key: dict[tuple, int] = {}  # plain-value key of a scalar attribute -> its class
        # (name, number of operands, ids of the operand and result types) -> signature id,
        # for ops without properties and attributes
        self.by_types: dict[tuple, int] = {}
        self.alive: list[object] = []  # the ops and attributes whose ids are keys above

    def compute(self, op: Operation, operands: Sequence[SSAValue]) -> int:
        props, attrs = op.properties, op.attributes
        if not props and not attrs:  # only types: often the same objects as another op's
            types = [v.type for v in operands]
            types += [r.type for r in op.results]
            same = (op.name, len(operands), *map(id, types))
            sig = self.by_types.get(same)
            if sig is None:
                sig = self.by_types[same] = self._compute(op, operands)  # keeps the types alive
            else:
                self.of_op[id(op)] = sig
                self.alive.append(op)
            return sig
        return self._compute(op, operands)

    def _compute(self, op: Operation, operands: Sequence[SSAValue]) -> int:
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
                    classes[i] = self._class(values[i])
        key = (op.name, prop_names, attr_names, len(operands), *classes)
        sig = self.of_op[id(op)] = self.ids.setdefault(key, len(self.ids))
        self.alive.append(op)
        return sig

    def _class(self, a: Attribute) -> int:
        """The class number of `a`, first seen as this object. The scalar attributes ops
        carry (a scale, a permutation, a name: usually one object per op) are looked up by
        a key of plain values, equal only for equal attributes (xDSL's hash and equality of
        a float attribute convert its bits at every call); a key's first attribute gets its
        number from `by_value`, so the numbering is the same."""
        c = self.by_id.get(id(a))
        if c is not None:
            return c
        t = type(a)
        key: tuple | None = None
        if t is FloatAttr:
            f = cast(FloatAttr, a)
            key = (t, _F64.pack(f.value.data), self._class(f.type))  # the bits, as FloatData compares
        elif t is IntegerAttr:
            i = cast(IntegerAttr, a)
            key = (t, i.value.data, self._class(i.type))
        elif t is DenseArrayBase:
            d = cast(DenseArrayBase, a)
            key = (t, d.data.data, self._class(d.elt_type))
        elif t is StringAttr:
            key = (t, cast(StringAttr, a).data)
        if key is None:
            c = self.by_value.setdefault(a, len(self.by_value))
        else:
            c = self.by_key.get(key)
            if c is None:
                c = self.by_key[key] = self.by_value.setdefault(a, len(self.by_value))
        self.by_id[id(a)] = c
        self.alive.append(a)
        return c


def _written(op: Operation) -> set[int]:
    """Operand indices `op` updates in place (in-place ops, by-reference call inputs)."""
    out = set(written_operands(op))
    by_ref = getattr(op, "operand_is_by_ref", None)
    if by_ref is not None:
        out.update(i for i in range(len(op.operands)) if by_ref(i))
    return out


_R = 1 << 20  # result q of the op at position g is coded g * _R + q (no op has more results)


@dataclass
class _Sequence:
    """All blocks' eligible ops as one sequence; `sig[g] < 0` is a separator."""

    ops: list[Operation | None] = field(default_factory=list)
    sig: list[int] = field(default_factory=list)
    # the operands of all positions, one after the other (position g's from start[g] to
    # start[g + 1]): a result of an op of the sequence by its code (>= 0), another value by
    # -id(value) (so the same value has the same code everywhere)
    operands: list[int] = field(default_factory=list)
    start: list[int] = field(default_factory=list)
    # results used by ops outside the sequence: their codes and the separators' positions
    outside_codes: list[int] = field(default_factory=list)
    outside_at: list[int] = field(default_factory=list)
    _arrays: tuple[np.ndarray, ...] | None = None

    def arrays(self) -> tuple[np.ndarray, ...]:
        """`operands` and `start` as arrays; per position, the last position using one of its
        results (a separator's for a use outside the sequence; -1 if none); the codes of the
        results used, ascending, and the last position using each."""
        if self._arrays is None:
            flat = np.array(self.operands, dtype=np.int64)
            start = np.array(self.start, dtype=np.int64)
            n = len(self.ops)
            inside = flat >= 0
            codes = np.concatenate((flat[inside], np.array(self.outside_codes, dtype=np.int64)))
            users = np.concatenate(
                (
                    np.repeat(np.arange(n, dtype=np.int64), np.diff(start))[inside],
                    np.array(self.outside_at, dtype=np.int64),
                )
            )
            order = np.lexsort((users, codes))
            codes, users = codes[order], users[order]
            final = np.ones(len(codes), dtype=bool)
            final[:-1] = codes[1:] != codes[:-1]
            codes, last = codes[final], users[final]
            reach = np.full(n, -1, dtype=np.int64)
            np.maximum.at(reach, codes // _R, last)
            self._arrays = (flat, start, reach, codes, last)
        return self._arrays


_SKIP, _SEPARATOR, _OP = 0, 1, 2  # how `_build_sequence` treats an op class


def _kind(op: Operation) -> int:
    if isinstance(op, VariableOp | ConstantOp):
        return _SKIP  # stays in place (no operands); its result becomes an input
    return _SEPARATOR if isinstance(op, OutputOp) else _OP


def _build_sequence(blocks: Sequence[Block], barriers: set[int], signatures: _Signatures) -> _Sequence:
    """`barriers`: ids of the calls created by the pass (kept alive by the IR). Operands are
    defined before their uses (as the verifier checks)."""
    return _sequence_of([[(op, op.operands) for op in block.ops] for block in blocks], barriers, signatures)


def _sequence_of(
    blocks: Iterable[Iterable[tuple[Operation, Sequence[SSAValue]]]], barriers: set[int], signatures: _Signatures
) -> _Sequence:
    """`_build_sequence` of blocks given as their ops in order, each with its operands (the
    values they will use: `xl.passes.outline_copy` builds the sequence of a program not
    yet made)."""
    seq = _Sequence()
    ops, sig, flat, start = seq.ops, seq.sig, seq.operands, seq.start
    code: dict[int, int] = {}  # id(result of an op of the sequence) -> its code
    get = code.get
    of_op = signatures.of_op
    kinds: dict[type, int] = {}
    n_separators = 0

    def separator(users: Iterable[Operation]) -> None:
        nonlocal n_separators
        q = len(ops)
        for user in users:  # its uses count as uses after any run
            for v in user.operands:
                c = get(id(v))
                if c is not None:
                    seq.outside_codes.append(c)
                    seq.outside_at.append(q)
        n_separators += 1
        ops.append(None)
        sig.append(-n_separators)
        start.append(len(flat))

    for block in blocks:
        for op, operands in block:
            kind = kinds.get(type(op))
            if kind is None:
                kind = kinds[type(op)] = _kind(op)
            if kind == _SKIP:
                continue
            if kind == _SEPARATOR or op.regions or id(op) in barriers:
                separator(op.walk())
                continue
            q = len(ops)
            start.append(len(flat))
            flat += [get(i, -i) for i in map(id, operands)]
            base = q * _R
            for i, r in enumerate(op.results):
                code[id(r)] = base + i
            g = of_op.get(id(op))
            ops.append(op)
            sig.append(g if g is not None else signatures.compute(op, operands))
        separator(())
    start.append(len(flat))
    return seq


# -- step 2: suffix array, LCP, intervals -----------------------------------------------


def suffix_lcp_arrays(s: Sequence[int]) -> tuple[list[int], list[int]]:
    """Suffix array of an integer sequence ending with a unique symbol, by prefix doubling
    (O(n log^2 n), vectorised), and its LCP array (lcp[i] = common prefix length of the
    suffixes sa[i - 1] and sa[i]), by binary lifting over the doubling's ranks (O(n log n))."""
    n = len(s)
    if n == 0:
        return [], []
    key = np.asarray(s, dtype=np.int64)
    ranks: list[np.ndarray] = []  # ranks[j]: classes of the prefixes of 2^j symbols
    while True:
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        rank = np.empty(n, dtype=np.int64)
        rank[order[0]] = 0
        rank[order[1:]] = np.cumsum(ordered[1:] != ordered[:-1])
        ranks.append(rank)
        if int(rank[order[-1]]) == n - 1:
            break
        k = 1 << (len(ranks) - 1)
        key = rank * (n + 1)
        key[: n - k] += rank[k:] + 1  # the class of the next 2^j symbols (none: 0)
    sa = np.empty(n, dtype=np.int64)
    sa[rank] = np.arange(n)
    # two suffixes share 2^j symbols where their level-j classes agree (the last symbol is
    # unique, so a class never spans the end)
    a, b = sa[:-1], sa[1:]
    h = np.zeros(n - 1, dtype=np.int64)
    for j in range(len(ranks) - 2, -1, -1):
        x, y = a + h, b + h
        ok = (x < n) & (y < n)
        level = ranks[j]
        same = ok & (level[np.minimum(x, n - 1)] == level[np.minimum(y, n - 1)])
        h += same.astype(np.int64) << j
    return sa.tolist(), [0, *h.tolist()]


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


def _wirings(seq: _Sequence, positions: list[int], length: int) -> tuple[np.ndarray, np.ndarray]:
    """Canonical wiring of the runs of `length` ops at `positions` (isomorphic ops, so the
    same operand slots), a row per run and a column per operand slot: an operand defined in
    the run by its code relative to the run's start (offset and result index), one from
    outside by -1 - the first slot using the same value; and where the runs' inputs are
    first used. The first columns are the wiring of shorter runs at the same positions."""
    flat, start = seq.arrays()[:2]
    p = np.asarray(positions, dtype=np.int64)
    m = seq.start[positions[0] + length] - seq.start[positions[0]]
    k = len(positions)
    slot = np.arange(m, dtype=np.int64)
    rows = flat[(start[p][:, None] + slot).ravel()]
    base = np.repeat(p * _R, m)
    inside = rows >= base
    # outside values: label each slot by the first slot of its run holding the same value
    run = np.repeat(np.arange(k, dtype=np.int64), m)
    values = np.where(inside, -(1 << 62), rows)
    order = np.lexsort((values, run))  # by run, then value, then slot
    same = np.zeros(k * m, dtype=bool)
    same[1:] = (values[order[1:]] == values[order[:-1]]) & (run[order[1:]] == run[order[:-1]])
    same &= ~inside[order]
    lead = np.maximum.accumulate(np.where(same, 0, np.arange(k * m)))
    label = np.empty(k * m, dtype=np.int64)
    label[order] = order[lead]
    label -= run * m
    keys = np.where(inside, rows - base, -1 - label).reshape(k, m)
    return keys, ((label == np.tile(slot, k)) & ~inside).reshape(k, m)


def _outputs(seq: _Sequence, starts: Sequence[int], length: int) -> list[tuple[int, int]]:
    """(offset, result index) of the results of the runs used after (or outside) them."""
    _, _, reach, codes, last = seq.arrays()
    p = np.asarray(starts, dtype=np.int64)
    end = p + length
    # the ops of the runs with a result used after their run, and their used results
    run, k = np.nonzero(reach[p[:, None] + np.arange(length, dtype=np.int64)] >= end[:, None])
    base = (p[run] + k) * _R
    lo = np.searchsorted(codes, base)
    n = np.searchsorted(codes, base + _R) - lo
    which = np.repeat(np.arange(len(base)), n)
    at = lo[which] + np.arange(len(which)) - np.repeat(np.cumsum(n) - n, n)
    escapes = last[at] >= end[run[which]]
    out = np.unique(k[which][escapes] * _R + (codes[at] - base[which])[escapes])
    return [(int(c) // _R, int(c) % _R) for c in out]


def _pick(positions: list[int], length: int) -> list[int]:
    """Greedy non-overlapping runs of `length` ops at `positions` (ascending), left to right:
    by bisection when few of them can fit, else by one scan."""
    n = len(positions)
    if not n or (positions[-1] - positions[0]) // length * 8 >= n:
        chosen: list[int] = []
        end = -1
        for p in positions:
            if p >= end:
                chosen.append(p)
                end = p + length
        return chosen
    chosen = []
    i = 0
    while i < n:
        p = positions[i]
        chosen.append(p)
        i = bisect_left(positions, p + length, i + 1)
    return chosen


def _examine(
    seq: _Sequence, positions: list[int], length: int, table: tuple[np.ndarray, np.ndarray] | None = None
) -> list[_Group]:
    """The groups of isomorphic runs of `length` ops at `positions` that save something
    (`table`: `_wirings` of these positions for `length` or more ops)."""
    if len(positions) < 2:
        return []
    keys, inputs = table if table is not None else _wirings(seq, positions, length)
    m = seq.start[positions[0] + length] - seq.start[positions[0]]
    keys, n_inputs = keys[:, :m], inputs[:, :m].sum(axis=1).tolist()
    by_wiring: dict[bytes, list[int]] = {}
    first: dict[bytes, int] = {}
    for i, (p, key) in enumerate(zip(positions, map(np.ndarray.tobytes, keys), strict=True)):
        ps = by_wiring.get(key)
        if ps is None:
            by_wiring[key] = [p]
            first[key] = i
        else:
            ps.append(p)
    out: list[_Group] = []
    for key, ps in by_wiring.items():
        if len(ps) < 2:
            continue
        starts = _pick(ps, length)
        c = len(starts)
        if c < 2 or (c - 1) * length - c <= 0:
            continue
        out.append(_Group(length, starts, n_inputs[first[key]], _outputs(seq, starts, length), ps))
    return out


def _packing_bound(positions: list[int], length: int, gap: int) -> int:
    """The most runs of `length` ops at `positions` (ascending, no two closer than `gap`) can
    save if all were isomorphic."""
    c = len(positions) if length <= gap else len(_pick(positions, length))
    return max(0, (c - 1) * length - c)


def select_groups(seq: _Sequence, min_ops: int) -> tuple[list[_Group], bool]:
    """Greedy choice of groups of non-overlapping isomorphic runs of >= `min_ops` ops, best
    first: a group is taken once no unexamined interval can beat it (its bound is lower),
    after dropping its runs that overlap groups already taken. Also whether another round
    could find more (see `_repeats_left`)."""
    s = seq.sig
    if len(s) < 2:
        return [], False
    sa, lcp = suffix_lcp_arrays(s)
    intervals = lcp_intervals(lcp, min_ops)
    spans = range_min_max(sa, [lb for _, lb, _ in intervals], [rb for _, _, rb in intervals])
    n = len(s)
    # interval i holds positions in [lo[i], hi[i]]; its runs lie in [lo[i], end[i])
    lo, hi = spans
    end = np.minimum(np.asarray(hi, dtype=np.int64) + [l for l, _, _ in intervals], n)
    starts_ = np.asarray(lo, dtype=np.int64)
    ends = end.tolist()
    # (-bound, refined?, l, lb, rb, i, positions, gap): a cheap bound first, refined by
    # packing when popped (positions sorted, no two closer than gap); only the first five
    # ever decide the order
    heap: list[tuple[int, bool, int, int, int, int, list[int], int]] = []
    for i, (l, lb, rb) in enumerate(intervals):
        bound = min((rb - lb) * l, hi[i] - lo[i]) - 2
        if bound > 0:
            heap.append((-bound, False, l, lb, rb, i, [], 0))
    heapq.heapify(heap)
    pending: list[tuple[tuple[int, int, int], int, _Group]] = []  # max-heap by rank
    count = 0
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
            # intervals without free ops for a saving are dropped now rather than one by
            # one when they come up (the order of the others is unchanged)
            n_covered = np.concatenate(([0], np.cumsum(np.frombuffer(covered, dtype=np.uint8), dtype=np.int64)))
            hopeless = ((end - starts_) - (n_covered[end] - n_covered[starts_]) - 2 <= 0).tolist()
            heap = [e for e in heap if not hopeless[e[5]]]
            heapq.heapify(heap)
            continue
        entry = heapq.heappop(heap)
        neg_bound, refined, l, lb, rb, i, positions, gap = entry
        clear = True  # no op of the interval's span is in a taken run
        if taken:  # c runs of L ops fit in the free ops of the span: saved < free ops
            n_taken = covered.count(1, lo[i], ends[i])
            cap = (ends[i] - lo[i]) - n_taken - 2
            if cap < -neg_bound:
                if cap > 0:
                    heapq.heappush(heap, (-cap, *entry[1:]))
                continue
            clear = n_taken == 0
        if not refined:
            positions = sorted(sa[lb : rb + 1])
            gap = min(map(sub, positions[1:], positions))
        lengths = sorted({l, max(min_ops, min(l, gap))})
        if not refined:
            bound = max(
                _packing_bound(positions if clear else free(positions, length), length, gap) for length in lengths
            )
            if bound > 0:
                heapq.heappush(heap, (-bound, True, l, lb, rb, i, positions, gap))
            continue
        table = _wirings(seq, positions, lengths[-1]) if clear and len(positions) > 1 else None
        for length in lengths:
            for g in _examine(seq, positions if clear else free(positions, length), length, table):
                count += 1
                heapq.heappush(pending, (tuple(-x for x in g.rank()), count, g))  # pyright: ignore[reportArgumentType]
    return taken, bool(taken) and _repeats_left(sa, intervals, covered, min_ops)


def _repeats_left(sa: list[int], intervals: list[tuple[int, int, int]], covered: bytearray, min_ops: int) -> bool:
    """Whether the free ops (outside the runs taken) still hold two equal runs of `min_ops`
    ops. The next round's sequence is this one with each taken run replaced by a separator
    (its call), so its repeats are repeats of free ops here: two positions of one interval
    (all intervals share >= min_ops ops) whose first `min_ops` ops are all free. Without
    any, the next round finds nothing and is skipped."""
    if not intervals:
        return False
    n = len(sa)
    n_covered = np.concatenate(([0], np.cumsum(np.frombuffer(covered, dtype=np.uint8), dtype=np.int64)))
    p = np.arange(n - min_ops + 1)
    free = np.zeros(n, dtype=np.int64)
    free[: len(p)] = n_covered[p + min_ops] == n_covered[p]
    in_order = np.concatenate(([0], np.cumsum(free[np.asarray(sa, dtype=np.int64)])))
    lb = np.asarray([lb for _, lb, _ in intervals], dtype=np.int64)
    rb = np.asarray([rb for _, _, rb in intervals], dtype=np.int64)
    return bool((in_order[rb + 1] - in_order[lb] >= 2).any())


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


def _operands(op: Operation) -> Sequence[SSAValue]:
    return op.operands


def _run_inputs(
    seq: _Sequence, p: int, length: int, operands: Callable[[Operation], Sequence[SSAValue]] = _operands
) -> tuple[list[SSAValue], list[tuple[int, int]], list[int]]:
    """The values the run [p, p + length) uses from outside it, in order of first use; where
    each is first used: (offset in the run, operand index); the offsets of the ops using
    any. Isomorphic runs use their inputs at the same places. `operands`: the operands of
    an op of the sequence (those it will have, for `xl.passes.outline_copy`)."""
    inputs: list[SSAValue] = []
    slots: list[tuple[int, int]] = []
    users: list[int] = []
    seen: set[int] = set()
    ops, flat, start = seq.ops, seq.operands, seq.start
    base = p * _R
    for g in range(p, p + length):
        op = ops[g]
        assert op is not None
        outside = False
        for i, (v, c) in enumerate(zip(operands(op), flat[start[g] : start[g + 1]], strict=True)):
            if c < base:
                outside = True
                if c not in seen:
                    seen.add(c)
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
    for op in (first[k] for k in users):
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
        where = run[0].parent
        assert where is not None
        where.insert_op_after(call, run[-1])
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
            where.detach_op(op)
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


def outline(module: ModuleOp, min_ops: int = 3, graph: str | None = None, dce: bool = False) -> list[str]:
    """Outline repeated runs of `module` (see the module docstring); returns the names of
    the new graphs. `dce`: first remove the dead ops of the blocks searched
    (`xl.passes.outline_dce`; the pass does, its option `dce`)."""
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
    if dce:  # a call would keep them alive
        remove_dead_ops(h.regions[0] for h in holders)
    return _rounds(module, holders, min_ops, set(), _Signatures(), [], True)


def _rounds(
    module: ModuleOp,
    holders: Sequence[Operation],
    min_ops: int,
    barriers: set[int],
    signatures: _Signatures,
    created: list[str],
    more: bool,
) -> list[str]:
    """The rounds of `outline` on the blocks of `holders`, while `more`; `barriers`: ids of
    the calls created so far (alive: they stay in the IR), `signatures` kept across rounds,
    `created` the names of the graphs made so far. Returns `created`."""
    while more:
        blocks = [h.regions[0].block for h in holders]
        seq = _build_sequence(blocks, barriers, signatures)
        groups, more = select_groups(seq, min_ops)
        in_runs = {id(op) for g in groups for p in g.starts for op in seq.ops[p : p + g.length]}
        renamed: dict[int, SSAValue] = {}
        redirects = _Redirects()
        for group in groups:
            calls = outline_group(module, seq, group, in_runs, renamed, redirects)
            barriers.update(id(c) for c in calls)
            created.append(calls[0].callee.root_reference.data)
        redirects.apply()
    return created


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

    def size(holder: Operation) -> int:  # the ops nested in `holder` (block by block: no walk)
        n = 0
        for region in holder.regions:
            for block in region.blocks:
                for op in block.ops:
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
                    else:
                        n += 1
                    if op.regions:
                        n += size(op)
        return n

    return size(main)


@dataclass(frozen=True)
class OutlinePass(ModulePass):
    """`outline{min-ops=3 graph=G min-program-ops=0 dce=true}`: repeated op runs of at
    least `min-ops` ops become one graph and calls (every graph and `graph.main`, or only
    graph @G). With `min-program-ops=N` the pass does nothing to a module whose graphs hold
    fewer than N ops once inlined (`count_ops`): the size threshold of the default pipeline.
    With `dce` (default) the dead ops of the blocks searched are removed first, as `dce`
    would (a call keeps its whole body alive; `xl.passes.outline_dce`); `dce=false`
    outlines them with the rest."""

    name = "outline"
    min_ops: int = 3
    graph: str | None = None
    min_program_ops: int = 0
    dce: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.min_program_ops > 0 and count_ops(op) < self.min_program_ops:
            if self.min_ops < 1:
                raise OutlineError(f"outline: min-ops must be >= 1, got {self.min_ops}")
            return
        outline(op, self.min_ops, self.graph, self.dce)
