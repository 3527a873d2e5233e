"""Lowering of remote buffers and sharded variables to `rt` (part of `lower-to-rt`).

`lower-to-rt` lowers the `ipu` remote ops through the functions registered here by op
class (`lowering_of(op)`):

- `ipu.remote_buffer @rb : T, entries = E` becomes `rt.state "rb" : memref<E x T>` marked
  `rt.remote` (host memory apart from the virtual IPUs' buffers, which the memory report
  counts as remote). Its initial value holds, in the entry of each `ipu.remote_variable`
  of the buffer, that variable's value on each replica (its group's value, or its shard);
  when replicas differ, the state carries one value per replica (`grouping` with an
  explicit assignment).
- `ipu.remote_load` / `ipu.remote_load_` / `ipu.remote_store` become `rt.kernel`s that copy
  one entry (`xl.runtime.kernels.remote`): ins `(state[, offset])` -> outs `(tensor)` for
  the loads, ins `(tensor[, offset])` -> outs `(state)` for the store; `buffer` (the
  buffer's name) and a constant `offset` are kernel parameters.
- `ipu.replica_sharded_variable "w"` becomes `rt.state "w"` of the shard's type, each
  replica starting from its shard; ops use it as any variable.
- `ipu.remote_variable` lowers to nothing: the host reads it through its buffer.

```mlir
// before
graph.main {
  ipu.remote_buffer @rb : tensor<2xf32>, entries = 2
  %v = ipu.remote_variable "w" in @rb[1] = dense<3.0> : tensor<2xf32>
  %x = ipu.remote_load @rb[1] : tensor<2xf32>
  ipu.remote_store @rb[0], %x : tensor<2xf32>
}
// after `xl-opt -p lower-to-rt`
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %0 = rt.state "rb" = dense<[[0.0, 0.0], [3.0, 3.0]]> : tensor<2x2xf32> : memref<2x2xf32> {rt.remote}
  %x = rt.alloc : memref<2xf32>
  rt.kernel "ipu.remote_load"(%0) -> (%x) {buffer = "rb", offset = 1 : i64} : (memref<2x2xf32>) -> memref<2xf32>
  rt.kernel "ipu.remote_store"(%x) -> (%0) {buffer = "rb", offset = 0 : i64} : (memref<2xf32>) -> memref<2x2xf32>
}
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue

from xl.dialects import rt
from xl.dialects.ipu import (
    IPU_ATTR,
    RemoteBufferOp,
    RemoteCodeLoadOp,
    RemoteLoadInplaceOp,
    RemoteLoadOp,
    RemoteStoreOp,
    RemoteVariableOp,
    ReplicaShardedVariableOp,
    _RemoteAccess,
)
from xl.dialects.rt import REMOTE_ATTR
from xl.dialects.utils import dense_attr, dtype_of, memref_type, shape_of

Env = dict[SSAValue, SSAValue]
Lowering = Callable[[Any, Operation, Env, Block, set[SSAValue]], None]
_LOWERINGS: dict[type[Operation], Lowering] = {}


def lowering(*classes: type[Operation]) -> Callable[[Lowering], Lowering]:
    """Register the decorated function as the `lower-to-rt` lowering of each op class."""

    def deco(f: Lowering) -> Lowering:
        for cls in classes:
            _LOWERINGS[cls] = f
        return f

    return deco


def lowering_of(op: Operation) -> Lowering | None:
    """The lowering registered for the class of `op` (None when there is none)."""
    return _LOWERINGS.get(type(op))


def is_remote_state(op: Operation) -> bool:
    """Whether `op` is the `rt.state` of a remote buffer."""
    return isinstance(op, rt.StateOp) and REMOTE_ATTR in op.attributes


def _per_replica_state(
    emitter: Any,
    name: str,
    values: list[np.ndarray],
    shape: tuple[int, ...],
    dtype: np.dtype,
    any_init: bool,
) -> rt.StateOp:
    """An `rt.state` whose replica r starts from `values[r]` (one value, or one per
    distinct value with an explicit grouping)."""
    from xl.dialects.replica import ReplicaGroupingAttr

    if name in emitter.slots:
        from xl.passes.lower_to_rt import LoweringError

        raise LoweringError(f'lower-to-rt: two variables are named "{name}"')
    emitter.slots.add(name)
    mtype = memref_type(shape, dtype)
    if not any_init:
        return rt.StateOp(name, mtype)
    distinct: list[np.ndarray] = []
    assignment: list[int] = []
    for v in values:
        for k, d in enumerate(distinct):
            if d.tobytes() == v.tobytes():
                assignment.append(k)
                break
        else:
            assignment.append(len(distinct))
            distinct.append(v)
    if len(distinct) == 1:
        return rt.StateOp(name, mtype, dense_attr(distinct[0]))
    sizes = {assignment.count(g) for g in range(len(distinct))}
    if len(sizes) != 1:  # groups of unequal size: one value per replica
        distinct, assignment = values, list(range(len(values)))
    return rt.StateOp(name, mtype, dense_attr(np.stack(distinct)), ReplicaGroupingAttr(assignment=assignment))


@lowering(RemoteBufferOp)
def _lower_buffer(emitter: Any, op: Operation, env: Env, block: Block, fresh: set[SSAValue]) -> None:
    assert isinstance(op, RemoteBufferOp)
    shape, dtype = shape_of(op.type), dtype_of(op.type)
    entries = op.num_entries
    main = op.parent_op()
    rf = int(getattr(main, "replication_factor", 1) or 1)
    parent = op.parent_block()
    assert parent is not None, "ipu.remote_buffer is declared in graph.main"
    variables = [v for v in parent.ops if isinstance(v, RemoteVariableOp) and v.buffer_name == op.buffer_name]
    values = [np.zeros((entries, *shape), dtype) for _ in range(rf)]
    for v in variables:
        for r, x in enumerate(v.replica_values()):
            values[r][v.entry] = x.reshape(shape)
    any_init = any(v.init is not None for v in variables)
    st = _per_replica_state(emitter, op.buffer_name, values, (entries, *shape), dtype, any_init)
    st.attributes[REMOTE_ATTR] = UnitAttr()
    if IPU_ATTR in op.attributes:
        st.attributes[IPU_ATTR] = op.attributes[IPU_ATTR]
    st.result.name_hint = _hint(op.buffer_name)
    block.add_op(st)
    emitter.remote_states[op.buffer_name] = st.result


@lowering(RemoteCodeLoadOp)
def _lower_code_load(emitter: Any, op: Operation, env: Env, block: Block, fresh: set[SSAValue]) -> None:
    """Nothing to emit: on NumPy every graph's code is always resident."""


