"""Large kernels split into row blocks on worker threads (`xl.runtime.parallel_kernels`)
give the bits of the single-thread plan.

Every kernel of the registry's cases whose rows split (the `Elementwise` trait, or a rule
registered by class) runs as one `rt.kernel` in a plan built for 2 threads, with the split
threshold lowered to its size, and in the plan built for 1 thread (OpenBLAS pinned to one
thread); outputs must be equal byte for byte (NaN payloads and signed zeros included).
The GPT example's training step gives the same losses and weights, step after step, and a
failure inside a block on a worker leaves `run` named after its kernel.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from xdsl.ir import Block, Region

from tests.helpers.kernel_cases import CASES, KernelCase, RtForm, kernel_form
from xl.dialects import rt
from xl.dialects.traits import Elementwise
from xl.dialects.utils import memref_type
from xl.runtime import parallel_kernels
from xl.runtime.executable import Executable, compile_program
from xl.runtime.parallel_kernels import ROW_RULES, ParallelStep

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _splits(case: KernelCase) -> bool:
    return case.replicas == 1 and (case.cls.has_trait(Elementwise) or case.cls in ROW_RULES)


SPLIT = [c for c in CASES if _splits(c)]
SPLIT_CASES = [pytest.param(c, id=c.id) for c in SPLIT]


def _program(case: KernelCase, ins: list[np.ndarray]) -> tuple[rt.ProgramOp, list[str]]:
    """One `rt.kernel` of `case`: its inputs loaded from the host, its outputs stored."""
    form = kernel_form(case, ins)
    block = Block()
    vals = []
    for i, a in enumerate(ins):
        buf = rt.AllocOp(memref_type(a.shape, a.dtype))
        block.add_op(buf)
        block.add_op(rt.H2DOp(f"in{i}", buf.result))
        vals.append(buf.result)
    outs = []
    for o in form.outs:
        if isinstance(o, int):
            outs.append(vals[o])
        else:
            buf = rt.AllocOp(memref_type(o[0], o[1]))
            block.add_op(buf)
            outs.append(buf.result)
    block.add_op(rt.KernelOp(form.name, vals, outs, dict(form.attrs)))
    names = [f"out{j}" for j in range(len(outs))]
    for name, v in zip(names, outs, strict=True):
        block.add_op(rt.D2HOp(name, v))
    return rt.ProgramOp(Region(block), rt.ProgramOp.program_attributes(1, 1)), names


def _run(exe: Executable, ins: list[np.ndarray]) -> dict[str, np.ndarray]:
    with np.errstate(all="ignore"), threadpool_limits(1, user_api="blas"):
        return exe.run({f"in{i}": a for i, a in enumerate(ins)})


@pytest.mark.parametrize("case", SPLIT_CASES)
def test_split_kernel_gives_the_single_thread_bits(case: KernelCase, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 0)
    ins = [a for a in case.inputs(np.random.default_rng(0)) if a is not None]
    program, names = _program(case, ins)
    serial = compile_program(program, optimize=True, workers=1)
    split = compile_program(program, optimize=True, workers=2)
    assert not isinstance(serial.replicas[0].step, ParallelStep)
    if not isinstance(split.replicas[0].step, ParallelStep):
        # rows that cannot split on these operands (one row, a result without rows, blocks
        # that would touch each other): then the plan is the serial one
        assert split.sources == serial.sources
        return
    assert split.workers == 2 and "_par(" in split.sources[0]
    for seed in (1, 2):
        ins = [a for a in case.inputs(np.random.default_rng(seed)) if a is not None]
        want, got = _run(serial, [a.copy() for a in ins]), _run(split, [a.copy() for a in ins])
        for name in names:
            assert want[name].tobytes() == got[name].tobytes(), f"{case.id}: {name} differs when split"


def test_most_registered_kernels_split() -> None:
    """The cases above do split: a rule or trait that stopped splitting would pass them."""
    split = 0
    for case in SPLIT:
        ins = [a for a in case.inputs(np.random.default_rng(0)) if a is not None]
        program, _ = _program(case, ins)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 0)
            split += isinstance(compile_program(program, optimize=True, workers=2).replicas[0].step, ParallelStep)
    assert split >= 0.8 * len(SPLIT), (split, len(SPLIT))


def test_rows_split_by_threshold_and_shape() -> None:
    from xl.dialects.popxl import AddOp, MatmulOp, SoftmaxGradOp

    x = np.zeros((4, 1 << 16), np.float32)
    b = np.zeros((1 << 16,), np.float32)
    blocks = parallel_kernels.row_blocks(AddOp, {}, [x, b], [x], 2)
    assert blocks is not None
    (i0, o0), (i1, o1) = blocks
    assert i0[0].shape == (2, 1 << 16) and i0[1] is b and i1[1] is b and o1[0].base is x
    assert parallel_kernels.row_blocks(AddOp, {}, [x, b], [x], 2, min_elements=x.size + 1) is None
    # a broadcast operand that is also written: blocks would race
    assert parallel_kernels.row_blocks(AddOp, {}, [x[:1], x[:1]], [x[:1]], 2, 0) is None
    # the softmax gradient along the leading axis couples the rows
    y = np.zeros((64, 64), np.float32)
    assert parallel_kernels.row_blocks(SoftmaxGradOp, {"axis": 1}, [y, y], [y.copy()], 2, 0) is not None
    assert parallel_kernels.row_blocks(SoftmaxGradOp, {"axis": 0}, [y, y], [y.copy()], 2, 0) is None
    # a stack of products splits; one product, or a stack times one matrix, does not
    s = np.zeros((4, 8, 8), np.float32)
    assert parallel_kernels.row_blocks(MatmulOp, {}, [s, s], [s.copy()], 2, 0) is not None
    assert parallel_kernels.row_blocks(MatmulOp, {}, [s, y[:8, :8]], [s.copy()], 2, 0) is None
    assert parallel_kernels.row_blocks(MatmulOp, {}, [y, y], [y.copy()], 2, 0) is None
    # a stack of attention products is measured by its FLOPs, not its 65536 results
    p, v = np.zeros((16, 4, 64, 64), np.float32), np.zeros((16, 4, 64, 16), np.float32)
    assert parallel_kernels.row_blocks(MatmulOp, {}, [p, v], [v.copy()], 2) is not None
    assert parallel_kernels.row_blocks(AddOp, {}, [v, v], [v.copy()], 2) is None
    # xl.softmax_grad: the gradient along an inner axis, its epilogue operand read whole
    from xl.dialects.rt_kernels import SoftmaxGradFusedOp

    scale = np.zeros((), np.float32)
    blocks = parallel_kernels.row_blocks(SoftmaxGradFusedOp, {"axis": -1}, [y, y, scale], [y.copy()], 2, 0)
    assert blocks is not None and blocks[1][0][2] is scale
    assert parallel_kernels.row_blocks(SoftmaxGradFusedOp, {"axis": 0}, [y, y, scale], [y.copy()], 2, 0) is None


def test_failure_on_a_worker_names_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A division by zero in the rows the worker runs, under np.errstate(divide="raise") of
    the caller: the worker applies the caller's error state, and the step raises the
    FloatingPointError named after the kernel; the next run works."""
    monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 0)
    case = next(c for c in CASES if c.cls.name == "popxl.div" and c.replicas == 1)
    x = np.ones((8, 3), np.float32)
    y = np.ones((8, 3), np.float32)
    program, names = _program(case, [x, y])
    exe = compile_program(program, optimize=True, workers=2)
    assert isinstance(exe.replicas[0].step, ParallelStep)
    y[6, 1] = 0.0  # rows 4..7 are the worker's
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError, match="popxl.div"):
        exe.run({"in0": x, "in1": y})
    y[6, 1] = 2.0
    out = exe.run({"in0": x, "in1": y})[names[0]]
    np.testing.assert_array_equal(out, x / y)


