"""Benchmark of the `outline` pass: pass time, and what outlining changes downstream.

    python benchmarks/outline.py            # all rows
    python benchmarks/outline.py --quick    # fewer repetitions

Programs (built with popxl / popxl.addons, training steps with `addons.autodiff` + SGD):

- `mlp-48`: 48 identical Linear+gelu layers (`addons.Module`), after a first layer of
  another input width;
- `transformer-12`: a transformer-style block (layer-norm-like normalisation from
  mean/sub/mul/sqrt/div, q/k/v projections, softmax attention, output projection,
  residual adds, a gelu MLP) repeated 12 times;
- `mlp-N` for N layers chosen to give about 1,000 and 10,000 ops in all;
- `chain-10000`: 10,000 identical gelu ops in a row (the branch-and-bound worst case) and
  `random-10000`: 10,000 ops wired at random (almost nothing repeats).

For each: ops in the module, outline time (median), graphs created and calls.

The default compile (`deep` rows, `bench_deep`; also a case of benchmarks/run.py): for
`mlp-48` and `transformer-12`, `compile_module` time from the high-level module (best of
`reps`, the two variants compiled alternately: the least disturbed run of the same work),
generated plan source lines and steady-state step time, without outlining
(`compile_module(..., outline=False)`) and with the default compile (automatic outlining,
repeats kept as `rt.func` and one Python function each), step times measured alternately
in chunks (median per step over chunks).

    python benchmarks/outline.py --deep     # only the default-compile rows
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import numpy as np
from xdsl.dialects.builtin import ModuleOp

import popxl
import popxl.ops as ops
import popxl_addons as addons
from xl.compiler import compile_module
from xl.dialects.call import CallOp
from xl.passes.outline import outline
from xl.runtime.executable import Executable

# -- models ---------------------------------------------------------------------------------


class Linear(addons.Module):
    def __init__(self, out_features: int):
        super().__init__()
        self.out_features = out_features

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        w = self.add_variable_input(
            "weight", partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)), x.dtype
        )
        b = self.add_variable_input("bias", partial(np.zeros, (self.out_features,)), x.dtype)
        return x @ w + b


class MLP(addons.Module):
    def __init__(self, layers: int, width: int, classes: int):
        super().__init__()
        self.first = Linear(width)
        self.hidden = [Linear(width) for _ in range(layers)]
        for i, m in enumerate(self.hidden):
            setattr(self, f"fc{i}", m)
        self.head = Linear(classes)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = ops.gelu(self.first(x))
        for m in self.hidden:
            x = ops.gelu(m(x))
        return self.head(x)


def layer_norm(x: popxl.Tensor) -> popxl.Tensor:
    """Layer-norm-like normalisation over the last axis from elementary ops."""
    mu = ops.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = ops.mean(d * d, axis=-1, keepdims=True)
    return d / ops.sqrt(var + 1e-5)


class Block(addons.Module):
    def __init__(self, d: int):
        super().__init__()
        self.d = d
        self.q, self.k, self.v, self.o = (Linear(d) for _ in range(4))
        self.up, self.down = Linear(2 * d), Linear(d)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        h = layer_norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        att = ops.softmax((q @ k.T) * (1.0 / float(np.sqrt(self.d))), axis=-1)
        x = x + self.o(att @ v)
        h = layer_norm(x)
        return x + self.down(ops.gelu(self.up(h)))


class Transformer(addons.Module):
    def __init__(self, blocks: int, d: int, classes: int):
        super().__init__()
        self.embed = Linear(d)
        self.blocks = [Block(d) for _ in range(blocks)]
        for i, b in enumerate(self.blocks):
            setattr(self, f"block{i}", b)
        self.head = Linear(classes)

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def training_module(model: addons.Module, batch: int, features: int, classes: int) -> ModuleOp:
    np.random.seed(0)
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((batch, features), popxl.float32, "x")
        ls = popxl.h2d_stream((batch,), popxl.int32, "labels")
        x, labels = ops.host_load(xs), ops.host_load(ls)
        facts, fwd = model.create_graph(x)
        bwd = addons.autodiff(fwd)
        variables = facts.init()
        info = fwd.bind(variables).call_with_info(x)
        loss, dx = addons.ops.cross_entropy_with_grad(info.outputs[0], labels)
        ops.host_store(popxl.d2h_stream(loss.shape, loss.dtype, "loss"), loss)
        binfo = bwd.call_with_info(dx, args=bwd.grad_graph_info.inputs_dict(info))
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, binfo)
        for t in variables.tensors:
            ops.scaled_add_(t, grads[t], b=-0.01)
    return ir._module


def _parse(text: str) -> ModuleOp:
    from xdsl.parser import Parser

    from xl.tools.context import xl_context

    return Parser(xl_context(), text).parse_module()


def chain_module(n: int) -> ModuleOp:
    """n gelu ops in a row (textual IR: the frontend is not what is measured)."""
    t = "tensor<4xf32>"
    lines = [f"graph.h2d_stream @x : {t}", f"graph.d2h_stream @y : {t}", "graph.main {",
             f"  %v0 = graph.host_load @x : {t}"]  # fmt: skip
    lines += [f"  %v{i + 1} = popxl.gelu %v{i} : ({t}) -> {t}" for i in range(n)]
    lines += [f"  graph.host_store @y, %v{n} : {t}", "}"]
    return _parse("\n".join(lines))


def random_module(n: int, seed: int = 0) -> ModuleOp:
    """n ops (add, sub, mul, matmul, tanh) on (4, 4) tensors with random operands."""
    rng = np.random.default_rng(seed)
    t = "tensor<4x4xf32>"
    lines = [f"graph.h2d_stream @x : {t}", f"graph.d2h_stream @y : {t}", "graph.main {",
             f"  %v0 = graph.host_load @x : {t}"]  # fmt: skip
    for i in range(n):
        a, b, k = rng.integers(i + 1), rng.integers(i + 1), rng.integers(5)
        if k < 4:
            op = ("add", "sub", "mul", "matmul")[k]
            lines.append(f"  %v{i + 1} = popxl.{op} %v{a}, %v{b} : ({t}, {t}) -> {t}")
        else:
            lines.append(f"  %v{i + 1} = popxl.tanh %v{a} : ({t}) -> {t}")
    lines += [f"  graph.host_store @y, %v{n} : {t}", "}"]
    return _parse("\n".join(lines))


# -- measuring ------------------------------------------------------------------------------


def n_ops(module: ModuleOp) -> int:
    return sum(1 for _ in module.walk()) - 1


def time_outline(module: ModuleOp, reps: int) -> tuple[float, ModuleOp, list[str]]:
    times = []
    m, names = module, []
    for _ in range(max(reps, 1)):
        m = module.clone()
        t0 = time.perf_counter()
        names = outline(m)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), m, names


def downstream(module: ModuleOp, steps: int, outline: bool = True) -> tuple[float, int, float]:
    t0 = time.perf_counter()
    exe = compile_module(module, outline=outline)
    compile_s = time.perf_counter() - t0
    lines = sum(len(s.splitlines()) for s in exe.sources)
    inputs = _inputs(exe)
    exe.run(inputs)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        exe.run(inputs)
        times.append(time.perf_counter() - t0)
    return compile_s, lines, statistics.median(times) * 1e3


DEEP_MODELS = {
    "mlp-48": lambda: training_module(MLP(48, 64, 10), 8, 32, 10),
    "transformer-12": lambda: training_module(Transformer(12, 32, 10), 8, 32, 10),
}


def _inputs(exe: Executable) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inputs = {}
    for name, (shape, dtype) in exe.h2d_streams.items():
        full = exe.full_shape(shape)
        inputs[name] = (
            rng.normal(size=full).astype(dtype)
            if np.dtype(dtype).kind == "f"
            else rng.integers(0, 10, size=full).astype(dtype)
        )
    return inputs


def bench_deep(reps: int = 5, rounds: int = 15, steps: int = 10) -> dict:
    """Compile time, plan lines and step time of the deep models with and without
    outlining (see the module docstring)."""
    out: dict = {}
    variants = {"off": {"outline": False}, "on": {}}
    for name, build in DEEP_MODELS.items():
        module = build()
        row: dict = {"ops": n_ops(module)}
        exes: dict[str, Executable] = {}
        times: dict[str, list[float]] = {v: [] for v in variants}
        for r in range(max(reps, 1)):
            for v in list(variants) if r % 2 == 0 else list(reversed(variants)):
                t0 = time.perf_counter()
                exes[v] = compile_module(module, **variants[v])
                times[v].append(time.perf_counter() - t0)
        for v in variants:
            row[f"compile_s_{v}"] = min(times[v])
            row[f"lines_{v}"] = sum(len(s.splitlines()) for s in exes[v].sources)
            row[f"functions_{v}"] = sum(s.count("# rt.call") for s in exes[v].sources)
        inputs = _inputs(exes["off"])
        per: dict[str, list[float]] = {v: [] for v in variants}
        for r in range(rounds):
            order = list(variants) if r % 2 == 0 else list(reversed(variants))
            for v in order:
                exes[v].run(inputs)
                t0 = time.perf_counter()
                for _ in range(steps):
                    exes[v].run(inputs)
                per[v].append((time.perf_counter() - t0) / steps)
        for v in variants:
            row[f"step_ms_{v}"] = statistics.median(per[v]) * 1e3
        out[name] = row
    return out


def deep_report(results: dict) -> list[str]:
    lines = [
        "",
        "| default compile | ops | compile s, best run (no outline / outlined) | ratio | plan lines | ratio "
        "| rt.call lines | step ms | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['ops']:,} | {r['compile_s_off']:.3f} / {r['compile_s_on']:.3f} | "
            f"{r['compile_s_on'] / r['compile_s_off']:.2f} | {r['lines_off']:,} / {r['lines_on']:,} | "
            f"{r['lines_on'] / r['lines_off']:.2f} | {r['functions_on']} | "
            f"{r['step_ms_off']:.3f} / {r['step_ms_on']:.3f} | {r['step_ms_on'] / r['step_ms_off']:.3f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--deep", action="store_true", help="only the default-compile rows")
    args = ap.parse_args(argv)
    reps = 1 if args.quick else 3
    steps = 5 if args.quick else 30
    print("\n".join(deep_report(bench_deep(2 if args.quick else 5, 5 if args.quick else 15))), flush=True)
    if args.deep:
        return
    cases = [
        ("mlp-48", lambda: training_module(MLP(48, 64, 10), 8, 32, 10), True),
        ("transformer-12", lambda: training_module(Transformer(12, 32, 10), 8, 32, 10), True),
        ("mlp-~1,000 ops", lambda: training_module(MLP(62, 16, 10), 4, 8, 10), True),
        ("chain-1000", lambda: chain_module(1_000), False),
        ("random-1000", lambda: random_module(1_000), False),
        ("mlp-~10,000 ops", lambda: training_module(MLP(640, 16, 10), 4, 8, 10), False),
        ("chain-10000", lambda: chain_module(10_000), False),
        ("random-10000", lambda: random_module(10_000), False),
    ]
    print(
        "| program | ops | outline s | graphs | calls | compile s (off / on) | plan lines (off / on) "
        "| step ms (off / on) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, build, run in cases:
        module = build()
        secs, outlined, names = time_outline(module, reps)
        calls = sum(isinstance(op, CallOp) and op.callee.root_reference.data in names for op in outlined.walk())
        row = f"| {name} | {n_ops(module):,} | {secs:.3f} | {len(names)} | {calls} |"
        if run:  # without outlining / the default compile (outlining, functions)
            c0, l0, s0 = downstream(module, steps, outline=False)
            c1, l1, s1 = downstream(module, steps)
            row += f" {c0:.2f} / {c1:.2f} | {l0:,} / {l1:,} | {s0:.3f} / {s1:.3f} |"
        else:
            row += " | | |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
