"""Virtual IPUs run concurrently (`xl.runtime.concurrent`): same bits as the serial plan.

Every multi-IPU program here runs concurrently (one worker thread per IPU) and serially
(`Session(..., concurrent=False)`), with OpenBLAS pinned to one thread for both (its results
depend on its thread count, serial or not), and every output and every weight must be
equal bit for bit after several steps; where the program has an independent reference
(NumPy, the unpipelined program) the concurrent results are checked against it too.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from xdsl.parser import Parser

import popxl
import popxl.ops as ops
from xl.dialects import rt
from xl.runtime.executable import Executable, compile_program
from xl.runtime.kernels import DataRangeError
from xl.runtime.profile import Profile
from xl.tools.context import xl_context

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def one_blas_thread() -> Iterator[None]:
    with threadpool_limits(1, "blas"):
        yield


def _stream_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("xl worker ")}


# ------------------------------------------------------------------------------------
# Seed 003: the pipelined MNIST (3 stages on 2 virtual IPUs)
# ------------------------------------------------------------------------------------


def _mnist_pipeline(micro_batch: int, recomputation: bool = False, data_parallel: int = 1):
    sys.path.insert(0, str(EXAMPLES))
    import mnist_pipeline as ex

    opts = ex.Options()
    opts.train.device = "cpu"
    opts.train.micro_batch_size = micro_batch
    opts.train.recomputation = recomputation
    opts.train.data_parallel = data_parallel
    np.random.seed(0)
    session, streams, variables, loss_stream, _ = ex.train_program(opts)
    return session.ir, streams, variables, loss_stream, opts


def _train(
    ir: popxl.Ir, streams: Any, variables: Any, loss_stream: Any, batches: list[Any], **session_kw: Any
) -> tuple[list[np.ndarray], dict[str, np.ndarray], int]:
    session = popxl.Session(ir, "cpu", **session_kw)
    losses = []
    with session:
        for x, y in batches:
            losses.append(session.run(dict(zip(streams, [x, y])))[loss_stream])
    weights = {k: session.get_tensor_data(t) for k, t in variables.to_dict().items()}
    return losses, weights, session._exe.workers


@pytest.mark.parametrize("recomputation", [False, True], ids=["stash", "recompute"])
def test_mnist_pipeline_concurrent_equals_serial(recomputation: bool) -> None:
    ir, streams, variables, loss_stream, opts = _mnist_pipeline(4, recomputation)
    n = opts.train.gradient_accumulation
    rng = np.random.default_rng(1)
    batches = [
        (rng.standard_normal((n, 4, 784)).astype(np.float32), rng.integers(0, 10, (n, 4)).astype(np.int32))
        for _ in range(3)
    ]
    c_losses, c_weights, c_workers = _train(ir, streams, variables, loss_stream, batches)
    s_losses, s_weights, s_workers = _train(ir, streams, variables, loss_stream, batches, concurrent=False)
    assert (c_workers, s_workers) == (2, 1)
    for a, b in zip(c_losses, s_losses):
        assert np.array_equal(a, b)
    assert c_weights.keys() == s_weights.keys() and len(c_weights) == 8
    for k in c_weights:
        assert np.array_equal(c_weights[k], s_weights[k]), k
    # the independent reference: the same stages one after another, unpipelined
    # (examples/mnist_accumulate.py, as tests/examples/test_pipeline_mnist.py checks the serial run)
    import mnist_accumulate as acc

    aopts = acc.Options()
    aopts.train.device = "cpu"
    aopts.train.micro_batch_size = 4
    aopts.train.recomputation = recomputation
    np.random.seed(0)
    session, astreams, avars, aloss, *_ = acc.train_program(aopts)
    with session:
        ref = [session.run(dict(zip(astreams, [x, y])))[aloss] for x, y in batches]
        ref_w = {k: session.get_tensor_data(t) for k, t in avars.to_dict().items()}
    for a, b in zip(c_losses, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for k in c_weights:
        np.testing.assert_allclose(c_weights[k], ref_w[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_mnist_pipeline_data_parallel_runs_serially() -> None:
    """Replica collectives: the plan stays serial (documented), same numbers as asked serially."""
    ir, streams, variables, loss_stream, opts = _mnist_pipeline(2, data_parallel=2)
    n = opts.train.gradient_accumulation
    rng = np.random.default_rng(2)
    batches = [
        (rng.standard_normal((n, 2, 2, 784)).astype(np.float32), rng.integers(0, 10, (n, 2, 2)).astype(np.int32))
    ]
    c = _train(ir, streams, variables, loss_stream, batches)
    s = _train(ir, streams, variables, loss_stream, batches, concurrent=False)
    assert c[2] == s[2] == 1
    assert np.array_equal(c[0][0], s[0][0])


def test_mnist_pipeline_trace_rows_overlap(tmp_path: Path) -> None:
    """Done when: the trace of the pipelined MNIST loads as JSON, with kernel slices on the
    rows of both IPUs that overlap in time (retried: the machine may be busy)."""
    ir, streams, _, _, opts = _mnist_pipeline(32)
    n = opts.train.gradient_accumulation
    rng = np.random.default_rng(3)
    inputs = dict(
        zip(
            streams,
            [rng.standard_normal((n, 32, 784)).astype(np.float32), rng.integers(0, 10, (n, 32)).astype(np.int32)],
        )
    )
    path = tmp_path / "trace.json"
    overlap = False
    for _ in range(5):
        with popxl.Session(ir, "cpu", profile=str(path)) as session:
            for _ in range(2):
                session.run(inputs)
        data = json.loads(path.read_text())
        names = {(e["pid"], e["tid"]): e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
        rows: dict[str, list[tuple[float, float]]] = {"IPU 0": [], "IPU 1": []}
        for e in data["traceEvents"]:
            row = names.get((e["pid"], e["tid"]))
            if e["ph"] == "X" and row in rows and e["cat"] not in ("step", "graph call"):
                rows[row].append((e["ts"], e["ts"] + e["dur"]))
        assert rows["IPU 0"] and rows["IPU 1"]
        if _overlaps(rows["IPU 0"], rows["IPU 1"]):
            overlap = True
            break
    assert overlap


def _overlaps(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    b = sorted(b)
    starts = [s for s, _ in b]
    import bisect

    for s, e in a:
        i = bisect.bisect_left(starts, e)
        if any(bs < e and s < be for bs, be in b[max(0, i - 50) : i]):
            return True
    return False


# ------------------------------------------------------------------------------------
# The pipelined training programs of tests/passes/test_pipeline_training.py (2-4 stages)
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_stages", [2, 3, 4])
def test_pipeline_training_programs(num_stages: int) -> None:
    from tests.passes import test_pipeline_training as tpt

    prog = tpt.build(num_stages, pipelined=True, recompute=num_stages == 3)
    x, t = tpt.data(prog["dims"])
    results = []
    for concurrent in (True, False):
        with popxl.Session(prog["ir"], "ipu_hw", concurrent=concurrent) as session:
            init = [{k: session.get_tensor_data(v).copy() for k, v in fv.named_tensors.items()} for fv in prog["fwd"]]
            for _ in range(3):
                session.run({prog["x"]: x, prog["t"]: t})
            weights = [
                {k: session.get_tensor_data(v).copy() for k, v in fv.named_tensors.items()} for fv in prog["fwd"]
            ]
            results.append((init, weights, session._exe.workers))
    (init, w_c, workers), (_, w_s, serial_workers) = results
    assert workers == 2 and serial_workers == 1
    for a, b in zip(w_c, w_s):
        for k in a:
            assert np.array_equal(a[k], b[k]), k
    # one run from the initial weights matches the NumPy gradients (SGD step)
    prog = tpt.build(num_stages, pipelined=True, recompute=False)
    with popxl.Session(prog["ir"], "ipu_hw") as session:
        init = [{k: session.get_tensor_data(v).copy() for k, v in fv.named_tensors.items()} for fv in prog["fwd"]]
        session.run({prog["x"]: x, prog["t"]: t})
        weights = [{k: session.get_tensor_data(v).copy() for k, v in fv.named_tensors.items()} for fv in prog["fwd"]]
        assert session._exe.workers == 2
    expected = tpt.numpy_grads(prog["dims"], init)
    for i in range(len(init)):
        for k in init[i]:
            np.testing.assert_allclose(weights[i][k], init[i][k] - tpt.LR * expected[i][k], rtol=1e-4, atol=1e-5)


def test_seed_two_layer_pipeline_and_ipu_copies() -> None:
    """Seed 003's two-stage example (copy_to_ipu between stages), stored each micro batch."""
    import popxl_addons as addons

    class Add(addons.Module):
        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            w = self.add_variable_input("weight", np.random.normal(size=x.shape).astype(np.float32))
            return x + w

    np.random.seed(0)
    ir = popxl.Ir()
    n = 6
    with ir.main_graph:
        input_stream = popxl.h2d_stream((32,), dtype=popxl.float32)
        out_stream = popxl.d2h_stream((32,), popxl.float32, "out")
        with popxl.ipu(0):
            facts0, layer0 = Add().create_graph(input_stream.spec)
        with popxl.ipu(1):
            facts1, layer1 = Add().create_graph(input_stream.spec)
        vars0, vars1 = facts0.init(), facts1.init()
        with popxl.in_sequence(True):
            with addons.pipelined_execution(steps=n) as p:
                with p.stage(0), popxl.ipu(0):
                    x = ops.host_load(input_stream)
                    (x,) = layer0.bind(vars0).call(x)
                    x = x.copy_to_ipu(1)
                with p.stage(1), popxl.ipu(1):
                    (x,) = layer1.bind(vars1).call(x)
                    ops.host_store(out_stream, x)
    ir.num_host_transfers = n
    inputs = np.arange(n * 32, dtype=np.float32).reshape(n, 32)
    outs = []
    for concurrent in (True, False):
        with popxl.Session(ir, "ipu_hw", concurrent=concurrent) as session:
            outs.append(session.run({input_stream: inputs})[out_stream])
            w0 = session.get_tensor_data(vars0.weight)
            w1 = session.get_tensor_data(vars1.weight)
            assert session._exe.workers == (2 if concurrent else 1)
    assert np.array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], (inputs + w0) + w1)


