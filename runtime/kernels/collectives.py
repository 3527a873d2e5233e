"""Replica collective kernels: each receives every local replica's arrays at once.

An `rt.kernel` whose op class is registered here (`@collective(AllReduceOp)`) is a
*collective site*: all replicas of a step advance to it together (`xl.runtime.executable`),
then its kernel runs once over the buffers of every local replica. The factory runs once
at compile time and returns the step function:

```python
@collective(AllReduceOp)
def _all_reduce(site: Site) -> Callable[[], None]: ...
```

`site.ins[i]` / `site.outs[i]` are the input / output arrays of local replica
`site.local[i]` (global index), as for ordinary kernels (`xl.runtime.kernels`: an in-place
collective's first output is its first input). `site.groups()` lists each group's global
replica indices (ascending) from the op's `grouping` property (`#replica.grouping`, absent:
one group of all replicas). A kernel reads the contributions of remote replicas through
`site.comm.gather` (`xl.runtime.comm`) and reduces in ascending replica order, so every
instance computes the same numbers in the same order.

Semantics (PopXL's `popxl.ops.collectives`, with `mul` a real product):

- all-reduce `op`: add, mean (sum, then divided by the group size; integers truncate),
  mul, min, max, and, or (logical, 0/1 in the output dtype), square_add (sum of squares);
- all-gather: the group's inputs in group order, stacked on a new leading axis (output
  `[group_size, *shape]`), concatenated along `axis` (same rank), or flattened and
  concatenated then cut to the output shape (`meta_shape`, 1-D results);
- reduce-scatter: the inputs flattened and reduced; member i of a group gets elements
  `[i*s, (i+1)*s)` with `s = ceil(n / group_size)`, zero-padded past `n`;
- replica-sharded slice: member i gets that shard of its own flattened input (no data
  exchanged); replicated slice: member i gets the i-th of `group_size` equal parts along
  `axis`;
- identical-inputs all-reduce: the identity forward (its gradient is the all-reduce);
  identical-grad-inputs all-reduce: an all-reduce forward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xl.dialects.replica import (
    COLLECTIVE_OPS,
    LINEAR_OPS,
    LOGICAL_OPS,
    AllGatherOp,
    AllReduceIdenticalGradInputsOp,
    AllReduceIdenticalInputsOp,
    AllReduceInplaceOp,
    AllReduceOp,
    ReduceScatterOp,
    ShardedSliceOp,
    SliceOp,
    shard_size,
)
from xl.dialects.rt_kernels import AllReduceGemmUpdateOp, AllReduceUpdateOp
from xl.dialects.traits import CrossReplica
from xl.runtime import blas
from xl.runtime.comm import Comm, LocalComm
from xl.runtime.errors import PlanError

Step = Callable[[], None]
CollectiveFactory = Callable[["Site"], Step]

COLLECTIVES: dict[type, CollectiveFactory] = {}


def collective(*classes: type) -> Callable[[CollectiveFactory], CollectiveFactory]:
    """Register `factory` as the collective kernel of the op `classes`."""

    def deco(factory: CollectiveFactory) -> CollectiveFactory:
        for cls in classes:
            COLLECTIVES[cls] = factory
        return factory

    return deco


def is_collective(cls: type | None) -> bool:
    """Whether an `rt.kernel` of op class `cls` is a replica collective (the `CrossReplica`
    trait): it runs once over all replicas."""
    if cls is None or cls in COLLECTIVES:
        return cls is not None
    has_trait = getattr(cls, "has_trait", None)
    return has_trait is not None and has_trait(CrossReplica)


def collective_factory(cls: type | None, name: str) -> CollectiveFactory:
    factory = COLLECTIVES.get(cls) if cls is not None else None
    if factory is None:
        raise PlanError(f"runtime: no collective kernel for '{name}'")
    return factory


@dataclass
class Site:
    """One collective of a program, bound to the buffers of every local replica."""

    name: str
    props: dict[str, Any]
    replication_factor: int
    local: range
    ins: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    outs: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    comm: Comm = field(default_factory=LocalComm)

    def groups(self) -> list[list[int]]:
        """Each group's global replica indices, ascending."""
        g = self.props.get("grouping")
        r = self.replication_factor
        if g is None:
            return [list(range(r))]
        groups = [sorted(int(i) for i in grp) for grp in g.groups(r)]
        seen = sorted(i for grp in groups for i in grp)
        if seen != list(range(r)):
            raise PlanError(f"{self.name}: grouping {g} does not cover replicas 0..{r - 1} exactly once")
        return groups

    def prop(self, key: str, default: Any) -> Any:
        v = self.props.get(key, default)
        return default if v is None else v

    def reduce_op(self) -> str:
        op = self.prop("op", "add")
        if op not in COLLECTIVE_OPS:
            raise PlanError(f"{self.name}: unknown reduction '{op}' (expected one of {', '.join(COLLECTIVE_OPS)})")
        return op

    def gathered(self, j: int = 0) -> Callable[[], list[np.ndarray]]:
        """A function returning input `j` of every replica (global order), local ones
        without copying."""
        local_arrays = [ins[j] for ins in self.ins]
        if self.comm.num_instances == 1:
            return lambda: local_arrays
        comm = self.comm
        return lambda: comm.gather(local_arrays)

    def slot(self, replica: int) -> int | None:
        """The position of global `replica` among the local replicas (None: remote)."""
        return replica - self.local.start if replica in self.local else None


