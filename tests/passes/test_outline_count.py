"""`count_ops` (the size test of automatic outlining) against its definition written with
`walk`: every op nested in `graph.main`, a `call.call` of a graph counting that graph's
ops but its `graph.output`, on every valid program of the lit corpus, and against the
size of the fully inlined program where `inline` applies."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from tests.helpers.fuzz_mlir import corpus
from xl.compiler.driver import lower
from xl.dialects.call import CallOp
from xl.dialects.graph import GraphOp, MainGraphOp
from xl.passes.outline import count_ops
from xl.tools.context import xl_context
from xl.tools.parse import parse_source

_CORPUS = corpus()


def _by_walk(module: ModuleOp) -> int:
    graphs = {h.graph_name: h for h in module.body.block.ops if isinstance(h, GraphOp)}
    main = next((h for h in module.body.block.ops if isinstance(h, MainGraphOp)), None)
    if main is None:
        return sum(1 for g in graphs.values() for _ in g.walk()) - len(graphs)

    def size(holder: Operation, stack: tuple[str, ...]) -> int:
        n = 0
        for op in holder.walk():
            if isinstance(op, CallOp) and op.callee.root_reference.data in graphs:
                name = op.callee.root_reference.data
                n += 0 if name in stack else size(graphs[name], (*stack, name)) - 1
            elif op is not holder:
                n += 1
        return n

    return size(main, ())


@pytest.mark.parametrize("name", [n for n, _ in _CORPUS])
def test_count_ops_by_its_definition(name):
    module = parse_source(xl_context(), dict(_CORPUS)[name], "x.mlir")
    assert count_ops(module) == _by_walk(module)


def test_count_ops_is_the_inlined_size():
    module = parse_source(xl_context(), dict(_CORPUS)["frontend"], "x.mlir")
    inlined = lower(module, "inline")
    main = next(h for h in inlined.body.block.ops if isinstance(h, MainGraphOp))
    assert count_ops(module) == sum(1 for _ in main.walk()) - 1 > 0
