"""The benchmarked transformer training steps as xl programs (popxl / popxl.addons).

- GPT: `examples/gpt_char.py`'s model and training step as it is (`train_program`: token and
  position embeddings, pre-norm blocks of causal attention and a tanh-gelu MLP, Adam),
  trained on its stdlib corpus;
- a BERT-base-shaped encoder layer (`BertLayer`: hidden 768, 12 heads, ffn 3072, exact
  gelu through `ops.geluerf`, post-norm with eps 1e-12, dropout on the attention
  probabilities and on both branches as BERT), its loss the mean squared error against a
  target, the gradients of every weight applied by SGD (`ops.scaled_add_`).

Each `XlProgram` carries its initial weights (by variable name, xl's layout: a `Linear`
weight is `(in, out)`) and, with dropout, the keep-and-scale multipliers xl's dropout ops
draw at the first step (`first_step_masks`), from the runtime's counter-based generator:
the references compute the same first loss with them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import popxl
import popxl.ops as ops
import popxl_addons as addons
from popxl_addons.layers import LayerNorm, Linear
from xl.runtime.kernels.random import SEED_STREAM, keep_mask, random_bits

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import gpt_char  # noqa: E402  (the example's model and training step)


@dataclass
class XlProgram:
    """A compiled training step: `run(batch)` returns the step's loss (before the update)."""

    session: popxl.Session
    streams: list
    loss: popxl.DeviceToHostStream
    init: dict[str, np.ndarray]
    first_step_masks: Callable[[], list[np.ndarray]] | None

    def feed(self, batch: tuple[np.ndarray, ...]) -> dict:
        return dict(zip(self.streams, batch))

    def run(self, batch: tuple[np.ndarray, ...]) -> float:
        return float(self.session.run(self.feed(batch))[self.loss])


# -- dropout masks as xl draws them ------------------------------------------------------------
def derived_seed(seed: np.ndarray, i: int) -> np.ndarray:
    """`ops.split_random_seed(seed, n)[i]` (`modify_random_seed(seed, i)`) computed on the host."""
    (w,) = (int(v) for v in random_bits(seed, 1, SEED_STREAM, counter=i))
    return np.array([w >> 32, w & 0xFFFFFFFF], np.uint32)


def dropout_multiplier(seed: np.ndarray, shape: tuple[int, ...], ratio: float) -> np.ndarray:
    """What `ops.dropout(x, seed, ratio)` multiplies x by: 1 / (1 - ratio) where kept, else 0."""
    return np.where(keep_mask(seed, shape, ratio), np.float32(1.0 / (1.0 - ratio)), np.float32(0.0))


def step_seeds(session: popxl.Session, n: int) -> list[np.ndarray]:
    """The `n` dropout seeds of the next step of a program that splits its seed variable
    (`addons.seed_variable`) into (next value, step seed) and the step seed into `n`."""
    (seed_var,) = [v for v in session.ir.main_graph.variables if v.dtype == popxl.uint32]
    step = derived_seed(np.asarray(session.get_tensor_data(seed_var)), 1)
    return [derived_seed(step, i) for i in range(n)]


# -- GPT (examples/gpt_char.py) ----------------------------------------------------------------
def gpt_config(hidden: int, seq_len: int, dropout: float, batch: int = 16, heads: int = 4, layers: int = 2):
    vocab = gpt_char.Vocab(gpt_corpus())
    return gpt_char.Config(
        vocab_size=len(vocab), seq_len=seq_len, hidden=hidden, heads=heads, layers=layers, batch=batch, dropout=dropout
    )


_CORPUS: list[str] = []


def gpt_corpus() -> str:
    if not _CORPUS:
        _CORPUS.append(gpt_char.load_corpus(300_000))
    return _CORPUS[0]


def gpt_batches(cfg, count: int = 16) -> list[tuple[np.ndarray, np.ndarray]]:
    text = gpt_corpus()
    data = gpt_char.Vocab(text).encode(text)
    it = gpt_char.batches(data, cfg.batch, cfg.seq_len, np.random.default_rng(1))
    return [next(it) for _ in range(count)]


def gpt_program(cfg, profile: bool = False) -> XlProgram:
    session, streams, variables, loss_s = gpt_char.train_program(cfg)
    if profile:
        session = popxl.Session(session.ir, "cpu", profile=True)
    init = {k: np.array(session.get_tensor_data(t)) for k, t in variables.to_dict().items()}

    def masks() -> list[np.ndarray]:
        b, t, h, nh = cfg.batch, cfg.seq_len, cfg.hidden, cfg.heads
        seeds = step_seeds(session, 3 * cfg.layers)
        shapes = [(b, nh, t, t), (b * t, h), (b * t, h)] * cfg.layers  # per block: probs, attn out, mlp out
        return [dropout_multiplier(s, shape, cfg.dropout) for s, shape in zip(seeds, shapes)]

    return XlProgram(session, streams, loss_s, init, masks if cfg.dropout > 0 else None)


