"""Mutation fuzzing of `xl-opt` and `xl-run` (used by `tests/tools/test_fuzz_parser.py`).

Valid programs (the `.mlir` files of `tests/filecheck` and `examples/ir`, split at
`// -----`, plus a small program printed by the popxl frontend; with `--extended` also
frontend programs with repeat / conditional / IPU copies / replicas / pipelining and every
runnable program lowered to the `rt` dialect, optimised and outlined, for `xl-run` at the
rt level) are mutated at the token
level (delete / duplicate / swap tokens, flip characters, insert quotes, truncate, change
numbers and element types, rename SSA values, insert bytes that are not UTF-8, ...) and fed
to the tools' entry points in this process. Each run must end either in success (exit 0)
or in a clear error: exit status 1 and a first stderr line `file:line:col: error: ...` or
`xl-opt: error: ...` / `xl-run: error: ...`; never an escaping exception, never a traceback,
never more than `TIME_LIMIT` seconds.

Run as a worker (what the test does, so that a hang cannot stop the suite)::

    python tests/helpers/fuzz_mlir.py --n 200 --seed 0 --out findings.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TIME_LIMIT = 10.0
"""Seconds one tool run may take on one mutated input (they take milliseconds)."""

_LOCATED = re.compile(rb"^[^\n]*:\d+:\d+: error: \S")
_PREFIXED = re.compile(rb"^xl-(opt|run): error: \S")
_INTERNAL = re.compile(rb"\(internal \w+|<[A-Z]\w+\[|NotImplementedError|\w+Error: \w+Error")

_TOKEN = re.compile(
    r'"(?:[^"\\\n]|\\.)*"'  # string literal
    r"|[%@^#!][\w.$-]+"  # SSA value, symbol, block, attribute / type alias
    r"|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"  # numbers
    r"|[A-Za-z_][\w.$]*"  # identifiers, op names, types
    r"|->|\S"
)

_TYPES = [
    "f32",
    "f16",
    "f64",
    "i1",
    "i8",
    "i32",
    "i64",
    "ui8",
    "si32",
    "bf16",
    "complex<f32>",
    "index",
    "tensor<?xf32>",
    "tensor<0xf32>",
    "tensor<99999999999999999999xf32>",
    "none",
    "memref<2xf32>",
    "tensor<2x3xf32>",
    "tensor<f32>",
    "f80",
    "tf32",
    "i0",
]
_NUMBERS = [
    "0",
    "-1",
    "1",
    "2",
    "7",
    "99999999999999999999",
    "-99999999999999999999",
    "1e400",
    "0.5",
    "-0.0",
    "1.0e-45",
    "4294967296",
    "0x7FFFFFFF",
    "3.4e38",
    "nan",
    "inf",
]
_INSERTS = [
    '"',
    '"',
    '"',
    "%",
    "@",
    "{",
    "}",
    "(",
    ")",
    "<",
    ">",
    "[",
    "]",
    ",",
    ":",
    "->",
    "=",
    "loc(",
    "dense<",
    "tensor<",
    "// ",
    "\\",
    "#",
    "^bb0:",
    "\n",
    "-",
    "?",
    "x",
]


@dataclass
class Finding:
    tool: str
    kind: str  # "exception", "traceback", "timeout", "unclear-error", "slow", "plans-differ"
    detail: str
    source: str
    mutations: list[str] = field(default_factory=list)
    input: str = ""  # the mutated input, bytes as latin-1
    argv: list[str] = field(default_factory=list)


class _Timeout(BaseException):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def handler(signum, frame):  # noqa: ANN001
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- corpus -----------------------------------------------------------------------------


def _frontend_program() -> str:
    """A small training step printed by the frontend: a subgraph called with its weights,
    its gradient graph from autodiff, an SGD update and host streams."""
    import numpy as np

    import popxl
    import popxl.ops as ops
    from popxl import transforms

    class Linear(popxl.Module):
        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            self.W = popxl.graph_input((3, 2), popxl.float32, "W")
            return ops.gelu(x @ self.W)

    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        x = ops.host_load(xs, "x")
        w = popxl.variable(np.arange(6, dtype=np.float32).reshape(3, 2) / 10, name="W")
        lin = Linear()
        g = ir.create_graph(lin, x)
        fwd = ops.call_with_info(g, x, inputs_dict={lin.W: w})
        (y,) = fwd.outputs
        grad = transforms.autodiff(g, grads_required=[lin.W])
        (dw,) = ops.call(grad.graph, y, inputs_dict=grad.inputs_dict(fwd))  # y as the provided gradient
        ops.scaled_add_(w, dw, b=-0.1)
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, ops.softmax(y, axis=1))
    return ir.to_mlir()


def _frontend_structured_programs() -> list[tuple[str, str]]:
    """Programs printed by the frontend with the structure the small one lacks: a repeated
    subgraph calling another graph, a conditional, copies between virtual IPUs, replicas with
    collectives and replicated streams, a pipelined loop over two stages."""
    import numpy as np

    import popxl
    import popxl.ops as ops
    import popxl_addons as addons

    out: list[tuple[str, str]] = []

    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        x = ops.host_load(xs, "x")
        inc = popxl.variable(np.full((2, 3), 0.5, np.float32), name="inc")
        double = ir.create_graph(lambda a: a * 2.0, x)

        def body(acc: popxl.Tensor, d: popxl.Tensor) -> popxl.Tensor:
            (twice,) = ops.call(double, acc)
            return ops.tanh(twice + d)

        bg = ir.create_graph(body, x, inc)
        (r,) = ops.repeat(bg, 3, x, inc)
        t_g = ir.create_graph(lambda a: a + 10.0, r)
        e_g = ir.create_graph(lambda a: a - 10.0, r)
        flag = popxl.variable(True, name="flag")
        (c,) = ops.conditional(flag, t_g, e_g, [r], [r])
        with popxl.ipu(1):
            y = ops.relu(c.copy_to_ipu(1, 0))
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    out.append(("frontend-repeat", ir.to_mlir()))

    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        xs = popxl.h2d_stream((4,), popxl.float32, "x")
        x = ops.host_load(xs, "x")
        w = popxl.variable(np.arange(4, dtype=np.float32), name="w")
        g = ops.collectives.replicated_all_reduce(x * w)
        ops.scaled_add_(w, g, b=-0.1)
        ys = popxl.d2h_stream((4,), popxl.float32, "y")
        ops.host_store(ys, ops.collectives.replicated_all_reduce(ops.sin(g), op="mean"))
    out.append(("frontend-replicas", ir.to_mlir()))

    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2,), popxl.float32, "x")
        ys = popxl.d2h_stream((2,), popxl.float32, "y")
        with addons.pipelined_execution(4) as p:
            with p.stage(0), popxl.ipu(0):
                x = ops.host_load(xs)
                x = ops.gelu(x).copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                ops.host_store(ys, ops.relu(x) * 3.0)
    ir.num_host_transfers = 4
    out.append(("frontend-pipeline", ir.to_mlir()))
    return out


def _lowered_programs(programs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each runnable graph-level program lowered to the runtime dialect and printed, as
    `compile_module` runs it (default pipeline then `rt-optimize`: fused kernels, views,
    folded updates, reused buffers) and outlined with runs of 2+ ops (`rt.func` / `rt.call`):
    inputs for `xl-run` at the rt level. A program that does not lower is left out."""
    from xl.compiler.driver import DEFAULT_PIPELINE, OUTLINE_MIN_OPS, OUTLINE_PIPELINE, RT_PIPELINE, lower
    from xl.tools.context import xl_context
    from xl.tools.diagnostics import verify_located
    from xl.tools.parse import parse_source

    outlined = OUTLINE_PIPELINE.replace(f"outline{{min-ops={OUTLINE_MIN_OPS}}}", "outline{min-ops=2}")
    out: list[tuple[str, str]] = []
    for name, text in programs:
        if "graph.main" not in text:
            continue
        for tag, pipe in (("rt", DEFAULT_PIPELINE), ("rt-outlined", outlined)):
            try:
                module = lower(parse_source(xl_context(), text, "x.mlir"), f"{pipe},{RT_PIPELINE}")
            except Exception:  # noqa: BLE001 - not lowerable on purpose (an error test): skip
                continue
            printed = str(module)
            try:  # the printed rt program must read back: a failure is a printer / parser bug
                verify_located(parse_source(xl_context(), printed, "lowered.mlir"))
            except Exception as e:  # noqa: BLE001
                raise RuntimeError(f"{name} lowered with {pipe} does not parse back: {e}\n{printed}") from e
            out.append((f"{name}@{tag}", printed))
    return out