# ------------------------------------------------------------------------------------
# Reductions
# ------------------------------------------------------------------------------------


# the reductions that combine two values with one ufunc (mean divides after)
_UFUNCS = {"add": np.add, "mean": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}


def _reducer(op: str, name: str) -> Callable[[Sequence[np.ndarray], np.ndarray, np.ndarray | None], None]:
    """`reduce(xs, acc, tmp)`: `acc` = the reduction of `xs` in order (acc may be xs[0])."""
    ufunc = _UFUNCS.get(op)
    if ufunc is not None:

        def reduce(xs: Sequence[np.ndarray], acc: np.ndarray, tmp: np.ndarray | None) -> None:
            if len(xs) == 1:
                if acc is not xs[0]:
                    np.copyto(acc, xs[0])
            else:
                ufunc(xs[0], xs[1], out=acc)
                for x in xs[2:]:
                    ufunc(acc, x, out=acc)
            if op == "mean" and len(xs) > 1:
                np.divide(acc, len(xs), out=acc, casting="unsafe")

        return reduce
    if op in LOGICAL_OPS:
        lfunc = np.logical_and if op == "and" else np.logical_or

        def reduce_logical(xs: Sequence[np.ndarray], acc: np.ndarray, tmp: np.ndarray | None) -> None:
            if len(xs) == 1:
                np.not_equal(xs[0], 0, out=acc, casting="unsafe")
                return
            lfunc(xs[0], xs[1], out=acc, casting="unsafe")
            for x in xs[2:]:
                lfunc(acc, x, out=acc, casting="unsafe")

        return reduce_logical
    if op == "square_add":

        def reduce_squares(xs: Sequence[np.ndarray], acc: np.ndarray, tmp: np.ndarray | None) -> None:
            assert tmp is not None
            np.multiply(xs[0], xs[0], out=acc)
            for x in xs[1:]:
                np.multiply(x, x, out=tmp)
                np.add(acc, tmp, out=acc)

        return reduce_squares
    raise PlanError(f"{name}: unknown reduction '{op}'")


def all_reduce(site: Site) -> Step:
    """Every local member of a group gets the reduction of the group's inputs."""
    op = site.reduce_op()
    reduce = _reducer(op, site.name)
    inputs = site.gathered(0)
    plans: list[tuple[list[int], np.ndarray, list[np.ndarray], np.ndarray | None]] = []
    for members in site.groups():
        mine = [s for s in (site.slot(m) for m in members) if s is not None]
        if not mine:
            continue  # computed by the instances that run this group
        outs = [site.outs[s][0] for s in mine]
        acc = outs[0]
        rest = outs[1:]
        later = [site.ins[s][0] for s in (site.slot(m) for m in members[1:]) if s is not None]
        if any(np.shares_memory(acc, x) for x in later):
            # accumulating into this output would overwrite an input still to be read
            acc = np.empty_like(acc)
            rest = outs
        tmp = np.empty_like(acc) if op == "square_add" else None
        plans.append((members, acc, rest, tmp))

    def step() -> None:
        xs = inputs()
        for members, acc, rest, tmp in plans:
            reduce([xs[m] for m in members], acc, tmp)
            for o in rest:
                np.copyto(o, acc)

    return step


