"""Seeing a run: the profiled plan, the Chrome trace, the per-op table, errors naming ops.

Expected rows, counts and names are worked out from the programs (transfers per step, the
repeat count, the op ids `print_schedule` shows), not read back from the profiler.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl.printing import schedule_str
from xl.compiler import compile_module
from xl.runtime.kernels import DataRangeError
from xl.runtime.profile import OpRow, Profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _ids(graph: popxl.Graph, op_type: str) -> list[str]:
    """`Type.N` of every op of `op_type` as print_schedule shows them."""
    return re.findall(rf"\b({op_type}\.\d+) \(", schedule_str(graph))


def _strip_timing(src: str) -> str:
    return "".join(line for line in src.splitlines(True) if not re.match(r"\s*(_t = _pc\(\)|_ev\(\()", line))


def _norm(src: str) -> str:
    """Scratch arrays are named by id(): number them in order of appearance."""
    m: dict[str, str] = {}
    return re.sub(r"s_\d+", lambda x: m.setdefault(x.group(0), f"s_{len(m)}"), src)


# ------------------------------------------------------------------------------------
# A small program with a repeat of 3: matmul + gelu per iteration
# ------------------------------------------------------------------------------------


def _repeat_program(n: int = 3):
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 4), popxl.float32, "x")
        ys = popxl.d2h_stream((2, 4), popxl.float32, "y")
        w = popxl.variable(np.eye(4, dtype=np.float32) * 0.5, name="w")
        body = ir.create_graph(
            lambda x, w: ops.gelu(ops.matmul(x, w)),
            popxl.TensorSpec((2, 4), popxl.float32),
            popxl.TensorSpec((4, 4), popxl.float32),
        )
        x = ops.host_load(xs, "x")
        (y,) = ops.repeat(body, n, x, inputs_dict={body.inputs[1]: w})
        ops.host_store(ys, y)
    return ir, xs, ys, body


def test_profile_off_plan_is_unchanged_and_on_only_adds_timing() -> None:
    ir, *_ = _repeat_program()
    plain = popxl.Session(ir, "cpu")
    profiled = popxl.Session(ir, "cpu", profile=True)
    # the program compiled without the source names the session adds: same plan
    bare = compile_module(ir._module)
    assert plain._exe.profile is None and bare.profile is None
    assert _norm(plain._exe.sources[0]) == _norm(bare.sources[0])
    src = profiled._exe.sources[0]
    assert "_pc()" in src and "_ev((" in src
    assert _norm(_strip_timing(src)) == _norm(plain._exe.sources[0])


def test_repeat_counts_and_table_totals() -> None:
    n, runs = 3, 2
    ir, xs, ys, body = _repeat_program(n)
    session = popxl.Session(ir, "cpu", profile=True)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with session:
        session.run({xs: x})  # outside the profile block: not counted
        with session.profile() as prof:
            outs = [session.run({xs: x}) for _ in range(runs)]
            out = outs[-1]
        session.run({xs: x})
    ref = x
    for _ in range(n):
        ref = ref @ (np.eye(4, dtype=np.float32) * 0.5)
        ref = 0.5 * ref * (1 + np.tanh(np.sqrt(2 / np.pi) * (ref + 0.044715 * ref**3)))
    np.testing.assert_allclose(out[ys], ref, rtol=1e-3, atol=1e-3)
    (mm,) = _ids(body, "MatMul")
    (gelu,) = _ids(body, "Gelu")
    events = prof.events()
    labels = Counter(e.info.label for e in events)
    # matmul and gelu once per iteration, one load and one store per run
    assert labels[mm] == n * runs and labels[gelu] == n * runs
    assert labels["HostLoad x"] == runs and labels["HostStore y"] == runs
    assert all(e.info.graph == body.name for e in events if e.info.label in (mm, gelu))
    assert len(prof.steps()) == runs
    by_type = prof.key_averages()
    rows = {r.key: r for r in by_type}
    assert rows["MatMul"].count == n * runs and rows["Gelu"].count == n * runs
    # the table's totals equal the trace's kernel slices
    trace = prof.chrome_trace()
    kernel_slices = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] not in ("step", "graph call")]
    assert len(kernel_slices) == sum(r.count for r in by_type) == len(events)
    assert by_type.total_ns / 1000 == pytest.approx(sum(e["dur"] for e in kernel_slices), rel=1e-9, abs=1e-6)
    for r in by_type:
        assert r.total_ns == sum(e.duration_ns for e in events if e.info.op_type == r.key)
    # sorted by total time, percentages sum to 100
    totals = [r.total_ns for r in by_type]
    assert totals == sorted(totals, reverse=True)
    text = by_type.table()
    pct = [float(p) for p in re.findall(r"([\d.]+)%", text)]
    assert sum(pct) == pytest.approx(100, abs=0.5)
    by_count = by_type.table(sort_by="count")
    counts = [int(c) for c in re.findall(r"^(?!Total)\S.*?\s(\d+)\s+[\d.]+(?:us|ms|s)\s", by_count, re.M)]
    assert counts == sorted(counts, reverse=True) and len(counts) == len(by_type)
    with pytest.raises(ValueError, match="sort_by"):
        by_type.table(sort_by="name")
    sites = {r.key: r for r in prof.key_averages("site")}
    assert sites[f"{mm} @ {body.name}"].count == n * runs
    # the session's summary covers every run (4), both tables
    summary = session.profile_summary(print_table=False)
    assert "Op type" in summary and "Call site" in summary
    all_rows = {r.key: r for r in session._all_runs().key_averages()}
    assert all_rows["MatMul"].count == n * (runs + 2)


def _run_steps(session: popxl.Session, xs, ys, profiled: set[int], steps: int = 5) -> list[np.ndarray]:
    """`steps` runs on different inputs, those in `profiled` inside a profile block."""
    outs = []
    with session:
        for k in range(steps):
            x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4) * (k + 1)
            if k in profiled:
                with session.profile():
                    outs.append(session.run({xs: x})[ys])
            else:
                outs.append(session.run({xs: x})[ys])
    return outs


def _training_program():
    """A training step: y = x @ w, loss-free SGD w -= 0.1 * x^T @ y (the weight changes
    every run, so a profile block that lost the device state would change later results)."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 4), popxl.float32, "x")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        w = popxl.variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, name="w")
        x = ops.host_load(xs, "x")
        y = ops.matmul(x, w)
        ops.host_store(ys, y)
        ops.scaled_add_(w, ops.matmul(ops.transpose(x), y), b=-0.1)
    return ir, xs, ys, w


