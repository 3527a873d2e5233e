"""Consistency of what the compiler knows about each op, walking every op of every dialect.

What a pass needs to know about an op lives on its class (traits, `xl.dialects.traits`
and `xl.dialects.effects`) or is registered by class (gradient rules). A new op that
misses a declaration fails here, not at run time:

- gradient: a rule registered by class (`@grad_rule(GeluOp)`), or the `NoGradient` or
  `NotDifferentiable` trait; exactly one of the three;
- a round-trip lit line: the op is parsed and printed (a `CHECK` line) in a
  `tests/filecheck/dialects/*/ops.mlir` round-trip test;
- a kernel for every `popxl` op (`xl.runtime.kernels.KERNELS`, registered by op class);
- the runtime's elementwise / view kernels are the ops with the traits;
- a frontend function for every user-facing op, built by op class (`emit1(GeluOp, ...)`),
  never by an op-name string.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from xdsl.ir import Operation

import xl.passes.autodiff  # noqa: F401  (registers the call.call rule)
from xl.dialects import get_all_dialects
from xl.dialects.effects import InPlaceInterface, written_operands
from xl.dialects.traits import (
    Elementwise,
    Internal,
    NoGradient,
    NotDifferentiable,
    PopartType,
    ViewLike,
    derived_popart_type,
    popart_type,
)
from xl.passes.grad_rules import GRAD_RULES, grad_rule

ROOT = Path(__file__).resolve().parents[1]  # tests/
LIT_DIALECTS = ROOT / "filecheck" / "dialects"

# The lowered runtime dialect is produced after autodiff and executed by the runtime; its ops
# are never differentiated.
NOT_DIFFERENTIATED_DIALECTS = {"rt"}
PENDING_DIALECTS: set[str] = set()


def _all_ops() -> list[tuple[str, type[Operation]]]:
    out = []
    for dname, factory in get_all_dialects().items():
        for cls in factory().operations:
            out.append((dname, cls))
    return out


ALL_OPS = _all_ops()
IDS = [c.name for _, c in ALL_OPS]


def test_walks_every_dialect() -> None:
    names = {d for d, _ in ALL_OPS}
    assert {"graph", "popxl", "call", "ipu", "rt"} <= names
    assert len({c.name for _, c in ALL_OPS}) == len(ALL_OPS), "two op classes share a name"


@pytest.mark.parametrize(("dialect", "cls"), ALL_OPS, ids=IDS)
def test_gradient_declared(dialect: str, cls: type[Operation]) -> None:
    if dialect in NOT_DIFFERENTIATED_DIALECTS:
        pytest.skip("lowered dialect: never differentiated")
    if dialect in PENDING_DIALECTS:
        pytest.skip("dialects/pipeline.py declares its gradient traits in issue 10 phase 2")
    kinds = [
        name
        for name, present in (
            ("a gradient rule", cls in GRAD_RULES),
            ("NoGradient", cls.has_trait(NoGradient)),
            ("NotDifferentiable", cls.has_trait(NotDifferentiable)),
        )
        if present
    ]
    assert len(kinds) == 1, (
        f"{cls.name} must have exactly one of: a gradient rule (@grad_rule), the NoGradient "
        f"or the NotDifferentiable trait; it has {kinds or 'none'}"
    )


def test_grad_rule_refuses_bad_registrations() -> None:
    from xl.dialects.popxl import DetachOp, GeluGradOp, GeluOp

    def rule(b, op, dys):
        return [None]

    with pytest.raises(TypeError, match="is not an op class"):
        grad_rule("popxl.gelu")  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    with pytest.raises(TypeError, match="popxl.detach declares NoGradient"):
        grad_rule(DetachOp)
    with pytest.raises(TypeError, match="popxl.gelu_grad declares NotDifferentiable"):
        grad_rule(GeluGradOp)
    with pytest.raises(TypeError, match="popxl.gelu already has a gradient rule"):
        grad_rule(GeluOp)(rule)
    assert GRAD_RULES[GeluOp] is not rule


def _roundtrip_lines() -> tuple[str, str]:
    """(IR text, CHECK text) of the dialect round-trip tests."""
    ir: list[str] = []
    checks: list[str] = []
    for f in sorted(LIT_DIALECTS.glob("*/ops.mlir")):
        text = f.read_text()
        if "XL_ROUNDTRIP" not in text:
            continue
        for line in text.splitlines():
            s = line.strip()
            if s.startswith("//"):
                if re.match(r"//\s*CHECK", s):
                    checks.append(s)
            else:
                ir.append(s)
    return "\n".join(ir), "\n".join(checks)


IR_TEXT, CHECK_TEXT = _roundtrip_lines()


@pytest.mark.parametrize(("dialect", "cls"), ALL_OPS, ids=IDS)
def test_roundtrip_lit_line(dialect: str, cls: type[Operation]) -> None:
    pat = re.compile(r"(?<![\w.])" + re.escape(cls.name) + r"(?![\w.])")
    assert pat.search(IR_TEXT), f"{cls.name}: no line of tests/filecheck/dialects/*/ops.mlir parses it"
    assert pat.search(CHECK_TEXT), (
        f"{cls.name}: no CHECK line of tests/filecheck/dialects/*/ops.mlir checks its printed form"
    )


def test_in_place_interface() -> None:
    from xl.dialects.popxl import AdamUpdaterOp, Popxl, ScaledAddOp

    inplace = {c.name for c in Popxl.operations if c.get_trait(InPlaceInterface) is not None}
    # every popxl op whose name ends in `_` writes in place, and only those plus the updaters
    assert {c.name for c in Popxl.operations if c.name.endswith("_")} <= inplace
    assert inplace - {c.name for c in Popxl.operations if c.name.endswith("_")} == {
        "popxl.adam_updater", "popxl.lamb_updater", "popxl.adamax_updater",
        "popxl.adam_var_update",
    }  # fmt: skip
    assert ScaledAddOp.get_trait(InPlaceInterface) is None
    assert isinstance(AdamUpdaterOp.get_trait(InPlaceInterface), InPlaceInterface)


def test_written_operands_of_calls() -> None:
    from xdsl.dialects.builtin import ModuleOp, TensorType, f32

    from xl.dialects.call import CallOp
    from xl.dialects.graph import GraphOp, OutputOp

    t = TensorType(f32, [2])
    g = GraphOp("g", [t, t], [], input_names=["a", "b"], by_ref=[False, True])
    g.body.block.add_op(OutputOp([]))
    caller = GraphOp("f", [t, t], [], input_names=["x", "y"])
    call = CallOp("g", list(caller.body.block.args), [])
    caller.body.block.add_ops([call, OutputOp([])])
    ModuleOp([g, caller])
    assert written_operands(call) == (1,)


def test_runtime_kernel_kinds_are_the_traits() -> None:
    """The `rt` passes' elementwise (fusable) and view kernels are the ops with the
    `Elementwise` / `ViewLike` traits, resolved from the kernel name by class."""
    from xl.dialects import rt
    from xl.passes.rt_analysis import is_elementwise_kernel, is_view_kernel

    for _, c in ALL_OPS:
        k = rt.KernelOp(c.name, [], [])
        assert is_elementwise_kernel(k) == c.has_trait(Elementwise), c.name
        assert is_view_kernel(k) == c.has_trait(ViewLike), c.name
    for name in ("popxl.minimum", "popxl.swish", "popxl.detach", "popxl.logical_not"):
        assert is_elementwise_kernel(rt.KernelOp(name, [], [])), name
    assert not is_elementwise_kernel(rt.KernelOp("popxl.matmul", [], []))


def test_popxl_ops_have_kernels() -> None:
    """Kernels are registered by op class (`@kernel(GeluOp)`); an `rt.kernel` name
    resolves to its class through the dialects."""
    from xl.dialects.popxl import Popxl
    from xl.dialects.rt_kernels import RT_KERNEL_OPS, kernel_class
    from xl.runtime.kernels import KERNELS, kernel_factory

    missing = [c.name for c in Popxl.operations if c not in KERNELS]
    assert not missing, f"popxl ops without a NumPy kernel: {missing}"
    for cls in Popxl.operations:
        assert kernel_class(cls.name) is cls
        assert kernel_factory(cls.name) is KERNELS[cls]
    # every registered key is a popxl op class or an rt-only kernel, nothing else
    from xl.dialects.ipu import REMOTE_ACCESS_OPS

    assert all(k in set(Popxl.operations) or k in REMOTE_ACCESS_OPS or k in RT_KERNEL_OPS for k in KERNELS)
    assert all(c in KERNELS for c in REMOTE_ACCESS_OPS)  # remote copies (kernels/remote.py)
    assert kernel_factory("popxl.no_such_op") is None


def test_popart_type_names() -> None:
    from xl.dialects.call import RepeatOp
    from xl.dialects.popxl import AccumulateOp, MatmulOp, ReduceSumOp

    assert popart_type(MatmulOp) == "MatMul"
    assert popart_type(ReduceSumOp) == "ReduceSum"
    assert popart_type(AccumulateOp) == "Accumulate"
    assert popart_type(RepeatOp) == "Loop"
    assert derived_popart_type("popxl.relu_") == "ReluInplace"
    for _, c in ALL_OPS:
        t = c.get_trait(PopartType)
        if t is not None:
            assert t.type_name != derived_popart_type(c.name), f"{c.name}: redundant PopartType"


def _frontend_source() -> str:
    root = ROOT.parent / "frontend"
    return "\n".join(p.read_text() for p in sorted(root.rglob("*.py")))


@pytest.mark.parametrize(
    ("dialect", "cls"),
    [(d, c) for d, c in ALL_OPS if d in ("popxl", "call", "ipu", "replica")],
    ids=[c.name for d, c in ALL_OPS if d in ("popxl", "call", "ipu", "replica")],
)
def test_frontend_emits_op(dialect: str, cls: type[Operation]) -> None:
    """Every user-facing op is emitted by the frontend (its class is named in `frontend/`:
    the frontend emits op classes)."""
    if cls.has_trait(Internal):
        assert dialect == "popxl"
        return
    src = _frontend_source()
    assert re.search(rf"\b{cls.__name__}\b", src), (
        f"{cls.name}: no frontend function emits it (mark it Internal if passes build it only)"
    )


def test_frontend_emits_only_op_classes() -> None:
    """The frontend builds ops by class (`emit1(GeluOp, ...)`), never by an op-name string;
    upstream ops xl has no op for are declared `@unimplemented` in `popxl.ops`."""
    root = ROOT.parent / "frontend" / "popxl" / "ops"
    by_string = sorted(
        f"{p.name}: {m.group(0)}"
        for p in root.rglob("*.py")
        for m in re.finditer(r'\bemit(?:1|_inplace)?\(\s*["\']', p.read_text())
    )
    assert not by_string, f"frontend functions emit ops by name: {by_string}"