def _update_reduction(site: Site) -> tuple[str, float]:
    """The reduction (add or mean) and the `scale` property of a fused replica update."""
    op = site.reduce_op()
    if op not in LINEAR_OPS:
        raise PlanError(f"{site.name}: the fused update supports {' and '.join(LINEAR_OPS)}, not '{op}'")
    return op, float(site.prop("scale", 1.0))


def _update_targets(
    site: Site, mine: list[int], out: int, op: str, scale: float, group_size: int, dtype: np.dtype
) -> tuple[list[np.ndarray], np.ndarray]:
    """The weights (output `out`) of a group's local members, each array once (a
    replica-invariant weight is one array: updated once), and the factor the group's summed
    gradient is multiplied by (`scale`, divided by the group size for `mean`)."""
    weights: dict[int, np.ndarray] = {}
    for s in mine:
        weights.setdefault(id(site.outs[s][out]), site.outs[s][out])
    factor = np.array(scale / group_size if op == "mean" else scale, dtype=dtype)
    return list(weights.values()), factor


def _add_scaled(acc: np.ndarray, factor: np.ndarray, weights: list[np.ndarray]) -> None:
    """`acc *= factor`, then `w += acc` for every weight."""
    np.multiply(acc, factor, out=acc)
    for w in weights:
        np.add(w, acc, out=w)


def all_reduce_update(site: Site) -> Step:
    """`w += scale * reduce(g)` on every local member (`xl.all_reduce_update`, from
    `rt-fold-all-reduce`): the group's gradients summed once, scaled once (divided by the
    group size for `mean`), added to each member's weight. Inputs (g, w), outputs (g, w)."""
    op, scale_prop = _update_reduction(site)
    add = _reducer("add", site.name)
    inputs = site.gathered(0)
    plans: list[tuple[list[int], np.ndarray, list[np.ndarray], np.ndarray]] = []
    for members in site.groups():
        mine = [s for s in (site.slot(m) for m in members) if s is not None]
        if not mine:
            continue
        acc = site.outs[mine[0]][0]  # this replica's gradient buffer (a partial sum after)
        later = [site.ins[s][0] for s in (site.slot(m) for m in members[1:]) if s is not None]
        if any(np.shares_memory(acc, x) for x in later):
            acc = np.empty_like(acc)
        weights, scale = _update_targets(site, mine, 1, op, scale_prop, len(members), acc.dtype)
        plans.append((members, acc, weights, scale))

    def step() -> None:
        xs = inputs()
        for members, acc, weights, scale in plans:
            g = [xs[m] for m in members]
            if len(g) == 1:
                np.multiply(g[0], scale, out=acc)
                for w in weights:
                    np.add(w, acc, out=w)
            else:
                add(g, acc, None)
                _add_scaled(acc, scale, weights)

    return step


def all_reduce_gemm_update(site: Site) -> Step:
    """`w += scale * reduce(op(a) @ op(b))` on every local member (`xl.all_reduce_gemm_update`,
    from `rt-fold-all-reduce-gemm`): the members' products summed into one buffer per group
    (the first written by `matmul`, the others added by an accumulating BLAS gemm, in
    ascending replica order), scaled once, added to each member's weight. Inputs (a, b, w),
    output w. With remote replicas (`site.comm`), each local product is written apart and
    the group's products are gathered and summed as by `xl.all_reduce_update`."""
    op, scale_prop = _update_reduction(site)
    ta, tb = bool(site.prop("trans_a", False)), bool(site.prop("trans_b", False))
    products: list[tuple[np.ndarray, np.ndarray]] = []  # each member's (op(a), op(b))
    for a, b, w in site.ins:
        opa, opb = (a.T if ta else a), (b.T if tb else b)
        if a.ndim != 2 or b.ndim != 2 or opa.shape[1] != opb.shape[0] or (opa.shape[0], opb.shape[1]) != w.shape:
            raise PlanError(f"{site.name}: cannot multiply {opa.shape} by {opb.shape} into the weight's {w.shape}")
        products.append((opa, opb))
    w0 = site.ins[0][2]
    remote = site.comm.num_instances > 1
    # remote replicas: each local product in its own buffer, exchanged and summed in order
    own = [np.empty_like(w0) for _ in site.ins] if remote else []
    gathered = site.comm.gather if remote else None
    add = _reducer("add", site.name)
    plans: list[tuple[list[int], np.ndarray, list[Callable[[], object]], list[np.ndarray], np.ndarray]] = []
    for members in site.groups():
        mine = [s for s in (site.slot(m) for m in members) if s is not None]
        if not mine:
            continue
        acc = np.empty_like(w0)  # the group's sum of products (this process's buffer)
        calls: list[Callable[[], object]] = []
        if not remote:
            for i, s in enumerate(mine):
                pa, pb = products[s]
                if i == 0:
                    calls.append(functools.partial(np.matmul, pa, pb, out=acc))
                else:
                    calls.append(blas.gemm_acc(site.ins[s][0], site.ins[s][1], acc, 1.0, 1.0, ta, tb))
        weights, scale = _update_targets(site, mine, 0, op, scale_prop, len(members), acc.dtype)
        plans.append((members, acc, calls, weights, scale))

    def step() -> None:
        if gathered is not None:
            for (pa, pb), o in zip(products, own):
                np.matmul(pa, pb, out=o)
            xs = gathered(own)
            for members, acc, _, weights, scale in plans:
                add([xs[m] for m in members], acc, None)
                _add_scaled(acc, scale, weights)
            return
        for _, acc, calls, weights, scale in plans:
            for call in calls:
                call()
            _add_scaled(acc, scale, weights)

    return step


