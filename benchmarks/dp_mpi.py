"""Data-parallel MNIST training throughput: 2 MPI processes vs 2 replicas simulated in one process.

    python benchmarks/dp_mpi.py                 # both measurements, printed as a table row
    python benchmarks/run.py --only data_parallel_mpi

The program is `examples/mnist_data_parallel.py`'s training step (2 replicas, gradient
accumulation 4, micro batch 8: 64 images per step; accumulated gradients all-reduced
(mean), Adam). It runs as a worker process (this file with `--worker`) either alone (2
simulated replicas, `LocalComm`) or under `mpirun -n 2` (one replica per process,
`MpiComm`), every process with one BLAS thread. A worker compiles, warms up, then times
chunks of steps between barriers (the slowest instance counts) and reports the median
time per step; both kinds of worker run alternately. Both train on the same batches from
the same weights, so their final weights must be equal bit for bit (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
GLOBAL_BATCH = 64  # 8 x 4 x 2


def worker(chunks: int, steps: int, warmup: int) -> dict:
    """Time the training step in this process (under mpirun: one instance of the launch)."""
    sys.path.insert(0, str(EXAMPLES))
    import hashlib

    import mnist_data_parallel as dp
    import numpy as np
    from mnist_data import batches, load_mnist

    import popdist

    opts = dp.parse_args(["--device", "cpu"])
    popdist.init()
    np.random.seed(opts.seed)
    train_x, train_y, _, _ = load_mnist()
    data = list(batches(train_x, train_y, GLOBAL_BATCH, shuffle=True, seed=opts.seed))
    session, (img_s, lab_s), variables, _ = dp.train_program(opts)
    ir = session.ir
    feeds = [
        {img_s: dp.local_share(x, ir, 8), lab_s: dp.local_share(y.astype(np.int32), ir, 8)}
        for x, y in data[: warmup + chunks * steps]
    ]
    comm = None
    if popdist.getNumInstances() > 1:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    per_step = []
    with session:
        for f in feeds[:warmup]:
            session.run(f)
        k = warmup
        for _ in range(chunks):
            if comm is not None:
                comm.Barrier()
            t = time.perf_counter()
            for f in feeds[k : k + steps]:
                session.run(f)
            if comm is not None:
                comm.Barrier()
            per_step.append((time.perf_counter() - t) / steps)
            k += steps
        weights = session.get_tensors_data(variables.tensors)
    digest = hashlib.sha256()
    for _name, t in sorted(variables.named_tensors.items()):
        digest.update(np.ascontiguousarray(weights[t]).tobytes())
    return {
        "instances": popdist.getNumInstances(),
        "replicas": ir.replication_factor,
        "step_s": per_step,
        "median_step_s": statistics.median(per_step),
        "weights_sha256": digest.hexdigest(),
    }


def _run_worker(mpi: bool, chunks: int, steps: int, warmup: int, timeout: float = 600) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "POPDIST_"))}
    env["OPENBLAS_NUM_THREADS"] = "1"
    env["MPIEXEC_TIMEOUT"] = str(int(timeout))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
           "--chunks", str(chunks), "--steps", str(steps), "--warmup", str(warmup)]  # fmt: skip
    if mpi:
        mpirun = Path(sys.executable).parent / "mpirun"
        cmd = [str(mpirun) if mpirun.exists() else "mpirun", "-n", "2", *cmd]
    proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout + 30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])


def bench_data_parallel_mpi(rounds: int = 2, chunks: int = 3, steps: int = 8, warmup: int = 2) -> dict:
    """Median step time of 2 simulated replicas (1 process) and of 2 MPI processes, measured
    alternately `rounds` times each; `speedup` = simulated / MPI step time (target >= 1.7)."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return {"skipped": "mpi4py not installed (pip install -e '.[mpi]')"}
    sim, mpi = [], []
    for _ in range(rounds):
        sim.append(_run_worker(False, chunks, steps, warmup))
        mpi.append(_run_worker(True, chunks, steps, warmup))
    sim_s = statistics.median(s for r in sim for s in r["step_s"])
    mpi_s = statistics.median(s for r in mpi for s in r["step_s"])
    same = {r["weights_sha256"] for r in sim + mpi}
    return {
        "global_batch": GLOBAL_BATCH,
        "simulated_step_s": sim_s,
        "mpi_step_s": mpi_s,
        "simulated_samples_per_s": GLOBAL_BATCH / sim_s,
        "mpi_samples_per_s": GLOBAL_BATCH / mpi_s,
        "speedup": sim_s / mpi_s,
        "same_weights": len(same) == 1,
        "runs": {"simulated": sim, "mpi": mpi},
    }


def report_lines(r: dict) -> list[str]:
    """The table of `bench_data_parallel_mpi`'s result, for benchmarks/run.py."""
    if "skipped" in r:
        return ["", f"data-parallel MNIST over MPI: skipped ({r['skipped']})"]
    return [
        "",
        "| data-parallel MNIST training (R=2, GA 4, micro batch 8, Adam), 1 BLAS thread per process "
        "| ms/step | samples/s | speedup |",
        "|---|---|---|---|",
        f"| 1 process, 2 simulated replicas | {r['simulated_step_s'] * 1e3:.1f} | "
        f"{r['simulated_samples_per_s']:.0f} | 1.00x |",
        f"| 2 MPI processes (mpirun -n 2), 1 replica each | {r['mpi_step_s'] * 1e3:.1f} | "
        f"{r['mpi_samples_per_s']:.0f} | **{r['speedup']:.2f}x** (target >= 1.7x) |",
        f"\nsame trained weights in both (bit for bit): {r['same_weights']}",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--worker", action="store_true", help="time the step in this process (internal)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    if args.worker:
        result = worker(args.chunks, args.steps, args.warmup)
        import popdist

        if popdist.getInstanceIndex() == 0:
            print(json.dumps(result), flush=True)
        return
    r = bench_data_parallel_mpi(args.rounds, args.chunks, args.steps, args.warmup)
    print("\n".join(report_lines(r)))


if __name__ == "__main__":
    main()
