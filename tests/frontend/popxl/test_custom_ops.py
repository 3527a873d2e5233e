"""Custom ops with NumPy implementations (popxl.custom_ops, docs/custom_ops.md).

The rotary position embedding of docs/custom_ops.md runs as the binding module of a
wrapper written the way Graphcore's applications write theirs (createOpInGraph on
`g._pb_graph`, op settings, `_op_created`, `Tensor._from_pb_tensor`): forward against
NumPy's complex multiplication, gradient against finite differences of xl's forward;
then the calling form, the IR text, and the errors users hit.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl.custom_ops import CustomOpDef, custom_op
from xl.dialects.custom_ops import CustomOpError, custom_op_definition, unregister_custom_op
from xl.passes.autodiff_info import AutodiffError

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "custom_ops.md"
_BLOCK = re.compile(r"^```python file=(\S+)\n(.*?)^```$", re.M | re.S)

# A wrapper in the applications' style (upstream's is compiled C++ behind it).
WRAPPER = """
import popxl
from popxl.context import get_current_context
from popxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set

from . import rotary_pos_embed_binding


def rotary_pos_embed(t, sin, cos, rotary_dim=None):
    ctx = get_current_context()
    g = ctx.graph
    pb_g = g._pb_graph
    rotary_dim = rotary_dim or t.shape[-1]
    if sin.rank == 2:
        sin = sin.reshape((1, *sin.shape))
    if cos.rank == 2:
        cos = cos.reshape((1, *cos.shape))
    check_in_graph(g, t=t, sin=sin, cos=cos)
    check_tensor_ipu_and_tile_set(t=t, sin=sin, cos=cos)
    settings = ctx._get_op_settings("RotaryPosEmbedOp")
    op = rotary_pos_embed_binding.RotaryPosEmbedOp.createOpInGraph(
        pb_g, {0: t.id, 1: sin.id, 2: cos.id}, {0: g._create_tensor_id("t_rotated")}, rotary_dim, settings
    )
    ctx._op_created(op)
    return popxl.Tensor._from_pb_tensor(op.outTensor(0))
"""


@pytest.fixture(scope="module")
def rope(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The package `rope_app`: the wrapper above and the binding module of the doc."""
    blocks = {m.group(1): m.group(2) for m in _BLOCK.finditer(DOC.read_text())}
    assert set(blocks) == {"rotary_pos_embed_binding.py"}
    d = tmp_path_factory.mktemp("app")
    pkg = d / "rope_app"
    pkg.mkdir()
    (pkg / "rotary_pos_embed_binding.py").write_text(blocks["rotary_pos_embed_binding.py"])
    (pkg / "__init__.py").write_text(WRAPPER)
    sys.path.insert(0, str(d))
    try:
        yield importlib.import_module("rope_app")
    finally:
        sys.path.remove(str(d))
        for name in [m for m in sys.modules if m.startswith("rope_app")]:
            del sys.modules[name]


