"""Building ops from the frontend.

- `emit(cls, inputs, result_types=None, **props)` / `emit1` / `emit_inplace`: build an op of
  the `xl.dialects.popxl` class `cls` (its `make` infers the result types) in the current
  graph and return the result tensors; the frontend never names an op by a string.
- `as_one_popart_op(outputs, type)`: the ops of a public op that PopART builds as one op.
- `insert(graph, op)`: the one insertion path (operands must belong to the graph; the op
  is verified, placed and numbered).
- `@unimplemented`: a public op of upstream PopXL that xl has no op for yet.
- `public_op` / `wrap_public_ops`: the wrapper of every public op (error messages name the
  function the user called; `NotImplementedError` names the public function).
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.utils.exceptions import VerifyException

from popxl import context, dtypes
from popxl._checks import check_int, check_shape, describe
from popxl._host import host_array
from popxl.context import gcg
from popxl.errors import GraphBuildError, GraphTypeError
from popxl.graph import Graph
from popxl.tensor import Constant, Tensor, Variable, constant_of
from xl.dialects.popxl import DtypeMismatch, PopxlOp, deferred_dtype_checks
from xl.dialects.traits import POPART_INTERNAL_ATTR, POPART_OP_ATTR, popart_type


def not_implemented(qualname: str) -> NotImplementedError:
    """`NotImplementedError("<qualname> is not implemented in xl yet")`, marked so that an
    enclosing public op renames it to itself (see `public_op`)."""
    e = NotImplementedError(f"{qualname} is not implemented in xl yet")
    # a marker on the instance: the type must stay exactly NotImplementedError
    e._xl_not_implemented = True  # pyright: ignore[reportAttributeAccessIssue]
    return e


def current_op(default: str = "popxl") -> str:
    """The outermost public op being called (e.g. "ops.add"), for error messages."""
    calls = context._state.calls
    return calls[0] if calls else default


def as_int(x: Any, arg: str) -> int:
    """An int argument of the public op being called (TypeError naming both otherwise)."""
    return check_int(x, current_op(), arg)


def as_float(x: Any, arg: str) -> float:
    """A float argument of the public op being called (TypeError naming both otherwise)."""
    if isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool):
        return float(x)
    if isinstance(x, np.ndarray) and x.size == 1 and x.dtype.kind in "iuf":
        return float(x.reshape(-1)[0])
    raise TypeError(f"{current_op()}: {arg} must be a number or a Tensor, got {describe(x)}")


def as_dtype(d: Any, arg: str = "dtype") -> dtypes.dtype:
    """A dtype argument of the public op being called."""
    return dtypes.checked_dtype(d, f"{current_op()} ({arg})")


def as_shape(shape: Any, arg: str = "shape") -> tuple[int, ...]:
    """A shape argument of the public op being called."""
    return check_shape(shape, f"{current_op()} ({arg})")


def unimplemented(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Declare a public op of upstream PopXL that xl has no op for yet.

    `fn` is a real definition (signature and docstring, body `...`); the returned
    function keeps both and raises `NotImplementedError("<module>.<name> is not
    implemented in xl yet")` when called. `wrap_public_ops` later sets its module to the
    public one.
    """

    @functools.wraps(fn)
    def stub(*args: Any, **kwargs: Any) -> Any:
        # `public_op` (the wrapper every public op gets) names the public function instead
        raise not_implemented(f"{stub.__module__}.{stub.__name__}")

    return stub


# The wrappers `public_op` made (so `wrap_public_ops` never wraps one twice).
_public_op_wrappers: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