def _kernels_program(
    ins: list[np.ndarray], kernels: list[tuple[str, list[int], tuple[int, ...]]]
) -> tuple[rt.ProgramOp, list[str]]:
    """Inputs `in<i>` loaded from the host, then each kernel (name, operand indices, result
    shape): its result is operand `len(ins) + k`, stored as `out<k>`."""
    block = Block()
    vals = []
    for i, a in enumerate(ins):
        op = rt.AllocOp(memref_type(a.shape, a.dtype))
        block.add_op(op)
        block.add_op(rt.H2DOp(f"in{i}", op.result))
        vals.append(op.result)
    for name, operands, shape in kernels:
        out = rt.AllocOp(memref_type(shape, np.dtype(np.float32)))
        block.add_op(out)
        block.add_op(rt.KernelOp(name, [vals[i] for i in operands], [out.result], {}))
        vals.append(out.result)
    names = [f"out{k}" for k in range(len(kernels))]
    for name, v in zip(names, vals[len(ins) :], strict=True):
        block.add_op(rt.D2HOp(name, v))
    return rt.ProgramOp(Region(block), rt.ProgramOp.program_attributes(1, 1)), names


def test_independent_kernels_run_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two products of one input run in two lanes (one on a worker) and give the single-thread
    bits; the division that reads the second waits for both. (Blocks and lanes forced: BLAS
    threads would be preferred for products this large.)"""
    monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 1 << 30)
    monkeypatch.setattr(parallel_kernels, "PARALLEL_OVER_BLAS", 0.0)
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((128, 256), (256, 192), (256, 192)))
    d = np.full((128, 192), 3.0, np.float32)
    out: tuple[int, ...] = (128, 192)
    kernels: list[tuple[str, list[int], tuple[int, ...]]] = [
        ("popxl.matmul", [0, 1], out),
        ("popxl.matmul", [0, 2], out),
        ("popxl.div", [5, 3], out),
    ]
    program, names = _kernels_program([x, w1, w2, d], kernels)
    serial = compile_program(program, optimize=True, workers=1)
    lanes = compile_program(program, optimize=True, workers=2)
    assert "_fork(" not in serial.sources[0]
    assert lanes.sources[0].count("_fork(") == 1 and isinstance(lanes.replicas[0].step, ParallelStep)
    ins = [x, w1, w2, d]
    want, got = _run(serial, ins), _run(lanes, ins)
    for name in names:
        assert want[name].tobytes() == got[name].tobytes(), name
    np.testing.assert_allclose(got["out2"], (x @ w2) / 3.0, rtol=1e-5, atol=1e-5)


def test_failure_in_a_lane_on_a_worker_names_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second of two independent divisions runs on the worker and divides by zero under
    the caller's np.errstate(divide="raise"): the step raises the FloatingPointError named
    after that kernel (`popxl.div`), and the next run works."""
    monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 1 << 30)
    monkeypatch.setattr(parallel_kernels, "LANE_MIN_COST", 0)
    a, b = np.ones((8, 3), np.float32), np.full((8, 3), 2.0, np.float32)
    program, names = _kernels_program([a, b], [("popxl.div", [0, 1], (8, 3)), ("popxl.div", [1, 0], (8, 3))])
    exe = compile_program(program, optimize=True, workers=2)
    assert exe.sources[0].count("_fork(") == 1
    a[5, 2] = 0.0
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError, match=r"popxl\.div.* failed"):
        exe.run({"in0": a, "in1": b})
    a[5, 2] = 4.0
    out = exe.run({"in0": a, "in1": b})
    np.testing.assert_array_equal(out[names[0]], a / b)
    np.testing.assert_array_equal(out[names[1]], b / a)


