"""Call sites and graph contexts as upstream: `CallSiteInfo.set_parent_input_modified`
affects its own call site only; the graphs of two Irs cannot be nested in `with`."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from popxl.context import NoGraphSelectedError


def test_set_parent_input_modified_is_per_call_site() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = popxl.variable(np.float32(1.0), name="x")
        g = ir.create_graph(lambda t: ops.var_updates.accumulate_(t, popxl.constant(np.float32(10.0))), x)
        outs = []

        def store() -> None:
            s = popxl.d2h_stream(x.shape, x.dtype)
            ops.host_store(s, x)
            outs.append(s)

        ops.call(g, x)  # x is passed by value: unchanged
        store()
        info = ops.call_with_info(g, x)
        info.set_parent_input_modified(x)  # this call updates x
        store()
        info2 = ops.call_with_info(g, x)  # a later plain call: unchanged again
        store()
        info3 = ops.call_with_info(g, x)
        info3.set_parent_input_modified(x)
        info3.set_parent_input_modified(x)  # twice: one copy
        store()
    assert info.called_graph is not g and info2.called_graph is g and info3.called_graph is not info.called_graph
    assert not g._input_by_ref(0) and info.called_graph._input_by_ref(0)
    with popxl.Session(ir, "cpu") as s:
        got = s.run()
        final = s.get_tensor_data(x)
    assert [float(got[o]) for o in outs] == [1.0, 11.0, 11.0, 21.0]
    assert float(final) == 21.0
    with ir.main_graph, pytest.raises(ValueError, match="is not an input of this call site"):
        info.set_parent_input_modified(popxl.variable(np.float32(0.0)))


def test_graphs_of_two_irs_cannot_be_nested() -> None:
    a, b = popxl.Ir(), popxl.Ir()
    with pytest.raises(RuntimeError, match="graphs of different Irs cannot be nested"):
        with a.main_graph:
            with b.main_graph:
                pass
    with a.main_graph:  # the context is intact afterwards
        sub = a.create_empty_graph("sub")
        with sub:
            assert popxl.gcg() is sub
    with b.main_graph:
        assert popxl.gcg() is b.main_graph
    with pytest.raises(NoGraphSelectedError):
        popxl.gcg()