# ------------------------------------------------------------------------------------
# Serial on request; errors in a worker
# ------------------------------------------------------------------------------------


def _two_ipu_program(rows: int = 4) -> tuple[popxl.Ir, Any, Any, Any]:
    ir = popxl.Ir()
    with ir.main_graph:
        idx_s = popxl.h2d_stream((2,), popxl.int32, "idx")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        with popxl.ipu(0):
            table = popxl.variable(np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), name="table")
            t2 = (table * 2.0).copy_to_ipu(1)
        with popxl.ipu(1):
            idx = ops.host_load(idx_s, "idx")
            y = ops.gather(t2, idx)
            ops.host_store(ys, y)
    return ir, idx_s, ys, table


def test_xl_serial_env_and_session_option(monkeypatch: pytest.MonkeyPatch) -> None:
    ir, idx_s, ys, _ = _two_ipu_program()
    feed = {idx_s: np.array([1, 3], np.int32)}
    expect = np.arange(12, dtype=np.float32).reshape(4, 3)[[1, 3]] * 2
    with popxl.Session(ir, "cpu") as s:
        assert s._exe.workers == 2
        np.testing.assert_array_equal(s.run(feed)[ys], expect)
    before = _stream_threads()
    monkeypatch.setenv("XL_SERIAL", "1")
    for session in (popxl.Session(ir, "cpu"), popxl.Session(ir, "cpu", concurrent=False)):
        with session:
            assert session._exe.workers == 1
            np.testing.assert_array_equal(session.run(feed)[ys], expect)
    monkeypatch.delenv("XL_SERIAL")
    with popxl.Session(ir, "cpu", concurrent=False) as session:
        assert session._exe.workers == 1
        session.run(feed)
    assert _stream_threads() <= before  # the serial sessions started no worker
    # sessions live as long as their Ir, but the workers are one pool for the process:
    # sessions run one after another start no more workers
    with popxl.Session(ir, "cpu") as s:
        s.run(feed)
    started = _stream_threads()
    assert len(started) >= 1
    for _ in range(4):
        with popxl.Session(ir, "cpu") as s:
            s.run(feed)
    assert _stream_threads() == started
    with pytest.raises(TypeError, match="concurrent must be a bool"):
        popxl.Session(ir, "cpu", concurrent="yes")  # pyright: ignore[reportArgumentType]


