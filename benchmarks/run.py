"""xl benchmarks: runtime speed against hand-written NumPy (and PyTorch / JAX), compile time.

    python benchmarks/run.py                  # everything (~2 min), table + benchmarks/results.json
    python benchmarks/run.py --quick          # fewer repetitions
    python benchmarks/run.py --only train_b8,compile_mnist --json out.json
    python benchmarks/run.py --threads 1      # pin BLAS (NumPy's OpenBLAS, torch) to 1 thread

Cases:
  train_b8, train_b128  the seed MNIST training step (Net 784-512-512-512-10, gelu,
                        cross-entropy, SGD with scaled_add_), steady-state steps/s
  infer_b80             inference of the same Net at batch 80
  compile_mnist         building the training IR (incl. autodiff), passes + lowering,
                        rt optimisations, plan creation (best of k runs)
  compile_scaling       the same pipeline on graphs of 100, 1,000, 10,000 ops (best of k)
  data_parallel_mpi     data-parallel MNIST training (examples/mnist_data_parallel.py), 2 MPI
                        processes vs 2 simulated replicas in one process, 1 BLAS thread each
                        (benchmarks/dp_mpi.py; target >= 1.7x)
  pipeline_b5,          seed 003's pipelined MNIST training step (3 stages on 2 virtual IPUs),
  pipeline_b32          micro batch 5 / 32: concurrent IPUs (2 workers x 1 BLAS thread) vs serial
                        with 1 and with 2 BLAS threads (benchmarks/pipeline.py; targets >= 1.6x
                        and >= 1.1x)
  pipeline_balanced     two virtual IPUs with equal independent matmul + tanh chains, concurrent vs
                        serial (1 BLAS thread): the runtime's ceiling (benchmarks/pipeline.py)
  outline_deep          48 identical Linear+gelu layers and a 12x transformer-style block
                        (addons.Module, training step): compile time, generated plan lines
                        and step time without / with automatic outlining (benchmarks/outline.py)
  replicas_b8,          data-parallel training step (gradients all-reduced, mean) with 4
  replicas_b128         simulated replicas vs 1 replica at the same per-replica batch (8 / 128):
                        ratio of step times (target <= 4.4x), the plain 1-replica step and
                        the same ratio for a hand-written NumPy data-parallel step

Every runtime figure is measured alternately with the other implementations in this
process (chunks of steps, rotating order); the reported time is the median per step
over chunks. `ratio` = NumPy time / xl time (> 1: xl is faster). xl runs through the
user API (`popxl.Session.run`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

# The sibling benchmark modules, also when this file is imported rather than run as a script
# (ruff accepts imports after a `sys.path` change, not after other statements).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dp_mpi import bench_data_parallel_mpi
from dp_mpi import report_lines as dp_mpi_report
from models import chain_ir, count_ops, infer_ir, module_of, train_ir
from outline import bench_deep, deep_report
from pipeline import bench_balanced, bench_pipeline
from pipeline import report_lines as pipeline_report
from references import NumpyMLP, jax_mlp, torch_mlp
from replicas import NumpyDataParallel, dp_train_ir
from timing import alternate, pin_jax_threads

import popxl

HERE = Path(__file__).resolve().parent
LR = 0.05


# ------------------------------------------------------------------------------------
# Machine and timing helpers
# ------------------------------------------------------------------------------------


def set_blas_threads(n: int) -> None:
    """Pin NumPy's BLAS (threadpoolctl: OpenBLAS, MKL, ...) and torch to `n` threads."""
    threadpool_limits(n, user_api="blas")
    try:
        import torch

        torch.set_num_threads(n)
    except Exception:
        pass


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
    }
    try:
        from importlib.metadata import version

        import xdsl  # noqa: F401

        info["xdsl"] = version("xdsl")
    except Exception:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except Exception:
        pass
    try:
        import jax

        info["jax"] = jax.__version__
    except Exception:
        pass
    try:
        info["loadavg"] = os.getloadavg()
    except OSError:
        pass
    info["blas"] = numpy_blas()
    return info