def corpus(include_frontend: bool = True, extended: bool = False) -> list[tuple[str, str]]:
    """(name, text) of every valid program chunk: parses and verifies with `xl-opt`."""
    from xl.tools.context import xl_context
    from xl.tools.diagnostics import verify_located
    from xl.tools.parse import parse_source

    files = sorted((ROOT / "tests" / "filecheck").rglob("*.mlir")) + sorted((ROOT / "examples" / "ir").glob("*.mlir"))
    out: list[tuple[str, str]] = []
    for f in files:
        for i, chunk in enumerate(f.read_text().split("// -----")):
            body = "\n".join(ln for ln in chunk.splitlines() if not ln.lstrip().startswith("//"))
            if not body.strip():
                continue
            try:
                verify_located(parse_source(xl_context(), body, "x.mlir"))
            except Exception:  # noqa: BLE001 - invalid on purpose (an error test): skip
                continue
            out.append((f"{f.relative_to(ROOT)}#{i}", body))
    if include_frontend:
        try:
            out.append(("frontend", _frontend_program()))
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"cannot build the frontend program: {e}") from e
    if extended:
        out += _frontend_structured_programs()
        out += _lowered_programs(out)
    return out


# -- mutations ----------------------------------------------------------------------------


def _tokens(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _TOKEN.finditer(text)]


