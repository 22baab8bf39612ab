"""The packed prefill's attention backends (`prefill_attention.py`): per-length SDPA and torch's `varlen_attn`.

`varlen_attn` has no CPU kernel, so the varlen backend is run here against stand-ins with the signatures of three
torch releases (2.10: `is_causal`; 2.11: `window_size`; 2.13: `window_size` and `enable_gqa`, refusing fewer K/V
heads without it, as 2.13 does). Each stand-in computes attention as the function's documentation defines it, from
`cu_seq`, one sequence and one head at a time in float64 (`reference_varlen`), so the backend's offsets, lengths,
scale, causality and GQA are checked against an independent computation; the same reference checks SDPA's path.
On a GPU, `benchmarks/gpu_paged_check.py` (`prefill`) compares torch's real `varlen_attn` with SDPA.
"""

from __future__ import annotations

import pytest
import torch

from ulorl.config import ConfigError, load_run_config
from ulorl.rollout.engines import SamplingParams, TorchEngine
from ulorl.rollout.engines.registry import build_engine
from ulorl.rollout.engines.torch.prefill_attention import (SDPAPrefill, VarlenPrefill, prefill_backend,
                                                           varlen_unavailable)

from .benchmark_modules import benchmark_module
from .test_torch import T, _prefixes, two_segments_match_the_learner

LENS = [5, 1, 7, 5, 3]  # two sequences of equal length (one SDPA group), one of a single token


def reference_varlen(q, k, v, cu_seq_q, cu_seq_k, max_q, max_k, scale, causal):
    """Attention of each sequence `cu_seq[i]:cu_seq[i + 1]` over itself, query head h reading K/V head
    h // (H / H_kv), in float64, one sequence and head at a time."""
    assert cu_seq_q.dtype == torch.int32 and cu_seq_k.dtype == torch.int32, "flash attention takes int32 offsets"
    assert torch.equal(cu_seq_q, cu_seq_k) and int(cu_seq_q[-1]) == q.shape[0] == k.shape[0]
    bounds = cu_seq_q.tolist()
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    assert max_q == max_k == max(lengths), (max_q, max_k, lengths)
    heads, kv_heads = q.shape[1], k.shape[1]
    out = torch.empty(q.shape, dtype=torch.float64)
    for a, b in zip(bounds, bounds[1:]):
        for h in range(heads):
            kh = h // (heads // kv_heads)
            s = (q[a:b, h].double() @ k[a:b, kh].double().T) * scale
            if causal:
                s = s.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), float("-inf"))
            out[a:b, h] = torch.softmax(s, dim=-1) @ v[a:b, kh].double()
    return out.to(q.dtype)


def varlen_2_10(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, is_causal=False,
                scale=None):
    return reference_varlen(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, is_causal)


def varlen_2_11(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                window_size=(-1, -1)):
    assert window_size in ((-1, -1), (-1, 0)), window_size
    return reference_varlen(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size == (-1, 0))


