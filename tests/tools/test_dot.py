"""Graph pictures: `popxl.Ir.dot_checkpoint` and `xl-opt --emit=dot` (`xl.compiler.dot`).

The DOT text is read back with a small DOT parser written here (statements, quoted IDs with
escapes, attribute lists, nested `subgraph` clusters) and compared with what the program
has: one box node per scheduled op labelled as `print_schedule` names it, one edge per
operand use labelled as `print_schedule` prints the tensor, a cluster per virtual IPU
holding exactly the ops placed there, call edges to the called graph.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import popxl
import popxl.ops as ops
from popxl.printing import schedule_str
from tests.helpers.tool_runner import xl_opt
from xl.compiler import dot as dotmod
from xl.dialects import rt
from xl.dialects.call import called_graph_names
from xl.dialects.graph import ConstantOp, D2HStreamOp, GraphOp, H2DStreamOp, MainGraphOp, OutputOp, VariableOp
from xl.dialects.ipu import IPU_ATTR
from xl.tools.context import xl_context
from xl.tools.parse import parse_source

# ---------------------------------------------------------------------------------------
# A DOT parser (the subset Graphviz documents for digraphs: statements, attribute lists,
# subgraphs; IDs bare or double-quoted with backslash escapes)
# ---------------------------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<arrow>->)|(?P<punct>[\[\]{};,=])|(?P<id>[A-Za-z0-9_.\-]+))')


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"DOT: cannot read {text[pos : pos + 20]!r}")
        tok = m.group("str") or m.group("arrow") or m.group("punct") or m.group("id")
        out.append(tok)
        pos = m.end()
    return out


def _unquote(tok: str) -> str:
    if not tok.startswith('"'):
        return tok
    body = tok[1:-1]
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), body)


@dataclass
class Dot:
    name: str
    attrs: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    node_clusters: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node -> cluster path
    clusters: dict[str, dict[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def cluster_label(self, cid: str) -> str:
        return self.clusters[cid].get("label", "")

    def labels_of(self, node: str) -> tuple[str, ...]:
        return tuple(self.cluster_label(c) for c in self.node_clusters[node])

    def boxes(self) -> dict[str, str]:
        return {n: a["label"] for n, a in self.nodes.items() if a.get("shape") == "box"}

    def into(self, node: str) -> list[str]:
        return [a["label"] for s, d, a in self.edges if d == node and a.get("style") != "dashed"]


def parse_dot(text: str) -> Dot:
    toks = _tokens(text)
    i = 0

    def take(expected: str | None = None) -> str:
        nonlocal i
        tok = toks[i]
        if expected is not None and tok != expected:
            raise ValueError(f"DOT: expected {expected!r}, got {tok!r} at token {i}")
        i += 1
        return tok

    def ident() -> str:
        tok = take()
        if tok in ("[", "]", "{", "}", ";", ",", "=", "->"):
            raise ValueError(f"DOT: expected an ID, got {tok!r} at token {i - 1}")
        return _unquote(tok)

    def attr_list() -> dict[str, str]:
        attrs: dict[str, str] = {}
        while toks[i] == "[":
            take("[")
            while toks[i] != "]":
                k = ident()
                take("=")
                attrs[k] = ident()
                if toks[i] in (",", ";"):
                    take()
            take("]")
        return attrs

    assert take() == "digraph"
    dot = Dot(_unquote(take()))

    def body(path: tuple[str, ...], attrs_out: dict[str, str]) -> None:
        take("{")
        while toks[i] != "}":
            tok = take()
            if tok == "subgraph":
                cid = ident()
                dot.clusters[cid] = {}
                body((*path, cid), dot.clusters[cid])
            elif tok in ("node", "edge", "graph") and toks[i] == "[":
                attr_list()
            elif toks[i] == "=":
                take("=")
                attrs_out[_unquote(tok)] = ident()
            elif toks[i] == "->":
                src = _unquote(tok)
                take("->")
                dst = ident()
                dot.edges.append((src, dst, attr_list()))
                for n in (src, dst):
                    dot.node_clusters.setdefault(n, path)
            else:
                n = _unquote(tok)
                dot.nodes.setdefault(n, {}).update(attr_list())
                dot.node_clusters.setdefault(n, path)
            if toks[i] == ";":
                take(";")
        take("}")

    body((), dot.attrs)
    assert i == len(toks), "DOT: text after the closing brace"
    return dot


def test_parser_reads_escapes_and_clusters() -> None:
    d = parse_dot(
        'digraph "g" { a=b; subgraph "cluster_1" { label="x \\"y\\"\\nz"; "n 1" [shape=box, label="L"]; }\n "n 1" -> m [label="%1"]; }'
    )
    assert d.attrs == {"a": "b"}
    assert d.clusters["cluster_1"]["label"] == 'x "y"\nz'
    assert d.node_clusters["n 1"] == ("cluster_1",)
    assert d.edges == [("n 1", "m", {"label": "%1"})]
    with pytest.raises(ValueError):
        parse_dot("digraph g { a -> ; }")


# ---------------------------------------------------------------------------------------
# A popxl program with a subgraph on two virtual IPUs
# ---------------------------------------------------------------------------------------


def _two_ipu_program() -> tuple[popxl.Ir, popxl.Graph]:
    ir = popxl.Ir()

    def layer(x: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        with popxl.ipu(0):
            y = x @ w
        y = ops.ipu_copy(y, 1, 0)
        with popxl.ipu(1):
            return ops.gelu(y)

    with ir.main_graph:
        xs = popxl.h2d_stream((2, 4), popxl.float32, "x")
        w = popxl.variable(np.ones((4, 3), np.float32), name="w")
        g = ir.create_graph(layer, popxl.TensorSpec((2, 4), popxl.float32), w.spec)
        with popxl.ipu(0):
            x = ops.host_load(xs)
        (y,) = ops.call(g, x, w)
        with popxl.ipu(1):
            y = ops.relu(y)
        ys = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(ys, y)
    return ir, g


_SCHEDULE_LINE = re.compile(r"^    (\S+) \((.*)\) -> \((.*)\)$")
_TENSOR = re.compile(r"%\d+ \[[^\]]*\]")


def _schedule(graph: popxl.Graph) -> list[tuple[str, list[str]]]:
    """(op name, operand strings) per line of `print_schedule`."""
    out = []
    for line in schedule_str(graph).splitlines():
        m = _SCHEDULE_LINE.match(line)
        if m:
            out.append((m.group(1), _TENSOR.findall(m.group(2))))
    return out


def test_dot_checkpoint_matches_print_schedule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POPART_DOT_CHECKS", raising=False)
    monkeypatch.setattr(dotmod, "dot_program", lambda: None)
    ir, g = _two_ipu_program()
    ir.dot_checkpoint("FWD", tmp_path)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", g.name)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["FWD_main.dot", f"FWD_{safe}.dot"])
    for graph, fname in ((ir.main_graph, "FWD_main.dot"), (g, f"FWD_{safe}.dot")):
        d = parse_dot((tmp_path / fname).read_text())
        boxes = d.boxes()
        sched = _schedule(graph)
        # one box per scheduled op, named as print_schedule names it
        assert sorted(boxes.values()) == sorted(name for name, _ in sched)
        by_label = {v: k for k, v in boxes.items()}
        for name, operands in sched:
            # one edge per operand, labelled with the tensor as print_schedule prints it
            assert Counter(d.into(by_label[name])) == Counter(operands), name
    # the shapes and dtypes on the edges are the program's
    sub = parse_dot((tmp_path / f"FWD_{safe}.dot").read_text())
    labels = {a["label"] for _, _, a in sub.edges}
    assert {re.sub(r"%\d+ ", "", s) for s in labels} == {"[(2, 4) float32]", "[(4, 3) float32]", "[(2, 3) float32]"}
    # placement: MatMul on ipu 0, the copy and Gelu on ipu 1 (in clusters of those names)
    placed = {lab.split(".")[0]: sub.labels_of(n) for n, lab in sub.boxes().items()}
    assert placed == {"MatMul": ("ipu 0",), "IpuCopy": ("ipu 1",), "Gelu": ("ipu 1",)}
    # graph inputs and output are nodes with edges
    eggs = sorted(a["label"] for a in sub.nodes.values() if a.get("shape") == "egg")
    assert eggs == ["input 0: x=%1", "input 1: w=%2", "output 0"]
    # main: the call links to the subgraph's file; HostLoad on ipu 0, Relu on ipu 1
    main = parse_dot((tmp_path / "FWD_main.dot").read_text())
    (call,) = [n for n, lab in main.boxes().items() if lab.startswith("Call.")]
    (link,) = [dst for src, dst, a in main.edges if src == call and a.get("style") == "dashed"]
    assert main.nodes[link]["URL"] == f"FWD_{safe}.dot"
    assert (tmp_path / main.nodes[link]["URL"]).exists()
    placed = {lab.split(".")[0]: main.labels_of(n) for n, lab in main.boxes().items()}
    assert placed == {"HostLoad": ("ipu 0",), "Call": (), "Relu": ("ipu 1",), "HostStore": ()}
    assert [a["label"] for a in main.nodes.values() if a.get("color") == "blue"] == ['Variable "w"']


def test_dot_checkpoint_checks_and_save_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dotmod, "dot_program", lambda: None)
    ir, _ = _two_ipu_program()
    monkeypatch.setenv("POPART_DOT_CHECKS", "BWD:other")
    ir.dot_checkpoint("fwd", tmp_path / "a")
    assert not (tmp_path / "a").exists() or not list((tmp_path / "a").iterdir())
    ir.dot_checkpoint("bwd", tmp_path / "a")  # case-insensitive, as PopART
    assert (tmp_path / "a" / "bwd_main.dot").exists()
    monkeypatch.setenv("POPART_DOT_CHECKS", "ALL")
    ir.dot_checkpoint("later")  # save_dir stays the one given before
    assert (tmp_path / "a" / "later_main.dot").exists()
    monkeypatch.chdir(tmp_path)
    ir2, _ = _two_ipu_program()
    ir2.dot_checkpoint("here")  # default: the current directory
    assert (tmp_path / "here_main.dot").exists()
    with pytest.raises(ValueError, match="check must be a non-empty string"):
        ir2.dot_checkpoint("")


def test_dot_checks_option_log_dir_and_final(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PopART's rules: the option `dotChecks` and POPART_DOT_CHECKS select checkpoints; a
    checkpoint with neither sets `dotChecks` to ALL; `save_dir` becomes `logDir`; a
    Session writes FINAL when selected."""
    monkeypatch.setattr(dotmod, "dot_program", lambda: None)
    monkeypatch.delenv("POPART_DOT_CHECKS", raising=False)

    def names(d: Path) -> list[str]:
        return sorted(p.name for p in d.glob("*.dot"))

    ir, _ = _two_ipu_program()
    opts = ir._pb_ir.getSessionOptions()
    opts.dotChecks = {"final", "Bwd"}
    ir.dot_checkpoint("fwd", tmp_path / "a")
    ir.dot_checkpoint("bwd")
    assert opts.logDir == str(tmp_path / "a") and names(tmp_path / "a")[0].startswith("bwd_")
    popxl.Session(ir, "cpu")
    assert {n.split("_")[0] for n in names(tmp_path / "a")} == {"bwd", "FINAL"}

    ir2, _ = _two_ipu_program()
    ir2.dot_checkpoint("one", tmp_path / "b")  # nothing selected: every checkpoint
    assert ir2._pb_ir.getSessionOptions().dotChecks == {"ALL"}
    popxl.Session(ir2, "cpu")
    assert {n.split("_")[0] for n in names(tmp_path / "b")} == {"one", "FINAL"}

    monkeypatch.setenv("POPART_DOT_CHECKS", "")  # set, even empty: nothing is automatic
    ir3, _ = _two_ipu_program()
    ir3.dot_checkpoint("two", tmp_path / "c")
    popxl.Session(ir3, "cpu")
    assert not (tmp_path / "c").exists() or names(tmp_path / "c") == []
    ir4, _ = _two_ipu_program()  # no checkpoint and no checks: a Session writes nothing
    monkeypatch.chdir(tmp_path)
    popxl.Session(ir4, "cpu")
    assert names(tmp_path) == []