# -- BERT-base encoder layer ------------------------------------------------------------------
@dataclass(frozen=True)
class BertConfig:
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    seq_len: int = 128
    batch: int = 2
    dropout: float = 0.0
    lr: float = 1e-3
    eps: float = 1e-12
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class BertLayer(addons.Module):
    """One post-norm encoder layer on `(B*T, H)` rows; `build(x, target, seed=None)` is the
    mean squared error of its output against `target`."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.q, self.k, self.v, self.o = (Linear(cfg.hidden) for _ in range(4))
        self.ln1 = LayerNorm()
        self.fc1 = Linear(cfg.ffn)
        self.fc2 = Linear(cfg.hidden)
        self.ln2 = LayerNorm()

    def build(self, x: popxl.Tensor, target: popxl.Tensor, seed: popxl.Tensor | None = None) -> popxl.Tensor:
        c = self.cfg
        b = x.shape[0] // c.seq_len
        seeds = list(ops.split_random_seed(seed, 3)) if seed is not None else None

        def drop(t: popxl.Tensor, i: int) -> popxl.Tensor:
            return ops.dropout(t, seeds[i], c.dropout) if seeds is not None else t

        def heads(t: popxl.Tensor) -> popxl.Tensor:  # (B*T, H) -> (B, nh, T, hd)
            return ops.transpose(t.reshape((b, c.seq_len, c.heads, c.head_dim)), (0, 2, 1, 3))

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = (q @ ops.transpose(k, (0, 1, 3, 2))) * (1.0 / math.sqrt(c.head_dim))
        probs = drop(ops.softmax(scores, axis=-1), 0)
        ctx = ops.transpose(probs @ v, (0, 2, 1, 3)).reshape((b * c.seq_len, c.hidden))
        x1 = self.ln1(x + drop(self.o(ctx), 1), eps=c.eps)
        y = self.ln2(x1 + drop(self.fc2(ops.geluerf(self.fc1(x1))), 2), eps=c.eps)
        d = y - target
        return ops.mean(d * d)


def bert_batches(cfg: BertConfig, count: int = 8) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(2)
    rows = cfg.batch * cfg.seq_len
    return [
        (
            rng.standard_normal((rows, cfg.hidden)).astype(np.float32),
            rng.standard_normal((rows, cfg.hidden)).astype(np.float32),
        )
        for _ in range(count)
    ]


def bert_program(cfg: BertConfig, profile: bool = False) -> XlProgram:
    """Forward, backward and an SGD step of every weight of one `BertLayer`."""
    np.random.seed(cfg.seed)
    ir = popxl.Ir()
    rows = cfg.batch * cfg.seq_len
    with ir.main_graph:
        x_s = popxl.h2d_stream((rows, cfg.hidden), popxl.float32, "x")
        t_s = popxl.h2d_stream((rows, cfg.hidden), popxl.float32, "target")
        x, target = ops.host_load(x_s, "x"), ops.host_load(t_s, "target")
        extra = []
        if cfg.dropout > 0:
            _, seed = addons.seed_variable(cfg.seed)
            seed_next, step_seed = ops.split_random_seed(seed)
            ops.var_updates.copy_var_update_(seed, seed_next)
            extra = [step_seed]
        facts, fwd = BertLayer(cfg).create_graph(x, target, *extra)
        grad = addons.autodiff(
            fwd, grads_provided=fwd.graph.outputs[:1], grads_required=list(fwd.args.to_dict().values())
        )
        variables = facts.init()
        call = fwd.bind(variables).call_with_info(x, target, *extra)
        loss = call.outputs[0]
        gcall = grad.call_with_info(popxl.constant(np.float32(1.0)), args=grad.grad_graph_info.inputs_dict(call))
        grads = grad.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(call, gcall)
        for var in variables.tensors:
            ops.scaled_add_(var, grads[var], b=-cfg.lr)
        loss_s = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_s, loss)
    session = popxl.Session(ir, "cpu", profile=profile)
    init = {k: np.array(session.get_tensor_data(t)) for k, t in variables.to_dict().items()}

    def masks() -> list[np.ndarray]:
        b, t, h, nh = cfg.batch, cfg.seq_len, cfg.hidden, cfg.heads
        shapes = [(b, nh, t, t), (b * t, h), (b * t, h)]
        return [dropout_multiplier(s, sh, cfg.dropout) for s, sh in zip(step_seeds(session, 3), shapes)]

    return XlProgram(session, [x_s, t_s], loss_s, init, masks if cfg.dropout > 0 else None)
