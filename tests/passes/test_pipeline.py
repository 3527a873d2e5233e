"""`addons.pipelined_execution`: results of simple pipelines, the seed's forward example,
the deferred transform with `xl-opt -p pipeline`, stashes, and every frontend error."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons

BIN = Path(sys.executable).parent


def _chain(num_stages: int, steps: int, defer: bool = False):
    """x -> x + 1 on each stage (stage i on IPU i), copied to the next stage."""
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((), popxl.uint32, "x")
        out_stream = popxl.d2h_stream((), popxl.uint32, "y")
        x: popxl.Tensor | None = None  # the value the stages pass on
        with addons.pipelined_execution(steps, defer=defer) as p:
            for s in range(num_stages):
                with p.stage(s), popxl.ipu(s):
                    if s == 0:
                        x = ops.host_load(in_stream)
                    assert x is not None
                    x = x + 1
                    if s < num_stages - 1:
                        x = x.copy_to_ipu(s + 1)
                    else:
                        ops.host_store(out_stream, x)
    ir.num_host_transfers = steps
    return ir, p, in_stream, out_stream


@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
def test_chain_adds_number_of_stages(num_stages: int) -> None:
    steps = 10
    ir, _, in_stream, out_stream = _chain(num_stages, steps)
    inputs = np.arange(steps, dtype=np.uint32) * 7
    with popxl.Session(ir, "ipu_hw") as session:
        for _ in range(2):  # a second run sees the same results
            out = session.run({in_stream: inputs})[out_stream]
            assert out.dtype == np.uint32
            np.testing.assert_array_equal(out.reshape(-1), inputs + num_stages)


def test_main_graph_ends_with_one_call() -> None:
    ir, p, _, _ = _chain(3, 6)
    main_ops = [op.name for op in ir._main_op.body.block.ops]
    assert main_ops[-1] == "call.call"
    assert main_ops.count("call.call") == 1
    assert all(name in ("graph.constant", "graph.variable") for name in main_ops[:-1])
    assert p.pipeline_graph is not None and p.pipeline_graph.name == "pipeline_graph"
    names = {
        g.name
        for g in [
            ir._graph_by_name(n)
            for n in ("loads_stage_0", "stage_0", "stage_1", "stage_2", "stores_stage_2", "ipu_copies", "main_repeat")
        ]
    }
    assert len(names) == 7
    sched = addons.GraphWithNamedArgs(ir.main_graph).print_schedule()
    assert "Call" in sched and "(pipeline_graph)" in sched


class Add(addons.Module):
    def build(self, x: popxl.Tensor):
        w = self.add_variable_input("weight", partial(np.random.normal, 0, 0.02, x.shape), x.dtype)
        return popxl.ops.add(w, x)


def test_seed_two_layer_forward_example(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 003's example as written, plus a store of the result to check the numbers."""
    np.random.seed(0)
    ir = popxl.Ir(replication=1)
    N = 4
    with ir.main_graph:
        input_stream = popxl.h2d_stream((32,), dtype=popxl.float32)
        out_stream = popxl.d2h_stream((32,), popxl.float32, "out")
        with popxl.ipu(0):
            facts0, layer0 = Add().create_graph(input_stream.spec)
        with popxl.ipu(1):
            facts1, layer1 = Add().create_graph(input_stream.spec)
        vars0, vars1 = facts0.init(), facts1.init()
        bound_layer0 = layer0.bind(vars0)
        bound_layer1 = layer1.bind(vars1)
        with popxl.in_sequence(True):
            with addons.pipelined_execution(steps=N) as p:
                with p.stage(0), popxl.ipu(0):
                    x = popxl.ops.host_load(input_stream)
                    (x,) = bound_layer0.call(x)
                    x = x.copy_to_ipu(1)
                with p.stage(1), popxl.ipu(1):
                    (x,) = bound_layer1.call(x)
                    popxl.ops.host_store(out_stream, x)
    graph = addons.GraphWithNamedArgs(ir.main_graph)
    print("The current graph only has a call to the pipeline subgraph \n")
    print(graph.print_schedule())
    printed = capsys.readouterr().out
    assert "The current graph only has a call to the pipeline subgraph" in printed
    body = [line for line in printed.splitlines() if line.startswith("    ")]
    assert len(body) == 1 and body[0].strip().startswith("Call.") and "(pipeline_graph)" in body[0]
    ir.num_host_transfers = N
    inputs = np.arange(N * 32, dtype=np.float32).reshape(N, 32)
    with popxl.Session(ir, "ipu_hw") as session:
        out = session.run({input_stream: inputs})[out_stream]
        w0 = session.get_tensor_data(vars0.weight)
        w1 = session.get_tensor_data(vars1.weight)
    np.testing.assert_allclose(out, inputs + w0 + w1, rtol=1e-6)