def _run_with_timeout(fn: Callable[[], Any], seconds: float = 60.0) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the run hung"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_worker_error_names_the_op_and_does_not_hang() -> None:
    """A dynamic_slice offset out of range fails on IPU 1's worker (a gather gives zeros)."""
    ir = popxl.Ir()
    with ir.main_graph:
        off_s = popxl.h2d_stream((1,), popxl.uint32, "off")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        with popxl.ipu(0):
            table = popxl.variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="table")
            t2 = (table * 2.0).copy_to_ipu(1)
        with popxl.ipu(1):
            off = ops.host_load(off_s, "off")
            ops.host_store(ys, ops.dynamic_slice(t2, off, axes=[0], sizes=[2], no_overlap=False))
    with popxl.Session(ir, "cpu") as session:
        assert session._exe.workers == 2
        with pytest.raises(
            DataRangeError, match=r"DynamicSlice\.\d+ \(popxl.dynamic_slice in graph main_graph on IPU 1\) failed"
        ):
            _run_with_timeout(lambda: session.run({off_s: np.array([3], np.uint32)}))
        # the next run works
        out = _run_with_timeout(lambda: session.run({off_s: np.array([2], np.uint32)}))
        np.testing.assert_array_equal(out[ys], np.arange(12, dtype=np.float32).reshape(4, 3)[2:4] * 2)


