"""Programs `tests/examples/test_mpi.py` runs in one process (simulated replicas) and as MPI instances.

    POPDIST_NUM_TOTAL_REPLICAS=4 mpirun -n 2 python tests/helpers/mpi_program.py OUT_DIR

Each instance writes `OUT_DIR/instance<i>.npz`: its popdist values, the outputs of a
program with every replica collective (its local replicas' rows), the losses of three
data-parallel training steps, the trained weights and grouped variables as `Session`
returns them. `run_collectives` / `run_training` with an int replication factor give the
same arrays for every replica in one process.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
import popxl_addons as addons

R = 4  # total replicas of both programs
SHAPE = (4, 6)
BATCH = 3  # per replica
STEPS = 3


def collective_inputs() -> tuple[np.ndarray, np.ndarray]:
    """Every replica's inputs: x `[R, *SHAPE]` float32, b `[R, *SHAPE]` bool."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(R, *SHAPE)).astype(np.float32)
    b = rng.integers(0, 2, size=(R, *SHAPE)).astype(bool)
    return x, b


def collectives_program(replication: int | str) -> tuple[popxl.Ir, Any, Any, dict[str, Any]]:
    """One program using every replica collective, each with its own output stream."""
    ir = popxl.Ir(replication=replication)
    assert ir.replication_factor == R, ir.replication_factor
    every = ir.replica_grouping()  # (1, R): one group of all replicas
    strided = ir.replica_grouping(stride=2, group_size=2)  # {0, 2} {1, 3}: across instances
    pairs = ir.replica_grouping(stride=1, group_size=2)  # {0, 1} {2, 3}: within an instance
    explicit = ir.replica_grouping_from_assignments([0, 1, 1, 0])  # {0, 3} {1, 2}
    outs: dict[str, Any] = {}
    with ir.main_graph:
        xs = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        bs = popxl.h2d_stream(SHAPE, popxl.bool, "b")
        x = ops.host_load(xs, "x")
        b = ops.host_load(bs, "b")
        c = ops.collectives
        results = {
            "add_all": c.replicated_all_reduce(x, "add", every),
            "mean_strided": c.replicated_all_reduce(x, "mean", strided),
            "mul_pairs": c.replicated_all_reduce(x, "mul", pairs),
            "min_explicit": c.replicated_all_reduce(x, "min", explicit),
            "max_all": c.replicated_all_reduce(x, "max", every),
            "square_add_strided": c.replicated_all_reduce(x, "square_add", strided),
            "and_all": c.replicated_all_reduce(b, "and", every),
            "or_strided": c.replicated_all_reduce(b, "or", strided),
            "gather_concat_all": c.replicated_all_gather(x, axis=1, group=every, output_shape="concat"),
            "gather_new_axis_strided": c.replicated_all_gather(x, group=strided, output_shape="new_axis"),
            "reduce_scatter_all": c.replicated_reduce_scatter(x, "add", every),
            "sharded_slice_pairs": c.replica_sharded_slice(x, pairs),
            "slice_all": c.replicated_slice(x, axis=0, group=every),
            "identical_inputs": addons.ops.replicated_all_reduce_identical_inputs(x, "add", every),
            "identical_grad_inputs": addons.ops.replicated_all_reduce_identical_grad_inputs(x, "add", strided),
        }
        y = x + 0.0
        c.replicated_all_reduce_(y, "add", strided)  # in place
        results["inplace_add_strided"] = y
        for name, t in results.items():
            s = popxl.d2h_stream(t.shape, t.dtype, name)
            ops.host_store(s, t)
            outs[name] = s
    return ir, xs, bs, outs


def run_collectives(replication: int | str) -> dict[str, np.ndarray]:
    """Every output, `[local replicas, *shape]`."""
    ir, xs, bs, outs = collectives_program(replication)
    x, b = collective_inputs()
    local = slice(_offset(ir), _offset(ir) + ir.instance_replication_factor)
    with popxl.Session(ir, "cpu") as session:
        res = session.run({xs: _feed(x[local]), bs: _feed(b[local])})
    return {name: res[s] for name, s in outs.items()}


# ------------------------------------------------------------------------------------
# Data-parallel training
# ------------------------------------------------------------------------------------