def mutate(text: str, rng: random.Random) -> tuple[bytes, list[str]]:
    """1-3 random mutations of `text`; returns the bytes and a description of each."""
    data = text
    done: list[str] = []
    raw_suffix = b""
    for _ in range(rng.choice((1, 1, 2, 3))):
        toks = _tokens(data)
        if not toks:
            break
        kind = rng.choice(
            [
                "delete",
                "duplicate",
                "swap",
                "swap-adjacent",
                "flip-char",
                "insert-quote",
                "insert",
                "truncate",
                "number",
                "type",
                "rename-ssa",
                "non-utf8",
                "delete-line",
                "duplicate-line",
                "swap-lines",
                "replace-token",
            ]
        )
        a, b = toks[rng.randrange(len(toks))]
        tok = data[a:b]
        if kind == "delete":
            data = data[:a] + data[b:]
        elif kind == "duplicate":
            data = data[:b] + " " + tok + data[b:]
        elif kind in ("swap", "swap-adjacent", "replace-token"):
            i = rng.randrange(len(toks))
            if kind == "swap-adjacent":
                i = min(len(toks) - 1, toks.index((a, b)) + 1)
            c, d = toks[i]
            other = data[c:d]
            if kind == "replace-token":
                data = data[:a] + other + data[b:]
            elif (c, d) != (a, b):
                (a, b, tok), (c, d, other) = sorted([(a, b, tok), (c, d, other)])
                data = data[:a] + other + data[b:c] + tok + data[d:]
        elif kind == "flip-char":
            pos = rng.randrange(len(data))
            data = data[:pos] + chr(rng.randrange(32, 127)) + data[pos + 1 :]
        elif kind == "insert-quote":
            pos = rng.randrange(len(data) + 1)
            data = data[:pos] + '"' + data[pos:]
        elif kind == "insert":
            pos = rng.choice((a, b))
            data = data[:pos] + rng.choice(_INSERTS) + data[pos:]
        elif kind == "truncate":
            data = data[: rng.randrange(len(data))]
        elif kind == "number":
            nums = [(x, y) for x, y in toks if re.fullmatch(r"[-+]?\d.*", data[x:y])]
            if nums:
                a, b = rng.choice(nums)
            data = data[:a] + rng.choice(_NUMBERS) + data[b:]
        elif kind == "type":
            found = [m.span() for m in re.finditer(r"\b(f16|f32|f64|i1|i32|i64|ui8)\b", data)]
            if found:
                a, b = rng.choice(found)
                data = data[:a] + rng.choice(_TYPES) + data[b:]
        elif kind == "rename-ssa":
            names = [(x, y) for x, y in toks if data[x] == "%"]
            if len(names) >= 2:
                (x, y), (u, v) = rng.sample(names, 2)
                data = data[:x] + data[u:v] + data[y:]
        elif kind == "non-utf8":
            pos = rng.randrange(len(data) + 1)
            bad = rng.choice([b"\xff", b"\xfe\xfe", b"\xc3", b"\x80abc", b"\xed\xa0\x80"])
            done.append(f"{kind}@{pos}")
            raw_suffix = bad + data[pos:].encode()
            data = data[:pos]
            break  # the rest is bytes now
        else:  # line mutations
            lines = data.split("\n")
            i = rng.randrange(len(lines))
            if kind == "delete-line":
                del lines[i]
            elif kind == "duplicate-line":
                lines.insert(i, lines[i])
            else:
                j = rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
            data = "\n".join(lines)
        done.append(f"{kind}:{tok[:20]!r}")
    return data.encode() + raw_suffix, done


