"""The one walk over an `rt.program` shared by both plans.

`ProgramWalk` visits the ops of a block in order and does what both plans do the same
way: it allocates the buffers of `rt.alloc` / `rt.state` / `rt.const` (constants are
read-only arrays), keeps the variables by slot, makes the host stream entries and refuses
writes into constants. What an op *does* each step is the plan's: `kernel`, `copy`,
`h2d`, `d2h`, `loop`, `branch` and `collective` are implemented by the straightforward plan
(`xl.runtime.executable`, closures appended to a list) and the generated plan
(`xl.runtime.plan`, source lines). `at` is where the plan puts the step: a list of
closures or an indentation depth.

One walk builds one replica (`replica`, a global index): a grouped `rt.state` starts from
its group's value; an `rt.state` marked `rt.replica_invariant` (`rt-fold-all-reduce`) is
one buffer shared by every replica of the process (`shared_state`). A kernel of a replica
collective (`xl.runtime.kernels.collectives`) becomes a *site*: the walk records its arrays
(`sites`, in walk order, the same for every replica) and the plan makes the step stop
there (`yield k`) so that the executable can run the collective over all replicas at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np
from xdsl.ir import Block, Operation, SSAValue

from xl.dialects import rt
from xl.dialects.rt import REPLICA_INVARIANT_ATTR, VIEW_ATTR
from xl.dialects.rt_kernels import kernel_class, replica_update_weight
from xl.dialects.utils import dense_to_numpy, dtype_of, shape_of
from xl.runtime.aliasing import check_writable
from xl.runtime.errors import BufferNames, PlanError
from xl.runtime.functions import expand_call
from xl.runtime.kernels.collectives import is_collective
from xl.runtime.streams import StreamIn, StreamOut, stream_entry

At = TypeVar("At")


def only_updated_by_all_replicas(v: SSAValue, replication_factor: int) -> bool:
    """Whether buffer `v` (an `rt.state` marked `rt.replica_invariant`) is written only by
    fused updates over one group of every replica, so one buffer may serve all replicas.
    The runtime checks the mark itself: a hand-written or stale one is ignored."""
    for use in v.uses:
        user = use.operation
        if _reads_only(user, use.index):
            continue
        if not isinstance(user, rt.KernelOp):
            return False
        ins, outs = user.io()
        where = replica_update_weight(kernel_class(user.kernel.data))
        if where is not None:
            grouping = user.params.get("grouping")
            size = grouping.size() if grouping is not None else replication_factor
            i, o = where
            if (
                size == replication_factor
                and len(outs) == o + 1
                and outs[o] is v
                and len(ins) > i
                and ins[i] is v
                and sum(x is v for x in ins) == 1
            ):
                continue
            return False
        if v in outs:
            return False
        if VIEW_ATTR in user.attributes:
            # a view of the weight: its users must not write it either
            if not all(only_read(o, user) for o in outs):
                return False
    return True


def _reads_only(user: Operation, index: int) -> bool:
    """The use (operand `index` of `user`) only reads: a stored value, a copy's source, a
    branch condition."""
    return isinstance(user, rt.D2HOp | rt.IfOp) or (isinstance(user, rt.CopyOp) and index == 0)


def only_read(v: SSAValue, producer: Operation) -> bool:
    """No op but its `producer` writes `v` or a view of it."""
    for use in v.uses:
        user = use.operation
        if user is producer or _reads_only(user, use.index):
            continue
        if not isinstance(user, rt.KernelOp):
            return False
        _, outs = user.io()
        if v in outs:
            return False
        if VIEW_ATTR in user.attributes and not all(only_read(o, user) for o in outs):
            return False
    return True


class ProgramWalk(ABC, Generic[At]):
    """Buffers, state and streams of one replica, and the dispatch over `rt` ops."""

    def __init__(
        self,
        stream_in: type = StreamIn,
        stream_out: type = StreamOut,
        replica: int = 0,
        replication_factor: int = 1,
        shared_state: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.replica = replica
        self.shared_state = shared_state
        self.replication_factor = replication_factor
        # collective sites in walk order: (op, input arrays, output arrays)
        self.sites: list[tuple[rt.KernelOp, tuple[np.ndarray, ...], tuple[np.ndarray, ...]]] = []
        self.state: dict[str, np.ndarray] = {}
        self.inputs: dict[str, Any] = {}
        self.outputs: dict[str, Any] = {}
        self._stream_in = stream_in
        self._stream_out = stream_out
        self.describe = BufferNames()
        self._collective: dict[rt.KernelOp, bool] = {}

    # -- buffers -----------------------------------------------------------------------
    @abstractmethod
    def bind(self, v: SSAValue, arr: np.ndarray, hint: str) -> None:
        """Bind the buffer `v` to `arr` (`hint`: b buffer, w variable, c constant)."""

    @abstractmethod
    def array(self, v: SSAValue) -> np.ndarray:
        """The array bound to `v`."""

    # -- what each op does per step -------------------------------------------------------
    @abstractmethod
    def kernel(self, op: rt.KernelOp, at: At, /) -> None: ...

    @abstractmethod
    def copy(self, op: rt.CopyOp, at: At, /) -> None: ...

    @abstractmethod
    def h2d(self, op: rt.H2DOp, stream: Any, at: At, /) -> None: ...

    @abstractmethod
    def d2h(self, op: rt.D2HOp, stream: Any, at: At, /) -> None: ...

    @abstractmethod
    def loop(self, op: rt.LoopOp, at: At, /) -> None: ...

    @abstractmethod
    def branch(self, op: rt.IfOp, at: At, /) -> None: ...

    def call(self, op: rt.CallOp, at: At, /) -> None:
        """Run the function `op` calls (`xl.runtime.functions`; here: its body at this call)."""
        expand_call(self, op, at)  # pyright: ignore[reportArgumentType]  (checked as runtime.*, imported as xl.runtime.*: two names of one class)

    @abstractmethod
    def collective(self, op: rt.KernelOp, site: int, at: At, /) -> None:
        """Stop the step at collective `site` (the executable runs it over all replicas)."""

    # -- the walk ---------------------------------------------------------------------------
    def walk(self, block: Block, at: At) -> None:
        for op in block.ops:
            self.visit(op, at)

    def visit(self, op: Operation, at: At) -> None:
        visit = _VISITS.get(type(op))
        if visit is None:  # a subclass of an rt op, or not an rt op
            visit = next((f for cls, f in _VISITS.items() if isinstance(op, cls)), None)
            if visit is None:
                raise PlanError(f"runtime: cannot execute '{op.name}'")
        visit(self, op, at)

    def _alloc(self, op: rt.AllocOp, at: At) -> None:
        t = op.result.type
        self.bind(op.result, np.zeros(shape_of(t), dtype=dtype_of(t)), "b")

    def _state(self, op: rt.StateOp, at: At) -> None:
        t = op.result.type
        init = op.replica_init(self.replica, self.replication_factor)
        arr = init if init is not None else np.zeros(shape_of(t), dtype=dtype_of(t))
        arr = np.array(arr, dtype=dtype_of(t), order="C").reshape(shape_of(t))
        if (
            self.shared_state is not None
            and REPLICA_INVARIANT_ATTR in op.attributes
            and only_updated_by_all_replicas(op.result, self.replication_factor)
        ):
            arr = self.shared_state.setdefault(op.slot.data, arr)
        self.bind(op.result, arr, "w")
        self.state[op.slot.data] = arr

    def _const(self, op: rt.ConstOp, at: At) -> None:
        arr = np.array(dense_to_numpy(op.value)).reshape(shape_of(op.result.type))
        arr.flags.writeable = False
        self.bind(op.result, arr, "c")

    def _kernel(self, op: rt.KernelOp, at: At) -> None:
        collective = self._collective.get(op)
        if collective is None:  # once per op (a function's body is walked at each call)
            collective = self._collective[op] = is_collective(kernel_class(op.kernel.data))
        if collective:
            ins, outs = op.io()
            check_writable(op.kernel.data, [self.array(v) for v in outs], lambda i: self.describe(outs[i]))
            self.sites.append((op, tuple(self.array(v) for v in ins), tuple(self.array(v) for v in outs)))
            self.collective(op, len(self.sites) - 1, at)
        else:
            self.kernel(op, at)

    def _copy(self, op: rt.CopyOp, at: At) -> None:
        dest = op.dest
        check_writable(op.name, [self.array(dest)], lambda i: self.describe(dest))
        self.copy(op, at)

    def _h2d(self, op: rt.H2DOp, at: At) -> None:
        buf = op.buffer
        check_writable(op.name, [self.array(buf)], lambda i: self.describe(buf))
        self.h2d(op, stream_entry(op, self.inputs, self._stream_in, "loaded"), at)

    def _d2h(self, op: rt.D2HOp, at: At) -> None:
        self.d2h(op, stream_entry(op, self.outputs, self._stream_out, "stored"), at)

    def _func(self, op: rt.FuncOp, at: At) -> None:
        pass  # run by its calls


# What the walk does for each rt op class (looked up by the op's exact class: `isinstance`
# on IRDL op classes, which are ABCs, costs about as much as the rest of a visit).
_VISITS: dict[type[Operation], Callable[[Any, Any, Any], None]] = {
    rt.KernelOp: ProgramWalk._kernel,  # noqa: SLF001
    rt.AllocOp: ProgramWalk._alloc,  # noqa: SLF001
    rt.CallOp: lambda w, op, at: w.call(op, at),
    rt.StateOp: ProgramWalk._state,  # noqa: SLF001
    rt.ConstOp: ProgramWalk._const,  # noqa: SLF001
    rt.CopyOp: ProgramWalk._copy,  # noqa: SLF001
    rt.H2DOp: ProgramWalk._h2d,  # noqa: SLF001
    rt.D2HOp: ProgramWalk._d2h,  # noqa: SLF001
    rt.LoopOp: lambda w, op, at: w.loop(op, at),
    rt.IfOp: lambda w, op, at: w.branch(op, at),
    rt.FuncOp: ProgramWalk._func,  # noqa: SLF001
}
