"""Replicas through `popxl.Session` and the executable: grouped variables, per-replica state,
data-parallel training equal to one replica on the whole batch, and a program split over two
instances (threads sharing a gather) equal to the simulated run bit for bit."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl.bridge import module_of
from tests.helpers.narrow import narrow
from tests.helpers.plan_tolerance import PLAN_TOL
from xl.compiler import compile_module, lower
from xl.dialects import rt
from xl.passes.rt_optimize import optimize_program
from xl.runtime.comm import LocalComm, split_replicas
from xl.runtime.executable import compile_program

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))


def grouped_program(r: int = 4):
    ir = popxl.Ir(replication=r)
    with ir.main_graph:
        s = popxl.h2d_stream((3,), popxl.float32, "x")
        x = ops.host_load(s)
        v = popxl.variable(
            np.arange(6, dtype=np.float32).reshape(2, 3), name="v",
            replica_grouping=ir.replica_grouping(stride=1, group_size=2),
        )  # fmt: skip
        w = popxl.variable(
            np.array([[1, 2, 3], [4, 5, 6]], np.float32), name="w",
            replica_grouping=ir.replica_grouping(stride=2, group_size=2), retrieval_mode="all_replicas",
        )  # fmt: skip
        u = popxl.variable(np.full(3, 10, np.float32), name="u")
        ops.var_updates.accumulate_(v, x)
        ops.var_updates.accumulate_(w, x)
        ops.var_updates.accumulate_(u, x)
    return ir, s, v, w, u


def test_grouped_variables_per_group_and_all_replicas() -> None:
    ir, s, v, w, u = grouped_program()
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    session = popxl.Session(ir, "cpu")
    # before any run: the initial values, per group / per replica
    np.testing.assert_array_equal(session.get_tensor_data(v), [[0, 1, 2], [3, 4, 5]])
    w_groups = [0, 1, 0, 1]  # stride 2: {0, 2}, {1, 3}
    np.testing.assert_array_equal(session.get_tensor_data(w), np.array([[1, 2, 3], [4, 5, 6]])[w_groups])
    with session:
        session.run({s: x})
        # v: groups {0, 1}, {2, 3}; a group's value is its first replica's
        np.testing.assert_array_equal(session.get_tensor_data(v), [[0, 2, 4], [9, 11, 13]])
        # w (all_replicas): every replica's value, [replication_factor, *shape]
        want_w = np.array([[1, 2, 3], [4, 5, 6]], np.float32)[w_groups] + x
        np.testing.assert_array_equal(session.get_tensor_data(w), want_w)
        np.testing.assert_array_equal(session.get_tensor_data(u), 10 + x[0])
        # per-replica state on the device
        exe = session._exe
        for r in range(4):
            np.testing.assert_array_equal(exe.get_state("v", r), [[0, 1, 2], [3, 4, 5]][r // 2] + x[r])
            np.testing.assert_array_equal(exe.get_state("u", r), 10 + x[r])
        # write per group: replica r gets the value of its group
        session.write_variable_data(v, np.array([[7, 7, 7], [-1, -2, -3]], np.float32))
        for r in range(4):
            np.testing.assert_array_equal(exe.get_state("v", r), [[7, 7, 7], [-1, -2, -3]][r // 2])
        with pytest.raises(ValueError, match=r"shape of the data \(3,\) does not match variable"):
            session.write_variable_data(v, np.zeros(3, np.float32))
        with pytest.raises(NotImplementedError, match="all_replicas"):
            session.write_variable_data(w, np.zeros((4, 3), np.float32))
        session.run({s: x})
        np.testing.assert_array_equal(session.get_tensor_data(v), [[7, 7, 7], [-1, -2, -3]] + x[[0, 2]])
    # the IR keeps one value per group
    text = ir.to_mlir()
    assert "tensor<2x3xf32> -> tensor<3xf32> {grouping = #replica.grouping<stride = 1, group_size = 2>}" in text


def test_executable_state_per_replica() -> None:
    ir, s, v, w, u = grouped_program()
    exe = compile_module(module_of(ir))
    np.testing.assert_array_equal(exe.gather_state("v"), [[0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5]])
    exe.set_state("u", np.ones(3, np.float32), replicas=[1, 3])
    np.testing.assert_array_equal(exe.gather_state("u"), [[10] * 3, [1] * 3, [10] * 3, [1] * 3])
    exe.set_state("u", np.zeros(3, np.float32))
    np.testing.assert_array_equal(exe.gather_state("u"), np.zeros((4, 3)))
    with pytest.raises(IndexError, match=r"replica 4 does not exist \(replication_factor=4\)"):
        exe.get_state("u", 4)
    with pytest.raises(KeyError, match='no variable named "nope"'):
        exe.get_state("nope", 1)
    with pytest.raises(ValueError, match=r"expected shape \(3,\), got \(2,\)"):
        exe.set_state("u", np.zeros(2, np.float32), replicas=[0])


def test_grouped_state_lowering() -> None:
    ir, *_ = grouped_program()
    low = lower(module_of(ir))
    (program,) = low.ops
    assert isinstance(program, rt.ProgramOp)
    states = {op.slot.data: op for op in program.body.block.ops if isinstance(op, rt.StateOp)}
    assert str(states["v"].grouping) == "#replica.grouping<stride = 1, group_size = 2>"
    v_init = states["v"].init
    assert v_init is not None and v_init.type.get_shape() == (2, 3)
    assert states["u"].grouping is None
    text = str(low)
    assert 'rt.state "v" = dense<' in text and "{grouping = #replica.grouping<stride = 1, group_size = 2>}" in text


# ------------------------------------------------------------------------------------
# Data parallel training
# ------------------------------------------------------------------------------------


def dp_program(replicas: int, batch: int, lr: float = 0.05):
    """The tutorial's MNIST step, each replica on `batch` samples, gradients all-reduced (mean)."""
    from mnist import Net

    np.random.seed(7)
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        img_s = popxl.h2d_stream((batch, 28, 28), popxl.float32, "image")
        lab_s = popxl.h2d_stream((batch,), popxl.int32, "labels")
        img = ops.host_load(img_s)
        labels = ops.host_load(lab_s, "labels")
        facts, fwd = Net().create_graph(img)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(img)
        loss, dx = addons.ops.cross_entropy_with_grad(info.outputs[0], labels)
        loss_s = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_s, loss)
        bwd_info = bwd.call_with_info(dx, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, bwd_info)
        for t in variables.tensors:
            g = grads[t]
            ops.collectives.replicated_all_reduce_(g, op="mean")
            ops.scaled_add_(t, g, b=-lr)
    return ir, img_s, lab_s, loss_s, variables


