"""The remote-memory ops of `popxl.ops` (re-exported by `popxl/ops/__init__.py`):
`remote_load`, `remote_load_`, `remote_store` (an entry of a `popxl.RemoteBuffer` to or
from a tensor) and `remote_code_load`.

Their ops (`xl.dialects.ipu`) name the buffer or graph by symbol, and their verifiers look
it up in the module: they are inserted through `insert(..., verify_in_place=True)`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popxl._checks import check_name, describe
from popxl.context import gcg
from popxl.graph import Graph
from popxl.ops._ops import reshape
from popxl.ops._utils import argument_constant, check_in_graph, composed, insert, updated_tensor, wrap_public_ops
from popxl.remote_buffer import RemoteBuffer, checked_buffer
from popxl.tensor import Tensor
from xl.dialects.ipu import CODE_LOCATIONS, RemoteCodeLoadOp, RemoteLoadInplaceOp, RemoteLoadOp, RemoteStoreOp

__all__ = ["remote_code_load", "remote_load", "remote_load_", "remote_store"]


def _offset_of(rb: RemoteBuffer, offset: Any, what: str) -> Any:
    """The SSA value of the offset: of a scalar integer tensor of this graph (a tensor of one
    element, such as upstream's `popxl.constant([0])`, is reshaped to one), or of a uint32
    constant named `offset` for an int, checked against the buffer's entries."""
    if isinstance(offset, Tensor):
        check_in_graph(gcg(), [offset], what)
        if offset.nelms != 1 or not offset.dtype.is_int:
            raise ValueError(
                f"{what}: offset must be an int or an integer Tensor of one element, got {offset.id} "
                f"{offset.shape} {offset.dtype.name}"
            )
        if offset.shape != ():
            offset = reshape(offset, ())
        return offset._value
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer):
        raise TypeError(f"{what}: offset must be an int or a Tensor, got {describe(offset)}")
    k = int(offset)
    if not 0 <= k < rb.entries:
        raise ValueError(f"{what}: offset {k} is out of range [0, {rb.entries}) (entries of {rb!r})")
    # a constant tensor of the graph, as in PopXL (the lowering folds it into the access)
    return argument_constant(np.uint32(k), "offset")._value


@composed("RemoteLoad")
def remote_load(remote_buffer: Any, offset: int | Tensor, name: str | None = None) -> Tensor:
    """Entry `offset` of `remote_buffer` loaded into a new tensor (`ipu.remote_load`).

    `offset`: an int in `[0, entries)` or a scalar integer Tensor (checked when the op runs:
    `DataRangeError` naming the buffer and the value). The result has the buffer's shape,
    dtype and `meta_shape`. There is no data dependency between a store and a later load:
    build them inside `popxl.in_sequence()`. Not differentiable (no gradient flows).
    """
    what = "ops.remote_load"
    rb = checked_buffer(remote_buffer, what)
    name = check_name(name, what)
    off = _offset_of(rb, offset, what)
    g = gcg()
    op = RemoteLoadOp(rb._name, rb._op.type, off)
    insert(g, op, what, verify_in_place=True)
    if name is None:
        tag = int(offset) if isinstance(offset, int | np.integer) else getattr(offset, "name", "t")
        name = f"id_{rb.remote_buffer_id}_offset_{tag}"
    t = g._tensor(op.result, g._unique_name(name, scoped=True))
    t._meta_shape = rb.meta_shape
    return t


@composed("RemoteLoadInplace")
def remote_load_(remote_buffer: Any, offset: int | Tensor, t: Tensor) -> Tensor:
    """Entry `offset` of `remote_buffer` loaded into `t` in place (`ipu.remote_load_`);
    `t` must have the buffer's shape and dtype. Returns the loaded tensor: a new tensor
    aliasing `t`, as PopXL's in-place ops return."""
    what = "ops.remote_load_"
    rb = checked_buffer(remote_buffer, what)
    check_in_graph(gcg(), [t], what)
    rb.validate_tensor_matches_buffer(t)
    off = _offset_of(rb, offset, what)
    op = insert(gcg(), RemoteLoadInplaceOp(rb._name, t._value, off), what, verify_in_place=True)
    t._meta_shape = rb.meta_shape
    return updated_tensor(op)


@composed("RemoteStore")
def remote_store(remote_buffer: Any, offset: int | Tensor, t: Tensor) -> None:
    """`t` stored into entry `offset` of `remote_buffer` (`ipu.remote_store`); `t` must have
    the buffer's shape and dtype; `offset` as in `remote_load`."""
    what = "ops.remote_store"
    rb = checked_buffer(remote_buffer, what)
    check_in_graph(gcg(), [t], what)
    rb.validate_tensor_matches_buffer(t)
    off = _offset_of(rb, offset, what)
    insert(gcg(), RemoteStoreOp(rb._name, t._value, off), what, verify_in_place=True)


def remote_code_load(graph: Any, destination: str) -> None:
    """Load the code of `graph` from remote memory to `'executable'`, `'compute_buffer'`
    or `'io_buffer'` (`ipu.remote_code_load`).

    The op is recorded in the current graph (it prints, verifies and shows in pictures);
    on the NumPy runtime every graph's code is always resident, so running it does nothing.
    """
    what = "ops.remote_code_load"
    if not isinstance(graph, Graph):
        raise TypeError(f"{what}: expected a popxl.Graph, got {type(graph).__name__}")
    if not isinstance(destination, str) or destination not in CODE_LOCATIONS:
        raise ValueError(
            f"{what}: destination must be one of {', '.join(map(repr, CODE_LOCATIONS))}, got {destination!r}"
        )
    current = gcg()
    if graph.ir is not current.ir:
        raise ValueError(f"{what}: graph {graph.name!r} belongs to another Ir")
    if graph is current:
        raise ValueError(f"The remote_code_load op cannot load the code of the graph it is called in ({graph.name!r})")
    if graph._is_main:
        raise ValueError(f"{what}: the main graph's code cannot be loaded; pass a subgraph")
    insert(current, RemoteCodeLoadOp(graph.name, destination), what, verify_in_place=True)


wrap_public_ops(globals(), __all__, "popxl.ops")
