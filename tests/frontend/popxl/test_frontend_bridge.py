"""`popxl.bridge` (popxl objects <-> their IR) and popxl_addons staying on popxl's public surface.

popxl_addons works on the IR only through `popxl.bridge` and xl's own modules: it never
imports xDSL or a private popxl module, and never reads a private attribute of a popxl
object (`t._value`, `graph._op`, `Graph._from_op`, ...). The scan below fails on any new
such access, naming the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl import bridge
from popxl.transforms.autodiff import GradGraphInfo

ROOT = Path(__file__).resolve().parents[3] / "frontend"
POPXL = ROOT / "popxl"
ADDONS = ROOT / "popxl_addons"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_attribute_names(root: Path) -> set[str]:
    """Private attribute names the classes of a package define: methods and class attributes
    `_x`, attributes assigned as `obj._x = ...`, `__slots__` entries."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _private(item.name):
                        names.add(item.name)
                    targets = (
                        item.targets
                        if isinstance(item, ast.Assign)
                        else ([item.target] if isinstance(item, ast.AnnAssign) else [])
                    )
                    value = item.value if isinstance(item, ast.Assign | ast.AnnAssign) else None
                    for t in targets:
                        if isinstance(t, ast.Name) and _private(t.id):
                            names.add(t.id)
                        if isinstance(t, ast.Name) and t.id == "__slots__" and value is not None:
                            for c in ast.walk(value):
                                if isinstance(c, ast.Constant) and isinstance(c.value, str) and _private(c.value):
                                    names.add(c.value)
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and _private(t.attr):
                    names.add(t.attr)
    return names


POPXL_PRIVATE = _private_attribute_names(POPXL)
ADDONS_OWN = _private_attribute_names(ADDONS)


def _violations(path: Path) -> list[str]:
    """xDSL imports, private popxl imports and private popxl attribute accesses in `path`."""
    out: list[str] = []
    rel = path.relative_to(ROOT)
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            if node.module.split(".")[0] == "popxl":
                out += [f"{where}: imports private {a.name} from {node.module}" for a in node.names if _private(a.name)]
        for m in modules:
            parts = m.split(".")
            if parts[0] == "xdsl":
                out.append(f"{where}: imports {m} (use popxl.bridge)")
            if parts[0] == "popxl" and any(_private(p) for p in parts):
                out.append(f"{where}: imports the private module {m}")
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in POPXL_PRIVATE:
            base = ast.unparse(node.value)
            if node.attr not in ADDONS_OWN or base not in ("self", "cls"):
                out.append(f"{where}: {base}.{node.attr} reads a private popxl attribute")
    return out


def test_addons_use_only_popxl_public_surface() -> None:
    found = [v for p in sorted(ADDONS.rglob("*.py")) for v in _violations(p)]
    assert not found, "popxl_addons reaches into popxl privates or xDSL:\n" + "\n".join(found)


def test_scan_finds_what_it_forbids(tmp_path: Path) -> None:
    """The scan is not vacuous: each forbidden form in a file is reported."""
    assert {"_value", "_op", "_from_op", "_module", "_tensor"} <= POPXL_PRIVATE
    bad = ADDONS / "_scan_probe.py"
    text = (
        "from xdsl.ir import Operation\n"
        "import xdsl.dialects.builtin\n"
        "from popxl.ops._utils import insert\n"
        "from popxl._checks import check_dtype\n"
        "from popxl.tensor import _to_numpy\n"
        "def f(t, g, ir):\n"
        "    return t._value, g._op, popxl.Graph._from_op(ir, g), ir._module, self._tensor\n"
    )
    bad.write_text(text)
    try:
        found = _violations(bad)
    finally:
        bad.unlink()
    assert len(found) == 10, found
    assert any("_scan_probe.py:1: imports xdsl.ir" in f for f in found)
    assert any("t._value" in f for f in found) and any("popxl.Graph._from_op" in f for f in found)


# ---------------------------------------------------------------------------------------
# the bridge
# ---------------------------------------------------------------------------------------


def _program() -> tuple[popxl.Ir, popxl.Graph, popxl.Tensor, popxl.Tensor]:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.arange(3, dtype=np.float32), name="x")
        y = ops.gelu(x)
    return ir, ir.main_graph, x, y


def test_values_ops_and_graphs_round_trip() -> None:
    from xl.dialects.graph import MainGraphOp, VariableOp
    from xl.dialects.popxl import GeluOp

    ir, main, x, y = _program()
    assert isinstance(bridge.module_of(ir), bridge.Operation)
    assert isinstance(bridge.graph_op(main), MainGraphOp)
    assert bridge.graph_of(ir, bridge.graph_op(main)) is main
    v = bridge.value_of(y)
    assert isinstance(v, bridge.SSAValue)
    assert bridge.tensor_of(v) is y and bridge.tensor_of(v, main) is y
    assert isinstance(bridge.producer_of(y), GeluOp)
    assert isinstance(bridge.producer_of(x), VariableOp)
    g = ir.create_graph(lambda a: a * 2, x)
    assert bridge.producer_of(g.inputs[0]) is None
    assert bridge.graph_of(ir, g.name) is g
    assert bridge.tensor_of(bridge.value_of(g.inputs[0])) is g.inputs[0]


