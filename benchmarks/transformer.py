"""Transformer training steps: xl against PyTorch eager, torch.compile and JAX jit.

    python benchmarks/transformer.py                      # every row at 1 and 2 threads
    python benchmarks/transformer.py --quick --only gpt_h64_t64 --threads 1
    python benchmarks/transformer.py --profile            # and xl's time per op type of the GPT step

Rows (each also with dropout 0.1, `*_dropout`):
  gpt_h64_t64     examples/gpt_char.py at its default size: batch 16, context 64, hidden 64,
                  4 heads, 2 blocks, vocabulary 96; loss, gradients and an Adam step
  gpt_h256_t128   the same model at hidden 256, context 128
  bert_layer      a BERT-base-shaped encoder layer (hidden 768, 12 heads, ffn 3072, gelu-erf,
                  post-norm) at batch 2, sequence 128: forward, backward (every weight's
                  gradient) and an SGD step, loss the mean squared error against a target

Columns: xl (`popxl.Session.run`), PyTorch eager, torch.compile (the model's forward and
backward compiled by the default inductor backend), both with PyTorch's fused AdamW / foreach
SGD run eagerly, and JAX (`jax.jit` of the whole step, update included). Every implementation starts from xl's
initial weights and is fed the same batches; before anything is timed, each one's first
step must give xl's first loss to 1e-4 relative (with dropout, the reference is fed the
masks xl's dropout drew at that step; afterwards every library draws its own).

Threads: each thread count runs in its own process, and in it every implementation is timed
alternately in chunks (`timing.alternate`, as benchmarks/run.py). NumPy's BLAS (threadpoolctl)
and torch (`set_num_threads`) are pinned to N threads. JAX's CPU client sizes its thread pool
when it starts, from the environment variable NPROC (which jaxlib reads in place of the core
count), so the process gets NPROC=N before jax is imported, and for N = 1
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false; `--xla_cpu_multi_thread_eigen=false` alone, or
with `intra_op_parallelism_threads=1`, leaves XLA's work on several threads in this jaxlib
(measured: 4 threads busy on 2 cores). The report gives each column's process CPU time / wall
time and the number of threads it kept busy (>= 10 % of the wall time, from
/proc/self/task), which shows the pinning holds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FIRST_LOSS_RTOL = 1e-4
COLUMNS = ("xl", "eager", "compile", "jax")
COLUMN_TITLES = {"xl": "xl", "eager": "PyTorch eager", "compile": "torch.compile", "jax": "JAX jit"}


# -- rows -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    name: str
    model: str  # "gpt" or "bert"
    hidden: int
    seq_len: int
    dropout: float

    def build(self, profile: bool = False):
        """(xl program, batches, {column: builder of the reference step or None})."""
        import gpt_char
        import transformer_models as tm
        import transformer_refs as tr

        if self.model == "gpt":
            cfg = tm.gpt_config(self.hidden, self.seq_len, self.dropout)
            prog = tm.gpt_program(cfg, profile)
            init, mask = prog.init, gpt_char.MASK_VALUE
            refs: dict[str, Callable[[], Callable[..., float] | None]] = {
                "eager": lambda: tr.torch_gpt(cfg, init, mask),
                "compile": lambda: tr.torch_gpt(cfg, init, mask, compiled=True),
                "jax": lambda: tr.jax_gpt(cfg, init, mask),
            }
            return prog, tm.gpt_batches(cfg), refs
        bcfg = tm.BertConfig(hidden=self.hidden, seq_len=self.seq_len, dropout=self.dropout)
        prog = tm.bert_program(bcfg, profile)
        init = prog.init
        refs = {
            "eager": lambda: tr.torch_bert(bcfg, init),
            "compile": lambda: tr.torch_bert(bcfg, init, compiled=True),
            "jax": lambda: tr.jax_bert(bcfg, init),
        }
        return prog, tm.bert_batches(bcfg), refs


def _rows() -> dict[str, Row]:
    base = [Row("gpt_h64_t64", "gpt", 64, 64, 0.0), Row("gpt_h256_t128", "gpt", 256, 128, 0.0)]
    base.append(Row("bert_layer", "bert", 768, 128, 0.0))
    rows = {}
    for r in base:
        rows[r.name] = r
        rows[r.name + "_dropout"] = Row(r.name + "_dropout", r.model, r.hidden, r.seq_len, 0.1)
    return rows


ROWS = _rows()


# -- measuring ----------------------------------------------------------------------------------
def _thread_ticks() -> dict[str, int]:
    """CPU clock ticks (user + system) of each thread of this process (Linux); {} elsewhere."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[tid] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return out


