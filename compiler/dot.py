"""Graphviz DOT pictures of xl programs (`xl-opt --emit=dot`, `popxl.Ir.dot_checkpoint`).

Ops are box nodes labelled as `print_schedule` names them (`MatMul.100`, `Call.105(fwd)`:
the PopART type of the op class and the op id); tensors are edges labelled as
`print_schedule` prints them (`%4 [(2, 32) float32]`), numbered per graph in order of
first appearance; graph inputs, variables, constants and graph outputs are egg-shaped
nodes; ops placed on a virtual IPU (`ipu.id`) are grouped in a cluster `ipu N` per block;
ops with regions (`pipeline.region`, `rt.loop`, `rt.if`) are clusters holding their
body; a call is linked to the graph it calls.

`module_dot(module)` draws the whole module in one digraph: one cluster per graph
(`Graph : name`) and a dashed edge from every call to the cluster of its callee.
`graph_dot(module, name)` draws one graph alone; its calls point at a stub node of the
callee carrying a `URL` (the callee's own file, for `Ir.dot_checkpoint`).

A lowered program (`rt.program`) is drawn the same way, its edges following the data
through buffers: an edge goes from the op that last wrote a buffer (or its `rt.state` /
`rt.const`) to each op reading it, through loops (the value of the previous iteration)
and both branches of an `rt.if`; views count as their viewed buffer.

Used by the frontend (`popxl.Ir.dot_checkpoint`) and the tools (`xl-opt --emit=dot`), so it
lives below both, in `xl.compiler`.

```python
from xl.compiler.dot import module_dot
print(module_dot(module))     # digraph xl { compound=true; subgraph cluster_g0 { ... } ... }
```
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.utils.target import Target

from xl.dialects import rt
from xl.dialects.call import ConditionalOp, called_graph_names
from xl.dialects.effects import written_operands
from xl.dialects.graph import ConstantOp, GraphOp, MainGraphOp, OutputOp, VariableOp
from xl.dialects.ipu import placement
from xl.dialects.rt import VIEW_ATTR
from xl.dialects.rt_kernels import kernel_class
from xl.dialects.traits import derived_popart_type, popart_type
from xl.dialects.utils import dtype_of, shape_of

__all__ = [
    "DotNotInstalledError",
    "DotTarget",
    "SvgTarget",
    "dot_checkpoint",
    "graph_dot",
    "module_dot",
    "render_svg",
]

OpIds = Callable[[Operation], int]

# Not scheduled ops (as in `print_schedule`): tensors and structure.
_NOT_SCHEDULED = (OutputOp, VariableOp, ConstantOp)
_INPLACE_COLOR = '"#6B8E23"'  # PopART's colour for ops that update an input in place


class DotNotInstalledError(ValueError):
    """SVG was asked for and the Graphviz `dot` program is not installed."""


# ---------------------------------------------------------------------------------------
# DOT text
# ---------------------------------------------------------------------------------------


def quote(text: str) -> str:
    """`text` as a DOT quoted string (backslashes, quotes and newlines escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attrs(attrs: dict[str, str]) -> str:
    return "[" + ", ".join(f"{k}={v}" for k, v in attrs.items()) + "]"


@dataclass
class _Cluster:
    id: str
    label: str
    nodes: list[str] = field(default_factory=list)
    children: list[_Cluster] = field(default_factory=list)
    style: str = ""

    def child(self, id: str, label: str, style: str = "") -> _Cluster:
        c = _Cluster(id, label, style=style)
        self.children.append(c)
        return c


@dataclass
class _Scene:
    """Nodes (with their attribute text), a tree of clusters and edges, printed as DOT."""

    root: _Cluster = field(default_factory=lambda: _Cluster("", ""))
    nodes: dict[str, str] = field(default_factory=dict)
    edges: list[str] = field(default_factory=list)
    counter: int = 0

    def new_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def node(self, cluster: _Cluster, id: str, attrs: dict[str, str]) -> str:
        self.nodes[id] = _attrs(attrs)
        cluster.nodes.append(id)
        return id

    def edge(self, src: str, dst: str, attrs: dict[str, str]) -> None:
        self.edges.append(f"  {quote(src)} -> {quote(dst)} {_attrs(attrs)};")

    def text(self, name: str, graph_attrs: Sequence[str]) -> str:
        out = [f"digraph {quote(name)} {{"]
        out += [f"  {a};" for a in graph_attrs]
        out.append('  node [fontname="Helvetica", fontsize=10];')
        out.append('  edge [fontname="Helvetica", fontsize=9];')
        self._cluster_text(self.root, out, "  ")
        out += self.edges
        out.append("}")
        return "\n".join(out) + "\n"

    def _cluster_text(self, c: _Cluster, out: list[str], indent: str) -> None:
        for n in c.nodes:
            out.append(f"{indent}{quote(n)} {self.nodes[n]};")
        for ch in c.children:
            out.append(f"{indent}subgraph {quote(ch.id)} {{")
            out.append(f"{indent}  label={quote(ch.label)};")
            if ch.style:
                out.append(f"{indent}  {ch.style};")
            self._cluster_text(ch, out, indent + "  ")
            out.append(f"{indent}}}")


# ---------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------


def tensor_type_str(t: object) -> str:
    """`[(2, 32) float32]`, as `print_schedule` shows a tensor's type."""
    if isinstance(t, TensorType | MemRefType):
        return f"[{shape_of(t)} {dtype_of(t)}]"
    return f"[{t}]"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "_"


class _Numbering:
    """`%N` per graph, in order of first appearance (as `print_schedule`)."""

    def __init__(self) -> None:
        self.ids: dict[SSAValue, int] = {}

    def __call__(self, v: SSAValue) -> str:
        if v not in self.ids:
            self.ids[v] = len(self.ids) + 1
        return f"%{self.ids[v]}"

    def label(self, v: SSAValue) -> str:
        return f"{self(v)} {tensor_type_str(v.type)}"


def textual_op_ids(module: Operation) -> OpIds:
    """Op ids for a program without a frontend: 100, 101, ... in module order over the
    scheduled ops (the frontend numbers the ops it creates the same way)."""
    ids: dict[Operation, int] = {}
    for op in module.walk():
        if op.parent_op() is module or op is module or isinstance(op, _NOT_SCHEDULED):
            continue
        if isinstance(op, rt.AllocOp | rt.StateOp | rt.ConstOp):
            continue
        ids[op] = 100 + len(ids)
    return lambda op: ids.get(op, 0)


def op_type(op: Operation) -> str:
    """The PopART type name of an op; for `rt.kernel`, that of the op class it implements."""
    if isinstance(op, rt.KernelOp):
        cls = kernel_class(op.kernel.data)
        return derived_popart_type(op.kernel.data) if cls is None else popart_type(cls)
    return popart_type(op)


def op_label(op: Operation, op_ids: OpIds) -> str:
    """`MatMul.100`, `Call.105(fwd)`, `HostLoad.101 "x"`: the `print_schedule` name of the
    op, the graphs it calls, and for rt host transfers the stream."""
    label = f"{op_type(op)}.{op_ids(op)}"
    called = called_graph_names(op)
    if called:
        label += f"({', '.join(called)})"
    if isinstance(op, rt.H2DOp | rt.D2HOp):
        label += f" {quote(op.stream.data)}"
    if isinstance(op, rt.LoopOp):
        label += f" x{op.count.value.data}"
    if isinstance(op, rt.KernelOp) and VIEW_ATTR in op.attributes:
        label += " (view)"
    return label


# ---------------------------------------------------------------------------------------
# Drawing graphs
# ---------------------------------------------------------------------------------------


@dataclass
class _Graph:
    """What one drawn graph needs: the scene, its cluster, value -> producer node."""

    scene: _Scene
    cluster: _Cluster
    numbering: _Numbering
    producers: dict[SSAValue, str]
    calls: list[tuple[str, str, str]]  # (call node, callee, edge label)


class DotWriter:
    """Draws graphs and `rt.program`s of one module into a `_Scene` (see the module doc)."""

    def __init__(self, module: ModuleOp, op_ids: OpIds | None = None):
        self.module = module
        self.op_ids = op_ids if op_ids is not None else textual_op_ids(module)
        self.scene = _Scene()

    # -- high level ----------------------------------------------------------------
    def draw_graph(self, g: GraphOp | MainGraphOp, cluster: _Cluster) -> _Graph:
        gr = _Graph(self.scene, cluster, _Numbering(), {}, [])
        block = g.body.block
        for i, arg in enumerate(block.args):
            gr.numbering(arg)
            name = g.input_name(i) if isinstance(g, GraphOp) else f"arg{i}"
            by_ref = isinstance(g, GraphOp) and g.input_is_by_ref(i)
            label = f"input {i}: {name}={gr.numbering(arg)}" + (" (by ref)" if by_ref else "")
            nid = self.scene.new_id("in")
            self.scene.node(cluster, nid, {"shape": "egg", "label": quote(label), "color": '"black"'})
            gr.producers[arg] = nid
        self._draw_block(block, gr, cluster)
        return gr

    def _draw_block(self, block: Block, gr: _Graph, cluster: _Cluster) -> None:
        ipu_clusters: dict[int, _Cluster] = {}

        def where(op: Operation) -> _Cluster:
            ipu = placement(op)
            if ipu is None:
                return cluster
            if ipu not in ipu_clusters:
                ipu_clusters[ipu] = cluster.child(
                    self.scene.new_id("cluster_ipu"), f"ipu {ipu}", 'style="rounded,dashed"; color="gray40"'
                )
            return ipu_clusters[ipu]

        for op in block.ops:
            if isinstance(op, OutputOp):
                for i, v in enumerate(op.operands):
                    nid = self.scene.new_id("out")
                    self.scene.node(cluster, nid, {"shape": "egg", "label": quote(f"output {i}")})
                    self._use(v, nid, gr)
                continue
            if isinstance(op, VariableOp | ConstantOp):
                kind = "Variable" if isinstance(op, VariableOp) else "Constant"
                text = f'{kind} "{op.var_name.data}"' if isinstance(op, VariableOp) else kind
                color = '"blue"' if isinstance(op, VariableOp) else '"gold"'
                nid = self.scene.new_id("t")
                self.scene.node(where(op), nid, {"shape": "egg", "label": quote(text), "color": color})
                gr.producers[op.results[0]] = nid
                continue
            nid = self.scene.new_id("op")
            attrs = {"shape": "box", "label": quote(op_label(op, self.op_ids))}
            if written_operands(op):
                attrs["color"] = _INPLACE_COLOR
            for v in op.operands:
                gr.numbering(v)
            for r in op.results:
                gr.numbering(r)
            if op.regions:
                inner = where(op).child(self.scene.new_id("cluster_op"), op_label(op, self.op_ids))
                self.scene.node(inner, nid, attrs)
                for v in op.operands:
                    self._use(v, nid, gr)
                for r in op.results:
                    gr.producers[r] = nid
                for region in op.regions:
                    for b in region.blocks:
                        self._draw_block(b, gr, inner)
            else:
                self.scene.node(where(op), nid, attrs)
                for v in op.operands:
                    self._use(v, nid, gr)
                for r in op.results:
                    gr.producers[r] = nid
            callees = called_graph_names(op)
            for k, callee in enumerate(callees):
                label = "calls"
                if isinstance(op, ConditionalOp):
                    label = "then" if k == 0 else "else"
                gr.calls.append((nid, callee, label))

    def _use(self, v: SSAValue, consumer: str, gr: _Graph) -> None:
        src = gr.producers.get(v)
        if src is None:  # defined outside what is drawn (cannot happen in a verified graph)
            src = self.scene.new_id("ext")
            self.scene.node(gr.cluster, src, {"shape": "egg", "label": quote(gr.numbering(v))})
            gr.producers[v] = src
        self.scene.edge(src, consumer, {"label": quote(gr.numbering.label(v))})

    # -- rt ------------------------------------------------------------------------
    def draw_program(self, program: rt.ProgramOp, cluster: _Cluster) -> None:
        from xl.passes.rt_analysis import Memory, effects

        mem = Memory(program)
        numbering = _Numbering()
        nodes: dict[Operation, str] = {}
        flow: set[tuple[str, str, SSAValue]] = set()
        order: list[tuple[str, str, SSAValue]] = []

        def add(src: str, dst: str, v: SSAValue) -> None:
            if (src, dst, v) not in flow:
                flow.add((src, dst, v))
                order.append((src, dst, v))

        def draw(block: Block, c: _Cluster) -> None:
            ipu_clusters: dict[int, _Cluster] = {}

            def where(op: Operation) -> _Cluster:
                ipu = placement(op)
                if ipu is None:
                    return c
                if ipu not in ipu_clusters:
                    ipu_clusters[ipu] = c.child(
                        self.scene.new_id("cluster_ipu"), f"ipu {ipu}", 'style="rounded,dashed"; color="gray40"'
                    )
                return ipu_clusters[ipu]

            for op in block.ops:
                if isinstance(op, rt.AllocOp):
                    continue
                nid = self.scene.new_id("t" if isinstance(op, rt.StateOp | rt.ConstOp) else "op")
                nodes[op] = nid
                if isinstance(op, rt.StateOp):
                    self.scene.node(
                        where(op), nid, {"shape": "egg", "color": '"blue"', "label": quote(f'State "{op.slot.data}"')}
                    )
                    continue
                if isinstance(op, rt.ConstOp):
                    self.scene.node(where(op), nid, {"shape": "egg", "color": '"gold"', "label": quote("Constant")})
                    continue
                attrs = {"shape": "box", "label": quote(op_label(op, self.op_ids))}
                if op.regions:
                    inner = where(op).child(self.scene.new_id("cluster_op"), op_label(op, self.op_ids))
                    self.scene.node(inner, nid, attrs)
                    for region in op.regions:
                        for b in region.blocks:
                            if isinstance(op, rt.IfOp):
                                which = "then" if region is op.then_region else "else"
                                draw(b, inner.child(self.scene.new_id("cluster_br"), which))
                            else:
                                draw(b, inner)
                else:
                    self.scene.node(where(op), nid, attrs)

        def flow_block(block: Block, last: dict[SSAValue, frozenset[str]]) -> dict[SSAValue, frozenset[str]]:
            for op in block.ops:
                if isinstance(op, rt.AllocOp):
                    continue
                if isinstance(op, rt.StateOp | rt.ConstOp):
                    last = {**last, op.result: frozenset((nodes[op],))}
                    continue
                eff = effects(op)
                reads, writes = eff if eff is not None else (tuple(op.operands), tuple(op.operands))
                for v in reads:
                    for src in sorted(last.get(mem.root(v), ())):
                        add(src, nodes[op], v)
                if isinstance(op, rt.LoopOp):
                    if op.count.value.data > 0:
                        first = flow_block(op.body.block, last)
                        last = flow_block(op.body.block, first)
                elif isinstance(op, rt.IfOp):
                    a = flow_block(op.then_region.block, last)
                    b = flow_block(op.else_region.block, last)
                    last = {k: a.get(k, frozenset()) | b.get(k, frozenset()) for k in {*a, *b}}
                if writes:
                    last = dict(last)
                    for v in writes:
                        last[mem.root(v)] = frozenset((nodes[op],))
            return last

        draw(program.body.block, cluster)
        for op in program.walk():
            if op is program:
                continue
            for v in op.operands:
                numbering(v)
        flow_block(program.body.block, {})
        for src, dst, v in order:
            self.scene.edge(src, dst, {"label": quote(numbering.label(v))})


def _graphs(module: ModuleOp) -> list[GraphOp | MainGraphOp | rt.ProgramOp]:
    return [op for op in module.ops if isinstance(op, GraphOp | MainGraphOp | rt.ProgramOp)]


def _graph_name(g: GraphOp | MainGraphOp | rt.ProgramOp) -> str:
    if isinstance(g, GraphOp):
        return g.graph_name
    return "main" if isinstance(g, MainGraphOp) else rt.ProgramOp.name


def module_dot(module: ModuleOp, op_ids: OpIds | None = None, name: str = "xl") -> str:
    """The whole module as one DOT digraph: a cluster per graph (`graph.graph`,
    `graph.main`, `rt.program`), call edges to the callee's cluster."""
    w = DotWriter(module, op_ids)
    scene = w.scene
    anchors: dict[str, tuple[str, str]] = {}
    drawn: list[_Graph] = []
    for k, g in enumerate(_graphs(module)):
        gname = _graph_name(g)
        cid = f"cluster_g{k}"
        cluster = scene.root.child(cid, f"Graph : {gname}", 'style="rounded"; color="black"')
        anchor = scene.node(cluster, f"graph:{gname}", {"shape": "point", "label": quote(gname)})
        anchors[gname] = (anchor, cid)
        if isinstance(g, rt.ProgramOp):
            w.draw_program(g, cluster)
        else:
            drawn.append(w.draw_graph(g, cluster))
    for gr in drawn:
        for call, callee, label in gr.calls:
            target = anchors.get(callee)
            if target is None:
                label = quote(f"Graph : {callee} (missing)")
                stub = scene.node(scene.root, f"graph:{callee}", {"shape": "folder", "label": label})
                anchors[callee] = (stub, "")
                target = anchors[callee]
            attrs = {"label": quote(label), "style": "dashed", "color": '"blue"'}
            if target[1]:
                attrs["lhead"] = quote(target[1])
            scene.edge(call, target[0], attrs)
    return scene.text(name, ["compound=true", "rankdir=TB"])


def graph_dot(
    module: ModuleOp,
    graph_name: str,
    op_ids: OpIds | None = None,
    link: Callable[[str], str] | None = None,
) -> str:
    """One graph (`graph_name`, or `main`) as a DOT digraph; each call points at a stub
    node of its callee with `URL` `link(callee)` (when given)."""
    graphs = {_graph_name(g): g for g in _graphs(module)}
    g = graphs.get(graph_name)
    if g is None:
        raise KeyError(f"dot: the module has no graph named '{graph_name}' (graphs: {', '.join(graphs)})")
    w = DotWriter(module, op_ids)
    scene = w.scene
    if isinstance(g, rt.ProgramOp):
        w.draw_program(g, scene.root)
        return scene.text(graph_name, [f"label={quote('Graph : ' + graph_name)}", "labelloc=t"])
    gr = w.draw_graph(g, scene.root)
    stubs: dict[str, str] = {}
    for call, callee, label in gr.calls:
        if callee not in stubs:
            attrs = {"shape": "folder", "label": quote(f"Graph : {callee}")}
            if link is not None:
                attrs["URL"] = quote(link(callee))
            stubs[callee] = scene.node(scene.root, f"graph:{callee}", attrs)
        scene.edge(call, stubs[callee], {"label": quote(label), "style": "dashed", "color": '"blue"'})
    return scene.text(graph_name, [f"label={quote('Graph : ' + graph_name)}", "labelloc=t"])


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------


def dot_program() -> str | None:
    """The Graphviz `dot` program, or None when it is not installed."""
    return shutil.which("dot")


def render_svg(dot_text: str) -> str:
    """SVG from DOT text through Graphviz `dot` (`DotNotInstalledError` without it)."""
    exe = dot_program()
    if exe is None:
        raise DotNotInstalledError(
            "SVG needs the Graphviz 'dot' program, which is not installed (emit DOT text instead)"
        )
    proc = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"dot -Tsvg failed: {proc.stderr.strip()}")
    return proc.stdout