def test_main_stream_error_releases_the_waiting_worker() -> None:
    """IPU 0 (the calling thread) fails while IPU 1 waits for its copy: no hang."""
    ir = popxl.Ir()
    with ir.main_graph:
        off_s = popxl.h2d_stream((1,), popxl.uint32, "off")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        with popxl.ipu(0):
            table = popxl.variable(np.ones((4, 3), np.float32), name="table")
            off = ops.host_load(off_s, "off")
            g = ops.dynamic_slice(table, off, axes=[0], sizes=[2], no_overlap=False).copy_to_ipu(1)
        with popxl.ipu(1):
            ops.host_store(ys, g + 1.0)
    with popxl.Session(ir, "cpu") as session:
        assert session._exe.workers == 2
        with pytest.raises(
            DataRangeError, match=r"DynamicSlice\.\d+ \(popxl.dynamic_slice in graph main_graph on IPU 0\) failed"
        ):
            _run_with_timeout(lambda: session.run({off_s: np.array([7], np.uint32)}))
        out = _run_with_timeout(lambda: session.run({off_s: np.array([1], np.uint32)}))
        np.testing.assert_array_equal(out[ys], np.full((2, 3), 2.0, np.float32))


# ------------------------------------------------------------------------------------
# Random rt programs on 3 virtual IPUs: loops, branches, in-place ops, shared buffers, views
# ------------------------------------------------------------------------------------

SHAPE = (4, 4)
T = "memref<4x4xf32>"


def _parse(text: str) -> rt.ProgramOp:
    module = Parser(xl_context(), text).parse_module()
    return next(op for op in module.ops if isinstance(op, rt.ProgramOp))


class _Gen:
    """A random program over 4 state buffers (and a transposed view of one), as rt text and
    as a NumPy interpreter over the same statements."""

    def __init__(self, draw: Any, ipus: int) -> None:
        self.draw = draw
        self.ipus = ipus

    def stmts(self, depth: int) -> list[tuple[Any, ...]]:
        from hypothesis import strategies as st

        out: list[tuple[Any, ...]] = []
        for _ in range(self.draw(st.integers(1, 6 if depth == 0 else 3))):
            kind = self.draw(
                st.sampled_from(
                    ["add", "mul", "tanh", "matmul", "scaled_add_", "copy", "h2d"]
                    + (["loop", "if"] if depth < 2 else [])
                )
            )
            buf = st.integers(0, 4)  # 4: the transposed view of v1
            ipu = self.draw(st.integers(0, self.ipus - 1))
            if kind == "loop":
                out.append(("loop", self.draw(st.integers(0, 3)), self.stmts(depth + 1)))
            elif kind == "if":
                out.append(("if", self.stmts(depth + 1), self.stmts(depth + 1)))
            elif kind in ("add", "mul", "matmul", "scaled_add_"):
                out.append((kind, ipu, self.draw(buf), self.draw(buf), self.draw(buf)))
            elif kind == "tanh":
                out.append((kind, ipu, self.draw(buf), self.draw(buf)))
            elif kind == "copy":
                out.append((kind, self.draw(buf), self.draw(buf)))
            else:
                out.append(("h2d", self.draw(st.integers(0, 3)), self.draw(st.booleans())))
        return out


def _names(i: int) -> str:
    return "%t" if i == 4 else f"%v{i}"