def busy_threads(f: Callable[[], object], seconds: float = 1.0) -> dict[str, object]:
    """Run `f` for about `seconds`: how many threads each spent >= 10 % of the wall time on a
    CPU, and the process CPU time / wall time."""
    before, c, t = _thread_ticks(), time.process_time(), time.perf_counter()
    n = 0
    while n < 2 or time.perf_counter() - t < seconds:
        f()
        n += 1
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    after = _thread_ticks()
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    shares = sorted(((after[k] - before.get(k, 0)) / hz / wall for k in after), reverse=True)
    return {
        "threads_busy": sum(1 for s in shares if s >= 0.1) if shares else None,
        "thread_shares": [round(s, 2) for s in shares[:4]],
        "cpu_per_wall": cpu / wall,
    }


class Cycle:
    def __init__(self, items: list):
        self.items, self.i = items, 0

    def next(self):
        item = self.items[self.i]
        self.i = (self.i + 1) % len(self.items)
        return item


def bench_row(row: Row, rounds: int, target_s: float) -> dict:
    from timing import alternate

    t0 = time.perf_counter()
    prog, batches, refs = row.build()
    out: dict = {"xl_compile_s": time.perf_counter() - t0, "first_loss_rel_diff": {}, "first_step_s": {}}
    masks = prog.first_step_masks() if prog.first_step_masks is not None else None
    session = prog.session
    session.__enter__()
    try:
        xl_first = prog.run(batches[0])
        out["first_loss"] = xl_first
        feeds = Cycle([prog.feed(b) for b in batches])
        impls: dict[str, Callable[[], object]] = {"xl": lambda: session.run(feeds.next())}
        for name, make in refs.items():
            t = time.perf_counter()
            step = make()
            if step is None:
                continue
            first = step(batches[0], masks)
            out["first_step_s"][name] = time.perf_counter() - t  # torch.compile: includes compiling
            rel = abs(first - xl_first) / abs(xl_first)
            if not rel <= FIRST_LOSS_RTOL:
                raise AssertionError(
                    f"{row.name}: the first loss of {COLUMN_TITLES[name]} is {first!r}, xl's {xl_first!r}: "
                    f"{rel:.2e} relative, more than {FIRST_LOSS_RTOL:g}: the two do not compute the same step"
                )
            out["first_loss_rel_diff"][name] = rel
            c = Cycle(batches)
            impls[name] = lambda step=step, c=c: step(c.next())
        out["impls"] = alternate(impls, rounds, target_s)
        out["busy"] = {name: busy_threads(f) for name, f in impls.items()}
    finally:
        session.__exit__(None, None, None)
    return out


def profile_gpt(dropout: float, steps: int) -> dict:
    """xl's time per op type over `steps` steps of the default GPT step (profiling on)."""
    row = Row("gpt_h64_t64", "gpt", 64, 64, dropout)
    prog, batches, _ = row.build(profile=True)
    session = prog.session
    feeds = Cycle([prog.feed(b) for b in batches])
    with session:
        for _ in range(3):
            session.run(feeds.next())
        t = time.perf_counter()
        with session.profile() as prof:
            for _ in range(steps):
                session.run(feeds.next())
        wall = time.perf_counter() - t
    table = prof.key_averages(group_by="type")
    return {
        "dropout": dropout,
        "steps": steps,
        "step_ms": wall / steps * 1e3,
        "kernels_per_step": sum(r.count for r in table) / steps,
        "kernel_ms_per_step": table.total_ns / steps / 1e6,
        "types": [
            {
                "type": r.key,
                "calls_per_step": r.count / steps,
                "us_per_call": r.mean_ns / 1e3,
                "ms_per_step": r.total_ns / steps / 1e6,
            }
            for r in table
        ],
    }


def run_here(threads: int, names: list[str], quick: bool, profile: bool) -> dict:
    """Every row in this process at `threads` threads (jax not imported yet)."""
    from timing import pin_jax_threads

    pin_jax_threads(threads)
    from run import machine, set_blas_threads

    set_blas_threads(threads)
    results: dict = {"threads": threads, "machine": machine(), "rows": {}}
    for name in names:
        row = ROWS[name]
        big = row.model == "bert" or row.hidden > 64
        rounds = (3 if big else 5) if quick else (7 if big else 15)
        t = time.perf_counter()
        results["rows"][name] = bench_row(row, rounds, 0.1 if quick else 0.3)
        print(f"[{threads} thread(s), {name}: {time.perf_counter() - t:.0f} s]", file=sys.stderr, flush=True)
    if profile:
        results["profile"] = [profile_gpt(p, 10 if quick else 30) for p in (0.0, 0.1)]
    results["loadavg_end"] = os.getloadavg()
    return results


# -- report -----------------------------------------------------------------------------------
def _ms(r: dict, col: str) -> str:
    return f"{r['impls'][col]['median_s'] * 1e3:.1f}" if col in r["impls"] else "n/a"


