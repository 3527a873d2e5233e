"""A small CNN training step in xl against the same step in PyTorch (CPU).

    python benchmarks/conv.py                 # batch 32, 1 BLAS thread
    python benchmarks/conv.py --batch 128 --threads 2

The model (LeNet-like, NCHW): conv 1->8 5x5 pad 2, relu, max_pool 2, conv 8->16 5x5,
relu, average_pool 2, flatten, matmul 400->10, softmax cross-entropy; plain SGD. xl builds
it with popxl.ops (conv, pools, autodiff) and runs it through `popxl.Session.run`; PyTorch
runs the same step with `torch.nn.functional` from the same initial weights and batches.
Both are timed alternately in chunks of steps; the median step time per chunk is
reported, and the losses of the first steps are compared (they must agree to 1e-4).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunks", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="steps per chunk")
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import numpy as np
    import torch

    import popxl
    import popxl_addons as addons
    from popxl import ops, transforms

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    b, lr = args.batch, 0.05
    init = {
        "w1": (rng.standard_normal((8, 1, 5, 5)) * 0.2).astype(np.float32),
        "w2": (rng.standard_normal((16, 8, 5, 5)) * 0.07).astype(np.float32),
        "w3": (rng.standard_normal((400, 10)) * 0.05).astype(np.float32),
    }
    n_batches = 4
    images = rng.standard_normal((n_batches, b, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, (n_batches, b)).astype(np.int32)

    def net(x: popxl.Tensor, w1: popxl.Tensor, w2: popxl.Tensor, w3: popxl.Tensor) -> popxl.Tensor:
        h = ops.max_pool(ops.relu(ops.conv(x, w1, padding=(2, 2, 2, 2))), (2, 2), stride=(2, 2))
        h = ops.average_pool(ops.relu(ops.conv(h, w2)), (2, 2), stride=(2, 2))
        return ops.reshape(h, (x.shape[0], 400)) @ w3

    ir = popxl.Ir()
    with ir.main_graph:
        xs = popxl.h2d_stream((b, 1, 28, 28), popxl.float32, "x")
        ys = popxl.h2d_stream((b,), popxl.int32, "labels")
        x, y = ops.host_load(xs), ops.host_load(ys)
        ws = [popxl.variable(init[k], name=k) for k in ("w1", "w2", "w3")]
        graph = ir.create_graph(net, x.spec, *[w.spec for w in ws])
        info = ops.call_with_info(graph, x, *ws)
        loss, dlogits = addons.ops.cross_entropy_with_grad(info.outputs[0], y)
        grad_info = transforms.autodiff(graph, grads_required=graph.inputs[1:])
        grads = ops.call(grad_info.graph, dlogits, inputs_dict=grad_info.inputs_dict(info))
        for w, g in zip(ws, grads):
            ops.scaled_add_(w, g, b=-lr)
        loss_stream = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_stream, loss)

    tw = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    F = torch.nn.functional

    def torch_step(i: int) -> float:
        xt = torch.from_numpy(images[i % n_batches])
        h = F.max_pool2d(F.relu(F.conv2d(xt, tw["w1"], padding=2)), 2)
        h = F.avg_pool2d(F.relu(F.conv2d(h, tw["w2"])), 2)
        logits = h.reshape(b, 400) @ tw["w3"]
        loss = F.cross_entropy(logits, torch.from_numpy(labels[i % n_batches]).long())
        for t in tw.values():
            t.grad = None
        loss.backward()
        with torch.no_grad():
            for t in tw.values():
                assert t.grad is not None  # set by loss.backward()
                t -= lr * t.grad
        return float(loss)

    with popxl.Session(ir, "cpu") as session:

        def xl_step(i: int) -> float:
            out = session.run({xs: images[i % n_batches], ys: labels[i % n_batches]})
            return float(out[loss_stream])

        first_xl = [xl_step(i) for i in range(5)]
        first_torch = [torch_step(i) for i in range(5)]
        diff = max(abs(a - c) / abs(c) for a, c in zip(first_xl, first_torch))
        print(f"first 5 losses xl    {[round(v, 5) for v in first_xl]}")
        print(f"first 5 losses torch {[round(v, 5) for v in first_torch]}  (max rel diff {diff:.1e})")
        if diff > 1e-4:
            raise SystemExit("losses differ")
        times: dict[str, list[float]] = {"xl": [], "torch": []}
        step = 5
        for c in range(args.chunks):
            order = [("xl", xl_step), ("torch", torch_step)]
            for name, fn in order if c % 2 == 0 else reversed(order):
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    fn(step)
                    step += 1
                times[name].append((time.perf_counter() - t0) / args.steps)
    xl_ms = statistics.median(times["xl"]) * 1e3
    torch_ms = statistics.median(times["torch"]) * 1e3
    print(
        f"batch {b}, {args.threads} thread(s): xl {xl_ms:.2f} ms/step, torch {torch_ms:.2f} ms/step, "
        f"torch/xl {torch_ms / xl_ms:.2f}"
    )


if __name__ == "__main__":
    main()
