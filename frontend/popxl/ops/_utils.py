"""Emitting `popxl` dialect ops from the frontend."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import VerifyException

from popxl.context import gcg
from popxl.graph import Graph
from popxl.tensor import Tensor, constant

_OP_CLASSES: dict[str, type] = {}


def op_class(name: str) -> type:
    """The `xl.dialects.popxl` op class named `name` (e.g. "popxl.add")."""
    cls = _OP_CLASSES.get(name)
    if cls is None:
        from xl.dialects.popxl import Popxl

        _OP_CLASSES.update({c.name: c for c in Popxl.operations})
        cls = _OP_CLASSES.get(name)
        if cls is None:
            raise NotImplementedError(f"op {name} is not available in xl.dialects.popxl")
    return cls


def check_in_graph(g: Graph, ts: Sequence[Tensor], what: str) -> None:
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected a popxl Tensor, got {type(t).__name__}")
        if t._graph is not g:
            raise ValueError(
                f"{what}: tensor {t.id} is in graph {t._graph.name!r}, not in the current "
                f"graph {g.name!r}. Pass it to the graph as an input instead."
            )


def to_tensor(x: Any, dtype: Any = None) -> Tensor:
    """`x` itself if it is a Tensor, else a constant of `dtype` in the current graph."""
    if isinstance(x, Tensor):
        return x
    return constant(x, dtype=dtype)


def insert(g: Graph, op: Operation, what: str, verify: bool = True) -> Operation:
    if verify:
        try:
            op.verify()
        except VerifyException as e:
            raise ValueError(str(e).split("\n\n")[0]) from None
    g._insert(op)
    return op


def emit(
    op_name: str,
    inputs: Sequence[Tensor | None],
    result_types: Sequence[Attribute] | None = None,
    names: Sequence[str | None] | None = None,
    **props: Any,
) -> list[Tensor]:
    """Build `op_name` on `inputs` in the current graph; returns the result tensors.

    `inputs` may hold `None` for absent optional operands; a Tensor passed as a
    keyword goes to the optional operand of that name (or `<name>_tensor`). A
    `VerifyException` from type inference/verification becomes a `ValueError` with the
    same message.
    """
    g = gcg()
    short = op_name.split(".", 1)[-1]
    tensor_props = {k: v for k, v in props.items() if isinstance(v, Tensor)}
    check_in_graph(g, [t for t in inputs if t is not None], f"ops.{short}")
    check_in_graph(g, list(tensor_props.values()), f"ops.{short}")
    for k, v in tensor_props.items():
        props[k] = v._value
    cls = op_class(op_name)
    try:
        op = cls.make(  # type: ignore[attr-defined]
            [None if t is None else t._value for t in inputs], result_types, **props
        )
    except VerifyException as e:
        raise ValueError(str(e)) from None
    # Inferred result types were checked by `make`; given ones are verified here.
    insert(g, op, op_name, verify=result_types is not None)
    outs = []
    for i, r in enumerate(op.results):
        name = names[i] if names is not None and i < len(names) else None
        outs.append(g._tensor(r, g._unique_name(name, scoped=True) if name else None))
    return outs


def emit1(op_name: str, inputs: Sequence[Tensor], result_type: Any = None, name: str | None = None, **props: Any) -> Tensor:
    (t,) = emit(
        op_name, inputs, [result_type] if result_type is not None else None, [name], **props
    )
    return t


def emit_inplace(op_name: str, inputs: Sequence[Tensor | None], **props: Any) -> Tensor:
    """An in-place op (no results): returns the updated first input."""
    emit(op_name, inputs, None, None, **props)
    t = inputs[0]
    assert t is not None
    return t


def factor(f: Any) -> Any:
    """A scalar factor for an op: a Tensor stays (optional operand), else a float."""
    if f is None or isinstance(f, Tensor):
        return f
    return float(f)


def axes_tuple(axis: Any, rank: int) -> tuple[int, ...] | None:
    if axis is None:
        return None
    if isinstance(axis, int | np.integer):
        return (int(axis),)
    return tuple(int(a) for a in axis)
