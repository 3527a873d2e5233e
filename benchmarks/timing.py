"""Timing shared by the benchmarks: implementations timed in alternating chunks."""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

SETTLE_S = 0.25
"""Pause before each chunk: idle thread pools spin-wait for a while after their last call
(OpenBLAS's workers for up to ~0.1 s, OpenMP's and XLA's for less); without the pause the
previous chunk's library keeps cores busy while the next one is timed."""


def alternate(
    impls: dict[str, Callable[[], object]], rounds: int, target_s: float, settle_s: float = SETTLE_S
) -> dict[str, dict]:
    """Median seconds per call of each impl, timed in alternating chunks, each after a pause of
    `settle_s` (and the median process CPU time / wall time of its chunks: how many cores it
    kept busy)."""
    chunk: dict[str, int] = {}
    for name, f in impls.items():  # warm up, size the chunks
        for _ in range(3):
            f()
        t = time.perf_counter()
        f()
        dt = max(time.perf_counter() - t, 1e-6)
        chunk[name] = max(1, int(target_s / dt))
    samples: dict[str, list[float]] = {n: [] for n in impls}
    cpu: dict[str, list[float]] = {n: [] for n in impls}  # process CPU time / wall time per chunk
    names = list(impls)
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                f, k = impls[name], chunk[name]
                time.sleep(settle_s)
                c = time.process_time()
                t = time.perf_counter()
                for _ in range(k):
                    f()
                wall = time.perf_counter() - t
                samples[name].append(wall / k)
                cpu[name].append((time.process_time() - c) / wall)
    finally:
        if gc_was:
            gc.enable()
    return {
        n: {
            "median_s": statistics.median(s),
            "min_s": min(s),
            "iqr_s": (np.percentile(s, 75) - np.percentile(s, 25)).item(),
            "chunks": len(s),
            "steps_per_chunk": chunk[n],
            "cpu_per_wall": statistics.median(cpu[n]),
        }
        for n, s in samples.items()
    }


def pin_jax_threads(n: int) -> None:
    """Environment for XLA's CPU client to use `n` threads; must run before jax is imported."""
    if "jax" in sys.modules:
        raise RuntimeError("pin_jax_threads: jax is already imported; its thread pool is sized")
    os.environ["NPROC"] = str(n)
    flags = os.environ.get("XLA_FLAGS", "").replace("--xla_cpu_multi_thread_eigen=false", "").split()
    if n == 1:
        flags.append("--xla_cpu_multi_thread_eigen=false")
    os.environ["XLA_FLAGS"] = " ".join(flags)
