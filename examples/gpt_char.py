"""A small GPT-style character language model, built with popxl_addons layers and trained
with Adam on Python's own standard-library sources (no download).

    python examples/gpt_char.py                   # 600 steps, then samples 300 characters
    python examples/gpt_char.py --steps 50 --sample-chars 100
    python examples/gpt_char.py --steps 20 --profile trace.json --memory-report   # see observe.py

The model: token and position embeddings (`layers.Embedding`), `--layers` pre-norm blocks
(`layers.LayerNorm`; causal self-attention written with matmul / softmax and an additive
mask; an MLP with gelu; dropout on the attention probabilities and on both residual
branches), a final layer norm and a `layers.Linear` head. The loss is
`addons.cross_entropy` of every next character; `addons.autodiff` gives the gradients and
`AdamOptimizerStep` updates each variable. Dropout uses the seed from
`addons.seed_variable`, split afresh at each step.

The corpus is a fixed list of standard-library modules read from
`sysconfig.get_paths()["stdlib"]`, cut to `--corpus-bytes`; the last 10 % is held out
and gives the sampling prompt.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import sysconfig
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import observe  # noqa: E402

import popxl  # noqa: E402
import popxl.ops as ops  # noqa: E402
import popxl_addons as addons  # noqa: E402
from popxl_addons.layers import Embedding, LayerNorm, Linear  # noqa: E402
from popxl_addons.optimizers.adam import AdamOptimizerStep  # noqa: E402

# stdlib modules making up the corpus, in this order (the ones missing from an install
# are skipped)
CORPUS_MODULES = (
    "textwrap.py",
    "string/__init__.py",
    "string.py",
    "shlex.py",
    "fnmatch.py",
    "glob.py",
    "argparse.py",
    "dataclasses.py",
    "functools.py",
    "heapq.py",
    "bisect.py",
    "queue.py",
    "difflib.py",
    "pprint.py",
    "reprlib.py",
    "csv.py",
    "configparser.py",
    "calendar.py",
    "random.py",
    "statistics.py",
    "fractions.py",
    "contextlib.py",
    "abc.py",
    "copy.py",
    "enum.py",
    "inspect.py",
    "typing.py",
    "collections/__init__.py",
)

# an additive causal mask: 0 where a position may attend, this below (exp underflows to 0)
MASK_VALUE = -1e9


@dataclass(frozen=True)
class Config:
    vocab_size: int
    seq_len: int = 64
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    batch: int = 16
    dropout: float = 0.1
    lr: float = 3e-3
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# -- data ----------------------------------------------------------------------------------------
def load_corpus(max_bytes: int = 300_000) -> str:
    """Standard-library sources (`CORPUS_MODULES`), concatenated, at most `max_bytes`."""
    root = sysconfig.get_paths()["stdlib"]
    parts = []
    total = 0
    for rel in CORPUS_MODULES:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        parts.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    # printable ASCII, tab and newline; anything else (a few accented letters) becomes '?'
    corpus = "".join(c if (" " <= c <= "~" or c in "\n\t") else "?" for c in "".join(parts)[:max_bytes])
    if len(corpus) < 10_000:
        raise RuntimeError(f"gpt_char: found only {len(corpus)} characters of stdlib sources under {root}")
    return corpus


class Vocab:
    """Characters <-> ids (the corpus's characters, sorted)."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        return np.array([self.index[c] for c in text], np.int32)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def batches(data: np.ndarray, batch: int, seq_len: int, rng: np.random.Generator):
    """Endless (tokens, next tokens) batches `(batch, seq_len)` from random offsets."""
    while True:
        starts = rng.integers(0, len(data) - seq_len - 1, size=batch)
        x = np.stack([data[s : s + seq_len] for s in starts])
        y = np.stack([data[s + 1 : s + seq_len + 1] for s in starts])
        yield x.astype(np.int32), y.astype(np.int32)


# -- model ---------------------------------------------------------------------------------------
def dropout(x: popxl.Tensor, seed: popxl.Tensor | None, p: float) -> popxl.Tensor:
    return ops.dropout(x, seed, p) if seed is not None and p > 0 else x


class Attention(addons.Module):
    """Causal multi-head self-attention on `(B*T, H)` rows."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.q = Linear(cfg.hidden)
        self.k = Linear(cfg.hidden)
        self.v = Linear(cfg.hidden)
        self.proj = Linear(cfg.hidden)

    def build(self, x: popxl.Tensor, seeds: list | None = None) -> popxl.Tensor:
        c = self.cfg
        b = x.shape[0] // c.seq_len

        def heads(t: popxl.Tensor) -> popxl.Tensor:  # (B*T, H) -> (B, nh, T, hd)
            return ops.transpose(t.reshape((b, c.seq_len, c.heads, c.head_dim)), (0, 2, 1, 3))

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = (q @ ops.transpose(k, (0, 1, 3, 2))) * (1.0 / math.sqrt(c.head_dim))
        mask = np.triu(np.full((c.seq_len, c.seq_len), MASK_VALUE, np.float32), k=1)
        scores = scores + popxl.constant(mask, popxl.float32, name="causal_mask")
        probs = ops.softmax(scores, axis=-1)
        probs = dropout(probs, seeds[0] if seeds else None, c.dropout)
        y = ops.transpose(probs @ v, (0, 2, 1, 3)).reshape((b * c.seq_len, c.hidden))
        return dropout(self.proj(y), seeds[1] if seeds else None, c.dropout)


class Block(addons.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.ln1 = LayerNorm()
        self.attn = Attention(cfg)
        self.ln2 = LayerNorm()
        self.fc = Linear(4 * cfg.hidden)
        self.out = Linear(cfg.hidden)

    def build(self, x: popxl.Tensor, seeds: list | None = None) -> popxl.Tensor:
        x = x + self.attn(self.ln1(x), seeds[:2] if seeds else None)
        m = self.out(ops.gelu(self.fc(self.ln2(x))))
        return x + dropout(m, seeds[2] if seeds else None, self.cfg.dropout)


class GPT(addons.Module):
    """`build(tokens, targets=None, seed=None)`: the mean next-character loss when
    `targets` is given, else the logits `(B*T, vocab)`."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.wte = Embedding(popxl.float32, cfg.vocab_size, cfg.hidden)
        self.wpe = Embedding(popxl.float32, cfg.seq_len, cfg.hidden)
        self.blocks = addons.Module.from_list([Block(cfg) for _ in range(cfg.layers)])
        self.ln_f = LayerNorm()
        self.head = Linear(cfg.vocab_size)

    def build(
        self, tokens: popxl.Tensor, targets: popxl.Tensor | None = None, seed: popxl.Tensor | None = None
    ) -> popxl.Tensor:
        c = self.cfg
        b, t = tokens.shape
        positions = popxl.constant(np.arange(t, dtype=np.int32), popxl.int32, name="positions")
        x = self.wte(tokens) + self.wpe(positions)  # (B, T, H) + (T, H)
        x = x.reshape((b * t, c.hidden))
        seeds = list(ops.split_random_seed(seed, 3 * c.layers)) if seed is not None and c.dropout > 0 else None
        for i, block in enumerate(self.blocks):
            x = block(x, seeds[3 * i : 3 * i + 3] if seeds else None)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return addons.cross_entropy(logits, targets.reshape((b * t,)))


# -- programs ------------------------------------------------------------------------------------
def train_program(cfg: Config, device: str = "cpu", seed_variable: bool = True):
    """The training step: returns (session, [tokens, targets] streams, variables, loss stream).

    One run loads a batch, computes the loss and its gradients (autodiff) and applies one
    Adam step (AdamW with weight decay 0, first moment in float32) to every variable.
    """
    np.random.seed(cfg.seed)  # the layers draw their initial weights from NumPy
    ir = popxl.Ir()
    use_dropout = cfg.dropout > 0
    with ir.main_graph:
        tok_s = popxl.h2d_stream((cfg.batch, cfg.seq_len), popxl.int32, "tokens")
        tgt_s = popxl.h2d_stream((cfg.batch, cfg.seq_len), popxl.int32, "targets")
        tokens, targets = ops.host_load(tok_s, "tokens"), ops.host_load(tgt_s, "targets")
        extra = []
        if use_dropout:
            seed_v, seed = addons.seed_variable(cfg.seed)
            seed_next, step_seed = ops.split_random_seed(seed)
            ops.var_updates.copy_var_update_(seed, seed_next)  # a fresh seed next step
            extra = [step_seed]
        facts, fwd = GPT(cfg).create_graph(tokens, targets, *extra)
        names = fwd.args.to_dict()
        grad = addons.autodiff(fwd, grads_provided=fwd.graph.outputs[:1], grads_required=list(names.values()))
        variables = facts.init()
        call = fwd.bind(variables).call_with_info(tokens, targets, *extra)
        loss = call.outputs[0]
        gcall = grad.call_with_info(popxl.constant(np.float32(1.0)), args=grad.grad_graph_info.inputs_dict(call))
        grads = grad.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(call, gcall)
        optimizer = AdamOptimizerStep(cache=True)
        for var in variables.tensors:
            state, step = optimizer.create_graph(
                var,
                grads[var].spec,
                lr=cfg.lr,
                weight_decay=0.0,
                eps=1e-8,
                first_order_dtype=popxl.float32,
            )
            step.bind(state.init()).call(var, grads[var])
        loss_s = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(loss_s, loss)
    return popxl.Session(ir, device), [tok_s, tgt_s], variables, loss_s


def logits_program(cfg: Config, device: str = "cpu"):
    """Inference: logits `(seq_len, vocab)` of one context; returns (session, stream, variables, out)."""
    ir = popxl.Ir()
    with ir.main_graph:
        tok_s = popxl.h2d_stream((1, cfg.seq_len), popxl.int32, "context")
        tokens = ops.host_load(tok_s, "context")
        facts, fwd = GPT(Config(**{**cfg.__dict__, "batch": 1, "dropout": 0.0})).create_graph(tokens)
        variables = facts.init()
        (logits,) = fwd.bind(variables).call(tokens)
        out_s = popxl.d2h_stream(logits.shape, logits.dtype, "logits")
        ops.host_store(out_s, logits)
    return popxl.Session(ir, device), tok_s, variables, out_s


def sample(
    session,
    stream,
    out_stream,
    vocab: Vocab,
    prompt: str,
    n_chars: int,
    seq_len: int,
    temperature: float = 0.8,
    seed: int = 0,
) -> str:
    """Generate `n_chars` characters after `prompt` (its last `seq_len` characters are
    the first context), sampling each from softmax(logits / temperature)."""
    rng = np.random.default_rng(seed)
    ids = list(vocab.encode(prompt[-seq_len:]))
    out = []
    with session:
        for _ in range(n_chars):
            ctx = np.array(ids[-seq_len:], np.int32)[None, :]
            logits = session.run({stream: ctx})[out_stream][-1].astype(np.float64) / temperature
            p = np.exp(logits - logits.max())
            p /= p.sum()
            nxt = int(rng.choice(len(p), p=p))
            ids.append(nxt)
            out.append(nxt)
    return vocab.decode(out)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--corpus-bytes", type=int, default=300_000)
    ap.add_argument("--sample-chars", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--device", default="cpu", help="cpu, ipu_model or ipu_hw: all run on NumPy")
    observe.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps must be at least 1, got {args.steps}")
    observe.check_arguments(ap, args)
    if args.hidden % args.heads:
        ap.error(f"--hidden {args.hidden} is not divisible by --heads {args.heads}")

    text = load_corpus(args.corpus_bytes)
    vocab = Vocab(text)
    data = vocab.encode(text)
    split = int(0.9 * len(data))
    train_data, held_out = data[:split], text[split:]
    cfg = Config(
        vocab_size=len(vocab),
        seq_len=args.seq_len,
        hidden=args.hidden,
        heads=args.heads,
        layers=args.layers,
        batch=args.batch,
        dropout=args.dropout,
        lr=args.lr,
        seed=args.seed,
    )
    print(
        f"corpus: {len(text):,} characters of stdlib sources, vocabulary {len(vocab)}; "
        f"model: {cfg.layers} blocks, hidden {cfg.hidden}, {cfg.heads} heads, context {cfg.seq_len}"
    )
    session, streams, variables, loss_s = train_program(cfg, args.device)
    n_params = sum(int(np.prod(t.shape)) for t in variables.tensors)
    print(f"{n_params:,} parameters")
    observe.memory(session, args)
    rng = np.random.default_rng(args.seed)
    losses = []
    t0 = time.perf_counter()
    with session, observe.StepProfiler(session, args) as runner:
        for step, (x, y) in zip(range(1, args.steps + 1), batches(train_data, cfg.batch, cfg.seq_len, rng)):
            losses.append(float(runner.run(dict(zip(streams, (x, y))))[loss_s]))
            if step == 1 or step % args.log_every == 0 or step == args.steps:
                recent = np.mean(losses[-args.log_every :])
                window = min(len(losses), args.log_every)
                print(f"step {step:5d}  loss {losses[-1]:.4f}  (mean of last {window}: {recent:.4f})")
        trained = session.get_tensors_data(variables.tensors)
    elapsed = time.perf_counter() - t0
    print(f"{args.steps} steps in {elapsed:.1f} s ({elapsed / args.steps * 1000:.1f} ms/step)")

    inf_session, ctx_s, inf_vars, out_s = logits_program(cfg, args.device)
    inf_session.write_variables_data({iv: trained[tv] for tv, iv in variables.to_mapping(inf_vars).items()})
    prompt = held_out[: cfg.seq_len]
    generated = sample(inf_session, ctx_s, out_s, vocab, prompt, args.sample_chars, cfg.seq_len, seed=args.seed)
    print("---- prompt (held-out text) ----")
    print(prompt)
    print("---- sample ----")
    print(generated)
    return {"losses": losses, "sample": generated, "prompt": prompt}


if __name__ == "__main__":
    main()