def identity(site: Site) -> Step:
    """Each replica's output is its input (a copy unless in place)."""
    pairs = [(ins[0], outs[0]) for ins, outs in zip(site.ins, site.outs, strict=True) if ins[0] is not outs[0]]

    def step() -> None:
        for x, y in pairs:
            np.copyto(y, x)

    return step


def _gather_into(
    x0: np.ndarray, n: int, out: np.ndarray, axis: int, mode: str | None, name: str
) -> Callable[[Sequence[np.ndarray]], object]:
    """How the `n` inputs of a group (each shaped like `x0`) fill `out`, decided once at
    compile time: the returned function takes the inputs of one step (its result is
    not used)."""
    if mode in (None, "new_axis") and out.shape == (n, *x0.shape):
        return lambda xs: np.stack(xs, axis=0, out=out)
    if mode in (None, "concat", "auto") and out.ndim == x0.ndim and x0.ndim > 0:
        ax = axis % x0.ndim
        want = list(x0.shape)
        want[ax] *= n
        if tuple(want) == out.shape:
            return lambda xs: np.concatenate(xs, axis=ax, out=out)
    if mode in (None, "meta_shape", "auto") and out.size <= n * x0.size:
        flat = out.reshape(-1)
        size = x0.size

        def fill(xs: Sequence[np.ndarray]) -> None:
            for i, x in enumerate(xs):
                lo = i * size
                if lo >= flat.size:
                    break
                hi = min(lo + size, flat.size)
                flat[lo:hi] = x.reshape(-1)[: hi - lo]

        return fill
    raise PlanError(
        f"{name}: cannot gather {n} inputs of shape {x0.shape} into an output of shape "
        f"{out.shape} (output_shape={mode!r}, axis={axis})"
    )


def all_gather(site: Site) -> Step:
    """Every local member of a group gets the group's inputs gathered (see module docstring)."""
    axis = int(site.prop("axis", 0))
    mode = site.props.get("output_shape")
    if mode is None and "new_axis" in site.props:
        mode = "new_axis" if site.props["new_axis"] else "concat"
    inputs = site.gathered(0)
    plans: list[tuple[list[int], Callable[[Sequence[np.ndarray]], object], np.ndarray, list[np.ndarray]]] = []
    for members in site.groups():
        mine = [s for s in (site.slot(m) for m in members) if s is not None]
        if not mine:
            continue
        outs = [site.outs[s][0] for s in mine]
        fill = _gather_into(site.ins[0][0], len(members), outs[0], axis, mode, site.name)
        plans.append((members, fill, outs[0], outs[1:]))

    def step() -> None:
        xs = inputs()
        for members, fill, out, rest in plans:
            fill([xs[m] for m in members])
            for o in rest:
                np.copyto(o, out)

    return step