# -- running the tools --------------------------------------------------------------------


def _check_output(code: int | None, err: bytes) -> str | None:
    """None if the run ended well, else what is wrong with it."""
    if b"Traceback" in err:
        return "traceback"
    if code == 0:
        return None
    if code != 1:
        return f"exit status {code}"
    first = err.lstrip(b"\n").split(b"\n", 1)[0]
    if _LOCATED.match(first) or _PREFIXED.match(first):
        return None
    return "unclear-error"


def run_in_process(tool: str, argv: list[str]) -> tuple[int | None, bytes, bytes, float]:
    """Runs `xl-opt` / `xl-run` `main(argv)` here; returns (status, stdout, stderr, seconds)."""
    from xl.tools import opt, run

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if tool == "xl-opt":
            try:
                opt.main(argv)
                code: int | None = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
        else:
            code = run.main(argv)
    return code, out.getvalue().encode(), err.getvalue().encode(), time.perf_counter() - t0


def _inputs_for(data: bytes, folder: Path) -> list[str]:
    """`name=file.npy` arguments with data of the right shape for the program's streams."""
    import numpy as np
    from xdsl.dialects.builtin import MemRefType, StringAttr, TensorType

    from xl.dialects.utils import numpy_dtype
    from xl.tools.context import xl_context
    from xl.tools.parse import parse_source

    try:
        module = parse_source(xl_context(), data, "in.mlir")
    except Exception:  # noqa: BLE001 - the tool reports it
        return []
    nht, rf = 1, 1
    for op in module.walk():
        if op.name in ("graph.main", "rt.program"):
            a = op.attributes.get("num_host_transfers")
            nht = getattr(getattr(a, "value", None), "data", 1)
            a = op.attributes.get("replication_factor")
            rf = getattr(getattr(a, "value", None), "data", 1)
    if not isinstance(nht, int) or not 1 <= nht <= 64 or not isinstance(rf, int) or not 1 <= rf <= 16:
        return []
    specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    for op in module.walk():
        if op.name in ("graph.h2d_stream", "rt.h2d"):
            try:
                if op.name == "rt.h2d":  # rt.h2d "x", %buf : memref<...>
                    t = op.operands[0].type
                    name = op.properties["stream"]
                else:
                    t = op.properties["type"]
                    name = op.properties["sym_name"]
                if not isinstance(t, TensorType | MemRefType) or not isinstance(name, StringAttr):
                    return []
                shape = tuple(int(d) for d in t.get_shape())
                dtype = numpy_dtype(t.get_element_type())
                if any(d < 0 for d in shape) or np.prod(shape, dtype=object) * nht * rf > 1 << 16:
                    return []
            except Exception:  # noqa: BLE001
                return []
            specs[name.data] = (shape, dtype)
    args = []
    rng = np.random.default_rng(0)
    for name, (shape, dtype) in specs.items():
        full = ((nht,) if nht > 1 else ()) + ((rf,) if rf > 1 else ()) + shape
        arr = rng.integers(0, 2, size=full) if dtype.kind in "iub" else rng.normal(size=full)
        path = folder / f"{abs(hash(name))}.npy"
        np.save(path, arr.astype(dtype))
        args.append(f"{name}={path}")
    return args