def test_deferred_region_text_through_xl_opt(tmp_path: Path) -> None:
    """`defer=True`: `ir.to_mlir()` prints the region; `xl-opt -p pipeline` lowers the text
    and `xl-run` gives what the Session gives after `p.apply()`."""
    steps = 6
    ir, p, in_stream, out_stream = _chain(3, steps, defer=True)
    text = ir.to_mlir()
    assert "pipeline.region steps 6 {" in text
    assert "pipeline.stage = 2 : i64" in text
    prog = tmp_path / "prog.mlir"
    prog.write_text(text)
    lowered = subprocess.run(
        [BIN / "xl-opt", prog, "-p", "pipeline"], capture_output=True, text=True, check=True
    ).stdout
    assert "call.repeat @main_repeat 4 (" in lowered
    assert "pipeline.region" not in lowered
    (tmp_path / "lowered.mlir").write_text(lowered)
    inputs = np.arange(steps, dtype=np.uint32) + 100
    np.save(tmp_path / "x.npy", inputs)
    subprocess.run(
        [BIN / "xl-run", tmp_path / "lowered.mlir", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "out.npz"],
        capture_output=True,
        text=True,
        check=True,
    )
    via_text = np.load(tmp_path / "out.npz")["y"]
    np.testing.assert_array_equal(via_text.reshape(-1), inputs + 3)

    # xl-run and the Session lower a remaining region themselves (the `pipeline` pass opens
    # the default lowering pipeline)
    subprocess.run(
        [BIN / "xl-run", prog, f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "out2.npz"],
        capture_output=True,
        text=True,
        check=True,
    )
    np.testing.assert_array_equal(np.load(tmp_path / "out2.npz")["y"], via_text)
    with popxl.Session(ir, "ipu_hw") as session:
        np.testing.assert_array_equal(session.run({in_stream: inputs})[out_stream], via_text)
    assert "pipeline.region" in ir.to_mlir()  # the Session does not change the Ir

    p.apply()
    assert "pipeline.region" not in ir.to_mlir()
    with popxl.Session(ir, "ipu_hw") as session:
        out = session.run({in_stream: inputs})[out_stream]
    np.testing.assert_array_equal(out, via_text)
    with pytest.raises(RuntimeError, match="already ran"):
        p.apply()


def test_stash_and_restore_tensor_delays_by_the_stage_distance() -> None:
    """Stage 2 adds the input it restores from stage 0's stash (depth 3) to the value that
    went through stages 1 and 2: y = (x + 1) * 2 + x for every micro-batch, in order."""
    steps = 8
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((2,), popxl.float32, "x")
        out_stream = popxl.d2h_stream((2,), popxl.float32, "y")
        with addons.pipelined_execution(steps) as p:
            with p.stage(0), popxl.ipu(0):
                x = ops.host_load(in_stream)
                a = (x + 1).copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                b = (a * 2).copy_to_ipu(0)
            with p.stage(2), popxl.ipu(0):
                restored = p.stash_and_restore_tensor(x)
                ops.host_store(out_stream, b + restored)
    ir.num_host_transfers = steps
    text = ir.to_mlir()
    # the stash is named after the stashed tensor, x_hostload (host_load names, as PopXL)
    assert 'graph.variable "pipeline.stash0.x_hostload.buffer" = dense<0.000000e+00> : tensor<3x2xf32>' in text
    inputs = np.random.default_rng(1).normal(size=(steps, 2)).astype(np.float32)
    with popxl.Session(ir, "ipu_hw") as session:
        for _ in range(2):
            out = session.run({in_stream: inputs})[out_stream]
            np.testing.assert_allclose(out, (inputs + 1) * 2 + inputs, rtol=1e-6)


def test_stash_of_a_scalar_with_explicit_from_stage() -> None:
    steps = 6
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((), popxl.int32, "x")
        out_stream = popxl.d2h_stream((), popxl.int32, "y")
        with addons.pipelined_execution(steps) as p:
            with p.stage(0), popxl.ipu(0):
                x = ops.host_load(in_stream)
                c = x.copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                r = p.stash_and_restore_tensor(x, from_stage=0)
                ops.host_store(out_stream, c * 10 + r.copy_to_ipu(1, 0))
    ir.num_host_transfers = steps
    inputs = np.arange(steps, dtype=np.int32) + 1
    with popxl.Session(ir, "ipu_hw") as session:
        out = session.run({in_stream: inputs})[out_stream]
    np.testing.assert_array_equal(out, inputs * 11)