def tables(seq: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Angles m * base^(-2i/r) and their sin / cos, shape (seq, r/2)."""
    phi = np.outer(np.arange(seq), 10000.0 ** (-np.arange(0, r, 2) / r))
    return phi, np.sin(phi), np.cos(phi)


def complex_reference(x: np.ndarray, phi: np.ndarray, r: int) -> np.ndarray:
    """The first r features as r/2 complex numbers (halves: real, imaginary) times e^(i phi)."""
    h = r // 2
    z = (x[..., :h] + 1j * x[..., h:r]) * np.exp(1j * phi)[None, :, None, :]
    return np.concatenate([z.real, z.imag, x[..., r:]], axis=-1)


def build(rope: ModuleType, shape: tuple[int, ...], r: int, sin: np.ndarray, cos: np.ndarray):
    """x from a host stream through the rotary op in a subgraph; y and dx (for a dy stream)
    stored. Returns (ir, x stream, dy stream, y stream, dx stream)."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream(shape, popxl.float64, "x")
        dys = popxl.h2d_stream(shape, popxl.float64, "dy")
        s = popxl.variable(sin, popxl.float64, name="sin")
        c = popxl.variable(cos, popxl.float64, name="cos")
        x = ops.host_load(xs)
        graph = ir.create_graph(lambda t, a, b: rope.rotary_pos_embed(t, a, b, r), x.spec, s.spec, c.spec)
        info = ops.call_with_info(graph, x, s, c)
        grad = popxl.transforms.autodiff(graph, grads_required=[graph.inputs[0]])
        (dx,) = ops.call(grad.graph, ops.host_load(dys), inputs_dict=grad.inputs_dict(info))
        y = addons.host_store(info.outputs[0])
        dxo = addons.host_store(dx)
    return ir, xs, dys, y, dxo


def test_rotary_binding_forward_vs_complex_and_gradient_vs_finite_differences(rope: ModuleType) -> None:
    rng = np.random.default_rng(0)
    b, seq, heads, hh, r = 2, 5, 3, 8, 6
    shape = (b, seq, heads, hh)
    phi, sin, cos = tables(seq, r)
    ir, xs, dys, ys, dxs = build(rope, shape, r, sin, cos)
    x, dy = rng.normal(size=shape), rng.normal(size=shape)
    with popxl.Session(ir, "cpu") as session:
        got = session.run({xs: x, dys: dy})
        np.testing.assert_allclose(got[ys], complex_reference(x, phi, r), rtol=1e-12, atol=1e-12)
        # finite differences of xl's forward along random directions: <dx, v> = d/de sum(f(x + e v) * dy)
        eps = 1e-6
        for _ in range(3):
            v = rng.normal(size=shape)
            lp = np.sum(session.run({xs: x + eps * v, dys: dy})[ys] * dy)
            lm = np.sum(session.run({xs: x - eps * v, dys: dy})[ys] * dy)
            np.testing.assert_allclose(np.sum(got[dxs] * v), (lp - lm) / (2 * eps), rtol=1e-7)
    # the untouched features pass their gradient through unchanged
    np.testing.assert_array_equal(got[dxs][..., r:], dy[..., r:])
    text = ir.to_mlir()
    assert "popxl.custom %" in text and 'op_type = "RotaryPosEmbedOp"' in text and "rotary_dim = 6 : i64" in text
    assert "popxl.custom_grad" in text


def test_rotary_called_directly_equals_the_binding_form(rope: ModuleType) -> None:
    op = rope.rotary_pos_embed_binding.RotaryPosEmbedOp
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 4, 2, 4)).astype(np.float32)
    phi, sin, cos = tables(4, 4)
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(x, name="x")
        s = popxl.variable(sin[None].astype(np.float32), name="sin")
        c = popxl.variable(cos[None].astype(np.float32), name="cos")
        a = addons.host_store(op(t, s, c, rotary_dim=4))
        b = addons.host_store(rope.rotary_pos_embed(t, s, c))
        assert [o.opType() for o in ir.main_graph._pb_graph.getOps()].count("Custom") == 2
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
    np.testing.assert_array_equal(got[a], got[b])
    np.testing.assert_allclose(got[a], complex_reference(x.astype(np.float64), phi, 4), rtol=1e-5, atol=1e-6)


def _scale() -> CustomOpDef:
    return custom_op("TestScale", forward=lambda x, *, k: k * x, attributes=("k",))


def test_errors_name_the_op() -> None:
    scale = _scale()
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        with pytest.raises(TypeError, match=r"custom op 'TestScale': unknown attribute\(s\) \['q'\]"):
            scale(x, k=2.0, q=1)
        with pytest.raises(TypeError, match=r"missing attribute\(s\) \['k'\]"):
            scale(x)
        with pytest.raises(TypeError, match="expected 1 attribute value"):
            scale.createOpInGraph(ir.main_graph._pb_graph, {0: x.id}, {0: "y"})
        with pytest.raises(ValueError, match="has no tensor 'nope'"):
            scale.createOpInGraph(ir.main_graph._pb_graph, {0: "nope"}, {0: "y"}, 2.0)
        with pytest.raises(TypeError, match="custom op attribute 'k'"):
            scale(x, k=object())
        y = addons.host_store(scale(x, k=2.0))
        # no gradient registered: autodiff refuses, naming the op
        g = ir.create_graph(lambda t: scale(t, k=3.0), x.spec)
        with pytest.raises(AutodiffError, match="custom op 'TestScale' has no gradient registered"):
            popxl.transforms.autodiff(g)
    unregister_custom_op("TestScale")
    with pytest.raises(CustomOpError, match="'TestScale' has no NumPy implementation registered"):
        custom_op_definition("TestScale")
    with pytest.raises(Exception, match="TestScale"):
        popxl.Session(ir, "cpu")
    _scale()  # registered again: the same program runs
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[y], [2.0, 2.0, 2.0])


