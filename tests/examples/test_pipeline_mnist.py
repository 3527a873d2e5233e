"""examples/mnist_pipeline.py: seed 003's pipelined MNIST (3 stages on 2 virtual IPUs)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import popxl
from tests.helpers.plan_tolerance import PLAN_TOL
from xl.dialects.graph import GraphOp

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import mnist_accumulate as serial_ex  # noqa: E402
import mnist_pipeline as ex  # noqa: E402
from mnist_data import batches, load_mnist  # noqa: E402


def _opts(module, **kw):
    opts = module.Options()
    opts.train.device = "cpu"
    for k, v in kw.items():
        setattr(opts.train, k, v)
    return opts


def _graph_names(ir: popxl.Ir) -> list[str]:
    return [op.sym_name.data for op in ir._module.ops if isinstance(op, GraphOp)]


@pytest.mark.parametrize("recomputation", [False, True])
def test_program_structure(recomputation: bool) -> None:
    np.random.seed(0)
    session, _, variables, _, layers = ex.train_program(_opts(ex, recomputation=recomputation))
    ir = session.ir
    assert ir.num_host_transfers == 6
    names = _graph_names(ir)
    for g in (
        "loads_stage_0",
        "loads_stage_1",
        "stage_0",
        "stage_1",
        "stage_2",
        "stores_stage_1",
        "ipu_copies",
        "main_repeat",
        "pipeline_graph",
    ):
        assert g in names, g
    text = ir.to_mlir()
    # ramp-up 2 cycles, main loop 6 - 2 = 4 cycles, ramp-down 2 cycles
    assert "call.repeat @main_repeat 4 (" in text
    # the main graph: variables, one call of the pipeline graph, then the optimizer
    main_ops = [op.name for op in ir._main_op.body.block.ops if op.name != "graph.variable"]
    assert main_ops[0] == "call.call" and main_ops.count("call.call") == 1 + 8  # + 8 Adam calls
    # stashes: fc2's activations and fc1's (stage 0 -> stage 2, depth 3); with
    # recomputation only the layer inputs (image, fc1's output)
    buffers = [line for line in text.splitlines() if "graph.variable" in line and '.buffer" =' in line]
    assert all(": tensor<3x5x" in line for line in buffers), buffers
    if recomputation:
        assert len(buffers) == 2
    else:
        assert len(buffers) > 2
    assert set(variables.to_dict()) == {f"fc{i}.{n}" for i in range(1, 5) for n in ("weight", "bias")}


def _train(module, opts, data, init=None):
    np.random.seed(0)
    session, streams, variables, loss_stream, _ = module.train_program(opts)
    if init is not None:
        session.write_variables_data({t: init[k] for k, t in variables.to_dict().items()})
    losses = []
    with session:
        start = {k: session.get_tensor_data(t).copy() for k, t in variables.to_dict().items()}
        for x, y in data:
            losses.append(session.run(dict(zip(streams, [x.reshape(6, 5, 784), y.reshape(6, 5)])))[loss_stream])
    weights = {k: session.get_tensor_data(t) for k, t in variables.to_dict().items()}
    return start, np.stack(losses), weights


@pytest.mark.parametrize("recomputation", [False, True])
def test_pipelined_training_equals_the_serial_stages(recomputation: bool) -> None:
    """Same initial weights and batches: the pipelined program's losses and weights after 3
    Adam steps equal those of mnist_accumulate.py (the stages one after another)."""
    train_x, train_y, _, _ = load_mnist()
    data = list(batches(train_x, train_y, 30, shuffle=True, seed=5))[:3]
    start, losses, weights = _train(ex, _opts(ex, recomputation=recomputation), data)
    _, s_losses, s_weights = _train(serial_ex, _opts(serial_ex), data, init=start)
    assert losses.shape == (3, 6)
    np.testing.assert_allclose(losses, s_losses, **PLAN_TOL)
    for k in weights:
        np.testing.assert_allclose(weights[k], s_weights[k], **PLAN_TOL, err_msg=k)
        assert not np.array_equal(weights[k], start[k])


def test_short_run_learns_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    acc = ex.main(["--max-steps", "40", "--device", "cpu"])
    out = capsys.readouterr().out
    assert f"Accuracy on test set: {acc:0.2f}%" in out
    assert out.count("Throughput:") == 2 and "train session" in out and "test session" in out
    assert acc > 75.0
