"""Memory per virtual IPU (`xl.runtime.memory`, `Session.memory_report`, `xl-run --memory`).

The report's numbers are compared with sizes computed here: by hand for a small 2-IPU `rt`
program (every buffer's lifetime written out), from the seed's model for MNIST (weights,
accumulators and Adam state per layer, stash ring buffers from micro-batch and depth),
and by an independent walk of the lowered program (all temporaries; the activation peak
by checking every op position against every buffer's uses).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue

import popxl
import popxl.ops as ops
from popxl.printing import schedule_str
from tests.helpers.tool_runner import xl_run
from xl.compiler.memory import lowered_program
from xl.dialects import rt
from xl.runtime.memory import format_bytes, memory_report
from xl.tools.context import xl_context
from xl.tools.parse import parse_source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# x, a on IPU 0 (the matmul writes a); b, bd, y, t on IPU 1 (b is written by a copy and by
# the gelu on IPU 1; its view v is read in the loop, so b lives until the loop ends).
_PROGRAM = """
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 2 : i64} {
  %w0 = rt.state "w0" : memref<4x8xf32>
  %w1 = rt.state "w1" : memref<8x2xf64>
  %st = rt.state "pipeline.stash0.h.buffer" : memref<2x8xf32>
  %cnt = rt.state "pipeline.stash0.h.stash_counter" : memref<1xui32>
  %c = rt.const dense<2.0> : tensor<f64> : memref<f64>
  %x = rt.alloc : memref<2x4xf32>
  rt.h2d "x", %x : memref<2x4xf32>
  %a = rt.alloc : memref<2x8xf32>
  rt.kernel "popxl.matmul"(%x, %w0) -> (%a) {ipu.id = 0 : i64} : (memref<2x4xf32>, memref<4x8xf32>) -> memref<2x8xf32>
  rt.copy %a, %st : memref<2x8xf32>, memref<2x8xf32>
  rt.kernel "popxl.increment_mod_"(%cnt) -> (%cnt) {ipu.id = 0 : i64, increment = 1.0 : f64, modulus = 3.0 : f64} : (memref<1xui32>) -> memref<1xui32>
  %b = rt.alloc : memref<2x8xf32>
  rt.copy %a, %b : memref<2x8xf32>, memref<2x8xf32>
  rt.kernel "popxl.gelu"(%b) -> (%b) {ipu.id = 1 : i64} : (memref<2x8xf32>) -> memref<2x8xf32>
  %v = rt.alloc : memref<16xf32>
  rt.kernel "popxl.reshape"(%b) -> (%v) {rt.view, ipu.id = 1 : i64, shape = array<i64: 16>} : (memref<2x8xf32>) -> memref<16xf32>
  %bd = rt.alloc : memref<2x8xf64>
  rt.kernel "popxl.cast"(%b) -> (%bd) {ipu.id = 1 : i64, dtype = "float64"} : (memref<2x8xf32>) -> memref<2x8xf64>
  %y = rt.alloc : memref<2x2xf64>
  rt.kernel "popxl.matmul"(%bd, %w1) -> (%y) {ipu.id = 1 : i64} : (memref<2x8xf64>, memref<8x2xf64>) -> memref<2x2xf64>
  rt.kernel "popxl.mul"(%y, %c) -> (%y) {ipu.id = 1 : i64} : (memref<2x2xf64>, memref<f64>) -> memref<2x2xf64>
  rt.loop 2 {
    %t = rt.alloc : memref<16xf32>
    rt.kernel "popxl.relu"(%v) -> (%t) {ipu.id = 1 : i64} : (memref<16xf32>) -> memref<16xf32>
    rt.d2h "t", %t : memref<16xf32>
  }
  rt.d2h "y", %y : memref<2x2xf64>
}
"""


def _program(text: str) -> rt.ProgramOp:
    module = parse_source(xl_context(), text.encode(), "test.mlir")
    (program,) = [op for op in module.ops if isinstance(op, rt.ProgramOp)]
    return program


def test_two_ipu_program_by_hand() -> None:
    r = memory_report(_program(_PROGRAM))
    assert r.replication_factor == 2
    assert [m.ipu for m in r.ipus] == [0, 1]
    m0, m1 = r.ipu(0), r.ipu(1)
    # variables: w0 4*8 f32, w1 8*2 f64
    assert (m0.variables, m1.variables) == (4 * 8 * 4, 8 * 2 * 8)
    # the stash ring buffer (written by a copy of a, an IPU-0 buffer) and its counter
    assert (m0.stashes, m1.stashes) == (2 * 8 * 4 + 4, 0)
    assert (m0.remote_staging, m1.remote_staging) == (0, 0)
    assert (m0.constants, m1.constants) == (0, 8)
    # IPU 0: x (32 B) and a (64 B) both live at the matmul
    assert (m0.activations_peak, m0.activations_allocated) == (32 + 64, 32 + 64)
    # IPU 1: b (64), bd (128), y (32), t (64); at the f64 matmul b, bd and y are live;
    # the view v has no storage
    assert m1.activations_allocated == 64 + 128 + 32 + 64
    assert m1.activations_peak == 64 + 128 + 32
    assert "popxl.matmul" in m1.peak_at and "popxl.matmul" in m0.peak_at
    assert m1.total == 128 + 8 + 224 and r.total == m0.total + m1.total
    kinds = {b.name: (b.kind, b.ipu) for b in r.buffers}
    assert kinds["w0"] == ("variable", 0) and kinds["w1"] == ("variable", 1)
    assert kinds["pipeline.stash0.h.buffer"] == ("stash", 0)
    assert len([b for b in r.buffers if b.kind == "activation"]) == 6  # not the view
    with pytest.raises(KeyError, match="no virtual IPU 3"):
        r.ipu(3)
    table = r.table()
    assert "2 replicas" in table and table.splitlines()[1].split()[:3] == ["IPU", "variables", "stashes"]
    assert [line.split()[0] for line in table.splitlines()[3:6]] == ["0", "1", "all"]


def test_unplaced_program_is_ipu_0() -> None:
    r = memory_report(
        _program("""