def plans_differ(data: bytes, argv: list[str]) -> str | None:
    """For an input `xl-run` ran: the optimised plan (`compile_module`, what `xl-run` runs)
    and the straightforward one (`optimize=False`) over two steps with the same inputs.
    None if every output and variable agrees (within float32 rounding of a fused or
    reordered computation, NaN where NaN), else what differs."""
    import numpy as np

    from xl.compiler import compile_module
    from xl.tools.context import xl_context
    from xl.tools.parse import parse_source

    module = parse_source(xl_context(), data, "in.mlir")
    inputs = {a.split("=", 1)[0]: np.load(a.split("=", 1)[1]) for a in argv[1:] if "=" in a}
    results = []
    for optimize in (True, False):
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # programs that print (rt.print)
                exe = compile_module(module, optimize=optimize)
                outs = [{k: v.copy() for k, v in exe.run(inputs).items()} for _ in range(2)]
        except Exception as e:  # noqa: BLE001 - compared below: both plans must fail alike
            results.append(f"{type(e).__name__}: {e}"[:300])
            continue
        results.append((outs, {k: exe.gather_state(k) for k in exe.state}))
    (a, b) = results
    if isinstance(a, str) or isinstance(b, str):
        return (
            None if isinstance(a, str) and isinstance(b, str) else f"optimised: {a!s:.300}\nstraightforward: {b!s:.300}"
        )
    from plan_tolerance import CHAIN_TOL  # tests/helpers/plan_tolerance.py: how far two plans may round apart

    (oa, sa), (ob, sb) = a, b
    pairs = [(f"step {i} {k}", x[k], y.get(k)) for i, (x, y) in enumerate(zip(oa, ob, strict=True)) for k in x]
    pairs += [(f"variable {k}", sa[k], sb.get(k)) for k in sa]
    for what, x, y in pairs:
        if y is None or x.shape != y.shape or x.dtype != y.dtype:
            return f"{what}: {None if y is None else (y.shape, y.dtype)} vs {(x.shape, x.dtype)}"
        if x.dtype.kind == "V" and x.dtype.names is None:  # float8 / bfloat16 (ml_dtypes): as float32
            x, y = x.astype(np.float32), y.astype(np.float32)
        if x.dtype.kind in "fc":
            ok = np.allclose(x, y, **CHAIN_TOL, equal_nan=True)
        else:
            ok = np.array_equal(x, y)
        if not ok:
            return f"{what}: optimised {x.ravel()[:8]} vs straightforward {y.ravel()[:8]}"
    return None