def test_profile_works_on_any_session() -> None:
    ir, xs, ys, w = _training_program()
    ref_session = popxl.Session(ir, "cpu")
    ref = _run_steps(ref_session, xs, ys, set())
    session = popxl.Session(ir, "cpu")  # no profile=True
    plain = session._exe
    src = plain.sources[0]
    assert plain.profile is None
    outs = _run_steps(session, xs, ys, {1, 2, 4})
    # the same numbers as without profiling, bit for bit, and the same trained weight
    for a, b in zip(outs, ref, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(session.get_tensor_data(w), ref_session.get_tensor_data(w))
    # outside the blocks the session runs its own plan again, its code unchanged
    assert session._exe is plain and plain.profile is None and plain.sources[0] == src
    assert _norm(src) == _norm(compile_module(ir._module).sources[0])
    # the profiled plan was built once and holds the three profiled runs
    rows = {r.key: r for r in session._all_runs().key_averages()}
    assert len(session._all_runs().steps()) == 3
    assert rows["MatMul"].count + rows.get("GemmAcc", OpRow("", 0, 0)).count == 3 * 2
    summary = session.profile_summary(print_table=False)
    assert "Op type" in summary and "Call site" in summary


def test_profile_block_state_and_nesting() -> None:
    """Inside a block the device state is the profiled plan's: reads and writes of variables
    in the block, nested blocks, and an exception leaving the block."""
    ir, xs, ys, w = _training_program()
    session = popxl.Session(ir, "cpu")
    x = np.ones((2, 4), np.float32)
    new_w = np.full((4, 3), 0.5, np.float32)
    with session:
        with session.profile() as outer:
            session.write_variable_data(w, new_w)
            with session.profile() as inner:
                y = session.run({xs: x})[ys]
            np.testing.assert_allclose(y, x @ new_w, rtol=1e-6)
            after = session.get_tensor_data(w)
            np.testing.assert_allclose(after, new_w - 0.1 * x.T @ y, rtol=1e-6)
        assert len(inner.steps()) == 1 and len(outer.steps()) == 1
        np.testing.assert_array_equal(session.get_tensor_data(w), after)
        with pytest.raises(RuntimeError, match="stop"), session.profile():
            session.run({xs: x})
            raise RuntimeError("stop")
        assert session._exe.profile is None  # back on the unprofiled plan
        y2 = session.run({xs: x})[ys]
    np.testing.assert_allclose(y2, x @ (after - 0.1 * x.T @ (x @ after)), rtol=1e-5)
    with pytest.raises(ValueError, match="no run has been profiled"):
        popxl.Session(ir, "cpu").profile_summary(print_table=False)


def test_profile_errors() -> None:
    ir, *_ = _repeat_program()
    with pytest.raises(TypeError, match="profile must be a bool or a trace file path"):
        popxl.Session(ir, "cpu", profile=3)  # pyright: ignore[reportArgumentType]  # bad input: the test checks its error
    recorder = popxl.Session(ir, "cpu", profile=True)._exe.profile
    assert recorder is not None  # profile=True
    with pytest.raises(ValueError, match="group_by"):
        Profile(recorder).key_averages("nope")


# ------------------------------------------------------------------------------------
# Shapes and FLOPs (torch.profiler's record_shapes / with_flops), torch's column names
# ------------------------------------------------------------------------------------


def _flops_program():
    """Matrix products (2-D, batched with broadcast, matrix-vector), a grouped strided
    convolution and a transposed one; every result stored."""
    rng = np.random.default_rng(0)

    def var(shape: tuple[int, ...], name: str) -> popxl.Tensor:
        return popxl.variable(rng.standard_normal(shape).astype(np.float32), name=name)

    ir = popxl.Ir()
    results = {}
    with ir.main_graph:
        a, b, v = var((3, 5, 4), "a"), var((4, 6), "b"), var((4,), "v")
        results["bmm"] = ops.matmul(a, b)  # (3, 5, 6), K = 4
        results["mv"] = ops.matmul(a, v)  # (3, 5), K = 4
        x, w = var((2, 4, 7, 7), "x"), var((6, 2, 3, 3), "w")
        results["conv"] = ops.conv(x, w, stride=(2, 2), padding=(1, 1, 1, 1), groups=2)  # (2, 6, 4, 4)
        wt = var((6, 3, 2, 2), "wt")
        results["convt"] = ops.conv_transpose(results["conv"], wt, stride=(2, 2))  # (2, 3, 8, 8)
        streams = {}
        for k, t in results.items():
            streams[k] = popxl.d2h_stream(t.shape, t.dtype, k)
            ops.host_store(streams[k], t)
    return ir, results, streams


# FLOPs worked out by hand: 2 x multiply-adds
_EXPECTED_FLOPS = {
    "bmm": 2 * (3 * 5 * 6) * 4,  # every result element is K = 4 multiply-adds
    "mv": 2 * (3 * 5) * 4,
    "conv": 2 * (2 * 6 * 4 * 4) * (4 // 2) * 3 * 3,  # per output: C / groups x kernel taps
    "convt": 2 * (2 * 6 * 4 * 4) * 3 * 2 * 2,  # per input element: M / groups x kernel taps
}
_EXPECTED_INPUTS = {
    "bmm": ([[3, 5, 4], [4, 6]], ["float32", "float32"]),
    "mv": ([[3, 5, 4], [4]], ["float32", "float32"]),
    "conv": ([[2, 4, 7, 7], [6, 2, 3, 3]], ["float32", "float32"]),
    "convt": ([[2, 6, 4, 4], [6, 3, 2, 2]], ["float32", "float32"]),
}


def test_trace_has_input_shapes_and_flops(tmp_path: Path) -> None:
    ir, results, streams = _flops_program()
    session = popxl.Session(ir, "cpu")
    with session, session.profile() as prof:
        session.run()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    data = json.loads(path.read_text())
    _check_trace(data)
    kernels = [e for e in data["traceEvents"] if e["ph"] == "X" and e["cat"] not in ("step", "graph call")]
    ids = {
        "bmm": _ids(ir.main_graph, "MatMul")[0],
        "mv": _ids(ir.main_graph, "MatMul")[1],
        "conv": _ids(ir.main_graph, "Conv")[0],
        "convt": _ids(ir.main_graph, "ConvTranspose")[0],
    }
    for key, op in ids.items():
        (event,) = [e for e in kernels if e["args"].get("source") == op]
        args = event["args"]
        assert args["Input Dims"] == _EXPECTED_INPUTS[key][0], key
        assert args["Input type"] == _EXPECTED_INPUTS[key][1], key
        assert args["flops"] == _EXPECTED_FLOPS[key], key
    # a kernel of no matrix product or convolution carries shapes but no FLOPs
    stores = [e for e in kernels if e["name"].startswith("HostStore")]
    assert len(stores) == 4 and all("flops" not in e["args"] and len(e["args"]["Input Dims"]) == 1 for e in stores)
    # the table sums them per row; with the input shapes, one row per shape
    table = prof.key_averages()
    rows = {r.key: r for r in table}
    assert rows["MatMul"].flops == _EXPECTED_FLOPS["bmm"] + _EXPECTED_FLOPS["mv"]
    assert rows["Conv"].flops == _EXPECTED_FLOPS["conv"] and rows["ConvTranspose"].flops == _EXPECTED_FLOPS["convt"]
    shaped = {(r.key, r.input_shapes) for r in prof.key_averages(group_by_input_shape=True)}
    assert ("MatMul", "[[3, 5, 4], [4, 6]]") in shaped and ("MatMul", "[[3, 5, 4], [4]]") in shaped
    text = prof.key_averages(group_by_input_shape=True).table(sort_by="flops")
    assert "Input shapes" in text and "FLOPs" in text
    assert text.splitlines()[2].startswith("Conv ")  # the most FLOPs first (6912)


def test_flops_against_torch() -> None:
    """Every op class declaring FLOPs (the popxl ops and the rt kernels), against torch's FLOP
    counter on the same shapes (torch.utils.flop_counter): matmul, conv, conv_transpose, the
    weight gradient of a conv, the folded gemm."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from xl.dialects import get_all_dialects
    from xl.dialects.rt_kernels import RT_KERNEL_OPS, kernel_class
    from xl.dialects.traits import Flops, flop_count

    def counted(fn) -> int:
        with FlopCounterMode(display=False) as mode:
            fn()
        return mode.get_total_flops()

    def t(*shape: int, grad: bool = False):
        return torch.randn(*shape, requires_grad=grad)

    # (inputs, results, props) of each kernel and the torch computation of the same product
    x, w = t(2, 4, 7, 7), t(6, 4, 3, 3, grad=True)
    cases = {
        "popxl.matmul": [
            (((3, 5, 4), (4, 6)), ((3, 5, 6),), {}, lambda: torch.matmul(t(3, 5, 4), t(4, 6))),
            (((2, 1, 5, 4), (3, 4, 6)), ((2, 3, 5, 6),), {}, lambda: torch.matmul(t(2, 1, 5, 4), t(3, 4, 6))),
        ],
        "popxl.matmul_pow2scaled": [(((5, 4), (4, 6), ()), ((5, 6),), {}, lambda: torch.matmul(t(5, 4), t(4, 6)))],
        "popxl.conv": [
            (((2, 4, 7, 7), (6, 2, 3, 3)), ((2, 6, 4, 4),), {},
             lambda: torch.nn.functional.conv2d(t(2, 4, 7, 7), t(6, 2, 3, 3), stride=2, padding=1, groups=2)),
        ],
        "popxl.conv_transpose": [
            (((2, 6, 4, 4), (6, 3, 2, 2)), ((2, 3, 8, 8),), {},
             lambda: torch.nn.functional.conv_transpose2d(t(2, 6, 4, 4), t(6, 3, 2, 2), stride=2)),
        ],
        # the weight gradient alone (the input needs none), the backward's count less the
        # forward's; groups=1: torch's backward formula leaves groups out (it counts a grouped
        # weight gradient `groups` times over)
        "popxl.conv_weight_grad": [
            (((2, 6, 4, 4), (2, 4, 7, 7)), ((6, 4, 3, 3),), {},
             lambda: torch.nn.functional.conv2d(x, w, stride=2, padding=1).sum().backward()),
        ],
        # c (4, 3) += x^T (4, 2) @ dy (2, 3), as rt-fold-update makes it of an SGD step
        "xl.gemm_acc": [
            (((2, 4), (2, 3), (4, 3)), ((4, 3),), {"trans_a": True, "trans_b": False},
             lambda: torch.addmm(t(4, 3), t(2, 4).T, t(2, 3))),
            (((4, 2), (3, 2), (4, 3)), ((4, 3),), {"trans_a": False, "trans_b": True},
             lambda: torch.addmm(t(4, 3), t(4, 2), t(3, 2).T)),
        ],
        # one replica's product (rt-fold-all-reduce-gemm): the sum over replicas and the
        # update are not counted, as for the all-reduce and the SGD step it replaces
        "xl.all_reduce_gemm_update": [
            (((2, 4), (2, 3), (4, 3)), ((4, 3),), {"trans_a": True, "trans_b": False},
             lambda: torch.addmm(t(4, 3), t(2, 4).T, t(2, 3))),
        ],
    }  # fmt: skip
    classes = [c for d in get_all_dialects().values() for c in d().operations] + list(RT_KERNEL_OPS)
    declaring = {cls.name for cls in classes if cls.has_trait(Flops)}
    assert declaring == set(cases)  # a new op declaring FLOPs needs a case here
    for name, entries in cases.items():
        cls = kernel_class(name)
        assert cls is not None, name
        for ins, outs, props, fn in entries:
            want = counted(fn)
            if name == "popxl.conv_weight_grad":
                want -= counted(lambda: torch.nn.functional.conv2d(x, w, stride=2, padding=1))
            assert flop_count(cls, ins, outs, props) == want, name


def test_table_accepts_torch_column_names() -> None:
    ir, results, streams = _flops_program()
    session = popxl.Session(ir, "cpu")
    with session, session.profile() as prof:
        session.run()
        session.run()
    table = prof.key_averages()
    keys = {
        "self_cpu_time_total": lambda r: r.total_ns,
        "cpu_time_total": lambda r: r.total_ns,
        "cpu_time": lambda r: r.mean_ns,
        "self_cpu_time": lambda r: r.mean_ns,
        "count": lambda r: r.count,
        "flops": lambda r: r.flops,
    }
    for name, key in keys.items():
        text = table.table(sort_by=name, row_limit=3)
        shown = [line.split()[0] for line in text.splitlines()[2:-2]]
        want = sorted(table.rows, key=lambda r: (-key(r), r.key))[:3]
        assert shown == [r.key for r in want], name
        assert [r["key"] for r in table.as_dict(sort_by=name, row_limit=3)["rows"]] == shown
    row = {r.key: r for r in table}["MatMul"]
    assert row.cpu_time_total == row.self_cpu_time_total == row.total_ns / 1000
    assert row.cpu_time == pytest.approx(row.total_ns / 1000 / row.count)
    for bad, hint in (("cuda_time_total", "run on the host"), ("cpu_memory_usage", "memory_report"), ("name", "")):
        with pytest.raises(ValueError, match=rf"sort_by must be one of .*self_cpu_time_total.*{hint}"):
            table.table(sort_by=bad)
    with pytest.raises(ValueError, match="row_limit"):
        table.table(row_limit=-1)
    # the JSON form: valid JSON, the same rows and totals
    doc = json.loads(table.to_json())
    assert doc["group_by"] == "type" and doc["count"] == sum(r.count for r in table)
    assert doc["flops"] == 2 * sum(_EXPECTED_FLOPS.values())
    assert {r["key"]: r["count"] for r in doc["rows"]} == {r.key: r.count for r in table}
    assert sum(r["percent"] for r in doc["rows"]) == pytest.approx(100)
    assert doc["total_us"] == pytest.approx(sum(r["total_us"] for r in doc["rows"]))


def test_session_profile_path_writes_trace(tmp_path: Path) -> None:
    ir, xs, *_ = _repeat_program()
    path = tmp_path / "t.json"
    session = popxl.Session(ir, "cpu", profile=str(path))
    with session:
        session.run({xs: np.ones((2, 4), np.float32)})
    data = json.loads(path.read_text())
    names = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    # the repeat's loop-carried value is copied back each iteration: the copies row
    assert names == {"IPU 0", "host transfers", "copies"}


# ------------------------------------------------------------------------------------
# The pipelined MNIST program (seed 003), built small
# ------------------------------------------------------------------------------------


def _check_trace(data: dict) -> None:
    """Every event well formed; per row, slices nest: steps hold everything, a graph call
    holds its kernels, kernels never overlap."""
    assert isinstance(data["traceEvents"], list)
    for e in data["traceEvents"]:
        assert e["ph"] in ("X", "M")
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and isinstance(e["name"], str)
        assert isinstance(e["args"], dict)
        if e["ph"] == "X":
            assert isinstance(e["cat"], str)
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float)
            assert e["ts"] >= 0 and e["dur"] >= 0
    rows: dict[tuple[int, int], list[dict]] = {}
    for e in data["traceEvents"]:
        if e["ph"] == "X":
            rows.setdefault((e["pid"], e["tid"]), []).append(e)
    eps = 1e-3  # microseconds: rounding of ns to us
    for evs in rows.values():
        steps = [e for e in evs if e["cat"] == "step"]
        calls = [e for e in evs if e["cat"] == "graph call"]
        kernels = [e for e in evs if e["cat"] not in ("step", "graph call")]
        for e in calls + kernels:
            assert any(s["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + eps for s in steps)
        kernels.sort(key=lambda e: e["ts"])
        for a, b in zip(kernels, kernels[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + eps
        for c in calls:
            inside = [k for k in kernels if c["ts"] - eps <= k["ts"] and k["ts"] + k["dur"] <= c["ts"] + c["dur"] + eps]
            assert len(inside) == c["args"]["kernels"]
            assert all(k["args"].get("graph") == c["name"] for k in inside)
            for k in kernels:  # no kernel straddles a call's edge
                end = k["ts"] + k["dur"]
                assert end <= c["ts"] + eps or k["ts"] >= c["ts"] + c["dur"] - eps or k in inside


@pytest.fixture(scope="module")
def pipeline_session():
    sys.path.insert(0, str(EXAMPLES))
    import mnist_pipeline as ex

    opts = ex.Options()
    opts.train.device = "cpu"
    opts.train.micro_batch_size = 2
    opts.train.gradient_accumulation = 6
    np.random.seed(0)
    session, streams, _, loss_stream, layers = ex.train_program(opts)
    return session, streams, loss_stream, layers, opts


def test_pipelined_mnist_trace(pipeline_session, tmp_path: Path) -> None:
    session, (img, labels), loss_stream, layers, opts = pipeline_session
    prof_session = popxl.Session(session.ir, "cpu")  # a concurrent plan, profiled by the block
    n = opts.train.gradient_accumulation
    rng = np.random.default_rng(0)
    inputs = {
        img: rng.standard_normal((n, 2, 784)).astype(np.float32),
        labels: rng.integers(0, 10, (n, 2)).astype(np.int32),
    }
    with prof_session, prof_session.profile() as prof:
        out = prof_session.run(inputs)
    assert prof_session._exe.profile is None and prof_session._profiled_exe.workers == 2
    # same losses as the session without profiling
    with session:
        ref = session.run(inputs)
    np.testing.assert_array_equal(out[loss_stream], ref[loss_stream])
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    data = json.loads(path.read_text())
    _check_trace(data)
    meta = {(e["pid"], e["tid"]): e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    # virtual IPUs run concurrently: each IPU's stream has its own copies / transfers row;
    # IPU 0's ops that worker 1 runs (xl.runtime.stream_balance: optimiser steps) their own
    assert set(meta.values()) == {
        "IPU 0",
        "IPU 1",
        "IPU 0 on worker 1",
        "copies (IPU 0)",
        "copies (IPU 1)",
        "host transfers (IPU 0)",
        "host transfers (IPU 1)",
    }
    procs = [e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"]
    assert procs == ["replica 0"]
    slices = [e for e in data["traceEvents"] if e["ph"] == "X"]
    per_row = Counter(meta[e["pid"], e["tid"]] for e in slices if e["cat"] not in ("step", "graph call"))
    assert per_row["IPU 0"] > 0 and per_row["IPU 1"] > 0
    # host transfers: image and labels loaded, the loss stored, once per micro batch
    host = Counter(
        e["name"] for e in slices if meta[e["pid"], e["tid"]].startswith("host transfers") and e["cat"] != "step"
    )
    assert host == {"HostLoad image": n, "HostLoad labels": n, "HostStore loss": n}
    # fc1's forward matmul runs once per micro batch, on IPU 0; fc4's on IPU 1
    fc1_mm = _ids(layers["fc1"].fwd.graph, "MatMul")
    fc4_mm = _ids(layers["fc4"].fwd.graph, "MatMul")
    assert len(fc1_mm) == 1 and len(fc4_mm) == 1
    fc1 = [e for e in slices if e["args"].get("source", "").split("+")[0] == fc1_mm[0]]
    fc4 = [e for e in slices if e["args"].get("source", "").split("+")[0] == fc4_mm[0]]
    assert len(fc1) == n and {meta[e["pid"], e["tid"]] for e in fc1} == {"IPU 0"}
    assert len(fc4) == n and {meta[e["pid"], e["tid"]] for e in fc4} == {"IPU 1"}
    assert all(e["args"]["graph"] == layers["fc1"].fwd.graph.name for e in fc1)
    # graph calls: the forward graphs of fc1 (IPU 0) and fc3 (IPU 1) once per micro batch
    calls = Counter((e["name"], meta[e["pid"], e["tid"]]) for e in slices if e["cat"] == "graph call")
    assert calls[layers["fc1"].fwd.graph.name, "IPU 0"] == n
    assert calls[layers["fc3"].fwd.graph.name, "IPU 1"] == n


def test_pipelined_mnist_two_replicas_rows(tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    import mnist_pipeline as ex

    opts = ex.Options()
    opts.train.device = "cpu"
    opts.train.micro_batch_size = 2
    opts.train.gradient_accumulation = 6
    opts.train.data_parallel = 2
    np.random.seed(0)
    session, (img, labels), _, loss_stream, _ = ex.train_program(opts)
    prof_session = popxl.Session(session.ir, "cpu", profile=True)
    n = opts.train.gradient_accumulation
    inputs = {
        img: np.ones((n, 2, 2, 784), np.float32),
        labels: np.ones((n, 2, 2), np.int32),
    }
    with prof_session, prof_session.profile() as prof:
        prof_session.run(inputs)
    data = prof.chrome_trace()
    _check_trace(data)
    procs = sorted(e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name")
    assert procs == ["replica 0", "replica 1"]
    # the gradients' all-reduces (one per variable gradient) are on both replicas' rows
    reduces = Counter(
        e["pid"]
        for e in data["traceEvents"]
        if e["ph"] == "X" and e["args"].get("type", "").startswith("ReplicatedAllReduce")
    )
    assert reduces[0] == reduces[1] > 0


# ------------------------------------------------------------------------------------
# Run-time errors name the popxl op
# ------------------------------------------------------------------------------------


def _slice_program(replicas: int = 1):
    """A dynamic_slice whose offset comes from the host: an offset out of range fails the
    kernel (gather gives zeros instead)."""
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        off_s = popxl.h2d_stream((1,), popxl.uint32, "off")
        ys = popxl.d2h_stream((2, 3), popxl.float32, "y")
        table = popxl.variable(np.arange(12, dtype=np.float32).reshape(4, 3), name="table")
        off = ops.host_load(off_s, "off")
        y = ops.dynamic_slice(table, off, axes=[0], sizes=[2], no_overlap=False)
        ops.host_store(ys, y)
    return ir, off_s


def test_data_range_error_names_the_op() -> None:
    ir, off_s = _slice_program()
    (op,) = _ids(ir.main_graph, "DynamicSlice")
    for profile in (False, True):
        session = popxl.Session(ir, "cpu", profile=profile)
        with session:
            ok = session.run({off_s: np.array([2], np.uint32)})
            np.testing.assert_array_equal(list(ok.values())[0], [[6, 7, 8], [9, 10, 11]])
            with pytest.raises(
                DataRangeError,
                match=rf"^{re.escape(op)} \(popxl.dynamic_slice in graph main_graph\) failed: .*offset 7 .*out of range",
            ):
                session.run({off_s: np.array([7], np.uint32)})


def test_error_names_the_op_in_the_straightforward_plan() -> None:
    from popxl.session import _source_names

    ir, off_s = _slice_program()
    (op,) = _ids(ir.main_graph, "DynamicSlice")
    with _source_names(ir):
        exe = compile_module(ir._module, optimize=False)
    with pytest.raises(DataRangeError, match=rf"^{re.escape(op)} \(popxl.dynamic_slice"):
        exe.run({"off": np.array([9], np.uint32)})


def test_error_names_the_replica() -> None:
    ir, off_s = _slice_program(replicas=2)
    (op,) = _ids(ir.main_graph, "DynamicSlice")
    session = popxl.Session(ir, "cpu")
    with session, pytest.raises(DataRangeError, match=rf"^{re.escape(op)} .* on replica 1 failed"):
        session.run({off_s: np.array([[1], [5]], np.uint32)})


def test_numpy_error_in_a_repeat_names_the_op() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((3,), popxl.float32, "x")
        ys = popxl.d2h_stream((3,), popxl.float32, "y")
        body = ir.create_graph(lambda x: ops.div(ops.exp(x), x), popxl.TensorSpec((3,), popxl.float32))
        (y,) = ops.repeat(body, 2, ops.host_load(xs, "x"))
        ops.host_store(ys, y)
    (div,) = _ids(body, "Div")
    (exp,) = _ids(body, "Exp")
    session = popxl.Session(ir, "cpu")
    with session:
        with (
            np.errstate(divide="raise", invalid="raise"),
            pytest.raises(
                # exp and div run as one fused elementwise kernel: both named
                FloatingPointError,
                match=rf"^{re.escape(exp)}\+{re.escape(div)} \(xl.fused in graph {re.escape(body.name)}\) failed: divide by zero",
            ),
        ):
            session.run({xs: np.array([1.0, 0.0, 2.0], np.float32)})


# ------------------------------------------------------------------------------------
# xl-run --trace / --op-times
# ------------------------------------------------------------------------------------


def test_xl_run_trace(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    trace = tmp_path / "trace.json"
    prog = EXAMPLES / "ir" / "linear.mlir"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "xl.tools.run",
            str(prog),
            f"x={tmp_path / 'x.npy'}",
            "--steps",
            "3",
            "--trace",
            str(trace),
            "--op-times",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(trace.read_text())
    _check_trace(data)
    # linear.mlir: the matmul (line 5) and the bias add (line 6) of @linear, once per step
    slices = [e for e in data["traceEvents"] if e["ph"] == "X" and e["cat"] not in ("step", "graph call")]
    mm = [e for e in slices if "MatMul@5:3" in e["args"].get("source", "")]
    assert len(mm) == 3 and all(e["args"]["graph"] == "linear" for e in mm)
    assert Counter(e["name"] for e in slices if e["cat"] in ("h2d", "d2h")) == {"HostLoad x": 3, "HostStore y": 3}
    assert "Op type" in r.stderr and "MatMul@5:3" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "xl.tools.run",
            str(prog),
            f"x={tmp_path / 'x.npy'}",
            "--trace",
            str(tmp_path / "no" / "t.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr and "--trace" in r.stderr


def test_xl_run_op_times_json(tmp_path: Path) -> None:
    from tests.helpers.tool_runner import xl_run

    np.save(tmp_path / "x.npy", np.ones((2, 4), np.float32))
    prog = str(EXAMPLES / "ir" / "linear.mlir")
    code, out, err = xl_run(prog, f"x={tmp_path / 'x.npy'}", "--steps", "2", "--op-times", "--json")
    assert code == 0, err
    doc = json.loads(err)
    by_type = {r["key"]: r for r in doc["type"]["rows"]}
    by_site = {r["key"]: r for r in doc["site"]["rows"]}
    # the (2, 4) @ (4, 3) matmul of @linear (line 5; its bias add folded in), twice: 2 x 2 x 3 x 4 FLOPs each
    (mm,) = [r for k, r in by_site.items() if k.startswith("MatMul@5:3")]
    assert mm["count"] == 2 and mm["flops"] == 2 * (2 * 2 * 3 * 4)
    assert by_type["HostLoad"]["count"] == 2 and by_type["HostStore"]["count"] == 2
    assert doc["type"]["flops"] == doc["site"]["flops"] == mm["flops"]
    assert "y = " in out  # the outputs still printed