def _text(stmts: list[tuple[Any, ...]], init: list[np.ndarray]) -> str:
    lines = ["rt.program attributes {num_host_transfers = 3 : i64, replication_factor = 1 : i64} {"]
    for i, a in enumerate(init):
        vals = ", ".join("[" + ", ".join(f"{float(v):.8e}" for v in row) + "]" for row in a)
        lines.append(f'  %v{i} = rt.state "v{i}" = dense<[{vals}]> : tensor<4x4xf32> : {T}')
    lines.append(f"  %t = rt.alloc : {T}")
    lines.append(
        f'  rt.kernel "popxl.transpose"(%v1) -> (%t) {{perm = array<i64: 1, 0>, rt.view, ipu.id = 1 : i64}} : ({T}) -> {T}'
    )
    lines.append("  %c = rt.alloc : memref<i1>")

    def emit(ss: list[tuple[Any, ...]], ind: str) -> None:
        for s in ss:
            k = s[0]
            if k == "loop":
                lines.append(f"{ind}rt.loop {s[1]} {{")
                emit(s[2], ind + "  ")
                lines.append(f"{ind}}}")
            elif k == "if":
                lines.append(f'{ind}rt.h2d "c", %c : memref<i1>')
                lines.append(f"{ind}rt.if %c : memref<i1> {{")
                emit(s[1], ind + "  ")
                lines.append(f"{ind}}} else {{")
                emit(s[2], ind + "  ")
                lines.append(f"{ind}}}")
            elif k in ("add", "mul", "matmul"):
                _, ipu, a, b, o = s
                name = {"add": "popxl.add", "mul": "popxl.mul", "matmul": "popxl.matmul"}[k]
                lines.append(
                    f'{ind}rt.kernel "{name}"({_names(a)}, {_names(b)}) -> ({_names(o)}) {{ipu.id = {ipu} : i64}} : ({T}, {T}) -> {T}'
                )
            elif k == "scaled_add_":
                _, ipu, a, b, _o = s
                lines.append(
                    f'{ind}rt.kernel "popxl.scaled_add_"({_names(a)}, {_names(b)}) -> ({_names(a)}) {{a = 5.0e-01 : f64, b = 5.0e-01 : f64, ipu.id = {ipu} : i64}} : ({T}, {T}) -> {T}'
                )
            elif k == "tanh":
                _, ipu, a, o = s
                lines.append(
                    f'{ind}rt.kernel "popxl.tanh"({_names(a)}) -> ({_names(o)}) {{ipu.id = {ipu} : i64}} : ({T}) -> {T}'
                )
            elif k == "copy":
                lines.append(f"{ind}rt.copy {_names(s[1])}, {_names(s[2])} : {T}, {T}")
            elif k == "cond":
                lines.append(f'{ind}rt.h2d "c", %c : memref<i1>')
            else:
                lines.append(f'{ind}rt.h2d "x", %v{s[1]} : {T}')

    emit(stmts, "  ")
    lines.append("}")
    return "\n".join(lines)


def _reference(stmts: list[tuple[Any, ...]], init: list[np.ndarray], x: np.ndarray, c: np.ndarray) -> list[np.ndarray]:
    v = [a.copy() for a in init]
    bufs = [*v, v[1].T]
    counters = {"x": 0, "c": 0}
    half = np.float32(0.5)

    def run(ss: list[tuple[Any, ...]]) -> None:
        for s in ss:
            k = s[0]
            if k == "loop":
                for _ in range(s[1]):
                    run(s[2])
            elif k == "if":
                cond = bool(c[counters["c"] % 3])
                counters["c"] += 1
                run(s[1] if cond else s[2])
            elif k == "add":
                r = bufs[s[2]] + bufs[s[3]]
                np.copyto(bufs[s[4]], r)
            elif k == "mul":
                r = bufs[s[2]] * bufs[s[3]]
                np.copyto(bufs[s[4]], r)
            elif k == "matmul":
                r = np.matmul(bufs[s[2]], bufs[s[3]])
                np.copyto(bufs[s[4]], r)
            elif k == "scaled_add_":
                r = bufs[s[2]] * half + bufs[s[3]] * half
                np.copyto(bufs[s[2]], r)
            elif k == "tanh":
                np.copyto(bufs[s[3]], np.tanh(bufs[s[2]]))
            elif k == "copy":
                np.copyto(bufs[s[2]], bufs[s[1]].copy())
            elif k == "cond":
                counters["c"] += 1
            else:
                np.copyto(bufs[s[1]], x[counters["x"] % 3])
                counters["x"] += 1

    run(stmts)
    return v


def _compile(text: str, **kw: Any) -> Executable:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # loads wrapping around num_host_transfers
        return compile_program(_parse(text), optimize=True, **kw)


def random_program(
    draw: Callable[..., Any], ipus: int, seed: int
) -> tuple[str, np.ndarray, np.ndarray, list[np.ndarray]]:
    """A random program on `ipus` virtual IPUs (hypothesis' `draw`): its text, the inputs
    `x` and `c` of three steps, and NumPy's state after the first step."""
    stmts = [("h2d", 0, False), ("cond",), *_Gen(draw, ipus).stmts(0)]
    rng = np.random.default_rng(seed)
    init = [rng.uniform(-1, 1, SHAPE).astype(np.float32) for _ in range(4)]
    x = rng.uniform(-1, 1, (3, *SHAPE)).astype(np.float32)
    c = rng.integers(0, 2, 3).astype(np.bool_)
    return _text(stmts, init), x, c, _reference(stmts, init, x, c)


