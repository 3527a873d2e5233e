"""benchmarks/transformer.py's references compute xl's step: tiny GPT and BERT-layer programs,
with dropout, give the first loss xl gives when PyTorch (eager) and JAX are fed the masks xl's
dropout drew (`first_step_masks`, from the runtime's counter-based generator), and PyTorch's next
steps (drawing its own masks) stay finite. Skipped without torch / jax."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _module(name: str) -> ModuleType:
    """A benchmarks/ module (registered under its name: its dataclasses need that)."""
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # for their own imports
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def programs():
    """(kind, config, xl program, batches, xl's losses of the batches, the first step's masks)."""
    tm = _module("transformer_models")
    import gpt_char

    gcfg = tm.gpt_config(16, 8, 0.5, batch=2, heads=2, layers=1)
    bcfg = tm.BertConfig(hidden=16, heads=2, ffn=32, seq_len=8, batch=2, dropout=0.5)
    out = []
    for kind, cfg, prog, batches in (
        ("gpt", gcfg, tm.gpt_program(gcfg), tm.gpt_batches(gcfg, 3)),
        ("bert", bcfg, tm.bert_program(bcfg), tm.bert_batches(bcfg, 3)),
    ):
        masks = prog.first_step_masks()
        with prog.session:
            losses = [prog.run(b) for b in batches]
        out.append((kind, cfg, prog, batches, losses, masks, gpt_char.MASK_VALUE))
    return out


@pytest.mark.parametrize("lib", ["torch", "jax"])
def test_references_match_xl_first_step_with_xl_masks(programs, lib):
    pytest.importorskip(lib)
    tr = _module("transformer_refs")
    for kind, cfg, prog, batches, xl_losses, masks, mask_value in programs:
        if kind == "gpt":
            step = (
                tr.torch_gpt(cfg, prog.init, mask_value) if lib == "torch" else tr.jax_gpt(cfg, prog.init, mask_value)
            )
        else:
            step = tr.torch_bert(cfg, prog.init) if lib == "torch" else tr.jax_bert(cfg, prog.init)
        assert step is not None
        np.testing.assert_allclose(step(batches[0], masks), xl_losses[0], rtol=1e-5, err_msg=f"{kind} {lib}")
        if lib == "torch":  # without masks: torch's own dropout; the loss differs, the step still runs
            later = [step(b) for b in batches[1:]]
            assert all(np.isfinite(later)), (kind, later)


def test_masks_are_what_xl_dropout_multiplies_by(programs):
    """With dropout 0.5 about half of each mask is 0 and the rest 2 (a program whose masks were
    wrong fails the reference test above; this pins their form)."""
    for *_, masks, _ in programs:
        for m in masks:
            assert m.dtype == np.float32 and set(np.unique(m).tolist()) <= {0.0, 2.0}
            assert 0.25 < float(np.mean(m == 0)) < 0.75