def numpy_blas() -> str:
    """NumPy's BLAS and the kernels it runs, e.g. "openblas 0.3.31 SkylakeX kernels".

    OpenBLAS picks its kernels for the CPU when it loads unless OPENBLAS_CORETYPE names a
    core; a machine that sets it (some do, for older OpenBLAS builds) runs every NumPy product
    on those kernels, so the variable is reported with the figures.
    """
    try:
        from threadpoolctl import threadpool_info

        libs = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception:
        return "unknown"
    if not libs:
        return "unknown"
    lib = libs[0]
    text = f"{lib.get('internal_api')} {lib.get('version') or ''} {lib.get('architecture') or ''} kernels"
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return " ".join(text.split()) + (f" (OPENBLAS_CORETYPE={forced})" if forced else "")


def mnist_batches(batch: int, count: int = 64) -> list[tuple[np.ndarray, np.ndarray]]:
    """Real MNIST digits (bundled 10k) when available, else random data."""
    path = HERE.parent / "examples" / "data" / "mnist10k.npz"
    rng = np.random.default_rng(0)
    if path.exists():
        d = np.load(path)
        x = ((d["images"].astype(np.float32) / 255.0 - 0.1307) / 0.3081).astype(np.float32)
        y = d["labels"].astype(np.int32)
    else:
        x = rng.normal(size=(batch * count, 28, 28)).astype(np.float32)
        y = rng.integers(0, 10, batch * count).astype(np.int32)
    idx = rng.permutation(len(x))[: batch * count]
    return [
        (
            np.ascontiguousarray(x[idx[i * batch : (i + 1) * batch]]),
            np.ascontiguousarray(y[idx[i * batch : (i + 1) * batch]]),
        )
        for i in range(count)
    ]


def weights_of(session: popxl.Session, variables) -> list[tuple[np.ndarray, np.ndarray]]:
    data = session.get_tensors_data(variables.tensors)
    named = {name: data[t] for name, t in variables.named_tensors.items()}
    return [(named[f"fc{i}.weight"].copy(), named[f"fc{i}.bias"].copy()) for i in range(1, 5)]


class Cycle:
    """Feeds batches round-robin."""

    def __init__(self, batches):
        self.batches = batches
        self.i = 0

    def next(self):
        b = self.batches[self.i]
        self.i = (self.i + 1) % len(self.batches)
        return b


# ------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------


def bench_train(batch: int, rounds: int, target_s: float) -> dict:
    np.random.seed(42)
    ir, (img_s, lab_s), variables, loss_s = train_ir(batch, LR)
    session = popxl.Session(ir, "cpu")
    weights = weights_of(session, variables)
    batches = mnist_batches(batch)

    # Correctness: first steps from the same weights and data.
    ref = NumpyMLP(weights, LR)
    check = []
    with session:
        for x, y in batches[:3]:
            xl_loss = float(session.run({img_s: x, lab_s: y})[loss_s])
            check.append(abs(xl_loss - ref.train_step(x, y)))
        # back to the initial weights, as every other implementation starts from them
        initial: dict[popxl.Variable, np.ndarray] = {}
        for name, t in variables.named_tensors.items():
            assert isinstance(t, popxl.Variable), f"{name} is not a variable"
            initial[t] = _named(weights)[name]
        session.write_variables_data(initial)

    impls: dict[str, Callable[[], object]] = {}
    cx = Cycle(batches)

    session.__enter__()

    def xl_step():
        x, y = cx.next()
        return session.run({img_s: x, lab_s: y})

    impls["xl"] = xl_step
    np_ref, np_fast = NumpyMLP(weights, LR), NumpyMLP(weights, LR, pow3=False)
    cn, cf = Cycle(batches), Cycle(batches)
    impls["numpy"] = lambda: np_ref.train_step(*cn.next())
    impls["numpy_xxx"] = lambda: np_fast.train_step(*cf.next())
    t = torch_mlp(weights, LR)
    if t is not None:
        ct = Cycle(batches)
        impls["torch"] = lambda: t[0](*ct.next())
    j = jax_mlp(weights, LR)
    if j is not None:
        cj = Cycle(batches)
        impls["jax"] = lambda: j[0](*cj.next())
    try:
        res = alternate(impls, rounds, target_s)
    finally:
        session.__exit__(None, None, None)
    return {"batch": batch, "impls": res, "first_steps_max_abs_loss_diff": max(check)}


def _named(weights) -> dict[str, np.ndarray]:
    named = {}
    for i, (w, b) in enumerate(weights, start=1):
        named[f"fc{i}.weight"], named[f"fc{i}.bias"] = w, b
    return named