def test_dot_checkpoint_renders_svg_when_dot_is_installed(tmp_path: Path) -> None:
    if dotmod.dot_program() is None:
        pytest.skip("Graphviz dot is not installed")
    ir, _ = _two_ipu_program()
    ir.dot_checkpoint("SVG", tmp_path)
    svg = (tmp_path / "SVG_main.svg").read_text()
    assert "<svg" in svg and "HostLoad" in svg


# ---------------------------------------------------------------------------------------
# xl-opt --emit=dot on textual programs, high level and rt
# ---------------------------------------------------------------------------------------


def _module(text: str) -> ModuleOp:
    return parse_source(xl_context(), text.encode(), "test.mlir")


def _scheduled(module: ModuleOp) -> list:
    skip = (OutputOp, VariableOp, ConstantOp, H2DStreamOp, D2HStreamOp, GraphOp, MainGraphOp)
    return [op for op in module.walk() if op is not module and not isinstance(op, skip)]


def _pipelined_text() -> str:
    ir = popxl.Ir()
    import popxl_addons as addons

    with ir.main_graph:
        xs = popxl.h2d_stream((2,), popxl.float32, "x")
        ys = popxl.d2h_stream((2,), popxl.float32, "y")
        with addons.pipelined_execution(4) as p:
            with p.stage(0), popxl.ipu(0):
                x = ops.host_load(xs)
                x = ops.gelu(x).copy_to_ipu(1)
            with p.stage(1), popxl.ipu(1):
                ops.host_store(ys, ops.relu(x))
    ir.num_host_transfers = 4
    return ir.to_mlir()