def checks_enabled(check: str, env: str | None = None, checks: Collection[str] | None = None) -> bool:
    """Whether checkpoint `check` is written. With `checks` (PopART's `dotChecks` with the
    names of `POPART_DOT_CHECKS` added): when it holds `check` or `ALL` (case-insensitive).
    Without: `POPART_DOT_CHECKS` (names separated by `:`) selects them; unset or empty, all
    are."""
    if checks is not None:
        names = {c.strip().upper() for c in checks}
        return "ALL" in names or check.upper() in names
    value = os.environ.get("POPART_DOT_CHECKS", "") if env is None else env
    names = {s.strip().upper() for s in value.split(":") if s.strip()}
    return not names or "ALL" in names or check.upper() in names


def dot_checkpoint(
    module: ModuleOp,
    check: str,
    save_dir: str | os.PathLike[str],
    op_ids: OpIds | None = None,
    render: bool | None = None,
    checks: Collection[str] | None = None,
) -> list[Path]:
    """Writes `{save_dir}/{check}_{graph}.dot` for every graph of `module` (`main` for the
    main graph; names made file-safe), and the `.svg` next to it when `render` (default:
    when `dot` is installed). A call links (`URL`) to its callee's file. Returns the
    files written ([] when `checks`, else `POPART_DOT_CHECKS`, does not select `check`:
    `checks_enabled`)."""
    if not isinstance(check, str) or not check:
        raise ValueError(f"dot_checkpoint: check must be a non-empty string, got {check!r}")
    if not checks_enabled(check, checks=checks):
        return []
    if render is None:
        render = dot_program() is not None
    out = Path(save_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [_graph_name(g) for g in _graphs(module)]
    files: dict[str, str] = {}
    for n in names:
        base = f"{_safe(check)}_{_safe(n)}"
        stem, k = base, 1
        while stem in files.values():
            stem, k = f"{base}_{k}", k + 1
        files[n] = stem
    ext = ".svg" if render else ".dot"
    ids = op_ids if op_ids is not None else textual_op_ids(module)
    written: list[Path] = []
    for n in names:
        text = graph_dot(module, n, ids, link=lambda callee: files.get(callee, _safe(callee)) + ext)
        path = out / (files[n] + ".dot")
        path.write_text(text)
        written.append(path)
        if render:
            svg = out / (files[n] + ".svg")
            svg.write_text(render_svg(text))
            written.append(svg)
    return written


@dataclass(frozen=True)
class DotTarget(Target):
    """`xl-opt -t dot` / `--emit=dot`: the module as one DOT digraph (`module_dot`)."""

    name = "dot"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        """Write the module's DOT text to `output`."""
        output.write(module_dot(module))


@dataclass(frozen=True)
class SvgTarget(Target):
    """`xl-opt -t svg` / `--emit=svg`: the DOT picture rendered by Graphviz `dot`."""

    name = "svg"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        """Write the module's picture as SVG to `output` (runs Graphviz `dot`; an error says when it is missing)."""
        output.write(render_svg(module_dot(module)))