def bench_infer(batch: int, rounds: int, target_s: float) -> dict:
    np.random.seed(42)
    ir, in_s, variables, out_s = infer_ir(batch)
    session = popxl.Session(ir, "cpu")
    weights = weights_of(session, variables)
    batches = mnist_batches(batch, 16)
    ref = NumpyMLP(weights, LR)
    fast = NumpyMLP(weights, LR, pow3=False)
    with session:
        diff = max(float(np.abs(session.run({in_s: x})[out_s] - ref.forward(x)).max()) for x, _ in batches[:3])
    session.__enter__()
    cx, cn, cf = Cycle(batches), Cycle(batches), Cycle(batches)
    impls: dict[str, Callable[[], object]] = {
        "xl": lambda: session.run({in_s: cx.next()[0]}),
        "numpy": lambda: ref.forward(cn.next()[0]),
        "numpy_xxx": lambda: fast.forward(cf.next()[0]),
    }
    t = torch_mlp(weights, LR)
    if t is not None:
        ct = Cycle(batches)
        impls["torch"] = lambda: t[1](ct.next()[0])
    j = jax_mlp(weights, LR)
    if j is not None:
        cj = Cycle(batches)
        impls["jax"] = lambda: j[1](cj.next()[0])
    try:
        res = alternate(impls, rounds, target_s)
    finally:
        session.__exit__(None, None, None)
    return {"batch": batch, "impls": res, "max_abs_output_diff": diff}


def bench_replicas(batch: int, replicas: int, rounds: int, target_s: float) -> dict:
    """Data-parallel step with `replicas` simulated replicas vs 1, same per-replica batch."""
    impls: dict[str, Callable[[], object]] = {}
    sessions = []
    check = {}
    weights = None
    for r in (1, replicas):
        np.random.seed(42)
        ir, (img_s, lab_s), variables, loss_s = dp_train_ir(r, batch, LR)
        session = popxl.Session(ir, "cpu")
        if weights is None:
            weights = weights_of(session, variables)
        batches = [
            (x.reshape(r, batch, 28, 28), y.reshape(r, batch)) if r > 1 else (x, y)
            for x, y in mnist_batches(batch * r, 16)
        ]
        # correctness: the first steps against the hand-written data-parallel step
        ref = NumpyDataParallel(weights, r, LR)
        with session:
            diffs = []
            for x, y in batches[:3]:
                got = np.asarray(session.run({img_s: x, lab_s: y})[loss_s]).reshape(-1)
                diffs.append(float(np.abs(got - np.asarray(ref.train_step(x, y))).max()))
        check[f"r{r}_first_steps_max_abs_loss_diff"] = max(diffs)
        session.__enter__()
        sessions.append(session)
        c = Cycle([{img_s: x, lab_s: y} for x, y in batches])
        impls[f"xl_r{r}"] = lambda s=session, c=c: s.run(c.next())
        np_dp, cn = NumpyDataParallel(weights, r, LR), Cycle(batches)
        impls[f"numpy_r{r}"] = lambda m=np_dp, cn=cn: m.train_step(*cn.next())
    # the plain training step (no collective), as in train_b{batch}
    np.random.seed(42)
    ir, (img_s, lab_s), _, _ = train_ir(batch, LR)
    plain = popxl.Session(ir, "cpu")
    plain.__enter__()
    sessions.append(plain)
    cp = Cycle([{img_s: x, lab_s: y} for x, y in mnist_batches(batch, 16)])
    impls["xl_plain"] = lambda: plain.run(cp.next())
    try:
        res = alternate(impls, rounds, target_s)
    finally:
        for s in sessions:
            s.__exit__(None, None, None)
    return {"batch": batch, "replicas": replicas, "impls": res, **check}


def compile_phases(build: Callable[[], popxl.Ir]) -> dict[str, float]:
    """Seconds for: build IR, passes + lowering, rt optimisations, plan creation.

    The phases of `xl.compiler.compile_module` (which a `popxl.Session` calls), timed apart.
    """
    from xl.compiler import DEFAULT_PIPELINE, lower
    from xl.dialects import rt
    from xl.passes.rt_optimize import optimize_program
    from xl.runtime.executable import compile_program, gc_paused

    t0 = time.perf_counter()
    ir = build()
    t1 = time.perf_counter()
    low = lower(module_of(ir), DEFAULT_PIPELINE)
    t2 = time.perf_counter()
    (program,) = list(low.ops)
    assert isinstance(program, rt.ProgramOp), f"lowering produced {program.name}, not rt.program"
    with gc_paused():
        optimize_program(program)
    t3 = time.perf_counter()
    compile_program(program, optimize=True)
    t4 = time.perf_counter()
    return {
        "build_s": t1 - t0,
        "passes_lowering_s": t2 - t1,
        "rt_optimize_s": t3 - t2,
        "plan_s": t4 - t3,
        "total_s": t4 - t0,
        "ops": count_ops(module_of(ir)),
    }


