"""The benchmarked transformer steps written in PyTorch (eager and torch.compile) and JAX (jit).

Each builder takes the xl program's configuration and initial weights (by xl variable
name, `Linear` weights `(in, out)`) and returns `step(batch, masks=None) -> loss`, or None
when the library is not installed. A step computes the loss, its gradients and the same
update as the xl program (GPT: AdamW with weight decay 0, as `AdamOptimizerStep`; the BERT
layer: SGD), and returns the loss from before the update. The model is written op for op
as the xl program: matmul / softmax attention with the additive causal mask, layer norm,
gelu (tanh for GPT, erf for BERT), dropout after the same ops. `masks` replaces each
dropout's random draw with a given multiplier (what xl's dropout drew at the same step),
so the first step can be compared with xl's to the last digits; without it each library
draws its own masks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

Batch = tuple[np.ndarray, np.ndarray]
Step = Callable[..., float]

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def _causal_mask(seq_len: int, value: float) -> np.ndarray:
    return np.triu(np.full((seq_len, seq_len), value, np.float32), k=1)


# -- PyTorch ---------------------------------------------------------------------------------
def _torch() -> Any | None:
    try:
        import torch
    except Exception:
        return None
    return torch


def torch_gpt(cfg: Any, init: dict[str, np.ndarray], mask_value: float, compiled: bool = False) -> Step | None:
    """examples/gpt_char.py's model and Adam step in PyTorch (`compiled`: torch.compile)."""
    torch = _torch()
    if torch is None:
        return None
    nn, F = torch.nn, torch.nn.functional
    p = cfg.dropout

    def drop(t, masks, i):
        if p == 0:
            return t
        return F.dropout(t, p, training=True) if masks is None else t * masks[i]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.proj = (nn.Linear(cfg.hidden, cfg.hidden) for _ in range(4))
            self.register_buffer("mask", torch.from_numpy(_causal_mask(cfg.seq_len, mask_value)))

        def forward(self, x, masks, i):
            b = x.shape[0] // cfg.seq_len

            def heads(t):
                return t.reshape(b, cfg.seq_len, cfg.heads, cfg.head_dim).permute(0, 2, 1, 3)

            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(cfg.head_dim))
            probs = drop(F.softmax(scores + self.mask, dim=-1), masks, i)
            y = (probs @ v).permute(0, 2, 1, 3).reshape(b * cfg.seq_len, cfg.hidden)
            return drop(self.proj(y), masks, i + 1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(cfg.hidden, eps=1e-5)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(cfg.hidden, eps=1e-5)
            self.fc = nn.Linear(cfg.hidden, 4 * cfg.hidden)
            self.out = nn.Linear(4 * cfg.hidden, cfg.hidden)

        def forward(self, x, masks, i):
            x = x + self.attn(self.ln1(x), masks, i)
            return x + drop(self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh")), masks, i + 2)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(*init["wte.weight"].shape)
            self.wpe = nn.Embedding(*init["wpe.weight"].shape)
            self.blocks = nn.ModuleList([Block() for _ in range(cfg.layers)])
            self.ln_f = nn.LayerNorm(cfg.hidden, eps=1e-5)
            self.head = nn.Linear(cfg.hidden, cfg.vocab_size)
            self.register_buffer("positions", torch.arange(cfg.seq_len))

        def forward(self, tokens, targets, masks=None):
            b, t = tokens.shape
            x = (self.wte(tokens) + self.wpe(self.positions)).reshape(b * t, cfg.hidden)
            for j, block in enumerate(self.blocks):
                x = block(x, masks, 3 * j)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits, targets.reshape(-1))

    model = _load(torch, GPT(), init)
    # fused: the fastest of PyTorch's AdamW implementations on this CPU (0.7 ms a step less than the default)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=0.0, fused=True)
    fwd = torch.compile(model) if compiled else model

    def step(batch: Batch, masks: list[np.ndarray] | None = None) -> float:
        tokens, targets = (torch.from_numpy(a).long() for a in batch)
        opt.zero_grad(set_to_none=True)
        loss = fwd(tokens, targets, None if masks is None else [torch.from_numpy(m) for m in masks])
        loss.backward()
        opt.step()
        return loss.item()

    return step


def torch_bert(cfg: Any, init: dict[str, np.ndarray], compiled: bool = False) -> Step | None:
    """The BERT-base-shaped encoder layer, mean squared error, SGD, in PyTorch."""
    torch = _torch()
    if torch is None:
        return None
    nn, F = torch.nn, torch.nn.functional
    p = cfg.dropout

    def drop(t, masks, i):
        if p == 0:
            return t
        return F.dropout(t, p, training=True) if masks is None else t * masks[i]

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(cfg.hidden, cfg.hidden) for _ in range(4))
            self.ln1 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)
            self.fc1 = nn.Linear(cfg.hidden, cfg.ffn)
            self.fc2 = nn.Linear(cfg.ffn, cfg.hidden)
            self.ln2 = nn.LayerNorm(cfg.hidden, eps=cfg.eps)

        def forward(self, x, target, masks=None):
            b = x.shape[0] // cfg.seq_len

            def heads(t):
                return t.reshape(b, cfg.seq_len, cfg.heads, cfg.head_dim).permute(0, 2, 1, 3)

            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(cfg.head_dim))
            probs = drop(F.softmax(scores, dim=-1), masks, 0)
            ctx = (probs @ v).permute(0, 2, 1, 3).reshape(b * cfg.seq_len, cfg.hidden)
            x1 = self.ln1(x + drop(self.o(ctx), masks, 1))
            y = self.ln2(x1 + drop(self.fc2(F.gelu(self.fc1(x1), approximate="none")), masks, 2))
            return ((y - target) ** 2).mean()

    model = _load(torch, Layer(), init)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, foreach=True)
    fwd = torch.compile(model) if compiled else model

    def step(batch: Batch, masks: list[np.ndarray] | None = None) -> float:
        x, target = (torch.from_numpy(a) for a in batch)
        opt.zero_grad(set_to_none=True)
        loss = fwd(x, target, None if masks is None else [torch.from_numpy(m) for m in masks])
        loss.backward()
        opt.step()
        return loss.item()

    return step