def check_concurrent_equals_serial(text: str, x: np.ndarray, c: np.ndarray, expected: list[np.ndarray]) -> None:
    """The program run concurrently on 2 workers equals the serial plan bit for bit over two
    steps, and NumPy after the first."""
    conc = _compile(text, workers=2)
    ser = _compile(text, concurrent=False)
    for step in range(2):
        try:
            conc.run({"x": x, "c": c})
        except Exception as e:
            raise AssertionError(f"{e}\n{text}\n{conc.sources[0]}") from e
        ser.run({"x": x, "c": c})
        for i in range(4):
            a, b = conc.get_state(f"v{i}"), ser.get_state(f"v{i}")
            assert np.array_equal(a, b, equal_nan=True), (step, i, text)
        if step == 0:
            for i in range(4):
                np.testing.assert_array_equal(conc.get_state(f"v{i}"), expected[i], err_msg=text)


def test_random_programs_concurrent_equals_serial_and_numpy() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=100, deadline=None, derandomize=True)
    @given(st.data(), st.integers(2, 3), st.integers(0, 2**31 - 1))
    def check(data: Any, ipus: int, seed: int) -> None:
        check_concurrent_equals_serial(*random_program(data.draw, ipus, seed))

    check()


def test_three_ipus_on_two_workers_and_a_loop_carried_dependency() -> None:
    """IPU 2 shares worker 0 with IPU 0; each iteration IPU 1 reads what IPU 0 wrote in the
    previous one, and IPU 0 overwrites what IPU 1 read (WAR across iterations)."""
    init = [np.full(SHAPE, k + 1, np.float32) for k in range(4)]
    stmts: list[tuple[Any, ...]] = [
        (
            "loop",
            5,
            [
                ("add", 1, 0, 2, 2),  # IPU 1: v2 = v0 + v2 (v0 from the previous iteration)
                ("mul", 0, 0, 3, 0),  # IPU 0: v0 = v0 * v3 (after IPU 1 read it)
                ("tanh", 2, 2, 3),  # IPU 2: v3 = tanh(v2)
            ],
        ),
    ]
    text = _text(stmts, init)
    exe = _compile(text, workers=2)
    assert exe.workers == 2
    x, c = np.zeros((3, *SHAPE), np.float32), np.zeros(3, np.bool_)
    exe.run()
    expected = _reference(stmts, init, x, c)
    for i in range(4):
        np.testing.assert_array_equal(exe.get_state(f"v{i}"), expected[i])