rt.program {
  %x = rt.alloc : memref<3xf32>
  rt.h2d "x", %x : memref<3xf32>
  %y = rt.alloc : memref<3xf32>
  rt.kernel "popxl.relu"(%x) -> (%y) : (memref<3xf32>) -> memref<3xf32>
  %z = rt.alloc : memref<3xf32>
  rt.kernel "popxl.relu"(%y) -> (%z) : (memref<3xf32>) -> memref<3xf32>
  rt.d2h "z", %z : memref<3xf32>
}
""")
    )
    (m,) = r.ipus
    assert m.ipu == 0 and m.variables == 0 and m.stashes == 0
    # x and y at the first relu, y and z at the second: never three at once
    assert (m.activations_peak, m.activations_allocated) == (24, 36)


# ---------------------------------------------------------------------------------------
# Independent measures of a lowered program
# ---------------------------------------------------------------------------------------


def _size(v: SSAValue) -> int:
    t = v.type
    assert isinstance(t, MemRefType)
    return int(np.prod(t.get_shape())) * np.dtype(_np_dtype(t)).itemsize


def _np_dtype(t: MemRefType) -> np.dtype:
    from xl.dialects.utils import dtype_of

    return dtype_of(t)


def _independent(program: rt.ProgramOp) -> tuple[int, int]:
    """(all temporaries, peak of live temporaries), all IPUs together: a temporary is an
    rt.alloc that is not a view's output; it is live at every op position between the
    first and last op (of the alloc's block, counting nested ops at their ancestor) that
    uses it or a view of it."""
    ops = [op for op in program.walk() if op is not program]
    index = {op: i for i, op in enumerate(ops)}
    views: dict[SSAValue, SSAValue] = {}
    for op in ops:
        if isinstance(op, rt.KernelOp) and "rt.view" in op.attributes:
            ins, outs = op.io()
            views[outs[0]] = ins[0]

    def base(v: SSAValue) -> SSAValue:
        return base(views[v]) if v in views else v

    def last_index(op: Operation) -> int:
        inner = [o for r in op.regions for b in r.blocks for o in b.walk()]
        return max([index[op], *(index[o] for o in inner)])

    allocs = [op.result for op in ops if isinstance(op, rt.AllocOp) and op.result not in views]
    spans: list[tuple[int, int, int]] = []
    for v in allocs:
        block = v.owner.parent
        positions: list[tuple[int, int]] = []
        for op in ops:
            if any(base(o) is v for o in op.operands):
                a: Operation | None = op
                while a is not None and a.parent is not block:
                    a = a.parent_op()
                assert a is not None, op  # the allocation's block encloses every use
                positions.append((index[a], last_index(a)))
        if positions:
            spans.append((min(p[0] for p in positions), max(p[1] for p in positions), _size(v)))
    peak = max((sum(s for a, b, s in spans if a <= i <= b) for i in range(len(ops))), default=0)
    return sum(_size(v) for v in allocs), peak


def _check_against_independent(report, program: rt.ProgramOp) -> None:
    allocated, peak = _independent(program)
    assert sum(m.activations_allocated for m in report.ipus) == allocated
    # the peaks per IPU add up to at least the peak of everything together, and each is at
    # most that: with one IPU they are equal
    per_ipu = [m.activations_peak for m in report.ipus]
    assert max(per_ipu) <= peak <= sum(per_ipu)
    if len(report.ipus) == 1:
        assert per_ipu == [peak]
    assert sum(m.variables + m.stashes for m in report.ipus) == sum(
        _size(op.result) for op in program.body.block.ops if isinstance(op, rt.StateOp)
    )
    assert sum(m.constants for m in report.ipus) == sum(
        _size(op.result) for op in program.walk() if isinstance(op, rt.ConstOp)
    )


def _mnist_example(name: str):
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def test_mnist_training_program(capsys: pytest.CaptureFixture[str]) -> None:
    ex = _mnist_example("mnist")
    np.random.seed(0)
    session, *_ = ex.train_program(8, "cpu", 0.05)
    ir = session.ir
    report = session.memory_report()
    printed = capsys.readouterr().out
    assert printed.strip() == report.text() and printed.startswith(report.table())
    (m,) = report.ipus
    # Net 784-512-512-512-10: the weights and biases are all the variables
    sizes = [784 * 512, 512, 512 * 512, 512, 512 * 512, 512, 512 * 10, 10]
    assert m.variables == 4 * sum(sizes)
    assert (
        sum(int(np.prod(v.shape)) * np.dtype(v.dtype.as_numpy()).itemsize for v in ir.main_graph.variables)
        == m.variables
    )
    assert m.stashes == 0 and m.remote_staging == 0
    program = lowered_program(ir._module)
    _check_against_independent(report, program)
    # the largest activation at once is at least the batch's 8x512 f32 hidden layers
    assert m.activations_peak >= 2 * 8 * 512 * 4


def test_pipelined_mnist_per_ipu() -> None:
    ex = _mnist_example("mnist_pipeline")
    opts = ex.Options()
    opts.train.device = "cpu"
    np.random.seed(0)
    session, *_ = ex.train_program(opts)
    report = session.memory_report(print_table=False)
    assert [m.ipu for m in report.ipus] == [0, 1]

    def layer_bytes(n_in: int, n_out: int) -> int:
        # weight and bias, each with its accumulator (f32), Adam first order (f16),
        # second order (f32) and step counter (f32 scalar); one mean_accum_counter per layer
        elems = n_in * n_out + n_out
        return elems * (4 + 4 + 2 + 4) + 2 * 4 + 4

    # seed 003: fc1, fc2 on IPU 0; fc3, fc4 on IPU 1
    assert report.ipu(0).variables == layer_bytes(784, 512) + layer_bytes(512, 512)
    assert report.ipu(1).variables == layer_bytes(512, 512) + layer_bytes(512, 10)
    # stage 0 -> stage 2 stashes on IPU 0, depth 3, micro-batch 5: the image and three
    # 512-wide activations, each with a stash and a restore counter (ui32)
    mb, depth = opts.train.micro_batch_size, 3
    assert report.ipu(0).stashes == depth * mb * (784 + 3 * 512) * 4 + 4 * 2 * 4
    assert report.ipu(1).stashes == 0
    program = lowered_program(session.ir._module)
    _check_against_independent(report, program)
    # every kernel placed on IPU k whose outputs are temporaries counts them on IPU k
    owners = {b.name: b.ipu for b in report.buffers}
    assert owners["fc1.weight"] == 0 and owners["fc4.weight"] == 1


def test_xl_run_memory(tmp_path: Path) -> None:
    text = (EXAMPLES / "ir" / "linear.mlir").read_text()
    code, out, err = xl_run(str(EXAMPLES / "ir" / "linear.mlir"), "--memory")
    assert code == 0, err
    module = parse_source(xl_context(), text.encode(), "linear.mlir")
    table = memory_report(lowered_program(module)).table()
    assert out.splitlines()[:4] == table.splitlines()[:4]  # the figures; ops named by position below
    row = out.splitlines()[3].split()
    # weight 4x3 + bias 3 (f32) = 60 B; x 2x4 and y 2x3 (f32) live together = 56 B
    assert row[:3] == ["0", "60", "B"] and "56 B" in out
    # at the peak: the loaded x and the result of the add written at line 6, column 3
    assert "IPU 0: the 2 tensors live at the activation peak (56 B, op" in out
    assert re.search(r"^ +32 B  %x \(HostLoad x\) \[\(2, 4\) float32\]$", out, re.M), out
    assert re.search(r"^ +24 B  %y \(Add@6:3\) \[\(2, 3\) float32\]$", out, re.M), out
    bad = tmp_path / "bad.mlir"
    bad.write_text(text.replace("popxl.add %xw, %b", "popxl.add %xw, %nope"))
    code, out, err = xl_run(str(bad), "--memory")
    assert code == 1 and f"{bad}:" in err and "error" in err


# ---------------------------------------------------------------------------------------
# In the program's terms: tensors at the peak, largest buffers, modules, liveness, JSON
# ---------------------------------------------------------------------------------------


def _named_program():
    """Two layers: `enc/w1`, `enc/b1` (a name scope) and `dec.w2` (a dotted name)."""
    rng = np.random.default_rng(0)
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((16, 8), popxl.float32, "x")
        ys = popxl.d2h_stream((16, 4), popxl.float32, "y")
        with popxl.name_scope("enc"):
            w1 = popxl.variable(rng.standard_normal((8, 32)).astype(np.float32), name="w1")
            b1 = popxl.variable(np.zeros(32, np.float32), name="b1")
        w2 = popxl.variable(rng.standard_normal((32, 4)).astype(np.float32), name="dec.w2")
        x = ops.host_load(xs, "x")
        h = ops.gelu(ops.matmul(x, w1) + b1)
        y = ops.matmul(h, w2)
        ops.host_store(ys, y)
    return ir


def _schedule_outputs(ir: popxl.Ir) -> dict[str, list[tuple[str, str]]]:
    """print_schedule's main graph: each op's results as (`%N`, `[shape dtype]`)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line in schedule_str(ir.main_graph).splitlines():
        m = re.match(r"\s+(\S+) \(.*\) -> \((.*)\)$", line)
        if m:
            out[m.group(1)] = re.findall(r"(%\d+) (\[[^\]]*\])", m.group(2))
    return out


def test_report_in_program_terms(capsys: pytest.CaptureFixture[str]) -> None:
    ir = _named_program()
    session = popxl.Session(ir, "cpu")
    report = session.memory_report()
    printed = capsys.readouterr().out
    (m,) = report.ipus
    # the tensors live at the peak, named as print_schedule names them, add up to the peak
    outputs = _schedule_outputs(ir)
    live = report.peak_tensors(0)
    assert live and sum(b.nbytes for b, _ in live) == m.activations_peak
    for b, w in live:
        assert w is not None
        name, graph = re.fullmatch(r"(%\d+) @ (\S+)", w.tensor).groups()  # pyright: ignore[reportOptionalMemberAccess]
        assert graph == "main_graph"
        if w.op.startswith("HostLoad"):  # a stream's load, named by its stream
            (op,) = [k for k in outputs if k.startswith("HostLoad.")]
        else:
            op = w.op.split("+")[-1]  # a fused kernel writes its last op's result
        shown = dict(outputs[op])
        assert name in shown, (w, outputs)
        assert shown[name] == f"[{b.shape} {np.dtype(b.dtype).name}]"
        assert f"{w.tensor} ({w.op})" in printed
    # the largest buffers: every buffer sorted by size
    sizes = sorted((b.nbytes for b in report.buffers if b.kind != "remote"), reverse=True)
    assert [b.nbytes for b in report.largest(3)] == sizes[:3]
    assert report.largest(1, kinds=["variable"])[0].name == "enc/w1"  # 8 x 32 f32 = 1 KiB
    top = report.largest(1)[0]  # the 16 x 32 hidden activation, 2 KiB, named as print_schedule does
    assert top.shape == (16, 32) and re.fullmatch(r"%\d+ @ main_graph", top.tensor)
    # variables by module: the name scope and the dotted prefix, from the variables' sizes
    mods = {r.module: (r.nbytes, r.variables) for r in report.modules()}
    assert mods == {"enc": ((8 * 32 + 32) * 4, 2), "dec": (32 * 4 * 4, 1)}
    assert "variables by module:" in printed and re.search(r"1\.12 KiB  enc  \(2 buffers, IPU 0\)", printed)
    # liveness: at every position, the bytes of the activations whose live range holds it
    steps = report.liveness(0)
    for p in range(report.num_ops):
        level = [b for q, b in steps if q <= p][-1]
        want = sum(
            b.nbytes for b in report.buffers if b.kind == "activation" and b.live and b.live[0] <= p <= b.live[1]
        )
        assert level == want, p
    assert max(b for _, b in steps) == m.activations_peak


def test_report_json_and_liveness_picture(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    ex = _mnist_example("mnist_pipeline")
    opts = ex.Options()
    opts.train.device = "cpu"
    np.random.seed(0)
    session, *_ = ex.train_program(opts)
    report = session.memory_report(print_table=False)
    doc = json.loads(report.to_json())
    assert [d["ipu"] for d in doc["ipus"]] == [0, 1]
    for d, m in zip(doc["ipus"], report.ipus, strict=True):
        assert (d["variables"], d["stashes"], d["activations_peak"], d["total"]) == (
            m.variables,
            m.stashes,
            m.activations_peak,
            m.total,
        )
        assert sum(t["bytes"] for t in d["peak_tensors"]) == m.activations_peak
        assert all(re.fullmatch(r"%\d+ @ .+", t["tensor"]) for t in d["peak_tensors"] if "tensor" in t)
        assert max(level for _, level in d["liveness"]) == m.activations_peak
    assert len(doc["buffers"]) == len(report.buffers)
    assert {r["module"] for r in doc["modules"] if r["depth"] == 1} >= {"fc1", "fc2", "fc3", "fc4", "pipeline"}
    # the picture: one panel per virtual IPU, each with its resident band and activations
    svg = report.write_liveness(tmp_path / "live.svg")
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    panels = {g.get("id"): g for g in root.iter(f"{ns}g")}
    assert set(panels) == {"ipu0", "ipu1"}
    for k, g in enumerate(panels.values()):
        title = "".join(t.text or "" for t in g.iter(f"{ns}text"))
        assert f"IPU {k}:" in title and format_bytes(report.ipu(k).total) in title
        (poly,) = g.iter(f"{ns}polygon")
        points = [tuple(map(float, p.split(","))) for p in (poly.get("points") or "").split()]
        assert len(points) >= 4
        tips = [t.text or "" for t in g.iter(f"{ns}title")]  # the peak's tensors on hover
        assert len(tips) == 1 and f"op {report.ipu(k).peak_position}" in tips[0]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"xl-popxl\[plot\].*\.svg"):
            report.write_liveness(tmp_path / "live.png")
    else:
        png = report.write_liveness(tmp_path / "live.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    with pytest.raises(ValueError, match=r"must end in \.svg or \.png"):
        report.write_liveness(tmp_path / "live.pdf")
    with pytest.raises(FileNotFoundError, match="no directory"):
        report.write_liveness(tmp_path / "nowhere" / "live.svg")


def test_xl_run_memory_json_and_liveness(tmp_path: Path) -> None:
    prog = str(EXAMPLES / "ir" / "linear.mlir")
    code, out, err = xl_run(prog, "--memory", "--json")
    assert code == 0, err
    doc = json.loads(out)
    (ipu,) = doc["ipus"]
    assert (ipu["variables"], ipu["activations_peak"]) == (60, 56)
    assert sorted(t["bytes"] for t in ipu["peak_tensors"]) == [24, 32]
    code, out, err = xl_run(prog, "--liveness", str(tmp_path / "l.svg"))
    assert code == 0, err
    assert (tmp_path / "l.svg").stat().st_size > 0 and "memory per virtual IPU" in out
    code, out, err = xl_run(prog, "--json")
    assert code == 1 and "--json prints the --memory report or the --op-times tables" in err
    code, out, err = xl_run(prog, "--liveness", str(tmp_path / "l.pdf"))
    assert code == 1 and "must end in .svg or .png" in err