def _load(torch: Any, model: Any, init: dict[str, np.ndarray]) -> Any:
    """Copy xl's initial weights into `model` (a Linear's weight transposed)."""
    linear = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    names = {n for n, _ in model.named_parameters()}
    if names != set(init):
        raise ValueError(f"PyTorch reference: parameters differ from xl's variables: {sorted(names ^ set(init))}")
    with torch.no_grad():
        for name, param in model.named_parameters():
            arr = init[name].T if name in linear else init[name]
            if tuple(param.shape) != arr.shape:
                raise ValueError(f"PyTorch reference: {name} has shape {tuple(param.shape)}, xl's {arr.shape}")
            param.copy_(torch.from_numpy(np.ascontiguousarray(arr)))
    return model


# -- JAX ---------------------------------------------------------------------------------------
def _jax() -> tuple[Any, Any] | None:
    try:
        import jax
        import jax.numpy as jnp
    except Exception:
        return None
    return jax, jnp


def _layer_norm(jnp: Any, x: Any, w: Any, b: Any, eps: float) -> Any:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * w + b


def _jax_trainer(
    loss_fn: Callable[..., Any], init: dict[str, np.ndarray], n_dropout: int, ratio: float, optimizer: str, lr: float
) -> Step | None:
    """A jitted step of `loss_fn(params, batch, drop)` (`drop(x, i)`: the i-th dropout) with
    Adam (as torch's AdamW, weight decay 0) or SGD. Two compiled forms: masks given, masks
    drawn with `jax.random` (a key split per step)."""
    lib = _jax()
    if lib is None:
        return None
    jax, jnp = lib
    tree_map = jax.tree_util.tree_map
    b1, b2 = ADAM_BETAS

    def make(with_masks: bool):
        def step(state, batch, masks):
            params, m, v, t, key = state
            if with_masks:
                drops = masks
            else:
                key, sub = jax.random.split(key)
                drops = list(jax.random.split(sub, max(n_dropout, 1)))

            def drop(x, i):
                if ratio == 0:
                    return x
                if with_masks:
                    return x * drops[i]
                keep = jax.random.bernoulli(drops[i], 1.0 - ratio, x.shape)
                return jnp.where(keep, x * (1.0 / (1.0 - ratio)), 0.0)

            loss, g = jax.value_and_grad(loss_fn)(params, batch, drop)
            if optimizer == "sgd":
                params = tree_map(lambda p_, g_: p_ - lr * g_, params, g)
            else:
                t = t + 1.0
                m = tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
                v = tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
                c1, c2 = 1 - b1**t, jnp.sqrt(1 - b2**t)
                params = tree_map(lambda p_, m_, v_: p_ - (lr / c1) * m_ / (jnp.sqrt(v_) / c2 + ADAM_EPS), params, m, v)
            return (params, m, v, t, key), loss

        return jax.jit(step, donate_argnums=0)

    params = {k: jnp.asarray(a) for k, a in init.items()}

    def zeros() -> dict[str, Any]:  # Adam's moments (each its own buffers: the state is donated)
        return {} if optimizer == "sgd" else {k: jnp.zeros_like(a) for k, a in params.items()}

    state = [(params, zeros(), zeros(), jnp.float32(0.0), jax.random.PRNGKey(0))]
    compiled = {True: make(True), False: make(False)}

    def run(batch: Batch, masks: list[np.ndarray] | None = None) -> float:
        state[0], loss = compiled[masks is not None](state[0], batch, masks)
        return float(loss)

    return run


