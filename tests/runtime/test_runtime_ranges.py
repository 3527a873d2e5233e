"""Indices, labels and offsets read at run time, outside their range.

Upstream behaviour where PopXL defines one (`gather(..., zero_OOR=True)` gives zeros,
`onehot` follows ONNX: off values; `gather` without zero_OOR gives zeros too, where
upstream leaves the values undefined), otherwise a `DataRangeError` (a `ValueError`) that
names the op, the tensor and the stream it came from, and the bad value, from both
plans, `popxl.Session.run` and `xl-run` (exit 1, `xl-run: error: ...`). Never another
row's data, never a NumPy `IndexError`. In-range values are checked against NumPy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.runtime_check import check_all
from xl.compiler import compile_module
from xl.runtime.kernels import DataRangeError


def _ir(build, streams):
    """streams: name -> (shape, popxl dtype); build(loaded tensors) -> {name: tensor} to store."""
    ir = popxl.Ir()
    with ir.main_graph:
        loaded = {n: ops.host_load(popxl.h2d_stream(s, d, n)) for n, (s, d) in streams.items()}
        for name, t in build(loaded).items():
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    return ir


def _expect_error(ir, feed, pattern: str) -> None:
    """Both plans and the Session raise DataRangeError matching `pattern`."""
    for opt in (False, True):
        ex = compile_module(ir._module, optimize=opt)
        with pytest.raises(DataRangeError, match=pattern):
            ex.run(feed)
    streams = {s.name: s for s in ir.get_all_h2d_streams()}
    with popxl.Session(ir, "cpu") as session:
        with pytest.raises(DataRangeError, match=pattern):
            session.run({streams[k]: v for k, v in feed.items()})


P = np.array([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1], [0.3, 0.3, 0.4]], np.float32)
PROBS = {"probs": ((4, 3), popxl.float32), "labels": ((4,), popxl.int32)}


def _np_nll(p, lab, ignore=None, red="mean"):
    keep = np.ones(lab.shape, bool) if ignore is None else lab != ignore
    picked = p[np.arange(len(lab)), np.where(keep, lab, 0)]
    loss = np.where(keep, -np.log(picked), 0.0)
    n = max(int(keep.sum()), 1)
    dx = p.copy()
    dx[np.arange(len(lab)), np.where(keep, lab, 0)] -= 1
    dx[~keep] = 0
    if red == "mean":
        return np.float32(loss.sum() / n), (dx / n).astype(np.float32)
    return np.float32(loss.sum()), dx.astype(np.float32)


@pytest.mark.parametrize("bad", [3, -1, 1000])
def test_nll_loss_with_softmax_grad_bad_label(bad: int) -> None:
    ir = _ir(lambda t: dict(zip(("loss", "dx"), ops.nll_loss_with_softmax_grad(t["probs"], t["labels"]))), PROBS)
    good = np.array([0, 2, 1, 2], np.int32)
    loss, dx = _np_nll(P, good)
    check_all(ir, [{"loss": loss, "dx": dx}], [{"probs": P, "labels": good}])
    lab = good.copy()
    lab[2] = bad
    _expect_error(
        ir,
        {"probs": P, "labels": lab},
        rf'popxl\.nll_loss_with_softmax_grad: label {bad} at position \(2,\) of tensor "[^"]*" '
        rf'loaded from stream "labels" is out of range \[0, 3\)',
    )


def test_nll_loss_bad_label_and_ignore_index() -> None:
    ir = _ir(lambda t: {"loss": ops.nll_loss(t["probs"], t["labels"], ignore_index=-100)}, PROBS)
    lab = np.array([0, -100, 1, 2], np.int32)
    loss, _ = _np_nll(P, lab, ignore=-100)
    check_all(ir, [{"loss": loss}], [{"probs": P, "labels": lab}], rtol=1e-5)
    lab[3] = 7
    _expect_error(ir, {"probs": P, "labels": lab}, r"popxl\.nll_loss: label 7 .* \[0, 3\) \(or -100\)")


def test_nll_loss_grad_bad_label() -> None:
    """The gradient kernel checks too (labels can change between forward and backward)."""
    from xl.runtime.kernels import kernel_factory

    factory = kernel_factory("popxl.nll_loss_grad")
    assert factory is not None
    k = factory({"reduction": "mean", "_kernel": "popxl.nll_loss_grad", "_operands": ("probs", 'tensor "l"')})
    out = np.zeros_like(P)
    with pytest.raises(DataRangeError, match=r'label 3 at position \(0,\) of tensor "l"'):
        k(P, np.array([3, 0, 0, 0], np.int32), np.array(1.0, np.float32), out)


X = np.arange(15, dtype=np.float32).reshape(5, 3)


def _np_gather(table: np.ndarray, idx: np.ndarray, lo: int) -> np.ndarray:
    """Rows of `table` at `idx` written out one by one; an index outside [lo, n) gives a
    row of zeros; negative indices in range count from the end."""
    n = table.shape[0]
    out = np.zeros(idx.shape + table.shape[1:], table.dtype)
    for pos in np.ndindex(idx.shape):
        i = int(idx[pos])
        if lo <= i < n:
            out[pos] = table[i % n]
    return out


def test_gather_out_of_range_gives_zeros() -> None:
    """Never an error, never another row: without zero_OOR, [-n, n) counts (negative from
    the end, as ONNX Gather); with zero_OOR (upstream), only [0, n); the rest gives zeros."""
    ir = popxl.Ir()
    with ir.main_graph:
        idx = ops.host_load(popxl.h2d_stream((6,), popxl.int32, "idx"))
        table = popxl.variable(X, name="table")
        y = ops.gather(table, idx)
        z = ops.gather(table, idx, zero_OOR=True)
        w = table[idx]  # tensor indexing
        for name, t in {"y": y, "z": z, "w": w}.items():
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype, name), t)
    for feed in (np.array([4, 0, -1, 2, -5, 3], np.int32), np.array([4, 5, -1, -6, 1000, -(2**31)], np.int32)):
        y_ref, z_ref = _np_gather(X, feed, -5), _np_gather(X, feed, 0)
        check_all(ir, [{"y": y_ref, "z": z_ref, "w": y_ref}], [{"idx": feed}])
    assert _np_gather(X, np.array([5, -6, -1]), 0).sum() == 0  # the reference zeroes them


def test_gather_zero_oor_gives_zeros_for_negative_indices() -> None:
    ir = _ir(
        lambda t: {"z": ops.gather(popxl.constant(X), t["idx"], axis=0, zero_OOR=True)}, {"idx": ((2, 2), popxl.int32)}
    )
    idx = np.array([[1, 5], [-1, 0]], np.int32)  # -1 would wrap to the last row in NumPy
    want = np.zeros((2, 2, 3), np.float32)
    want[0, 0] = X[1]
    want[1, 1] = X[0]
    check_all(ir, [{"z": want}], [{"idx": idx}])


def test_onehot_out_of_range_is_off_as_onnx() -> None:
    ir = _ir(
        lambda t: {
            "h": ops.onehot(
                t["c"], popxl.constant(np.int32(4)), popxl.constant(np.array([0.0, 2.0], np.float32)), axis=-1
            )
        },
        {"c": ((5,), popxl.int32)},
    )
    c = np.array([0, 3, 4, -1, -5], np.int32)
    want = np.zeros((5, 4), np.float32)
    want[0, 0] = want[1, 3] = want[3, 3] = 2.0  # 4 and -5 are outside [-4, 4): all off
    check_all(ir, [{"h": want}], [{"c": c}])


T = np.arange(24, dtype=np.float32).reshape(4, 6)


def test_dynamic_slice_out_of_range() -> None:
    ir = _ir(
        lambda t: {"s": ops.dynamic_slice(popxl.constant(T), t["i"], axes=[0, 1], sizes=[2, 3], no_overlap=False)},
        {"i": ((2,), popxl.uint32)},
    )
    check_all(ir, [{"s": T[2:4, 1:4]}], [{"i": np.array([2, 1], np.uint32)}])
    _expect_error(
        ir,
        {"i": np.array([3, 0], np.uint32)},
        r'popxl\.dynamic_slice: offset 3 on axis 0 of tensor "[^"]*" loaded from stream "i" '
        r"is out of range \[0, 2\]",
    )


def test_dynamic_update_inplace_out_of_range() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        i = ops.host_load(popxl.h2d_stream((1,), popxl.uint32, "i"))
        v = popxl.variable(T, name="v")
        ops.dynamic_update_(v, i, popxl.constant(np.ones((4, 2), np.float32)), axes=[1], sizes=[2])
    want = T.copy()
    want[:, 4:6] = 1.0
    check_all(ir, [{}], [{"i": np.array([4], np.uint32)}], state={"v": want})
    _expect_error(ir, {"i": np.array([5], np.uint32)}, r"popxl\.dynamic_update_: offset 5 on axis 1")


def test_sparse_accumulate_out_of_range() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        i = ops.host_load(popxl.h2d_stream((2,), popxl.int32, "i"))
        v = popxl.variable(np.zeros((3, 2), np.float32), name="v")
        ops.var_updates.sparse_accumulate_(v, popxl.constant(np.ones((2, 2), np.float32)), i, axis=0)
    want = np.zeros((3, 2), np.float32)
    want[2] += 2.0
    check_all(ir, [{}], [{"i": np.array([2, 2], np.int32)}], state={"v": want})
    _expect_error(
        ir,
        {"i": np.array([0, 3], np.int32)},
        r'popxl\.sparse_accumulate_: index 3 at position \(1,\) of tensor "[^"]*" loaded from stream "i"',
    )


def test_xl_run_reports_bad_label(tmp_path, capsys) -> None:
    from xl.tools.run import main

    ir = _ir(lambda t: dict(zip(("loss", "dx"), ops.nll_loss_with_softmax_grad(t["probs"], t["labels"]))), PROBS)
    prog = tmp_path / "p.mlir"
    prog.write_text(ir.to_mlir())
    np.savez(tmp_path / "in.npz", probs=P, labels=np.array([0, 1, 9, 2], np.int32))
    status = main([str(prog), str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")])
    err = capsys.readouterr().err
    assert status == 1
    assert re.fullmatch(
        # at the failing op's position, named by type and position, then the kernel's message
        # and the source line with a caret
        r"\S*p\.mlir:(\d+):(\d+): error: NllWithSoftmaxGrad@\1:\2 \(popxl\.nll_loss_with_softmax_grad in graph "
        r'main_graph\) failed: popxl\.nll_loss_with_softmax_grad: label 9 at position \(2,\) of tensor "[^"]*" '
        r'loaded from stream "labels" is out of range \[0, 3\) \(3 classes; 1 bad value\)\n'
        r".*popxl\.nll_loss_with_softmax_grad.*\n *\^\n",
        err,
    ), err
    assert "Traceback" not in err and "IndexError" not in err
