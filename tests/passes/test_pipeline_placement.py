"""Placement (`popxl.ipu`, `copy_to_ipu`, `ops.ipu_copy`) survives autodiff,
`autodiff_with_accumulation` (with `grads_required`) and `recompute_graph`: every gradient
op runs on the IPU of the forward op it differentiates, and the gradient of an `ipu.copy`
is an `ipu.copy` back."""

from __future__ import annotations

from functools import partial

import numpy as np
from xdsl.dialects.builtin import IntegerAttr

import popxl
import popxl.ops as ops
import popxl_addons as addons
from tests.helpers.narrow import narrow
from xl.dialects.graph import GraphOp, OutputOp
from xl.dialects.ipu import IPU_ATTR
from xl.dialects.ipu import CopyOp as IpuCopyOp


class TwoIpuLayer(addons.Module):
    """matmul on IPU 0, copied to IPU 1, gelu there (placement set inside the graph)."""

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.random.normal, 0, 0.5, (x.shape[-1], 3)), x.dtype)
        with popxl.ipu(0):
            y = x @ w
        y = ops.ipu_copy(y, 1, 0)
        with popxl.ipu(1):
            return ops.gelu(y)


def _placements(graph: GraphOp) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for op in graph.body.block.ops:
        if isinstance(op, OutputOp):
            continue
        a = op.attributes.get(IPU_ATTR)
        out.setdefault(op.name, set()).add(narrow(a, IntegerAttr).value.data if a is not None else -1)
    return out


def test_autodiff_places_gradient_ops_and_copies_back() -> None:
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = TwoIpuLayer().create_graph(popxl.TensorSpec((2, 4), popxl.float32))
        bwd = addons.autodiff(graph, grads_required=[graph.graph.inputs[0], *graph.args.tensors])
    grad_op = bwd.graph._op
    places = _placements(grad_op)
    assert places["popxl.gelu_grad"] == {1}
    assert places["popxl.matmul"] == {0}
    copies = [op for op in grad_op.body.block.ops if isinstance(op, IpuCopyOp)]
    assert len(copies) == 1
    (back,) = copies
    assert back.source.value.data == 1 and back.destination.value.data == 0
    assert narrow(back.attributes[IPU_ATTR], IntegerAttr).value.data == 0
    assert -1 not in set().union(*places.values()), places


def test_gradient_through_a_copy_is_the_gradient_without_it() -> None:
    """The NumPy gradient of sum(gelu(x @ w) * dy) w.r.t. x and w."""
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        facts, graph = TwoIpuLayer().create_graph(popxl.TensorSpec((2, 4), popxl.float32))
        bwd = addons.autodiff(graph, grads_required=[graph.graph.inputs[0], *graph.args.tensors])
        variables = facts.init()
        xs = popxl.h2d_stream((2, 4), popxl.float32, "x")
        dys = popxl.h2d_stream((2, 3), popxl.float32, "dy")
        x = ops.host_load(xs)
        info = graph.bind(variables).call_with_info(x)
        dx, dw = bwd.call(ops.host_load(dys), args=bwd.grad_graph_info.inputs_dict(info))
        out = {}
        for name, t in (("dx", dx), ("dw", dw)):
            out[name] = popxl.d2h_stream(t.shape, t.dtype, name)
            ops.host_store(out[name], t)
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(2, 4)).astype(np.float32)
    dyv = rng.normal(size=(2, 3)).astype(np.float32)
    with popxl.Session(ir, "cpu") as session:
        w = session.get_tensor_data(variables.weight).astype(np.float64)
        res = session.run({xs: xv, dys: dyv})
    z = xv.astype(np.float64) @ w
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (z + 0.044715 * z**3))
    dgelu = 0.5 * (1 + t) + 0.5 * z * (1 - t**2) * c * (1 + 3 * 0.044715 * z**2)
    dz = dyv * dgelu
    np.testing.assert_allclose(res[out["dx"]], dz @ w.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(res[out["dw"]], xv.T @ dz, rtol=1e-4, atol=1e-5)


class Linear(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input("weight", partial(np.random.normal, 0, 0.5, (x.shape[-1], 3)), x.dtype)
        b = self.add_variable_input("bias", partial(np.zeros, (3,)), x.dtype)
        return ops.gelu(x @ w + b)


def test_accumulation_and_recompute_keep_the_layer_ipu() -> None:
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph:
        with popxl.ipu(1):
            facts, graph = Linear().create_graph(popxl.TensorSpec((2, 4), popxl.float32))
            bwd_facts, bwd = addons.autodiff_with_accumulation(
                graph, tensors_to_accumulate_grads=graph.args.tensors, grads_required=(graph.graph.inputs[0],)
            )
        recomp = addons.transforms.recompute_graph(bwd)
    for g in (bwd.graph._op, recomp.graph._op):
        places = _placements(g)
        assert set().union(*places.values()) == {1}, (g.graph_name, places)