def test_emit_dot_high_level_pipeline(tmp_path: Path) -> None:
    text = _pipelined_text()
    (tmp_path / "p.mlir").write_text(text)
    code, out, err = xl_opt(str(tmp_path / "p.mlir"), "--emit=dot")
    assert code == 0, err
    d = parse_dot(out)
    module = _module(text)
    ops_ = _scheduled(module)
    assert len(d.boxes()) == len(ops_)
    assert Counter(v.split(".")[0] for v in d.boxes().values()) == Counter(dotmod.op_type(o) for o in ops_)
    # one cluster per graph, named as the graph
    graphs = [op.graph_name for op in module.ops if isinstance(op, GraphOp)] + ["main"]
    graph_clusters = {c: a["label"] for c, a in d.clusters.items() if a["label"].startswith("Graph : ")}
    assert sorted(graph_clusters.values()) == sorted(f"Graph : {n}" for n in graphs)
    # every call has one dashed edge to its callee's cluster
    calls = [o for o in ops_ if called_graph_names(o)]
    call_edges = [a for _, _, a in d.edges if a.get("style") == "dashed"]
    assert len(calls) == len(call_edges) > 0
    expected = Counter(f"Graph : {n}" for o in calls for n in called_graph_names(o))
    assert Counter(d.cluster_label(a["lhead"]) for a in call_edges) == expected
    # placement: every op with ipu.id k lies in a cluster `ipu k`, the others in none
    boxes_by_ipu = Counter(next((lab for lab in d.labels_of(n) if lab.startswith("ipu ")), None) for n in d.boxes())
    want = Counter(f"ipu {o.attributes[IPU_ATTR].value.data}" if IPU_ATTR in o.attributes else None for o in ops_)
    assert boxes_by_ipu == want and want["ipu 0"] > 0 and want["ipu 1"] > 0
    # non-dashed edges: one per operand use of every op and graph output
    uses = sum(len(o.operands) for o in module.walk() if o is not module and not isinstance(o, GraphOp | MainGraphOp))
    assert len([e for e in d.edges if e[2].get("style") != "dashed"]) == uses