def test_append_op_places_numbers_and_names() -> None:
    from xl.dialects.popxl import NegOp

    ir, main, x, y = _program()
    with ir.main_graph, popxl.ipu(1):
        (z,) = bridge.append_op(NegOp.make([bridge.value_of(y)]))
    assert z.ipu == 1 and bridge.ipu_of(z) == 1 and bridge.ipu_of(y) is None
    producer = bridge.producer_of(z)
    assert z in main and producer is not None and producer.name == "popxl.neg"
    from popxl.printing import schedule_str

    lines = schedule_str(main).splitlines()
    # ops numbered in creation order from 100; the variable is a tensor, not an op (no id)
    assert [ln.split(" ")[4] for ln in lines[2:-1]] == ["Gelu.100", "Neg.101"]
    # a value a pass put in the graph gets a unique name on request; a known one keeps its own
    op = NegOp.make([bridge.value_of(z)])
    bridge.graph_op(main).body.block.add_op(op)
    t = bridge.tensor_of(op.results[0], main, "x")
    assert t.name == "x__t0" and bridge.tensor_of(op.results[0], main, "other") is t


def test_append_op_refuses_foreign_values() -> None:
    from xl.dialects.popxl import NegOp

    ir, main, x, y = _program()
    other, _, _, y2 = _program()
    with ir.main_graph, pytest.raises(ValueError, match="operand 0 of popxl.neg is a value of another Ir"):
        bridge.append_op(NegOp.make([bridge.value_of(y2)]))
    with pytest.raises(TypeError, match="bridge.append_op: expected an op, got Tensor"):
        bridge.append_op(y)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


def test_run_pass_function_and_module_pass() -> None:
    from xl.passes.recompute import recompute

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32), name="x")
    fwd = ir.create_graph(lambda a: ops.gelu(a) * a, x)
    info = popxl.transforms.autodiff(fwd)
    result = bridge.run_pass(ir, recompute, info.graph.name)
    new = bridge.graph_of(ir, result.graph)
    assert new.name == f"{info.graph.name}_recomp"
    new_info = GradGraphInfo.from_graph(new)
    assert new_info.forward_graph is fwd
    # an xDSL ModulePass instance (canonicalize) runs on the same module
    from xdsl.transforms.canonicalize import CanonicalizePass

    assert bridge.run_pass(ir, CanonicalizePass()) is None
    with pytest.raises(TypeError, match="a ModulePass takes its options at construction"):
        bridge.run_pass(ir, CanonicalizePass(), 1)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error


def test_grad_graph_info_public_constructors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2,), np.float32), name="x")
    fwd = ir.create_graph(lambda a: ops.gelu(a), x)
    info = popxl.transforms.autodiff(fwd)
    ins, outs = info.connections
    assert ins[0] == ("fwd_grad", 0) and outs == (0,)
    again = GradGraphInfo.create(fwd, info.graph, ins, outs)
    assert again.expected_inputs == info.expected_inputs
    assert GradGraphInfo.from_graph(info.graph).connections == (ins, outs)
    with pytest.raises(ValueError, match="is not a gradient graph"):
        GradGraphInfo.from_graph(fwd)
    with pytest.raises(ValueError, match="is not a gradient graph"):
        GradGraphInfo.from_graph(ir.main_graph)


def test_call_op_of_sites() -> None:
    from xl.dialects.call import CallOp

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2,), np.float32), name="x")
        g = ir.create_graph(lambda a: a + 1, x)
        site = ops.call_with_info(g, x)
    assert isinstance(bridge.call_op_of(site), CallOp)
    with pytest.raises(TypeError, match="bridge.call_op_of: expected a CallSiteInfo"):
        bridge.call_op_of(x)


def test_bridge_type_errors_name_the_function() -> None:
    ir, main, x, y = _program()
    with pytest.raises(TypeError, match=r"bridge.value_of: expected a popxl.Tensor, got int"):
        bridge.value_of(1)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    with pytest.raises(TypeError, match=r"bridge.graph_op: expected a popxl.Graph"):
        bridge.graph_op(ir)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    with pytest.raises(TypeError, match=r"bridge.tensor_of: expected an SSA value"):
        bridge.tensor_of(y)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    with pytest.raises(ValueError, match="no graph named"):
        bridge.graph_of(ir, "nope")
    other, _, _, _ = _program()
    with pytest.raises(ValueError, match="is not in the module of"):
        bridge.graph_of(ir, bridge.graph_op(other.main_graph))