def reduce_scatter(site: Site) -> Step:
    """Member i of a group gets shard i of the reduction of the flattened inputs."""
    op = site.reduce_op()
    reduce = _reducer(op, site.name)
    inputs = site.gathered(0)
    x0 = site.ins[0][0]
    n = x0.size
    plans: list[tuple[list[int], np.ndarray, np.ndarray | None, list[tuple[int, np.ndarray]]]] = []
    for members in site.groups():
        gs = len(members)
        s = shard_size(n, gs)
        mine = [(i, slot) for i, m in enumerate(members) if (slot := site.slot(m)) is not None]
        if not mine:
            continue
        for _, slot in mine:
            out = site.outs[slot][0]
            if out.shape != (s,):
                raise PlanError(
                    f"{site.name}: output shape {out.shape} is not the shard shape ({s},) of "
                    f"{n} elements over a group of {gs}"
                )
        padded = np.zeros(gs * s, dtype=site.outs[mine[0][1]][0].dtype)
        tmp = np.empty(n, padded.dtype) if op == "square_add" else None
        shards = [(i, site.outs[slot][0]) for i, slot in mine]
        plans.append((members, padded, tmp, [(i * s, o) for i, o in shards]))

    def step() -> None:
        xs = inputs()
        for members, padded, tmp, shards in plans:
            reduce([xs[m].reshape(-1) for m in members], padded[:n], tmp)
            for lo, o in shards:
                np.copyto(o, padded[lo : lo + o.shape[0]])

    return step


def _copies(copies: list[tuple[np.ndarray, np.ndarray]]) -> Step:
    """A step that copies each `(dst, src)` pair (the slices: no data exchanged)."""

    def step() -> None:
        for dst, src in copies:
            np.copyto(dst, src)

    return step


def replica_sharded_slice(site: Site) -> Step:
    """Member i of a group gets shard i of its own flattened input (zero-padded)."""
    copies: list[tuple[np.ndarray, np.ndarray]] = []
    for members in site.groups():
        gs = len(members)
        for i, m in enumerate(members):
            slot = site.slot(m)
            if slot is None:
                continue
            x, out = site.ins[slot][0], site.outs[slot][0]
            s = shard_size(x.size, gs)
            if out.shape != (s,):
                raise PlanError(
                    f"{site.name}: output shape {out.shape} is not the shard shape ({s},) of "
                    f"{x.size} elements over a group of {gs}"
                )
            lo, hi = min(i * s, x.size), min((i + 1) * s, x.size)
            out[hi - lo :] = 0  # the padding never changes
            copies.append((out[: hi - lo], x.reshape(-1)[lo:hi]))
    return _copies(copies)


def replicated_slice(site: Site) -> Step:
    """Member i of a group gets part i of `group_size` equal parts of its input along `axis`."""
    axis = int(site.prop("axis", 0))
    copies: list[tuple[np.ndarray, np.ndarray]] = []
    for members in site.groups():
        gs = len(members)
        for i, m in enumerate(members):
            slot = site.slot(m)
            if slot is None:
                continue
            x, out = site.ins[slot][0], site.outs[slot][0]
            if x.ndim == 0:
                raise PlanError(f"{site.name}: cannot slice a scalar over replicas")
            ax = axis % x.ndim
            if x.shape[ax] % gs:
                raise PlanError(f"{site.name}: axis {axis} of size {x.shape[ax]} does not split into {gs} equal parts")
            part = x.shape[ax] // gs
            index = [slice(None)] * x.ndim
            index[ax] = slice(i * part, (i + 1) * part)
            src = x[tuple(index)]
            if src.shape != out.shape:
                if src.size != out.size:
                    raise PlanError(f"{site.name}: output shape {out.shape} is not the part shape {src.shape}")
                src = src.reshape(out.shape)  # a part of size 1 drops the axis (as upstream)
            copies.append((out, src))
    return _copies(copies)


def bind_site(factory: CollectiveFactory, site: Site) -> Step:
    """The step function of a collective site (the factory, with located errors)."""
    try:
        return factory(site)
    except PlanError:
        raise
    except (ValueError, TypeError) as e:
        raise PlanError(f"{site.name}: {e}") from None


collective(AllReduceOp, AllReduceInplaceOp, AllReduceIdenticalGradInputsOp)(all_reduce)
collective(AllReduceIdenticalInputsOp)(identity)
collective(AllReduceUpdateOp)(all_reduce_update)
collective(AllReduceGemmUpdateOp)(all_reduce_gemm_update)
collective(AllGatherOp)(all_gather)
collective(ReduceScatterOp)(reduce_scatter)
collective(ShardedSliceOp)(replica_sharded_slice)
collective(SliceOp)(replicated_slice)