_RT = """
rt.program attributes {num_host_transfers = 3 : i64} {
  %acc = rt.state "acc" : memref<2xf32>
  %x = rt.alloc : memref<2xf32>
  rt.loop 3 {
    rt.h2d "x", %x : memref<2xf32>
    rt.kernel "popxl.add"(%acc, %x) -> (%acc) {ipu.id = 1 : i64} : (memref<2xf32>, memref<2xf32>) -> memref<2xf32>
  }
  %y = rt.alloc : memref<2x1xf32>
  rt.kernel "popxl.reshape"(%acc) -> (%y) {rt.view, shape = array<i64: 2, 1>} : (memref<2xf32>) -> memref<2x1xf32>
  rt.kernel "popxl.relu"(%y) -> (%y) : (memref<2x1xf32>) -> memref<2x1xf32>
  rt.d2h "y", %y : memref<2x1xf32>
}
"""


def test_emit_dot_rt_follows_data_through_buffers(tmp_path: Path) -> None:
    (tmp_path / "r.mlir").write_text(_RT)
    code, out, err = xl_opt(str(tmp_path / "r.mlir"), "--emit=dot")
    assert code == 0, err
    d = parse_dot(out)
    names = {n: lab.split(".")[0] for n, lab in d.boxes().items()}
    assert sorted(names.values()) == ["Add", "D2h", "H2d", "Loop", "Relu", "Reshape"]
    nid = {v: k for k, v in names.items()}
    (state,) = [n for n, a in d.nodes.items() if a.get("label") == 'State "acc"']
    named = {**names, state: "acc"}
    flow = sorted((named[s], named[t], a["label"]) for s, t, a in d.edges if t in named and s in named)
    assert flow == sorted(
        [
            ("H2d", "Add", "%1 [(2,) float32]"),
            ("acc", "Add", "%2 [(2,) float32]"),  # first iteration
            ("Add", "Add", "%2 [(2,) float32]"),  # the previous iteration's sum
            ("Add", "Reshape", "%2 [(2,) float32]"),
            ("Reshape", "Relu", "%3 [(2, 1) float32]"),
            ("Relu", "D2h", "%3 [(2, 1) float32]"),
        ]
    )
    # the kernel placed on ipu 1 sits in the loop's cluster, inside `ipu 1`
    assert d.labels_of(nid["Add"]) == ("Graph : rt.program", "Loop.100 x3", "ipu 1")
    assert d.labels_of(nid["H2d"]) == ("Graph : rt.program", "Loop.100 x3")