def _best_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    """The fastest run (best of k: compile times only get slower from noise)."""
    return min(runs, key=lambda r: r["total_s"])


def bench_compile_mnist(repeats: int) -> dict:
    runs = []
    for _ in range(repeats):
        np.random.seed(0)
        gc.collect()
        runs.append(compile_phases(lambda: train_ir(8, LR)[0]))
    return {"repeats": repeats, **_best_phases(runs)}


def bench_compile_scaling(sizes: list[int], repeats: int) -> dict:
    out = {}
    for n in sizes:
        runs = []
        for _ in range(repeats):
            gc.collect()
            runs.append(compile_phases(partial(chain_ir, n)))
        out[str(n)] = _best_phases(runs)
    return out


# ------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------

COLS = ["xl", "numpy", "numpy_xxx", "torch", "jax"]


def fmt_ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.3f}"


def median_s(impls: dict, name: str) -> float:
    """The median step time of implementation `name` (always measured)."""
    return impls[name]["median_s"]


def optional_median_s(impls: dict, name: str) -> float | None:
    """The median step time of an optional implementation (torch, jax); None when not installed."""
    return impls[name]["median_s"] if name in impls else None


def report(results: dict) -> str:
    lines = []
    m = results["machine"]
    lines.append(
        f"machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}, NumPy {m['numpy']}"
        + (f", xDSL {m['xdsl']}" if "xdsl" in m else "")
        + (f", torch {m['torch']}" if "torch" in m else "")
        + (f"; NumPy's BLAS: {m['blas']}" if "blas" in m else "")
        + (f"; threads (BLAS, torch, JAX): {results['threads']}" if results.get("threads") else "; threads: defaults")
    )
    rt_cases = [k for k in ("train_b8", "train_b128", "infer_b80") if k in results]
    if rt_cases:
        lines.append("")
        lines.append(
            "| case | xl ms/step | xl steps/s | NumPy ms | ratio NumPy/xl | NumPy x*x*x ms | ratio "
            "| torch ms | jax ms |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for k in rt_cases:
            r = results[k]["impls"]
            xl, numpy, numpy_xxx = median_s(r, "xl"), median_s(r, "numpy"), median_s(r, "numpy_xxx")
            lines.append(
                f"| {k} | {fmt_ms(xl)} | {1 / xl:.0f} | {fmt_ms(numpy)} | **{numpy / xl:.2f}x** | "
                f"{fmt_ms(numpy_xxx)} | {numpy_xxx / xl:.2f}x | {fmt_ms(optional_median_s(r, 'torch'))} | "
                f"{fmt_ms(optional_median_s(r, 'jax'))} |"
            )
    rep_cases = [k for k in results if k.startswith("replicas_b")]
    if rep_cases:
        lines.append("")
        lines.append(
            "| case | xl 1 replica ms | xl R replicas ms | **ratio** | xl plain step ms | ratio to plain | "
            "NumPy 1 replica ms | NumPy R replicas ms | NumPy ratio |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for k in rep_cases:
            r = results[k]["impls"]
            n = results[k]["replicas"]
            xl_1, xl_n, xl_plain = median_s(r, "xl_r1"), median_s(r, f"xl_r{n}"), median_s(r, "xl_plain")
            np_1, np_n = median_s(r, "numpy_r1"), median_s(r, f"numpy_r{n}")
            lines.append(
                f"| data-parallel step, batch {results[k]['batch']} per replica, R={n} | {fmt_ms(xl_1)} | "
                f"{fmt_ms(xl_n)} | **{xl_n / xl_1:.2f}x** | {fmt_ms(xl_plain)} | "
                f"{xl_n / xl_plain:.2f}x | {fmt_ms(np_1)} | {fmt_ms(np_n)} | "
                f"{np_n / np_1:.2f}x |"
            )
    if "data_parallel_mpi" in results:
        lines += dp_mpi_report(results["data_parallel_mpi"])
    if "compile_mnist" in results:
        c = results["compile_mnist"]
        lines.append("")
        lines.append("| compile (MNIST training program) | s |")
        lines.append("|---|---|")
        for k in ("build_s", "passes_lowering_s", "rt_optimize_s", "plan_s", "total_s"):
            lines.append(f"| {k[:-2].replace('_', ' ')} | {c[k]:.3f} |")
    if "compile_scaling" in results:
        s = results["compile_scaling"]
        lines.append("")
        lines.append(
            "| graph ops | build s | passes+lowering s | rt-optimize s | plan s | total s | total / ops (ms) |"
        )
        lines.append("|---|---|---|---|---|---|---|")
        for r in s.values():
            lines.append(
                f"| {int(r['ops'])} | {r['build_s']:.3f} | {r['passes_lowering_s']:.3f} | {r['rt_optimize_s']:.3f} | "
                f"{r['plan_s']:.3f} | {r['total_s']:.3f} | {r['total_s'] / max(r['ops'], 1) * 1e3:.3f} |"
            )
        if "1000" in s and "10000" in s:
            big, small = s["10000"], s["1000"]
            lines.append(
                f"\n10,000 ops / 1,000 ops compile time: {big['total_s'] / small['total_s']:.1f}x "
                f"(compile without building the IR: "
                f"{(big['total_s'] - big['build_s']) / (small['total_s'] - small['build_s']):.1f}x)"
            )
    if "outline_deep" in results:
        lines += deep_report(results["outline_deep"])
    pipelined = {k: v for k, v in results.items() if k.startswith("pipeline_")}
    if pipelined:
        lines += pipeline_report(pipelined)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description="xl benchmarks")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--only", help="comma-separated cases")
    ap.add_argument("--json", default=str(HERE / "results.json"), help="where to write results")
    ap.add_argument("--threads", type=int, help="BLAS, torch and JAX threads (default: each library's default)")
    args = ap.parse_args(argv)
    if args.threads:
        set_blas_threads(args.threads)
        pin_jax_threads(args.threads)  # before jax is imported: XLA sizes its thread pool once
    cases = [
        "train_b8",
        "train_b128",
        "infer_b80",
        "replicas_b8",
        "replicas_b128",
        "data_parallel_mpi",
        "compile_mnist",
        "compile_scaling",
        "outline_deep",
        "pipeline_b5",
        "pipeline_b32",
        "pipeline_balanced",
    ]
    if args.only:
        cases = [c for c in args.only.split(",") if c]
    rounds = 5 if args.quick else 15
    target = 0.05 if args.quick else 0.1
    results: dict = {"machine": machine(), "threads": args.threads, "quick": args.quick}
    for case in cases:
        t = time.perf_counter()
        if case == "train_b8":
            results[case] = bench_train(8, rounds, target)
        elif case == "train_b128":
            results[case] = bench_train(128, rounds, target)
        elif case == "infer_b80":
            results[case] = bench_infer(80, rounds, target)
        elif case == "replicas_b8":
            results[case] = bench_replicas(8, 4, rounds, target)
        elif case == "replicas_b128":
            results[case] = bench_replicas(128, 4, rounds, target)
        elif case == "data_parallel_mpi":  # 2 MPI processes vs 2 simulated replicas (dp_mpi.py)
            results[case] = bench_data_parallel_mpi(rounds=1 if args.quick else 2)
        elif case == "compile_mnist":
            results[case] = bench_compile_mnist(3 if args.quick else 7)
        elif case == "outline_deep":  # automatic outlining on deep models (outline.py)
            results[case] = bench_deep(reps=1 if args.quick else 3, rounds=5 if args.quick else 15)
        elif case in ("pipeline_b5", "pipeline_b32"):  # concurrent virtual IPUs (pipeline.py)
            results[case] = bench_pipeline(int(case[len("pipeline_b") :]), rounds, 3 * target)
        elif case == "pipeline_balanced":  # two IPUs with equal work: the ceiling (pipeline.py)
            results[case] = bench_balanced(rounds=rounds, target_s=3 * target)
        elif case == "compile_scaling":
            results[case] = bench_compile_scaling([100, 1000, 10000], 2 if args.quick else 3)
        else:
            raise SystemExit(f"unknown case {case!r}")
        print(f"[{case}: {time.perf_counter() - t:.1f} s]", file=sys.stderr)
    results["machine"]["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    text = report(results)
    print(text)
    results["table"] = text
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=float))
    return results


if __name__ == "__main__":
    main()