def _ratio(r: dict, col: str) -> str:
    if col not in r["impls"]:
        return "n/a"
    return f"{r['impls'][col]['median_s'] / r['impls']['xl']['median_s']:.2f}x"


def report(runs: list[dict]) -> str:
    lines = []
    m = runs[0]["machine"]
    lines.append(
        f"machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}, NumPy {m['numpy']}"
        + "".join(f", {k} {m[k]}" for k in ("xdsl", "torch", "jax") if k in m)
        + (f"; NumPy's BLAS: {m['blas']}" if "blas" in m else "")
    )
    for run in runs:
        lines.append(
            f"{run['threads']} thread(s): load average {run['machine'].get('loadavg', ('?',))[0]:.2f} at the start, "
            f"{run['loadavg_end'][0]:.2f} at the end"
        )
    lines.append("")
    lines.append(
        "| row | threads | xl ms/step | PyTorch eager ms | torch.compile ms | JAX jit ms | eager / xl | compile / xl "
        "| JAX / xl |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for name in ROWS:
        for run in runs:
            r = run["rows"].get(name)
            if r is None:
                continue
            lines.append(
                f"| {name} | {run['threads']} | {_ms(r, 'xl')} | {_ms(r, 'eager')} | {_ms(r, 'compile')} | "
                f"{_ms(r, 'jax')} | {_ratio(r, 'eager')} | {_ratio(r, 'compile')} | {_ratio(r, 'jax')} |"
            )
    lines.append("")
    lines.append("Ratios: the reference's time / xl's (> 1: xl is faster). Median of alternating chunks.")
    lines.append("")
    lines.append(
        "| row | threads | busy threads (CPU / wall): xl | eager | compile | JAX | first-loss rel. diff (max) |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for name in ROWS:
        for run in runs:
            r = run["rows"].get(name)
            if r is None:
                continue
            cells = []
            for col in COLUMNS:
                b = r["busy"].get(col)
                cells.append("n/a" if b is None else f"{b['threads_busy']} ({b['cpu_per_wall']:.2f})")
            diff = max(r["first_loss_rel_diff"].values(), default=0.0)
            lines.append(f"| {name} | {run['threads']} | " + " | ".join(cells) + f" | {diff:.1e} |")
    for run in runs:
        for p in run.get("profile", []):
            lines.append("")
            lines.append(
                f"xl profile, gpt_h64_t64 dropout {p['dropout']}, {run['threads']} thread(s): "
                f"{p['step_ms']:.1f} ms/step profiled, {p['kernels_per_step']:.0f} kernels and "
                f"{p['kernel_ms_per_step']:.1f} ms in kernels per step"
            )
            lines.append("")
            lines.append("| op type | calls/step | us/call | ms/step | % of kernel time |")
            lines.append("|---|---|---|---|---|")
            for t in p["types"][:15]:
                lines.append(
                    f"| {t['type']} | {t['calls_per_step']:.0f} | {t['us_per_call']:.1f} | {t['ms_per_step']:.2f} | "
                    f"{100 * t['ms_per_step'] / p['kernel_ms_per_step']:.1f} |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description="xl transformer training steps against PyTorch and JAX")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts, each in its own process")
    ap.add_argument("--only", help="comma-separated rows: " + ", ".join(ROWS))
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--profile", action="store_true", help="xl's time per op type of the default GPT step")
    ap.add_argument("--json", default=str(HERE / "results_transformer.json"), help="where to write results")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one thread count, in this process
    args = ap.parse_args(argv)
    names = list(ROWS) if not args.only else [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        ap.error(f"unknown rows {unknown}; rows: {', '.join(ROWS)}")
    try:
        threads = [int(t) for t in args.threads.split(",") if t]
    except ValueError:
        ap.error(f"--threads takes comma-separated integers, got {args.threads!r}")
    if not threads or min(threads) < 1:
        ap.error(f"--threads: at least one count, each >= 1, got {args.threads!r}")
    if args.child:
        result = run_here(threads[0], names, args.quick, args.profile)
        Path(args.json).write_text(json.dumps(result, indent=2, default=float))
        return [result]
    runs = []
    for n in threads:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "run.json"
            cmd = [sys.executable, __file__, "--child", "--threads", str(n), "--only", ",".join(names)]
            cmd += ["--json", str(path)] + (["--quick"] if args.quick else [])
            cmd += ["--profile"] if args.profile and n == threads[0] else []
            proc = subprocess.run(cmd)
            if proc.returncode != 0:
                raise SystemExit(f"transformer benchmark: the {n}-thread run failed (exit {proc.returncode})")
            runs.append(json.loads(path.read_text()))
    text = report(runs)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "table": text}, indent=2, default=float))
    return runs


if __name__ == "__main__":
    main()
