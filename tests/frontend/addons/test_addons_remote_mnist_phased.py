"""examples/mnist_phased.py for a few steps in every io mode: the phased program (layers and
Adam state in remote buffers, sharded over 2 replicas, batch-serialised micro batches)
trains the same weights as the unphased program (every layer resident, all-reduced
gradients) from the same initial weights and data; and its memory report holds one layer's
phase at a time (resident bytes bounded by the largest phase, against the unphased figure)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import popxl

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))

import mnist_phased  # noqa: E402
from mnist_data import batches, load_mnist  # noqa: E402

LAYERS = {"fc1": 784 * 512 + 512, "fc2": 512 * 512 + 512, "fc3": 512 * 512 + 512, "fc4": 512 * 10 + 10}


def _run(session, streams, variables, loss_stream, data, opts, init=None):
    with session:
        if init is not None:
            session.write_variables_data({variables[k]: v for k, v in init.items()})
        start = {k: v.copy() for k, v in session.get_tensors_data(variables.tensors).items()}
        losses = []
        shape = (opts.gradient_accumulation, opts.data_parallel, opts.train_micro_batch_size)
        for x, y in data:
            images = x.reshape(*shape, *streams[0].shape[1:])  # (8, 784) phased, (8, 28, 28) unphased
            out = session.run(dict(zip(streams, [images, y.reshape(shape).astype(np.int32)])))
            losses.append(out[loss_stream])
        end = session.get_tensors_data(variables.tensors)
    named = {k: (start[t], end[t]) for k, t in variables.named_tensors.items()}
    return named, np.array(losses)


@pytest.mark.parametrize("io_mode,ga", [("compute", 2), ("io", 2), ("io_overlapped", 3)])
def test_phased_equals_unphased(io_mode: str, ga: int) -> None:
    """Both programs compiled without automatic outlining, so that both go through the same
    rt optimisations (Adam's float16 first moment turns float32 rounding differences into
    whole float16 steps); then the default (outlined when large enough) phased program
    against it, within those steps."""
    opts = mnist_phased.parse_args(["--io-mode", io_mode, "--gradient-accumulation", str(ga), "--lr", "1e-2"])
    np.random.seed(0)
    phased = mnist_phased.train_program(opts)
    plain = mnist_phased.unphased_program(opts)
    flat = (popxl.Session(phased[0].ir, opts.device, outline=False), *phased[1:])
    plain = (popxl.Session(plain[0].ir, opts.device, outline=False), *plain[1:])
    train_x, train_y, _, _ = load_mnist()
    data = list(batches(train_x, train_y, 8 * ga * 2, shuffle=True, seed=1))[:2]
    got, got_loss = _run(*flat, data, opts)
    init = {k: s for k, (s, _) in got.items()}  # the phased program's initial (full) weights
    want, want_loss = _run(*plain, data, opts, init)
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5, atol=1e-6)
    for k, (s, e) in got.items():
        np.testing.assert_array_equal(s, want[k][0])
        assert np.abs(e - s).max() > 1e-3, k  # every layer trained
        np.testing.assert_allclose(e, want[k][1], rtol=1e-4, atol=1e-5, err_msg=k)
    default, default_loss = _run(*phased, data, opts, init)
    np.testing.assert_allclose(default_loss, got_loss, rtol=1e-5, atol=1e-6)
    for k, (_, e) in got.items():  # lr * 2^-11 per float16 step of the first moment
        np.testing.assert_allclose(default[k][1], e, rtol=0, atol=1e-4, err_msg=k)


def test_phased_memory_bounded_by_largest_phase() -> None:
    opts = mnist_phased.parse_args([])
    reports = mnist_phased.memory_reports(opts)
    phased, plain = reports["phased"], reports["unphased"]
    # a phase holds one layer (parameter count P): gathered fp32 weights (4P), gradient
    # accumulators (4P), reduced gradient shard (2P), the weight shard (2P), first order
    # fp16 shard (P), second order fp32 shard (2P) = 15P bytes per replica
    cost = {k: 15 * p for k, p in LAYERS.items()}
    assert phased.variables == 0  # every weight and state is remote
    assert phased.total <= cost["fc1"]  # the largest phase
    assert phased.remote_staging > 0
    # the unphased program holds every layer, its gradients and full Adam state
    assert plain.total > sum(LAYERS.values()) * (4 + 4 + 2 + 4)
    assert phased.total * 3 < plain.total