def test_wrong_results_from_the_implementation() -> None:
    bad = custom_op("TestBadShape", forward=lambda x: np.zeros(x.shape[:-1]))
    ir = popxl.Ir()
    with ir.main_graph:
        y = addons.host_store(bad(popxl.variable(np.ones((2, 3), np.float32), name="x")))
    del y
    with (
        popxl.Session(ir, "cpu") as session,
        pytest.raises(Exception, match=r"'TestBadShape': forward output 0 has shape \(2,\)"),
    ):
        session.run()
    with pytest.raises(CustomOpError, match="num_outputs must be an int >= 1"):
        custom_op("TestNoOut", forward=lambda x: x, num_outputs=0)


def test_inputs_are_read_only_and_several_outputs() -> None:
    def split_minmax(x):
        return np.minimum(x, 0), np.maximum(x, 0)

    def mutate(x):
        x += 1
        return x

    two = custom_op("TestTwo", forward=split_minmax, num_outputs=2)
    mut = custom_op("TestMutate", forward=mutate)
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        a, b = two(popxl.variable(x, name="x"))
        sa, sb = addons.host_store(a), addons.host_store(b)
        addons.host_store(mut(popxl.variable(x, name="z")))
    with popxl.Session(ir, "cpu") as session, pytest.raises(Exception, match="read-only"):
        session.run()
    ir2 = popxl.Ir()
    with ir2.main_graph:
        a, b = two(popxl.variable(x, name="x"))
        sa, sb = addons.host_store(a), addons.host_store(b)
    with popxl.Session(ir2, "cpu") as session:
        got = session.run()
    np.testing.assert_array_equal(got[sa], np.minimum(x, 0))
    np.testing.assert_array_equal(got[sb], np.maximum(x, 0))


def test_op_debug_context_decorates_op_functions() -> None:
    from popxl.context import op_debug_context

    @op_debug_context
    def double(t: popxl.Tensor) -> popxl.Tensor:
        return t * 2

    @op_debug_context("triple")
    def triple(t: popxl.Tensor) -> popxl.Tensor:
        return t * 3

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        a, b = addons.host_store(double(x)), addons.host_store(triple(x))
    with popxl.Session(ir, "cpu") as session:
        got = session.run()
    np.testing.assert_array_equal(got[a], [2, 2])
    np.testing.assert_array_equal(got[b], [3, 3])
    with pytest.raises(TypeError, match="op_debug_context: expected a function or a name, got int"):
        op_debug_context(3)  # pyright: ignore[reportArgumentType]


def test_ops_utils_checks() -> None:
    from popxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        with popxl.ipu(0):
            x = a + 1
        with popxl.ipu(1):
            y = a + 2
            z = y * 2
        check_in_graph(ir.main_graph, a=a, x=x)
        check_tensor_ipu_and_tile_set(y=y, z=z)
        with pytest.raises(ValueError, match=r"`x` \(\S+\) and `y` \(\S+\) are located on different IPUs: 0 != 1"):
            check_tensor_ipu_and_tile_set(x=x, y=y)
        g = ir.create_graph(lambda t: t + 1, a.spec)
        with pytest.raises(ValueError, match="check_in_graph: a: tensor a is in graph 'main_graph'"):
            check_in_graph(g, a=a)
        with pytest.raises(TypeError, match="expected a popxl Tensor"):
            check_in_graph(g, a=3)  # pyright: ignore[reportArgumentType]