def test_emit_dot_lowered_pipeline_clusters_per_ipu(tmp_path: Path) -> None:
    (tmp_path / "p.mlir").write_text(_pipelined_text())
    code, out, err = xl_opt(str(tmp_path / "p.mlir"), "-p", "pipeline,inline,lower-to-rt,rt-optimize", "--emit=dot")
    assert code == 0, err
    d = parse_dot(out)
    code, text, err = xl_opt(str(tmp_path / "p.mlir"), "-p", "pipeline,inline,lower-to-rt,rt-optimize")
    module = _module(text)
    (program,) = [op for op in module.ops if isinstance(op, rt.ProgramOp)]
    kernels = [op for op in program.walk() if isinstance(op, rt.KernelOp)]
    others = [op for op in program.walk() if isinstance(op, rt.CopyOp | rt.H2DOp | rt.D2HOp | rt.LoopOp | rt.IfOp)]
    assert len(d.boxes()) == len(kernels) + len(others)
    in_ipu = Counter(next((lab for lab in d.labels_of(n) if lab.startswith("ipu ")), None) for n in d.boxes())
    want = Counter(
        f"ipu {o.attributes[IPU_ATTR].value.data}" if IPU_ATTR in o.attributes else None for o in [*kernels, *others]
    )
    assert in_ipu == want and want["ipu 0"] and want["ipu 1"]


def test_emit_svg_without_dot_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dotmod, "dot_program", lambda: None)
    code, out, err = xl_opt(
        "examples/ir/linear.mlir"
        if Path("examples/ir/linear.mlir").exists()
        else str(Path(__file__).resolve().parents[2] / "examples/ir/linear.mlir"),
        "--emit=svg",
    )
    assert code == 1 and out == ""
    assert err.strip() == (
        "xl-opt: error: --emit=svg needs the Graphviz 'dot' program, which is not installed; "
        "--emit=dot writes the DOT text"
    )