def test_large_matmuls_overlap_in_the_trace() -> None:
    """Two independent chains of 384x384 matmuls on IPU 0 and IPU 1: their trace rows
    overlap in time (BLAS releases the GIL); retried, the machine may be busy."""
    n = 384
    m = f"memref<{n}x{n}xf32>"
    text = f"""rt.program attributes {{num_host_transfers = 1 : i64, replication_factor = 1 : i64}} {{
  %a = rt.state "a" : {m}
  %b = rt.state "b" : {m}
  %c = rt.state "c" : {m}
  %d = rt.state "d" : {m}
  rt.loop 4 {{
    rt.kernel "popxl.matmul"(%a, %a) -> (%b) {{ipu.id = 0 : i64}} : ({m}, {m}) -> {m}
    rt.kernel "popxl.matmul"(%c, %c) -> (%d) {{ipu.id = 1 : i64}} : ({m}, {m}) -> {m}
  }}
}}"""
    exe = _compile(text, profile=True)
    assert exe.workers == 2 and exe.profile is not None
    rng = np.random.default_rng(0)
    exe.set_state("a", rng.standard_normal((n, n)).astype(np.float32))
    exe.set_state("c", rng.standard_normal((n, n)).astype(np.float32))
    for _ in range(5):
        prof = Profile(exe.profile, exe.profile.mark())
        exe.run()
        rows: dict[str, list[tuple[float, float]]] = {"IPU 0": [], "IPU 1": []}
        for e in prof.events():
            rows[e.info.row].append((float(e.start_ns), float(e.end_ns)))
        assert len(rows["IPU 0"]) == len(rows["IPU 1"]) == 4
        if _overlaps(rows["IPU 0"], rows["IPU 1"]):
            break
    else:
        pytest.fail("the two IPUs' matmuls never overlapped in 5 runs")
    a = exe.get_state("a")
    np.testing.assert_allclose(exe.get_state("b"), a @ a, rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------------------------------
# xl-run --serial; buffers are not shared between IPUs
# ------------------------------------------------------------------------------------

TWO_IPUS = """rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %a = rt.state "a" = dense<[[0.5, 0.25], [0.75, 0.125]]> : tensor<2x2xf32> : memref<2x2xf32>
  %b = rt.state "b" = dense<[[0.5, -1.0], [2.0, 0.25]]> : tensor<2x2xf32> : memref<2x2xf32>
  %t = rt.alloc : memref<2x2xf32>
  %u = rt.alloc : memref<2x2xf32>
  rt.loop 3 {
    rt.kernel "popxl.matmul"(%a, %a) -> (%t) {ipu.id = 0 : i64} : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
    rt.copy %t, %u : memref<2x2xf32>, memref<2x2xf32>
    rt.kernel "popxl.tanh"(%u) -> (%u) {ipu.id = 1 : i64} : (memref<2x2xf32>) -> memref<2x2xf32>
    rt.kernel "popxl.add"(%b, %u) -> (%b) {ipu.id = 1 : i64} : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
    rt.kernel "popxl.mul"(%a, %a) -> (%a) {ipu.id = 0 : i64} : (memref<2x2xf32>, memref<2x2xf32>) -> memref<2x2xf32>
  }
}
"""


def test_xl_run_serial_flag(tmp_path: Path) -> None:
    from tests.helpers.tool_runner import xl_run

    prog = tmp_path / "two_ipus.mlir"
    prog.write_text(TWO_IPUS)
    outs = {}
    for flags in ((), ("--serial",)):
        path = tmp_path / f"vars{len(flags)}.npz"
        trace = tmp_path / f"trace{len(flags)}.json"
        code, _, err = xl_run(str(prog), "--steps", "2", "--save-vars", str(path), "--trace", str(trace), *flags)
        assert code == 0, err
        outs[flags] = dict(np.load(path))
        names = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"] if e["name"] == "thread_name"}
        assert {"IPU 0", "IPU 1"} <= names
        # concurrently the copy runs on its destination's IPU (its own copies row)
        assert ("copies (IPU 1)" in names) == (not flags)
    for k in ("a", "b"):
        assert np.array_equal(outs[()][k], outs[("--serial",)][k])
    a = np.array([[0.5, 0.25], [0.75, 0.125]], np.float32)
    b = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
    for _ in range(6):  # 2 steps x 3 iterations, in NumPy
        b = b + np.tanh(a @ a)
        a = a * a
    np.testing.assert_allclose(outs[()]["b"], b, rtol=1e-6)
    np.testing.assert_array_equal(outs[()]["a"], a)


def test_buffer_reuse_keeps_ipus_apart() -> None:
    """rt-reuse-buffers never gives a buffer of one IPU the storage of another's: in the
    lowered pipelined MNIST, every temporary is used by kernels of one IPU only."""
    from xdsl.dialects.builtin import IntegerAttr

    from xl.compiler.driver import DEFAULT_PIPELINE, RT_PIPELINE, lower
    from xl.dialects.ipu import IPU_ATTR

    ir, *_ = _mnist_pipeline(2)
    module = lower(ir._module, f"{DEFAULT_PIPELINE},{RT_PIPELINE}")
    program = next(op for op in module.ops if isinstance(op, rt.ProgramOp))
    users: dict[Any, set[int]] = {}
    for op in program.walk():
        ipu = op.attributes.get(IPU_ATTR)
        if isinstance(op, rt.KernelOp) and isinstance(ipu, IntegerAttr) and "rt.view" not in op.attributes:
            for v in op.operands:
                if isinstance(v.owner, rt.AllocOp):
                    users.setdefault(v, set()).add(ipu.value.data)
    assert users and all(len(s) == 1 for s in users.values())
    assert {next(iter(s)) for s in users.values()} == {0, 1}


def test_numpy_error_handling_of_the_caller_applies_in_workers() -> None:
    """np.errstate(over="raise") around a run: an overflow in a kernel on IPU 1 (a worker
    thread) raises FloatingPointError naming the op, as it does serially."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2,), popxl.float32, "x")
        ys = popxl.d2h_stream((2,), popxl.float32, "y")
        with popxl.ipu(0):
            x = ops.host_load(xs, "x") * 2.0
            x1 = x.copy_to_ipu(1)
        with popxl.ipu(1):
            ops.host_store(ys, x1 * x1)
    big = {xs: np.array([1e30, 1.0], np.float32)}
    for concurrent in (True, False):
        with popxl.Session(ir, "cpu", concurrent=concurrent) as session:
            assert session._exe.workers == (2 if concurrent else 1)
            with np.errstate(over="ignore"):
                assert np.isinf(session.run(big)[ys][0])
            with np.errstate(over="raise"), pytest.raises(FloatingPointError, match=r"on IPU 1\) failed"):
                session.run(big)  # (in this thread: np.errstate is per thread)


# ------------------------------------------------------------------------------------
# Steps of two executables at the same time (from two threads)
# ------------------------------------------------------------------------------------

PING_PONG = f"""rt.program attributes {{num_host_transfers = 1 : i64, replication_factor = 1 : i64}} {{
  %a = rt.state "a" = dense<0.5> : tensor<4x4xf32> : {T}
  %b = rt.state "b" = dense<0.25> : tensor<4x4xf32> : {T}
  %c = rt.state "c" = dense<0.125> : tensor<4x4xf32> : {T}
  rt.kernel "popxl.tanh"(%a) -> (%a) {{ipu.id = 0 : i64}} : ({T}) -> {T}
  rt.kernel "popxl.add"(%b, %c) -> (%b) {{ipu.id = 1 : i64}} : ({T}, {T}) -> {T}
  rt.kernel "popxl.add"(%c, %b) -> (%c) {{ipu.id = 2 : i64}} : ({T}, {T}) -> {T}
  rt.kernel "popxl.mul"(%b, %c) -> (%b) {{ipu.id = 1 : i64}} : ({T}, {T}) -> {T}
}}"""


class _Gate:
    """A pool worker's job queue that makes the named threads' steps put their jobs in a
    forced order: a thread in `wait_for` first waits for its event, a thread in `then_set`
    sets its event after its put."""

    def __init__(self, jobs: Any, wait_for: dict[str, threading.Event], then_set: dict[str, threading.Event]) -> None:
        self.jobs, self.wait_for, self.then_set = jobs, wait_for, then_set

    def put(self, job: Any) -> None:
        me = threading.current_thread().name
        if me in self.wait_for:
            self.wait_for[me].wait(30)
        self.jobs.put(job)
        if me in self.then_set:
            self.then_set[me].set()


def test_two_executables_stepping_at_once_take_different_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 3-IPU executables step at the same time from threads A and B; in each, IPU 1
    waits for IPU 2 and IPU 2 for IPU 1. Forced order of the jobs: A's stream 1 on the first
    worker, then B's streams 1 and 2, then A's stream 2. On one shared pool that queued B's
    stream 1 behind A's (waiting for A's stream 2) and A's stream 2 behind B's (waiting for
    B's stream 1): a deadlock. A step takes idle workers, so B (started once A has taken
    them) runs on others; both finish with the numbers of the serial plan."""
    from xl.runtime import thread_pool

    exes = [_compile(PING_PONG, workers=3) for _ in range(2)]
    assert all(e.workers == 3 for e in exes)
    serial = _compile(PING_PONG, concurrent=False)
    for e in (*exes, serial):
        e.run()  # the pool has the workers a step takes
    first, second = thread_pool.take_workers(2)
    thread_pool.give_back([first, second])  # the next step takes these two, in this order
    a_on_first, b_on_second = threading.Event(), threading.Event()
    monkeypatch.setattr(first, "jobs", _Gate(first.jobs, {"B": a_on_first}, {"A": a_on_first}))
    monkeypatch.setattr(second, "jobs", _Gate(second.jobs, {"A": b_on_second}, {"B": b_on_second}))
    errors: list[BaseException] = []

    def step(i: int) -> None:
        try:
            exes[i].run()
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)
        finally:
            b_on_second.set()  # B's step is over (it put nothing on the second worker)

    threads = [threading.Thread(target=step, args=(i,), name=n, daemon=True) for i, n in enumerate("AB")]
    threads[0].start()
    assert a_on_first.wait(30)  # A has taken its workers (B starts after that)
    threads[1].start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "the two steps deadlocked"
    assert not errors, errors
    serial.run()
    for e in exes:
        for name in "abc":
            assert np.array_equal(e.get_state(name), serial.get_state(name)), name
    # the gated workers went back to the pool with the others: no worker is taken
    assert not (_stream_threads() - {w.thread.name for w in thread_pool._IDLE})