def test_large_products_in_a_chain_keep_blas_threads() -> None:
    """A large product then an elementwise kernel of its result: the product would gain far
    more from OpenBLAS's threads than the block split of the kernel saves, so the plan is
    the serial one (no blocks, no lanes), which runs OpenBLAS at the caller's threads."""
    x, w = np.ones((256, 512), np.float32), np.ones((512, 512), np.float32)
    program, _ = _kernels_program([x, w], [("popxl.matmul", [0, 1], (256, 512)), ("popxl.relu", [2], (256, 512))])
    exe = compile_program(program, optimize=True, workers=2)
    assert not isinstance(exe.replicas[0].step, ParallelStep) and exe.workers == 1
    assert "_par(" not in exe.sources[0] and "_fork(" not in exe.sources[0]
    # without the product, the elementwise kernel splits
    program, _ = _kernels_program([x], [("popxl.relu", [0], (256, 512))])
    assert "_par(" in compile_program(program, optimize=True, workers=2).sources[0]


def _gpt_executables(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Executable, Executable]:
    sys.path.insert(0, str(EXAMPLES))
    import gpt_char

    # a small model with its large kernels (attention scores, MLP) above the threshold
    monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 1024)
    monkeypatch.setattr(parallel_kernels, "LANE_MIN_COST", 2000)
    monkeypatch.setattr(parallel_kernels, "PARALLEL_OVER_BLAS", 0.0)
    cfg = gpt_char.Config(vocab_size=40, seq_len=16, hidden=32, heads=2, layers=2, batch=8, dropout=0.1, seed=3)
    session = gpt_char.train_program(cfg)[0]
    program = session._exe.program
    assert program is not None
    serial = compile_program(program, optimize=True, workers=1)
    split = compile_program(program, optimize=True, workers=2)
    return cfg, serial, split