class Mlp(addons.Module):
    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w1 = self.add_variable_input("w1", partial(np.random.normal, 0, 0.3, (8, 16)), popxl.float32)
        b1 = self.add_variable_input("b1", partial(np.zeros, (16,)), popxl.float32)
        w2 = self.add_variable_input("w2", partial(np.random.normal, 0, 0.3, (16, 4)), popxl.float32)
        return ops.gelu(x @ w1 + b1) @ w2


def training_data(steps: int = STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per step: images `[R * BATCH, 8]` and labels `[R * BATCH]` (replica r takes rows
    `r*BATCH ..`)."""
    rng = np.random.default_rng(3)
    return [
        (rng.normal(size=(R * BATCH, 8)).astype(np.float32), rng.integers(0, 4, R * BATCH).astype(np.int32))
        for _ in range(steps)
    ]


def training_program(replication: int | str, batch: int, lr: float = 0.1):
    np.random.seed(5)
    ir = popxl.Ir(replication=replication)
    with ir.main_graph:
        xs = popxl.h2d_stream((batch, 8), popxl.float32, "x")
        ys = popxl.h2d_stream((batch,), popxl.int32, "y")
        x = ops.host_load(xs, "x")
        y = ops.host_load(ys, "y")
        facts, fwd = Mlp().create_graph(x)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        loss, dlogits = addons.ops.cross_entropy_with_grad(info.outputs[0], y)
        loss_s = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_s, loss)
        bwd_info = bwd.call_with_info(dlogits, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, bwd_info)
        for t in variables.tensors:
            g = grads[t]
            if ir.replication_factor > 1:
                ops.collectives.replicated_all_reduce_(g, op="mean")
            ops.scaled_add_(t, g, b=-lr)
        grouped = every = None
        if ir.replication_factor > 1:
            # grouped variables: sums of each replica's inputs, read per group / per replica
            grouped = popxl.variable(
                np.arange(16, dtype=np.float32).reshape(2, 8), name="grouped",
                replica_grouping=ir.replica_grouping(stride=2, group_size=2),
            )  # fmt: skip
            every = popxl.variable(np.zeros(8, np.float32), name="every", retrieval_mode="all_replicas")
            row = ops.sum(x, axis=0)
            ops.var_updates.accumulate_(grouped, row)
            ops.var_updates.accumulate_(every, row)
    return ir, xs, ys, loss_s, variables, grouped, every


def run_training(replication: int | str, batch: int = BATCH, steps: int = STEPS) -> dict[str, np.ndarray]:
    """Losses `[steps, local replicas]`, the trained weights, the grouped variables."""
    ir, xs, ys, loss_s, variables, grouped, every = training_program(replication, batch)
    n_local = ir.instance_replication_factor
    offset = _offset(ir)
    rows = slice(offset * batch, (offset + n_local) * batch)
    losses = []
    with popxl.Session(ir, "cpu") as session:
        for x, y in training_data(steps):
            x, y = x[rows].reshape(n_local, batch, 8), y[rows].reshape(n_local, batch)
            losses.append(session.run({xs: _feed(x), ys: _feed(y)})[loss_s])
        out = {f"weight.{name}": np.array(session.get_tensor_data(t)) for name, t in variables.named_tensors.items()}
        if ir.replication_factor > 1:
            assert grouped is not None and every is not None  # made with more than one replica
            out["grouped"] = np.array(session.get_tensor_data(grouped))
            out["every"] = np.array(session.get_tensor_data(every))
    out["losses"] = np.stack(losses) if losses else np.zeros((0, n_local), np.float32)
    return out


# ------------------------------------------------------------------------------------


def _offset(ir: popxl.Ir) -> int:
    if ir.instance_replication_factor == ir.replication_factor:
        return 0
    import popdist

    return popdist.getReplicaIndexOffset()


def _feed(a: np.ndarray) -> np.ndarray:
    """`[local replicas, *shape]` -> the Session layout (size-1 replica dim dropped)."""
    return a[0] if a.shape[0] == 1 else a


def popdist_values() -> dict[str, Any]:
    import popdist

    popdist.init()
    ir = popxl.Ir(replication="popdist")
    return {
        "num_instances": popdist.getNumInstances(),
        "instance_index": popdist.getInstanceIndex(),
        "total": popdist.getNumTotalReplicas(),
        "local": popdist.getNumLocalReplicas(),
        "offset": popdist.getReplicaIndexOffset(),
        "env_set": popdist.isPopdistEnvSet(),
        "ir_replication_factor": ir.replication_factor,
        "ir_instance_replication_factor": ir.instance_replication_factor,
    }


class _StopsAfterHeaders:
    """An mpi4py communicator whose second `Allgather` (the data of the first exchange)
    raises instead: an exception inside an exchange, e.g. an interrupt."""

    def __init__(self, comm: Any) -> None:
        self._comm = comm
        self._calls = 0

    def Allgather(self, send: Any, recv: Any) -> None:
        self._calls += 1
        if self._calls == 2:
            raise RuntimeError("instance 0 stops between the header and the data of an exchange")
        self._comm.Allgather(send, recv)


def main(argv: list[str]) -> None:
    out_dir = Path(argv[1])
    case = argv[2] if len(argv) > 2 else "all"
    if case == "indivisible":
        popxl.Ir(replication="popdist")  # POPDIST_NUM_TOTAL_REPLICAS not a multiple: raises
        raise SystemExit("Ir(replication='popdist') accepted an indivisible replica count")
    if case == "diverge":
        # a collective only instance 0 reaches: both instances must stop with an error
        import popdist

        popdist.init()
        from xl.runtime.mpi import MpiComm

        comm = MpiComm()
        comm.gather([np.zeros(3 if comm.instance_index == 0 else 4, np.float32)])
        raise SystemExit("instances with different arrays exchanged them")
    if case == "early_exit":
        # instance 0 waits in an exchange instance 1 never makes: both must stop, no hang
        import popdist

        popdist.init()
        from xl.runtime.mpi import MpiComm

        comm = MpiComm()
        comm.gather([np.zeros(3, np.float32)])
        if comm.instance_index == 0:
            comm.gather([np.zeros(3, np.float32)])
            raise SystemExit("instance 0 got an exchange nobody else made")
        return
    if case == "failed":
        # instance 0 stops with an uncaught exception; instance 1 goes on to its next exchange
        # only once instance 0 has raised: it stops with an error naming instance 0, and
        # nothing either printed is lost (no instance aborts the job)
        import popdist

        popdist.init()
        from xl.runtime.mpi import MpiComm

        comm = MpiComm()
        comm.barrier()
        raised = out_dir / "failed.raised"
        if comm.instance_index == 0:
            print("instance 0 printed this before its error")  # not flushed
            raised.touch()
            raise RuntimeError("instance 0 fails on its own")
        while not raised.exists():
            time.sleep(0.01)
        print("instance 1 goes on after instance 0's error", flush=True)
        comm.gather([np.zeros(3, np.float32)])
        raise SystemExit("instance 1 exchanged with an instance that had stopped")
    if case == "interrupted":
        # instance 0 stops between the header and the data of an exchange, instance 1 waits
        # in its data: no exit exchange can answer that, the job is aborted (no hang)
        import popdist

        popdist.init()
        from xl.runtime.mpi import MpiComm

        comm = MpiComm()
        if comm.instance_index == 0:
            comm.comm = _StopsAfterHeaders(comm.comm)
        comm.gather([np.zeros(3, np.float32)])
        raise SystemExit("an exchange went through")
    if case in ("early_exit_caught", "barrier"):
        import popdist

        popdist.init()
        from xl.runtime.mpi import CommMismatchError, MpiComm

        comm = MpiComm()
        comm.barrier()
        if case == "barrier":
            # instance 0 at a barrier, instance 1 at an exchange of arrays: both stop
            if comm.instance_index == 0:
                comm.barrier()
            else:
                comm.gather([np.zeros(3, np.float32)])
            raise SystemExit("a barrier met an exchange of arrays")
        # instance 0 catches the error of the exchange instance 1 never makes, then tries
        # another: an error at once (nobody is left to exchange with), and both end normally
        if comm.instance_index == 0:
            for attempt in ("first", "second"):
                try:
                    comm.gather([np.zeros(3, np.float32)])
                except CommMismatchError as e:
                    print(f"{attempt}: {e}", flush=True)
        return
    values = popdist_values()
    results: dict[str, Any] = {f"popdist.{k}": v for k, v in values.items()}
    results.update({f"collective.{k}": v for k, v in run_collectives("popdist").items()})
    results.update({f"train.{k}": v for k, v in run_training("popdist").items()})
    np.savez(out_dir / f"instance{values['instance_index']}.npz", **results)


if __name__ == "__main__":
    main(sys.argv)