@pytest.mark.parametrize("replicas", [2, 4])
def test_data_parallel_equals_one_replica_on_the_whole_batch(replicas: int) -> None:
    batch = 16
    rng = np.random.default_rng(0)
    data = [
        (rng.normal(size=(batch, 28, 28)).astype(np.float32), rng.integers(0, 10, batch).astype(np.int32))
        for _ in range(3)
    ]
    weights = {}
    initial = {}
    for r in (1, replicas):
        ir, img_s, lab_s, loss_s, variables = dp_program(r, batch // r)
        session = popxl.Session(ir, "cpu")
        data0 = session.get_tensors_data(variables.tensors)
        initial[r] = {name: np.array(data0[t]) for name, t in variables.named_tensors.items()}
        losses = None
        with session:
            for x, y in data:
                feed = (
                    {img_s: x.reshape(r, batch // r, 28, 28), lab_s: y.reshape(r, batch // r)}
                    if r > 1 else {img_s: x, lab_s: y}
                )  # fmt: skip
                losses = session.run(feed)[loss_s]
            data_ = session.get_tensors_data(variables.tensors)
            weights[r] = {name: data_[t] for name, t in variables.named_tensors.items()}
            if r > 1:  # every replica holds the same weights
                for t in variables.tensors:
                    every = session._exe.gather_state(narrow(t, popxl.Variable)._var_name)
                    np.testing.assert_array_equal(every, np.stack([every[0]] * r))
        assert losses is not None and np.shape(losses) == ((r,) if r > 1 else ())
    assert len(weights[1]) == 8
    for name, w in weights[1].items():
        np.testing.assert_array_equal(initial[replicas][name], initial[1][name])
        d1, dr = w - initial[1][name], weights[replicas][name] - initial[1][name]
        assert np.abs(d1).max() > 1e-5, name  # training moved every weight
        np.testing.assert_allclose(weights[replicas][name], w, rtol=0, atol=1e-6, err_msg=name)
        # and the updates themselves agree (the biases move by ~1e-5)
        assert np.abs(dr - d1).max() <= 1e-3 * np.abs(d1).max(), name


# ------------------------------------------------------------------------------------
# Two instances: the replicas split over two executables sharing a gather
# ------------------------------------------------------------------------------------


class ThreadComm:
    """A fake multi-instance communicator: `n` executables in threads, one shared all-gather."""

    def __init__(self, shared: dict, index: int, n: int) -> None:
        self.shared = shared
        self.num_instances = n
        self.instance_index = index

    def local_replicas(self, replication_factor: int) -> range:
        return split_replicas(replication_factor, self.num_instances, self.instance_index)

    def gather(self, local: list[np.ndarray]) -> list[np.ndarray]:
        slots, barrier = self.shared["slots"], self.shared["barrier"]
        slots[self.instance_index] = [np.array(a) for a in local]
        barrier.wait()
        out = [a for i in range(self.num_instances) for a in slots[i]]
        barrier.wait()  # nobody overwrites a slot before every instance has read it
        return out


SPLIT = """
graph.h2d_stream @x : tensor<2x3xf32>
graph.d2h_stream @y : tensor<2x3xf32>
graph.d2h_stream @g : tensor<2x6xf32>
graph.d2h_stream @s : tensor<3xf32>
graph.graph @body(%a: tensor<2x3xf32> {graph.name = "a"}) -> (tensor<2x3xf32>) {
  %x = graph.host_load @x : tensor<2x3xf32>
  %t = popxl.mul %a, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %m = replica.all_reduce %t {grouping = #replica.grouping<stride = 2, group_size = 2>, op = "mean"} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %u = popxl.add %m, %x : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  graph.host_store @y, %u : tensor<2x3xf32>
  graph.output %u : tensor<2x3xf32>
}
graph.main attributes {num_host_transfers = 2 : i64, replication_factor = 4 : i64} {
  %w = graph.variable "w" = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %r = call.repeat @body 2 (%w) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  replica.all_reduce_ %r {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"} : (tensor<2x3xf32>) -> ()
  popxl.scaled_add_ %w, %r {a = 1.0 : f64, b = 0.5 : f64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()
  %g = replica.all_gather %w {axis = 1 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>, new_axis = false} : (tensor<2x3xf32>) -> tensor<2x6xf32>
  graph.host_store @g, %g : tensor<2x6xf32>
  graph.host_store @g, %g : tensor<2x6xf32>
  %s = replica.reduce_scatter %w {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"} : (tensor<2x3xf32>) -> tensor<3xf32>
  graph.host_store @s, %s : tensor<3xf32>
  graph.host_store @s, %s : tensor<3xf32>
}
"""


@pytest.mark.parametrize("optimize", [True, False])
def test_two_instances_equal_the_simulated_run(optimize: bool) -> None:
    from xl.tools.context import xl_context
    from xl.tools.parse import parse_source

    module = parse_source(xl_context(), SPLIT, "split.mlir")
    low = lower(module)
    (program,) = low.ops
    assert isinstance(program, rt.ProgramOp)
    if optimize:
        optimize_program(program)
    x = np.random.default_rng(5).normal(size=(2, 4, 2, 3)).astype(np.float32)  # [n, R, *shape]

    whole = compile_program(program, optimize=optimize, comm=LocalComm())
    want = [whole.run({"x": x}) for _ in range(2)]
    want_w = whole.gather_state("w")

    shared: dict = {"slots": [None, None], "barrier": threading.Barrier(2, timeout=30)}
    halves = [compile_program(program, optimize=optimize, comm=ThreadComm(shared, i, 2)) for i in range(2)]
    assert [list(h.local_replicas) for h in halves] == [[0, 1], [2, 3]]
    results: list = [None, None]
    errors: list = []

    def work(i: int) -> None:
        try:
            part = x[:, 2 * i : 2 * i + 2]
            results[i] = [halves[i].run({"x": part}) for _ in range(2)]
            results[i].append(halves[i].gather_state("w"))
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)
            shared["barrier"].abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for step in range(2):
        for name in ("y", "g", "s"):
            got = np.concatenate([results[i][step][name] for i in range(2)], axis=1)
            np.testing.assert_array_equal(got, want[step][name])  # bit for bit
    for i in range(2):
        np.testing.assert_array_equal(results[i][2], want_w)
    # the local layout: [num_host_transfers, local replicas, *shape]
    assert results[0][0]["y"].shape == (2, 2, 2, 3)
    with pytest.raises(IndexError, match=r"replica 3 runs in another instance \(this one runs replicas 0..1\)"):
        halves[0].get_state("w", 3)
    with pytest.raises(ValueError, match=r"\[num_host_transfers=2, local replicas=2\]"):
        halves[0].run({"x": x})


def test_simulated_split_program_against_numpy() -> None:
    """The program of the split test, computed here with NumPy."""
    from xl.tools.context import xl_context
    from xl.tools.parse import parse_source

    x = np.random.default_rng(5).normal(size=(2, 4, 2, 3)).astype(np.float64)
    w = np.array([[1, 2, 3], [4, 5, 6]], np.float64)
    a = np.stack([w] * 4)
    ys = []
    for i in range(2):
        t = a * x[i]
        m = np.empty_like(t)
        for members in ([0, 2], [1, 3]):
            m[members] = t[members].mean(axis=0)
        a = m + x[i]
        ys.append(a)
    total = a.sum(axis=0)
    wn = w + 0.5 * total  # the same on every replica
    g = np.concatenate([wn, wn], axis=1)
    s = [(wn + wn).reshape(-1)[:3], (wn + wn).reshape(-1)[3:]] * 2
    exe = compile_module(parse_source(xl_context(), SPLIT, "split.mlir"))
    out = exe.run({"x": x.astype(np.float32)})
    np.testing.assert_allclose(out["y"], np.stack(ys), rtol=1e-5)
    np.testing.assert_allclose(out["g"], np.stack([np.stack([g] * 4)] * 2), rtol=1e-5)
    np.testing.assert_allclose(out["s"], np.stack([np.stack(s)] * 2), rtol=1e-5)


def test_one_replica_data_parallel_program_drops_its_all_reduces() -> None:
    """With one replica the all-reduces are the identity: rt-optimize removes them, so the
    SGD updates fold into their gemms as in the program without collectives; same numbers
    as the straightforward plan, which keeps them."""
    ir, img_s, lab_s, loss_s, variables = dp_program(1, 4)
    low = lower(module_of(ir))
    (program,) = low.ops
    assert isinstance(program, rt.ProgramOp)
    optimize_program(program)
    text = str(low)
    assert '"replica.' not in text and text.count('"xl.gemm_acc"') >= 4
    rng = np.random.default_rng(1)
    feed = {"image": rng.normal(size=(4, 28, 28)).astype(np.float32), "labels": rng.integers(0, 10, 4).astype(np.int32)}
    opt = compile_program(program, optimize=True)
    plain = compile_module(module_of(ir), optimize=False)
    assert plain.sites  # the straightforward plan runs the (trivial) collectives
    for _ in range(2):
        a, b = opt.run(feed), plain.run(feed)
        np.testing.assert_allclose(a["loss"], b["loss"], **PLAN_TOL)
    for t in variables.tensors:
        name = narrow(t, popxl.Variable)._var_name
        np.testing.assert_allclose(opt.get_state(name), plain.get_state(name), **PLAN_TOL)


def _run_split(program, feeds_per_step, optimize: bool, names: list[str]):
    """Run `program` on 2 instances (threads); per instance: outputs per step, then states."""
    shared: dict = {"slots": [None, None], "barrier": threading.Barrier(2, timeout=60)}
    halves = [compile_program(program, optimize=optimize, comm=ThreadComm(shared, i, 2)) for i in range(2)]
    results: list = [None, None]
    errors: list = []

    def work(i: int) -> None:
        try:
            lo, hi = halves[i].local_replicas.start, halves[i].local_replicas.stop
            outs = [halves[i].run({k: v[lo:hi] for k, v in feed.items()}) for feed in feeds_per_step]
            results[i] = (outs, {n: halves[i].gather_state(n) for n in names})
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)
            shared["barrier"].abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


def test_two_instances_data_parallel_training_bit_for_bit() -> None:
    """The data-parallel MNIST step (its updates folded into `xl.all_reduce_update`
    collectives by rt-optimize, the weights' with their gradient matmuls as
    `xl.all_reduce_gemm_update`) on 2 instances of 2 replicas equals the 4 simulated replicas
    bit for bit: losses and every replica's weights after 2 steps."""
    ir, img_s, lab_s, loss_s, variables = dp_program(4, 2)
    low = lower(module_of(ir))
    (program,) = low.ops
    assert isinstance(program, rt.ProgramOp)
    optimize_program(program)
    assert str(low).count('"xl.all_reduce_update"') == 4  # the biases
    assert str(low).count('"xl.all_reduce_gemm_update"') == 4  # the weights
    rng = np.random.default_rng(2)
    feeds = [
        {
            "image": rng.normal(size=(4, 2, 28, 28)).astype(np.float32),
            "labels": rng.integers(0, 10, (4, 2)).astype(np.int32),
        }
        for _ in range(2)
    ]
    names = [narrow(t, popxl.Variable)._var_name for t in variables.tensors]
    assert str(low).count("rt.replica_invariant") == 8
    whole = compile_program(program, optimize=True)
    # replica-invariant weights: one buffer for the replicas of a process
    for n in names:
        assert all(whole.get_state(n, r) is whole.get_state(n, 0) for r in range(4))
    w0 = names[0]
    with pytest.raises(ValueError, match=f'variable "{w0}" is replica-invariant'):
        whole.set_state(w0, whole.get_state(w0) + 1, replicas=[1])
    whole.set_state(w0, whole.get_state(w0).copy(), replicas=[1])  # the same value: fine
    want = [whole.run(f) for f in feeds]
    want_state = {n: whole.gather_state(n) for n in names}
    results = _run_split(program, feeds, True, names)
    for step in range(2):
        got = np.concatenate([results[i][0][step]["loss"] for i in range(2)])
        np.testing.assert_array_equal(got, want[step]["loss"])
    for n in names:
        for i in range(2):
            np.testing.assert_array_equal(results[i][1][n], want_state[n])