def test_gpt_step_gives_the_single_thread_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, serial, split = _gpt_executables(monkeypatch)
    assert isinstance(split.replicas[0].step, ParallelStep)
    assert split.sources[0].count("_par(") >= 10, "the attention and MLP kernels split"
    assert split.sources[0].count("_fork(") >= 4, "independent products run side by side"
    rng = np.random.default_rng(0)
    for step in range(4):
        feed = {
            name: rng.integers(0, cfg.vocab_size, (cfg.batch, cfg.seq_len)).astype(np.int32)
            for name in serial.h2d_streams
        }
        with threadpool_limits(1, user_api="blas"):
            want = serial.run(feed)
        got = split.run(feed)
        for name in want:
            assert want[name].tobytes() == got[name].tobytes(), f"step {step}: {name}"
        for name, buf in serial.state.items():
            assert buf.tobytes() == split.state[name].tobytes(), f"step {step}: variable {name}"


@pytest.mark.parametrize("fused", [False, True], ids=["softmax", "xl.softmax"])
def test_softmax_blocks_of_rows_give_the_whole_bits(fused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attention scores `(4, 2, 64, 64)`: the softmax shifts blocks of 64 rows by their common
    maximum, and a row far below its block's maximum (in the last slice) by its own:
    computed in two blocks of leading slices, the bits of the whole. Rows of another layout
    (a slice smaller than a shift block) do not split."""
    from xl.dialects.popxl import SoftmaxOp
    from xl.dialects.rt_kernels import SoftmaxFusedOp
    from xl.passes.rt_fuse_elementwise import _steps_attr

    monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 0)
    monkeypatch.setattr(parallel_kernels, "PARALLEL_OVER_BLAS", 0.0)
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((4, 2, 64, 64)) * 3).astype(np.float32)
    x[3, 1, 5] -= 200.0  # under its block's shift its exponentials underflow
    if fused:
        mask = np.triu(np.full((64, 64), -1e9, np.float32), k=1)
        ins = [x, np.array(0.5, np.float32), mask]
        steps = _steps_attr([("popxl.mul", [0, 1], {}), ("popxl.add", [-1, 2], {})])
        form = RtForm({"axis": -1, "steps": steps}, [(x.shape, x.dtype)])
        case = KernelCase(SoftmaxFusedOp, lambda r: ins, rt=lambda i: form)
    else:
        ins = [x]
        case = KernelCase(SoftmaxOp, lambda r: ins, props={"axis": -1})
    program, names = _program(case, ins)
    serial = compile_program(program, optimize=True, workers=1)
    split = compile_program(program, optimize=True, workers=2)
    assert "_par(" in split.sources[0]
    want, got = _run(serial, ins), _run(split, ins)
    assert want[names[0]].tobytes() == got[names[0]].tobytes()
    assert np.isfinite(got[names[0]]).all() and np.allclose(got[names[0]].sum(-1), 1.0, atol=1e-5)
    # rows of 96: no shift block fits in a slice of one row
    y = rng.standard_normal((64, 96)).astype(np.float32)
    program, _ = _program(KernelCase(SoftmaxOp, lambda r: [y], props={"axis": -1}), [y])
    assert "_par(" not in compile_program(program, optimize=True, workers=2).sources[0]


@pytest.mark.parametrize("shape", [(3, 42, 96), (5, 85, 48), (3, 2, 128, 32)])
def test_softmax_blocks_of_odd_rows_give_the_whole_bits(
    shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shift blocks of 42 rows of 96, 85 of 48 (blocks of rows start at rows no vector unit
    aligns): the row sums, and so the results, are those of the whole (a matrix-vector
    product's sums would depend on the rows around them)."""
    from xl.dialects.popxl import SoftmaxOp

    monkeypatch.setattr(parallel_kernels, "SPLIT_MIN_ELEMENTS", 0)
    monkeypatch.setattr(parallel_kernels, "PARALLEL_OVER_BLAS", 0.0)
    x = (np.random.default_rng(5).standard_normal(shape) * 4).astype(np.float32)
    program, names = _program(KernelCase(SoftmaxOp, lambda r: [x], props={"axis": -1}), [x])
    serial = compile_program(program, optimize=True, workers=1)
    split = compile_program(program, optimize=True, workers=2)
    assert "_par(" in split.sources[0]
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="blas"):
            want = serial.run({"in0": x})[names[0]]
        assert want.tobytes() == _run(split, [x])[names[0]].tobytes()