def public_op(qualname: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a public op function `fn` named `qualname` (e.g. "popxl.ops.fmod").

    A call that needs an op xl's dialect does not define raises
    `NotImplementedError("<qualname> is not implemented in xl yet")` naming the function
    the user called (the outermost public op), never an internal op name.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls = context._state.calls
        calls.append(qualname.replace("popxl.ops.", "ops.", 1))
        try:
            return fn(*args, **kwargs)
        except NotImplementedError as e:
            if getattr(e, "_xl_not_implemented", False):
                raise not_implemented(qualname) from None
            raise
        finally:
            calls.pop()

    _public_op_wrappers.add(wrapper)
    wrapper.__module__ = qualname.rsplit(".", 1)[0]
    return wrapper


def wrap_public_ops(namespace: dict[str, Any], names: Sequence[str], prefix: str) -> None:
    """Replace every plain function listed in `names` by its `public_op` wrapper (whose
    `__module__` is `prefix`, the module users import it from)."""
    for name in names:
        fn = namespace.get(name)
        if isinstance(fn, types.FunctionType) and fn not in _public_op_wrappers:
            if fn.__name__ != name:
                raise TypeError(f"{prefix}.{name} is defined as {fn.__name__!r}: define it under its own name")
            namespace[name] = public_op(f"{prefix}.{name}", fn)


def _module_of(op: Operation | None) -> Operation | None:
    while op is not None and op.parent_op() is not None:
        op = op.parent_op()
    return op


def _defining_op(v: SSAValue) -> Operation | None:
    """The op defining `v`: its producer, or the op owning the block of an argument."""
    if isinstance(v, OpResult):
        return v.op
    if isinstance(v, BlockArgument):
        return v.block.parent_op()
    return None


def _defining_block(v: SSAValue) -> Block | None:
    if isinstance(v, BlockArgument):
        return v.block
    if isinstance(v, OpResult):
        return v.op.parent_block()
    return None


def check_in_graph(g: Graph, ts: Sequence[Any], what: str) -> None:
    """Every item of `ts` is a Tensor of graph `g` (TypeError / ValueError otherwise)."""
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected a popxl Tensor, got {describe(t)}")
        if t._graph is not g:
            if t._graph._ir is not g._ir:
                raise ValueError(
                    f"{what}: tensor {t.id} belongs to another Ir ({t._graph._ir!r}), not to "
                    f"the Ir of the current graph {g.name!r} ({g._ir!r})"
                )
            raise ValueError(
                f"{what}: tensor {t.id} is in graph {t._graph.name!r}, not in the current "
                f"graph {g.name!r}. Pass it to the graph as an input instead."
            )


def check_same_placement(ts: Sequence[Tensor], what: str) -> None:
    """The operands of one op that ops compute are on one virtual IPU and one tile set
    (upstream checks this for every op); ValueError naming the first two that differ.
    Variables, constants and graph inputs are placed by their consumers (not checked)."""
    first: tuple[Tensor, int, str] | None = None
    for t in ts:
        if not isinstance(t._value, OpResult) or isinstance(t, Variable | Constant):
            continue
        p = (t._ipu_or_none or 0, t._tile_set_or_none or "compute")
        if first is None:
            first = (t, *p)
            continue
        t0, ipu0, tiles0 = first
        if p[0] != ipu0:
            raise ValueError(
                f"{what}: the input tensors {t0.id} and {t.id} are located on different IPUs: {ipu0} != {p[0]} "
                "(copy one with ops.ipu_copy)"
            )
        if p[1] != tiles0:
            raise ValueError(
                f"{what}: the input tensors {t0.id} and {t.id} are located on different tile sets: "
                f"{tiles0!r} != {p[1]!r} (copy one with ops.io_tile_copy)"
            )


def check_graph_in_ir(g: Graph, graph: Graph, what: str) -> None:
    """`graph` (to be called from `g`) belongs to the same Ir as `g`."""
    if graph._ir is not g._ir:
        raise ValueError(
            f"{what}: graph {graph.name!r} belongs to another Ir ({graph._ir!r}), not to the "
            f"Ir of the current graph {g.name!r} ({g._ir!r}); a graph can only be called "
            "from its own Ir"
        )


def argument_constant(x: Any, name: str) -> Tensor:
    """A constant named `name` made of an argument of the public op being called (PopXL
    makes it a tensor: `ops.remote_load(rb, 1)`'s offset), a tensor of the graph even
    inside a composed op (`@composed`)."""
    return _argument(constant_of(*host_array(x, None, what=current_op("popxl.constant")), name=name))


def _argument(t: Tensor) -> Tensor:
    """Record the constant `t`, made of an argument of the composed op being built, as an
    argument of the call, not a step inside it (`@composed`)."""
    if _composing and isinstance(t._value, OpResult):
        _arguments.append(t._value.owner)
    return t


def to_tensor(x: Any, dtype: Any = None) -> Tensor:
    """`x` itself if it is a Tensor, else a constant of `dtype` in the current graph.

    Host data that cannot be a tensor (None, str, lists of Tensors, ragged lists) raises
    TypeError/ValueError naming the public op being called."""
    if isinstance(x, Tensor):
        return x
    return _argument(constant_of(*host_array(x, dtype, what=current_op("popxl.constant"))))


def insert(
    g: Graph, op: Operation, what: str | None = None, verify: bool = True, verify_in_place: bool = False
) -> Operation:
    """Append `op` to graph `g`: every op the frontend builds goes through here.

    Checks that each operand is a value of `g` (a value of another graph or another Ir
    would silently refer to the wrong data), then verifies `op` (a `VerifyException`
    becomes a `ValueError` with the same first paragraph). Errors name the public op being
    called, else `what`, else the op's name. `verify_in_place`: the op's verifier looks a
    symbol up in the module (a remote buffer, a graph), so it is verified once inserted
    and removed again when it fails (the `ValueError` starts with `what`)."""
    what = what if what is not None else op.name
    block = g._block
    for i, v in enumerate(op.operands):
        if _defining_block(v) is not block:
            other = _module_of(_defining_op(v))
            where = "another Ir" if other is not g._ir._module else "another graph"
            raise ValueError(
                f"{current_op(what)}: operand {i} of {op.name} is a value of {where}, not of "
                f"the current graph {g.name!r}"
            )
    if verify_in_place:
        g._insert(op, verify_as=what)
        return op
    if verify:
        try:
            op.verify()
        except DtypeMismatch as e:
            raise GraphTypeError(str(e).split("\n\n")[0]) from None
        except VerifyException as e:
            raise GraphBuildError(str(e).split("\n\n")[0]) from None
    g._insert(op)
    return op


def emit(
    cls: type[PopxlOp],
    inputs: Sequence[Tensor | None],
    result_types: Sequence[Attribute] | None = None,
    names: Sequence[str | None] | None = None,
    emitted: list[Operation] | None = None,
    **props: Any,
) -> list[Tensor]:
    """Build an op of class `cls` on `inputs` in the current graph; returns the result tensors
    (and appends the op to `emitted` when given).

    `inputs` may hold `None` for absent optional operands; a Tensor passed as a
    keyword goes to the optional operand of that name (or `<name>_tensor`). A
    `VerifyException` from type inference/verification becomes a `ValueError` with the
    same message.

    An operand of a dtype the op cannot compute (an int tensor to `gelu`, float labels to
    `nll_loss_with_softmax_grad`) does not stop the op being built, as in PopXL, which
    refuses such programs when they are compiled: the op is built with the types it would
    have, and `popxl.Session` refuses the program with the op's message
    (`xl.dialects.popxl.deferred_dtype_checks`).
    """
    if not (isinstance(cls, type) and issubclass(cls, PopxlOp)):
        raise TypeError(f"emit: expected a popxl dialect op class, got {cls!r}")
    g = gcg()
    what = current_op("ops." + cls.name.split(".", 1)[-1])
    if inputs and inputs[0] is None:  # only trailing operands are optional
        raise TypeError(f"{what}: expected a popxl Tensor, got None")
    tensor_props = {k: v for k, v in props.items() if isinstance(v, Tensor)}
    check_in_graph(g, [t for t in inputs if t is not None], what)
    check_in_graph(g, list(tensor_props.values()), what)
    for k, v in tensor_props.items():
        props[k] = v._value
    check_same_placement([t for t in inputs if t is not None] + list(tensor_props.values()), what)
    with deferred_dtype_checks():
        try:
            op = cls.make([None if t is None else t._value for t in inputs], result_types, **props)
        except DtypeMismatch as e:
            raise GraphTypeError(str(e)) from None
        except VerifyException as e:
            raise GraphBuildError(str(e)) from None
        # Inferred result types were checked by `make`; given ones are verified here.
        insert(g, op, verify=result_types is not None)
    if emitted is not None:
        emitted.append(op)
    outs = []
    for i, r in enumerate(op.results):
        name = names[i] if names is not None and i < len(names) else None
        outs.append(g._tensor(r, g._unique_name(name, scoped=True) if name else None))
    return outs


def emit1(
    cls: type[PopxlOp], inputs: Sequence[Tensor | None], result_type: Any = None, name: str | None = None, **props: Any
) -> Tensor:
    """`emit` of an op with one result: that result (named `name` when given)."""
    (t,) = emit(cls, inputs, [result_type] if result_type is not None else None, [name], **props)
    return t


def as_one_popart_op(outputs: Sequence[Tensor], type_name: str) -> None:
    """Mark the ops that define `outputs` (in order) as the parts of one PopART op of type
    `type_name` (`xl.dialects.traits.POPART_OP_ATTR`): a public op that xl builds from
    several ops where PopART has one (`ops.split`: one slice per part, PopART's `Split`),
    so `popart._internal.ir` reports the one op the program asked for."""
    ops: list[Operation] = []
    for t in outputs:
        v = t._value
        if isinstance(v, OpResult) and v.owner not in ops:
            ops.append(v.owner)
    if outputs:
        _mark_parts(outputs[0]._graph, ops, type_name)


def _mark_parts(g: Graph, ops: Sequence[Operation], type_name: str) -> None:
    """Mark `ops` (in order) as part k of n of one PopART op `type_name`, with one op id."""
    n = IntegerAttr(len(ops), i64)
    for k, op in enumerate(ops):
        op.attributes[POPART_OP_ATTR] = ArrayAttr([StringAttr(type_name), IntegerAttr(k, i64), n])
    g._ir._number_as_one(list(ops))  # one op id, as PopART's one op


COMPOSED_TYPES: dict[str, str] = {}
"""The public ops that xl builds from several ops where PopART has one (`@composed`): the
function's name -> the PopART op type; `popart._internal.ir.op` has a class for each type."""

_composing: list[str] = []  # the composed op being built (the outermost call only)
_arguments: list[Operation] = []  # the constants made of its arguments (`to_tensor`): public


_F = TypeVar("_F", bound=Callable[..., Any])


def composed(type_name: str) -> Callable[[_F], _F]:
    """Decorate a public op that xl builds from several ops where PopART builds the one op
    `type_name` (`ops.isinf`: `abs`, a constant and `equal`; PopART's `IsInf`). The ops a
    call builds are marked as the parts of one PopART op (`as_one_popart_op`: one
    `_ir.op.IsInfOp`, one op id), and those whose results the call does not return as
    internal steps (`xl.dialects.traits.POPART_INTERNAL_ATTR`), which `Graph.tensors` leaves
    out, as PopART's graph has no such tensors. Constants made of the call's arguments
    (`ops.add_(t, 1.0)`: `to_tensor`) stay tensors of their own, as in PopXL. A composed op
    called inside another counts as part of the outer one."""

    def decorate(fn: _F) -> _F:
        COMPOSED_TYPES[fn.__name__] = type_name

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _composing:
                return fn(*args, **kwargs)
            g = gcg()
            built: list[Operation] = []
            handle = g.register_op_created_hook(built.append)
            _composing.append(type_name)
            try:
                out = fn(*args, **kwargs)
            finally:
                _composing.pop()
                g.remove_op_created_hook(handle)
                arguments = set(_arguments)
                _arguments.clear()
            outs = out if isinstance(out, tuple | list) else (out,)
            parts = [op for op in built if op not in arguments]
            mark_composed(g, parts, [t for t in outs if isinstance(t, Tensor)], type_name)
            return out

        return cast(_F, wrapper)

    return decorate


def mark_composed(g: Graph, ops: Sequence[Operation], outputs: Sequence[Tensor], type_name: str) -> None:
    """Mark `ops` (built in this order in `g`) as the parts of one PopART op `type_name`;
    the parts that define none of `outputs` (by result, or by the tensor an in-place part
    returns) as internal. Nothing is marked when the call built a single op of its own."""
    if not ops or (len(ops) == 1 and popart_type(ops[0]) == type_name):
        return
    returned = {t._value for t in outputs}
    updated = {id(t) for t in outputs}
    for op in ops:
        upd = g._updated.get(op)
        if not any(r in returned for r in op.results) and not (upd is not None and id(upd) in updated):
            op.attributes[POPART_INTERNAL_ATTR] = UnitAttr()
    _mark_parts(g, ops, type_name)


def emit_inplace(cls: type[PopxlOp], inputs: Sequence[Tensor | None], **props: Any) -> Tensor:
    """An in-place op (no results, updates its first input): returns the tensor of the updated
    input, a new tensor of the graph (`Graph._updated_tensor`), as PopXL's in-place ops do."""
    emitted: list[Operation] = []
    emit(cls, inputs, None, None, emitted, **props)
    return updated_tensor(emitted[0])


def updated_tensor(op: Operation) -> Tensor:
    """The tensor in-place op `op`, just inserted in the current graph, returns: its updated
    operand under a new name in the current name scope (`Graph._updated_tensor`)."""
    g = gcg()
    t = g._updated_tensor(op, scoped=True)
    assert t is not None, f"{op.name} updates no operand in place"
    return t


def factor(f: Any) -> Any:
    """A scalar factor for an op: a Tensor stays (optional operand), else a float."""
    if f is None or isinstance(f, Tensor):
        return f
    return as_float(f, "factor")


def axes_tuple(axis: Any, rank: int, arg: str = "axis") -> tuple[int, ...] | None:
    """`axis` (None, an int or ints; the argument `arg` of the op being called) as a tuple."""
    if axis is None:
        return None
    if isinstance(axis, int | np.integer):
        return (as_int(axis, arg),)
    if isinstance(axis, str) or not isinstance(axis, Iterable):
        raise TypeError(f"{current_op()}: {arg} must be an int or a sequence of ints, got {describe(axis)}")
    return tuple(as_int(a, arg) for a in axis)