def test_pipeline_inside_a_subgraph() -> None:
    """A pipeline built while a subgraph is being created; graph inputs serve every stage."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((), popxl.int32, "x")
        ys = popxl.d2h_stream((), popxl.int32, "y")

        def body(w: popxl.Tensor) -> None:
            with addons.pipelined_execution(4) as p:
                with p.stage(0), popxl.ipu(0):
                    x = (ops.host_load(xs) * w).copy_to_ipu(1)
                with p.stage(1), popxl.ipu(1):
                    ops.host_store(ys, x + w)

        g = ir.create_graph(body, popxl.TensorSpec((), popxl.int32))
        ops.call(g, popxl.variable(np.int32(3), name="w"))
    ir.num_host_transfers = 4
    with popxl.Session(ir, "cpu") as session:
        out = session.run({xs: np.arange(4, dtype=np.int32)})[ys]
    np.testing.assert_array_equal(out, np.arange(4) * 3 + 3)


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


def test_op_outside_a_stage_is_a_runtime_error() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((), popxl.uint32, "x")
        with pytest.raises(RuntimeError, match="Operation must be created in a stage context: graph.host_load"):
            with addons.pipelined_execution(4):
                ops.host_load(in_stream)
    # the rejected op is not left in the graph
    assert not any(op.name == "graph.host_load" for op in ir._main_op.body.block.ops)


def test_too_few_steps_is_a_value_error() -> None:
    with pytest.raises(
        ValueError,
        match=r"Pipelining requires the steps at least 2x the number of stages in the pipeline. steps=5 stages=3",
    ):
        _chain(3, 5)


def test_stash_of_depth_one_is_a_type_error() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((), popxl.float32, "x")
        with addons.pipelined_execution(4, defer=True) as p:
            with p.stage(0):
                x = ops.host_load(in_stream)
                with pytest.raises(TypeError, match=r"Stash must be larger than 1. size=1, t="):
                    p.stash_and_restore_tensor(x)
            with p.stage(1):
                with pytest.raises(TypeError, match=r"Stash must be larger than 1. size=0"):
                    p.stash_and_restore_tensor(x, from_stage=2)


def test_stash_errors_outside_stage_and_without_producer() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((), popxl.float32, "x")
        w = popxl.variable(np.float32(1), name="w")
        with addons.pipelined_execution(4, defer=True) as p:
            with p.stage(0):
                x = ops.host_load(in_stream)
            with pytest.raises(RuntimeError, match="must be called in a stage context"):
                p.stash_and_restore_tensor(x)
            with p.stage(1):
                with pytest.raises(RuntimeError, match="`from_stage` must be specified"):
                    p.stash_and_restore_tensor(w)
                with pytest.raises(TypeError, match="expected a Tensor"):
                    p.stash_and_restore_tensor(np.zeros(2))


def test_bad_stage_and_steps_arguments() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(TypeError, match="steps must be an int"):
            with addons.pipelined_execution(4.0):
                pass
        with pytest.raises(ValueError, match="steps must be >= 1"):
            with addons.pipelined_execution(0):
                pass
        with addons.pipelined_execution(4) as p:
            with pytest.raises(ValueError, match="the stage must be >= 0"):
                with p.stage(-1):
                    pass
            with pytest.raises(TypeError, match="the stage must be an int"):
                with p.stage("0"):
                    pass


def test_value_crossing_stages_without_copy_is_rejected() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((), popxl.float32, "x")
        with pytest.raises(
            ValueError,
            match=r"\(stage 0\) is used in stage 1 by 'popxl.add': a value reaches a later stage only through an ipu.copy",
        ):
            with addons.pipelined_execution(4) as p:
                with p.stage(0):
                    x = ops.host_load(in_stream)
                with p.stage(1):
                    x = x + 1


def test_value_crossing_stages_backwards_is_rejected() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((), popxl.float32, "x")
        with pytest.raises(ValueError, match=r"values cross stages only forward in stage order"):
            with addons.pipelined_execution(4) as p:
                with p.stage(0):
                    x = ops.host_load(in_stream)
                with p.stage(1):
                    y = ops.host_load(in_stream)
                with p.stage(0):
                    x = x + y


def test_stages_must_start_in_order() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        in_stream = popxl.h2d_stream((), popxl.float32, "x")
        with pytest.raises(ValueError, match=r"stage 1 is never used \(stages must be 0..2\)"):
            with addons.pipelined_execution(6) as p:
                with p.stage(0):
                    ops.host_load(in_stream)
                with p.stage(2):
                    ops.host_load(in_stream)
