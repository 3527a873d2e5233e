"""Sites of an `rt.func` whose body binds kernels to its arrays with `functools.partial`
(`xl.softmax`'s prologue, `xl.softmax_grad`'s epilogue): the other sites of a signature
bind the partial again over their own arrays (`xl.runtime.functions._derive`) instead of
generating the body again; the plan gives the bits of every site generating its body and
of the straightforward plan."""

from __future__ import annotations

import re
from functools import partial

import numpy as np

import popxl
import popxl.ops as ops
import xl.runtime.functions as functions
from xl.compiler import compile_module
from xl.compiler.driver import OUTLINE_PIPELINE, RT_PIPELINE


def _k(a: np.ndarray, b: np.ndarray, out: np.ndarray, scale: float = 1.0) -> None:
    np.multiply(a, b, out=out)
    out *= scale


def test_partial_derived_over_the_other_sites_arrays():
    mem = [np.zeros((4, 4), np.float32) for _ in range(2)]
    other = [np.ones((4, 4), np.float32) for _ in range(2)]
    roots = {id(a) for a in mem}
    shared = np.zeros(3)
    p = partial(_k, mem[0], mem[1][1:], shared, scale=2.0)
    d = functions._derive(p, mem, roots)  # noqa: SLF001
    assert d is not None and d[0] == "bind"
    q = functions._rebuild(d, other)  # noqa: SLF001
    assert isinstance(q, partial) and q.func is _k and q.keywords == {"scale": 2.0}
    assert q.args[0] is other[0] and q.args[2] is shared
    assert np.shares_memory(q.args[1], other[1]) and q.args[1].shape == (3, 4)
    # a function or keywords holding an argument's memory cannot be bound again
    assert functions._derive(partial(lambda: mem[0]), mem, roots) is None  # noqa: SLF001
    assert functions._derive(partial(_k, out=mem[0]), mem, roots) is None  # noqa: SLF001


def _attention_module():
    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((8, 8), popxl.float32, "x")
        x = ops.host_load(xs)
        ws = [popxl.variable(np.random.default_rng(k).normal(0, 0.3, (8, 8)).astype(np.float32), name=f"w{k}")
              for k in range(4)]  # fmt: skip
        for w in ws:
            h = x @ w
            att = ops.softmax((h @ h.T) * 0.25, axis=-1)
            x = ops.gelu(att @ h) + x
        ops.host_store(popxl.d2h_stream(x.shape, x.dtype, "y"), x)
    return ir._module  # noqa: SLF001


def test_softmax_prologue_sites_share_one_body(monkeypatch):
    module = _attention_module()
    pipeline = f"{OUTLINE_PIPELINE},{RT_PIPELINE}"
    generated: list[str] = []
    original = functions._generate  # noqa: SLF001

    def counting(b, st, func, depth):  # noqa: ANN001, ANN202
        generated.append(func.func_name)
        return original(b, st, func, depth)

    monkeypatch.setattr(functions, "_generate", counting)
    exe = compile_module(module, pipeline=pipeline)
    src = "\n".join(exe.sources)
    # the fused softmax inside a function, its prologue a parameter of the function
    assert re.search(r"^    _softmax_rows_\d+\(.*redo=a\d+\)  # xl\.softmax$", src, re.M)
    # each function's body generated once per plan built (compile_program may build the
    # plan twice: with row blocks and lanes, then serial); every site did before (4 each)
    assert "(4 sites)" in src and len(generated) <= 2 * len(set(generated))
    x = np.random.default_rng(7).normal(size=(8, 8)).astype(np.float32)
    got = exe.run({"x": x})["y"]
    monkeypatch.setattr(functions, "SHARE_SITES", False)
    regen = compile_module(module, pipeline=pipeline).run({"x": x})["y"]
    plain = compile_module(module, pipeline=pipeline, optimize=False).run({"x": x})["y"]
    np.testing.assert_array_equal(got, regen)
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-6)
