"""The learner's packed rows through torch's `varlen_attn` (one call per layer for the whole row,
`ulorl.learners.varlen.packed_kernel`).

`varlen_attn` runs only on CUDA, so here it is a stand-in with the signatures of torch 2.11 (the GPU image's:
`window_size`, no `enable_gqa`) and 2.13 (`enable_gqa`), computing attention as the function's documentation
defines it, one sequence and head at a time in float64 (`test_prefill_attention.reference_varlen`): the
learner's gradient through it equals the one through SDPA per sample, so the row's layout (heads, offsets, lengths,
scale, causality, GQA) reaches the kernel right, forward and backward, with and without gradient checkpointing. On
a GPU, `benchmarks/gpu_learner_long_check.py` (`packed`) runs torch's real kernel against SDPA per sample."""

from __future__ import annotations

import inspect

import pytest
import torch

from tests.learners.test_micro_batch import batch, grads_and_metrics, learner  # noqa: F401  (batch: a fixture)
from tests.rollout.engines.test_prefill_attention import RELEASES
from ulorl.learners import varlen
from ulorl.learners.checkpointing import enable_gradient_checkpointing

KEEP = [True, True, False, True, True, True]


@pytest.fixture
def calls():
    return []


def here(monkeypatch, calls: list, release: str = "2.11", fn=None):
    """Make torch's varlen_attn "run" on this CPU as `fn` (default: the stand-in of `release`), recording each call's
    arguments in `calls`."""
    fn = fn or RELEASES[release]

    def recorded(q, k, v, cu_q, cu_k, max_q, max_k, **kw):
        calls.append({"q": q, "k": k, "cu": cu_q, "max": max_q, "kw": kw})
        return fn(q, k, v, cu_q, cu_k, max_q, max_k, **kw)

    recorded.__signature__ = inspect.signature(fn)  # its keywords decide what the learner passes
    monkeypatch.setattr(varlen, "varlen_attn", lambda: recorded)
    monkeypatch.setattr(varlen, "varlen_unavailable", lambda device, dtype, head_dim: None)


def test_on_this_cpu_the_learner_keeps_sdpa_per_sample(tiny_model_dir):
    ln = learner(tiny_model_dir, micro_batch_tokens=32, packing=True)
    assert ln.packed_kernel == "sdpa"
    assert learner(tiny_model_dir, micro_batch_tokens=32, packing=False).packed_kernel is None  # nothing packed


@pytest.mark.parametrize("release", ["2.11", "2.13"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_gradient_through_varlen_attn_is_sdpa_per_sample(tiny_model_dir, batch, calls, monkeypatch, release,
                                                              checkpointing):
    ref = learner(tiny_model_dir, micro_batch_tokens=32, packing=True)
    here(monkeypatch, calls, release)
    ln = learner(tiny_model_dir, micro_batch_tokens=32, packing=True)
    assert ln.packed_kernel == "varlen" and ref.packed_kernel == "sdpa"
    probe_calls = len(calls)
    assert probe_calls == 1  # the probe at the learner's start: one row of two samples
    if checkpointing:
        enable_gradient_checkpointing(ln.model)
    g, m = grads_and_metrics(ln, batch, KEEP)
    g_ref, m_ref = grads_and_metrics(ref, batch, KEEP)
    for k in ("actor/entropy", "actor/pg_loss", "actor/grad_norm", "actor/ratio_mean"):
        assert m[k] == pytest.approx(m_ref[k], rel=1e-5, abs=1e-7), k
    for a, b in zip(g, g_ref):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    # rows [36], [22, 10], [17, 7]: the two rows of two samples go through varlen_attn, once per layer (again in
    # the recomputation with checkpointing); the row of one sample is a plain causal forward
    layers = ln.model.config.num_hidden_layers
    rows = calls[probe_calls:]
    assert len(rows) == 2 * layers * (2 if checkpointing else 1)
    cfg = ln.model.config
    for c in rows:
        s = int(c["cu"][-1])
        assert s in (32, 24) and c["cu"].dtype == torch.int32 and c["max"] == {32: 22, 24: 17}[s]
        assert c["q"].shape == (s, cfg.num_attention_heads, cfg.head_dim) and c["q"].is_contiguous()
        assert c["k"].shape == (s, cfg.num_key_value_heads, cfg.head_dim)
        assert c["kw"]["window_size"] == (-1, 0) and c["kw"].get("enable_gqa", release == "2.13") is (release == "2.13")
        assert c["kw"]["scale"] == pytest.approx(cfg.head_dim ** -0.5)


def test_under_autocast_the_kernel_gets_the_autocast_dtype(calls, monkeypatch):
    here(monkeypatch, calls)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 16, 8, generator=gen) for h in (4, 2, 2))
    cu = torch.tensor([0, 5, 16], dtype=torch.int32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = varlen.varlen_row(varlen.varlen_attn(), q, k, v, cu, 11, 0.3)
    assert out.shape == (1, 16, 4, 8) and out.dtype == torch.bfloat16
    assert calls[0]["q"].dtype == calls[0]["k"].dtype == torch.bfloat16
    out32 = varlen.varlen_row(varlen.varlen_attn(), q, k, v, cu, 11, 0.3)  # no autocast: the inputs' float32
    assert out32.dtype == torch.float32 and (out.float() - out32).abs().max() < 0.05


def test_a_kernel_that_fails_its_probe_leaves_sdpa(tiny_model_dir, calls, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("FlashAttention only supports Ampere GPUs or newer")

    def no_gradient(q, k, v, *args, **kwargs):  # the right values, but no gradient reaches k and v
        return RELEASES["2.11"](q, k.detach(), v.detach(), *args, **kwargs)

    no_gradient.__signature__ = inspect.signature(RELEASES["2.11"])
    for fn, why in ((broken, "RuntimeError: FlashAttention only supports Ampere"), (no_gradient, "varlen_attn's dk")):
        here(monkeypatch, calls, fn=fn)
        with pytest.warns(UserWarning, match=f"varlen -> sdpa per sample .*{why}"):
            ln = learner(tiny_model_dir, micro_batch_tokens=32, packing=True)
        assert ln.packed_kernel == "sdpa"


def test_attention_dropout_keeps_sdpa(tiny_model_dir, calls, monkeypatch):
    here(monkeypatch, calls)
    from ulorl.models import load_model

    model = load_model(tiny_model_dir)
    model.config.attention_dropout = 0.1  # varlen_attn has no dropout
    assert varlen.packed_kernel(model, "cpu") == "sdpa" and calls == []
    model.config.attention_dropout = 0.0
    assert varlen.packed_kernel(model, "cpu") == "varlen" and len(calls) == 1