def fuzz(
    n: int,
    seed: int,
    *,
    progress: Path | None = None,
    tools: tuple[str, ...] = ("xl-opt", "xl-run"),
    extended: bool = False,
    differential: bool = False,
) -> tuple[int, list[Finding], dict[str, float]]:
    """Tries `n` mutated inputs (of `corpus(extended=extended)`); returns (runs, findings,
    stats). `differential`: every input `xl-run` runs is also run on both runtime plans
    (`plans_differ`), a difference being a finding."""
    import warnings

    warnings.simplefilter("ignore")
    import numpy as np

    np.seterr(all="ignore")
    rng = random.Random(seed)
    programs = corpus(extended=extended)
    findings: list[Finding] = []
    notes: list[Finding] = []
    runs = 0
    stats = {
        "ok": 0,
        "error": 0,
        "max_seconds": 0.0,
        "programs": len(programs),
        "lowered": sum("@rt" in name for name, _ in programs),
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for k in range(n):
            name, text = programs[rng.randrange(len(programs))]
            data, muts = mutate(text, rng)
            path = folder / f"in{k % 8}.mlir"
            path.write_bytes(data)
            if progress is not None:
                progress.write_bytes(data)
            tool = tools[k % len(tools)]
            argv = [str(path)]
            if tool == "xl-opt":
                argv += rng.choice(
                    [
                        [],
                        [],
                        ["-p", "canonicalize,cse,dce"],
                        ["-p", "inline,lower-to-rt"],
                        ["--print-op-generic"],
                        ["--print-debuginfo"],
                    ]
                )
            else:
                argv += _inputs_for(data, folder)
            runs += 1
            try:
                with _time_limit(TIME_LIMIT):
                    code, _out, err, secs = run_in_process(tool, argv)
            except _Timeout:
                findings.append(Finding(tool, "timeout", f"> {TIME_LIMIT} s", name, muts, data.decode("latin-1"), argv))
                continue
            except BaseException as e:  # noqa: BLE001 - an escaping exception is the finding
                detail = f"{type(e).__name__}: {e}"[:500]
                findings.append(Finding(tool, "exception", detail, name, muts, data.decode("latin-1"), argv))
                continue
            stats["max_seconds"] = max(stats["max_seconds"], secs)
            if code == 1 and _INTERNAL.search(err):
                # a clear, located error whose text still shows xl's internals: noted, not failed
                notes.append(
                    Finding(
                        tool,
                        "internal-message",
                        err.decode(errors="replace")[:800],
                        name,
                        muts,
                        data.decode("latin-1"),
                        argv,
                    )
                )
            problem = _check_output(code, err)
            if problem is not None:
                detail = err.decode(errors="replace")[-800:]
                findings.append(Finding(tool, problem, detail, name, muts, data.decode("latin-1"), argv))
            elif code == 0:
                stats["ok"] += 1
                if differential and tool == "xl-run":
                    try:
                        with _time_limit(4 * TIME_LIMIT):
                            diff = plans_differ(data, argv)
                    except _Timeout:
                        diff = f"the two plans took more than {4 * TIME_LIMIT} s"
                    except BaseException as e:  # noqa: BLE001
                        diff = f"{type(e).__name__}: {e}"[:500]
                    stats["compared"] = stats.get("compared", 0) + 1
                    if diff is not None:
                        findings.append(Finding(tool, "plans-differ", diff, name, muts, data.decode("latin-1"), argv))
            else:
                stats["error"] += 1
    stats["internal_messages"] = len(notes)
    findings_notes.clear()
    findings_notes.extend(notes)
    return runs, findings, stats


findings_notes: list[Finding] = []
"""Runs of the last `fuzz` call that ended in a clear error showing internals (a repr, an
internal exception name): worth a better message, not a failure."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write the findings as JSON here")
    ap.add_argument("--progress", type=Path, help="each input is written here before it runs")
    ap.add_argument(
        "--extended",
        action="store_true",
        help="also mutate frontend programs with repeat / conditional / IPU copies / replicas / "
        "pipelining, and every runnable program lowered to the rt dialect (for xl-run)",
    )
    ap.add_argument(
        "--differential",
        action="store_true",
        help="also run every input xl-run runs on the optimised and the straightforward runtime "
        "plans: outputs and variables over two steps must agree",
    )
    ap.add_argument(
        "--memory-gb",
        type=float,
        default=6.0,
        help="address-space limit of this process: a mutated shape that asks for gigabytes "
        "fails fast (and is reported by the tool) instead of swapping",
    )
    args = ap.parse_args(argv)
    try:
        import resource

        limit = int(args.memory_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not on this platform: run unlimited
        pass
    runs, findings, stats = fuzz(
        args.n, args.seed, progress=args.progress, extended=args.extended, differential=args.differential
    )
    report = {
        "runs": runs,
        "stats": stats,
        "findings": [asdict(f) for f in findings],
        "internal_messages": [asdict(f) for f in findings_notes],
    }
    text = json.dumps(report, indent=1)
    if args.out is not None:
        args.out.write_text(text)
    print(f"{runs} inputs, {len(findings)} findings, {stats}")
    for f in findings[:20] + findings_notes[:20]:
        print(f"- {f.tool} {f.kind} [{f.source}] {f.mutations}: {f.detail[:300]}")
    return 0


if __name__ == "__main__":
    # `xl` is the installed package: the checkout's parent folder is not put on sys.path,
    # where a checkout folder named `xl` (a clone of the repository) would shadow it.
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