def varlen_2_13(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                window_size=(-1, -1), enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
    if not enable_gqa and query.shape[1] != key.shape[1]:
        raise ValueError("Expect query and key/value to have the same number of heads; try enable_gqa=True")
    assert window_size in ((-1, -1), (-1, 0)), window_size
    return reference_varlen(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size == (-1, 0))


RELEASES = {"2.10": varlen_2_10, "2.11": varlen_2_11, "2.13": varlen_2_13}


def _qkv(heads: int = 4, kv_heads: int = 2, head_dim: int = 16, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    n = sum(LENS)
    return tuple(torch.randn(n, h, head_dim, generator=gen) for h in (heads, kv_heads, kv_heads))


@pytest.mark.parametrize("release", RELEASES)
def test_varlen_backend_matches_the_reference_for_each_releases_signature(release):
    q, k, v = _qkv()
    backend = VarlenPrefill(RELEASES[release])
    got = backend(q, k, v, backend.layout(LENS, q.device), 0.3)
    cu = torch.tensor([0, 5, 6, 13, 18, 21], dtype=torch.int32)
    assert torch.equal(backend.layout(LENS, q.device).cu_seq, cu)
    want = reference_varlen(q, k, v, cu, cu, 7, 7, 0.3, True)
    assert torch.allclose(got, want, atol=1e-6, rtol=0)
    assert backend.keywords == {"2.10": {"is_causal": True}, "2.11": {"window_size": (-1, 0)},
                                "2.13": {"window_size": (-1, 0), "enable_gqa": True}}[release]


def test_sdpa_backend_matches_the_reference_with_and_without_gqa():
    for heads, kv_heads in ((4, 2), (4, 4), (6, 1)):
        q, k, v = _qkv(heads, kv_heads)
        backend = SDPAPrefill()
        got = backend(q, k, v, backend.layout(LENS, q.device), 0.25)
        cu = torch.tensor([0, 5, 6, 13, 18, 21], dtype=torch.int32)
        assert torch.allclose(got, reference_varlen(q, k, v, cu, cu, 7, 7, 0.25, True), atol=1e-6, rtol=0)
        # and each sequence attends only over itself: changing one sequence's K leaves the others' outputs alone.
        # The change is random: a constant added to every key would shift each query's scores by one constant,
        # which the softmax ignores, and the outputs would differ only by rounding.
        k2 = k.clone()
        k2[6:13] += torch.randn(k2[6:13].shape, generator=torch.Generator().manual_seed(1))
        other = backend(q, k2, v, backend.layout(LENS, q.device), 0.25)
        assert torch.equal(other[:6], got[:6]) and torch.equal(other[13:], got[13:])
        assert torch.equal(other[6], got[6])  # the sequence's first position attends over its own key alone
        assert (other[7:13] - got[7:13]).abs().amax() > 1e-2


def test_the_backend_is_chosen_by_device_dtype_and_a_probe():
    cpu = torch.device("cpu")
    assert isinstance(prefill_backend("auto", cpu, torch.float32, 4, 2, 16), SDPAPrefill)
    assert isinstance(prefill_backend("sdpa", cpu, torch.float32, 4, 2, 16), SDPAPrefill)
    with pytest.raises(ValueError, match="prefill_attention=varlen cannot run here: .*CUDA kernel"):
        prefill_backend("varlen", cpu, torch.float32, 4, 2, 16)
    with pytest.raises(ValueError, match="rollout.torch.prefill_attention"):
        prefill_backend("flash", cpu, torch.float32, 4, 2, 16)
    cuda = torch.device("cuda")  # only its type is read: what a GPU machine would be told, without one
    assert "float32 kernel" in varlen_unavailable(cuda, torch.float32, 64)
    assert "multiples of 8" in varlen_unavailable(cuda, torch.bfloat16, 100)
    assert "multiples of 8" in varlen_unavailable(cuda, torch.bfloat16, 512)
    # a varlen_attn that passes its probe is taken; one that fails it (an error, or a wrong result) is not
    assert isinstance(prefill_backend("auto", cpu, torch.float32, 4, 2, 16, fn=varlen_2_13), VarlenPrefill)

    def broken(*args, **kwargs):
        raise RuntimeError("FlashAttention only supports Ampere GPUs or newer")

    def wrong(query, *args, **kwargs):
        return torch.zeros_like(query)

    for fn, why in ((broken, "RuntimeError: FlashAttention only supports Ampere"), (wrong, "differs from SDPA")):
        with pytest.warns(UserWarning, match=f"varlen -> sdpa .*{why}"):
            assert isinstance(prefill_backend("auto", cpu, torch.float32, 4, 2, 16, fn=fn), SDPAPrefill)
        with pytest.raises(ValueError, match=f"varlen cannot run here: its probe call failed: .*{why}"):
            prefill_backend("varlen", cpu, torch.float32, 4, 2, 16, fn=fn)


@pytest.mark.parametrize("release", ["2.11", "2.13"])
def test_an_engine_prefilling_through_varlen_keeps_the_learners_logprobs(fresh, release):
    """The engine contract (log-probs equal the learner's within 1e-5, continued segments prefilled again) with
    every prefill through the varlen backend, and the same tokens as the SDPA engine."""
    tok, model = fresh
    params = SamplingParams(temperature=T)
    engines = {}
    for name in ("sdpa", "varlen"):
        eng = TorchEngine(model, [tok.eos_token_id], max_batch=3, block_size=4, prefill_attention="sdpa")
        if name == "varlen":
            eng.runner.prefill_attention = VarlenPrefill(RELEASES[release])
        engines[name] = eng
    assert two_segments_match_the_learner(engines["varlen"], model, tok, _prefixes(7), params) >= 7 * 13
    a, b = (engines[n].generate(_prefixes(7), 12, params, seed=5) for n in ("sdpa", "varlen"))
    assert [o.tokens for o in a] == [o.tokens for o in b]
    assert max(abs(x - y) for oa, ob in zip(a, b) for x, y in zip(oa.logprobs, ob.logprobs)) < 1e-5


def test_the_setting_is_validated_and_reaches_the_engine(fresh):
    with pytest.raises(ConfigError, match="rollout.torch.prefill_attention"):
        load_run_config(None, ["rollout.torch.prefill_attention=flash"])
    cfg = load_run_config(None, ["rollout.torch.prefill_attention=sdpa"])
    assert cfg.rollout.torch.prefill_attention == "sdpa"
    tok, model = fresh
    cfg = load_run_config(None, ["rollout.torch.prefill_attention=varlen"])  # valid, but not on this CPU
    with pytest.raises(ValueError, match="prefill_attention=varlen cannot run here"):
        build_engine("torch", model, tok, [tok.eos_token_id], torch=cfg.rollout.torch)


def test_the_gpu_checks_prefill_part_compares_both_backends(monkeypatch):
    """`gpu_paged_check.prefill_paths` as it runs on a GPU, where `auto` takes varlen: here with the 2.11 stand-in
    in place of torch's `varlen_attn` (so the part's varlen branch is not first run on a lent machine)."""
    import ulorl.rollout.engines.torch.engine as engine_module
    from ulorl.rollout.engines.torch.prefill_attention import prefill_backend as real

    check = benchmark_module("gpu_paged_check")
    monkeypatch.setattr(engine_module, "prefill_backend",
                        lambda name, *a: VarlenPrefill(varlen_2_11) if name == "auto" else real(name, *a))
    model = check.build_model(check.QUICK["qwen2.5-0.5b"], torch.device("cpu"), torch.float32)
    r = check.prefill_paths(model, torch.device("cpu"), check.QUICK_PREFILL_CASES, repeats=1)
    assert r["auto"] == "varlen" and "varlen_not_run" not in r
    assert [(c["case"], c["sequences"], c["tokens"]) for c in r["cases"]] == [("prompts", 8, 92), ("continued", 3, 192)]
    for c in r["cases"]:
        assert c["sdpa_ms"] > 0 and c["varlen_ms"] > 0 and c["speedup"] > 0
        assert c["max_abs_logit_diff"] < 1e-4 and c["argmax_agree"] == 1.0


def test_a_varlen_prefill_dispatches_as_many_operations_for_one_sequence_as_for_many():
    """What `benchmarks/prefill_ops.py` counts for docs/benchmarks.md: with varlen the prefill's operations do not
    grow with the number of sequences (one attention call per layer), with per-length SDPA they do."""
    check, prefill_ops = benchmark_module("gpu_paged_check"), benchmark_module("prefill_ops")
    model = check.build_model(check.QUICK["qwen2.5-0.5b"], torch.device("cpu"), torch.float32)
    eng, _ = check.engine_for(model, 0.05, 8, "split_k", False)
    cache, blocks = eng._pool_for(200)
    one, many = [120], [8 + 3 * i for i in range(16)]  # 16 distinct lengths
    varlen = VarlenPrefill(prefill_ops.varlen_stand_in)
    assert prefill_ops.count(eng.runner, cache, blocks, many, varlen) == \
        prefill_ops.count(eng.runner, cache, blocks, one, varlen)
    sdpa_one = prefill_ops.count(eng.runner, cache, blocks, one, SDPAPrefill())["non_view_ops"]
    sdpa_many = prefill_ops.count(eng.runner, cache, blocks, many, SDPAPrefill())["non_view_ops"]
    layers = check.QUICK["qwen2.5-0.5b"]["num_hidden_layers"]
    assert sdpa_many - sdpa_one >= 15 * layers * 5  # ~7 kernels per further length per layer