@lowering(RemoteVariableOp)
def _lower_remote_variable(emitter: Any, op: Operation, env: Env, block: Block, fresh: set[SSAValue]) -> None:
    """Nothing to emit: the variable lives in its buffer's state."""


@lowering(ReplicaShardedVariableOp)
def _lower_sharded_variable(emitter: Any, op: Operation, env: Env, block: Block, fresh: set[SSAValue]) -> None:
    assert isinstance(op, ReplicaShardedVariableOp)
    t = op.shard.type
    st = _per_replica_state(
        emitter, op.var_name.data, op.replica_values(), shape_of(t), dtype_of(t), op.init is not None
    )
    if IPU_ATTR in op.attributes:
        st.attributes[IPU_ATTR] = op.attributes[IPU_ATTR]
    st.result.name_hint = op.shard.name_hint
    block.add_op(st)
    env[op.shard] = st.result


def _params(op: _RemoteAccess) -> dict[str, Attribute]:
    attrs: dict[str, Attribute] = {"buffer": StringAttr(op.buffer_name)}
    k = op.constant_offset()
    if k is not None:
        attrs["offset"] = IntegerAttr(k, i64)
    if IPU_ATTR in op.attributes:
        attrs[IPU_ATTR] = op.attributes[IPU_ATTR]
    return attrs


def _state(emitter: Any, op: _RemoteAccess) -> SSAValue:
    state = emitter.remote_states.get(op.buffer_name)
    if state is None:
        from xl.passes.lower_to_rt import LoweringError

        raise LoweringError(
            f"lower-to-rt: {op.name} uses remote buffer @{op.buffer_name}, which graph.main does not declare before it"
        )
    return state


@lowering(RemoteLoadOp, RemoteLoadInplaceOp, RemoteStoreOp)
def _lower_access(emitter: Any, op: Operation, env: Env, block: Block, fresh: set[SSAValue]) -> None:
    assert isinstance(op, _RemoteAccess)
    state = _state(emitter, op)
    offset = op.offset_operand()
    # a constant offset operand is folded into the kernel's `offset` (`_params`)
    off = [env[offset]] if offset is not None and op.constant_offset() is None else []
    if isinstance(op, RemoteLoadOp):
        buf = emitter.alloc(block, op.result.type, op.result.name_hint)
        block.add_op(rt.KernelOp(op.name, [state, *off], [buf], _params(op)))
        env[op.result] = buf
        fresh.add(buf)
    elif isinstance(op, RemoteLoadInplaceOp):
        block.add_op(rt.KernelOp(op.name, [state, *off], [env[op.t]], _params(op)))
    else:
        assert isinstance(op, RemoteStoreOp)
        block.add_op(rt.KernelOp(op.name, [env[op.t], *off], [state], _params(op)))


def _hint(name: str) -> str | None:
    import re

    return name if re.fullmatch(r"[A-Za-z_][\w$.\-]*", name) else None