def jax_gpt(cfg: Any, init: dict[str, np.ndarray], mask_value: float) -> Step | None:
    """examples/gpt_char.py's model and Adam step with jax.jit."""
    lib = _jax()
    if lib is None:
        return None
    jax, jnp = lib
    causal = _causal_mask(cfg.seq_len, mask_value)
    positions = np.arange(cfg.seq_len)

    def lin(P, name, x):
        return x @ P[f"{name}.weight"] + P[f"{name}.bias"]

    def ln(P, name, x):
        return _layer_norm(jnp, x, P[f"{name}.weight"], P[f"{name}.bias"], 1e-5)

    def loss_fn(P, batch, drop):
        tokens, targets = batch
        b, t = tokens.shape
        x = (P["wte.weight"][tokens] + P["wpe.weight"][positions]).reshape(b * t, cfg.hidden)

        def heads(a):
            return a.reshape(b, t, cfg.heads, cfg.head_dim).transpose(0, 2, 1, 3)

        for j in range(cfg.layers):
            pre = f"blocks.{j}"
            h = ln(P, f"{pre}.ln1", x)
            q, k, v = (heads(lin(P, f"{pre}.attn.{n}", h)) for n in "qkv")
            scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(cfg.head_dim))
            probs = drop(jax.nn.softmax(scores + causal, axis=-1), 3 * j)
            y = (probs @ v).transpose(0, 2, 1, 3).reshape(b * t, cfg.hidden)
            x = x + drop(lin(P, f"{pre}.attn.proj", y), 3 * j + 1)
            mlp = lin(P, f"{pre}.out", jax.nn.gelu(lin(P, f"{pre}.fc", ln(P, f"{pre}.ln2", x)), approximate=True))
            x = x + drop(mlp, 3 * j + 2)
        logp = jax.nn.log_softmax(lin(P, "head", ln(P, "ln_f", x)), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets.reshape(-1, 1), axis=1))

    return _jax_trainer(loss_fn, init, 3 * cfg.layers, cfg.dropout, "adam", cfg.lr)


def jax_bert(cfg: Any, init: dict[str, np.ndarray]) -> Step | None:
    """The BERT-base-shaped encoder layer, mean squared error, SGD, with jax.jit."""
    lib = _jax()
    if lib is None:
        return None
    jax, jnp = lib

    def lin(P, name, x):
        return x @ P[f"{name}.weight"] + P[f"{name}.bias"]

    def ln(P, name, x):
        return _layer_norm(jnp, x, P[f"{name}.weight"], P[f"{name}.bias"], cfg.eps)

    def loss_fn(P, batch, drop):
        x, target = batch
        b = x.shape[0] // cfg.seq_len

        def heads(a):
            return a.reshape(b, cfg.seq_len, cfg.heads, cfg.head_dim).transpose(0, 2, 1, 3)

        q, k, v = (heads(lin(P, n, x)) for n in "qkv")
        scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(cfg.head_dim))
        probs = drop(jax.nn.softmax(scores, axis=-1), 0)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b * cfg.seq_len, cfg.hidden)
        x1 = ln(P, "ln1", x + drop(lin(P, "o", ctx), 1))
        y = ln(P, "ln2", x1 + drop(lin(P, "fc2", jax.nn.gelu(lin(P, "fc1", x1), approximate=False)), 2))
        return jnp.mean((y - target) ** 2)

    return _jax_trainer(loss_fn, init, 3, cfg.dropout, "sgd", cfg.lr)
