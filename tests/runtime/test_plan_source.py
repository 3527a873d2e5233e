"""The generated plan's source: each kernel line names its op, the source is registered
with `linecache`, and kernels are resolved by op class."""

from __future__ import annotations

import linecache
import traceback

import numpy as np
import pytest

import popxl
from popxl import ops
from xl.compiler import compile_module, lower
from xl.dialects import rt
from xl.runtime.kernels import DataRangeError


def _nll_ir() -> popxl.Ir:
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((2, 3), popxl.float32, "x")
        ls = popxl.h2d_stream((2,), popxl.int32, "labels")
        x = ops.host_load(xs)
        labels = ops.host_load(ls)
        loss = ops.nll_loss(ops.softmax(x, axis=1), labels)
        ops.host_store(popxl.d2h_stream(loss.shape, loss.dtype, "loss"), loss)
    return ir


def _cached_source(name: str) -> str:
    """The source linecache holds for `name` (a registered entry, not a lazy loader)."""
    entry = linecache.cache[name]
    assert len(entry) == 4, entry
    return "".join(entry[2])


def test_kernel_error_traceback_shows_the_generated_line():
    exe = compile_module(_nll_ir()._module)
    x = np.zeros((2, 3), np.float32)
    tb = ""  # the traceback, formatted where the error is caught below
    with pytest.raises(DataRangeError):
        try:
            exe.run({"x": x, "labels": np.array([0, 7], np.int32)})
        except DataRangeError:
            tb = traceback.format_exc()
            raise
    # the frame of the generated step: its file name and the line with its op comment
    assert 'File "<xl plan ' in tb
    frame_lines = [ln for ln in tb.splitlines() if "# popxl.nll_loss" in ln]
    assert frame_lines, tb
    assert "(" in frame_lines[0]  # the call line itself, not a bare comment


def test_every_kernel_line_names_its_op_and_linecache_has_the_source():
    exe = compile_module(_nll_ir()._module)
    (src,) = exe.sources
    body = [ln.strip() for ln in src.splitlines() if ln.startswith("    ") and ln.strip() != "pass"]
    kernel_lines = [ln for ln in body if not ln.startswith("_d = ")]  # host transfers
    assert kernel_lines and all("  # popxl." in ln or "  # xl." in ln for ln in kernel_lines)
    cached = [name for name in linecache.cache if name.startswith("<xl plan ")]
    assert any(_cached_source(n) == src for n in cached)


def test_linecache_entry_dropped_with_the_plan():
    import gc

    exe = compile_module(_nll_ir()._module)
    (src,) = exe.sources
    # the plan's own file name (another plan of the same program has the same source)
    name = exe.replicas[0].filename
    assert name.startswith("<xl plan ") and _cached_source(name) == src
    del exe
    gc.collect()
    assert name not in linecache.cache


CHAIN = """
rt.program attributes {num_host_transfers = 1 : i64, replication_factor = 1 : i64} {
  %x = rt.alloc : memref<4x5xf32>
  rt.h2d "x", %x : memref<4x5xf32>
  %e = rt.alloc : memref<4x5xf32>
  rt.kernel "popxl.exp"(%x) -> (%e) : (memref<4x5xf32>) -> memref<4x5xf32>
  %a = rt.alloc : memref<4x5xf32>
  rt.kernel "popxl.abs"(%x) -> (%a) : (memref<4x5xf32>) -> memref<4x5xf32>
  %m = rt.alloc : memref<4x5xf32>
  rt.kernel "popxl.minimum"(%e, %a) -> (%m) : (memref<4x5xf32>, memref<4x5xf32>) -> memref<4x5xf32>
  %d = rt.alloc : memref<4x5xf32>
  rt.kernel "popxl.detach"(%m) -> (%d) : (memref<4x5xf32>) -> memref<4x5xf32>
  %y = rt.alloc : memref<4x5xf32>
  rt.kernel "popxl.swish"(%d) -> (%y) : (memref<4x5xf32>) -> memref<4x5xf32>
  rt.d2h "y", %y : memref<4x5xf32>
}
"""


def test_minimum_swish_detach_are_fused_now():
    """Fusable kernels come from the `Elementwise` trait: minimum, swish and detach were
    missing from the old name table."""
    from xdsl.parser import Parser

    from xl.tools.context import xl_context

    m = Parser(xl_context(), CHAIN).parse_module()
    low = lower(m, "rt-fuse-elementwise")
    ks = [op for op in low.walk() if isinstance(op, rt.KernelOp)]
    # the chain exp -> minimum -> detach -> swish is one kernel; abs is computed before it
    assert [k.kernel.data for k in ks] == ["popxl.abs", "xl.fused"]
    steps = str(ks[1].attributes["steps"])
    for name in ("popxl.exp", "popxl.minimum", "popxl.detach", "popxl.swish"):
        assert f'kernel = "{name}"' in steps
    x = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    mn = np.minimum(np.exp(x), np.abs(x))
    expected = mn / (1.0 + np.exp(-mn))
    for optimize in (True, False):
        out = compile_module(m, optimize=optimize).run({"x": x})["y"]
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
