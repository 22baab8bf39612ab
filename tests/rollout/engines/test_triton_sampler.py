"""The fused Triton sampler (`triton_sampler.py`), run here under Triton's interpreter (conftest sets it).

References: `sampler.sample_tokens` (the same draw with the same uniforms: the same tokens), `log_softmax` in
float64 over the float32-scaled logits (the log-probs), hand-built rows for the edges (a dominant token, tokens of
probability 0, uniforms at 0 and just below 1), and whole generations of the engine against its `sample_tokens`
path and the learner's log-probs.
"""

from __future__ import annotations

import pytest
import torch

from ulorl.rollout.engines import SamplingParams, TorchEngine
from ulorl.rollout.engines.torch.sampler import row_uniforms, sample_tokens
from ulorl.rollout.engines.torch.triton_sampler import BLOCK, WIDE, FusedSampler, fused_sample

from .test_torch import T, _prefixes, two_segments_match_the_learner


def _exact_logprobs(logits: torch.Tensor, temperature: float, tok: torch.Tensor) -> torch.Tensor:
    scaled = (logits.float() / temperature).double()
    return torch.log_softmax(scaled, -1).gather(-1, tok[:, None]).squeeze(-1)


@pytest.mark.parametrize("vocab,dtype,scale", [(50, torch.float32, 2.0), (BLOCK + 7, torch.bfloat16, 3.0),
                                               (WIDE, torch.float16, 1.0), (3 * WIDE + 5, torch.bfloat16, 8.0),
                                               (20_000, torch.float32, 0.3)])
def test_the_same_tokens_as_sample_tokens_and_exact_logprobs(vocab, dtype, scale):
    gen = torch.Generator().manual_seed(vocab)
    rows = 24
    logits = (torch.randn(rows, vocab, generator=gen) * scale).to(dtype)
    params = SamplingParams(temperature=0.85)
    for step in range(3):
        u = row_uniforms(11, list(range(rows)), [step] * rows)
        tok, lp = fused_sample(logits, params.temperature, u)
        want_tok, want_lp = sample_tokens(logits, params, u)
        assert torch.equal(tok, want_tok)
        assert tok.dtype == torch.long and lp.dtype == torch.float32
        assert torch.allclose(lp.double(), _exact_logprobs(logits, 0.85, tok), atol=1e-6, rtol=0)
        assert torch.allclose(lp, want_lp, atol=2e-5, rtol=0)  # sample_tokens' float32 log-softmax


def test_the_edges_of_the_inverse_cdf():
    # row 0: one token dominates; row 1: three live tokens in three chunks, the rest of probability 0 (-inf); row 2:
    # uniform logits; row 3: a first chunk of probability 0 (a draw of 0 must not stop there)
    v = 2 * WIDE + 100
    live = [5, WIDE + 3, 2 * WIDE + 50]
    logits = torch.zeros(4, v)
    logits[0, 1234] = 200.0  # the others: exp(-200) is 0 in float32
    logits[1] = float("-inf")
    logits[1, live] = 0.0
    logits[3, :WIDE] = float("-inf")
    for u, want in ((0.0, [1234, live[0], 0, WIDE]), (0.3, [1234, live[0], int(0.3 * v), WIDE + int(0.3 * (v - WIDE))]),
                    (0.5, [1234, live[1], v // 2, WIDE + (v - WIDE) // 2]),
                    (0.75, [1234, live[2], 3 * v // 4, WIDE + 3 * (v - WIDE) // 4]),
                    (1.0 - 2 ** -53, [1234, live[2], v - 1, v - 1])):
        uniforms = torch.full((4,), u, dtype=torch.float64)
        tok, lp = fused_sample(logits, 1.0, uniforms)
        assert tok.tolist() == want, (u, tok.tolist())
        assert tok.tolist() == sample_tokens(logits, SamplingParams(temperature=1.0), uniforms)[0].tolist()
        assert torch.allclose(lp.double(), _exact_logprobs(logits, 1.0, tok), atol=1e-6, rtol=0)
    # a draw past the last cumulative weight (rounding) takes the last token of positive probability
    tok, _ = fused_sample(logits, 1.0, torch.full((4,), 1.0, dtype=torch.float64))
    assert tok.tolist() == [1234, live[2], v - 1, v - 1]


def test_the_sampler_leaves_greedy_and_filtered_sampling_to_sample_tokens_and_falls_back_once():
    fused = FusedSampler()
    logits = torch.randn(4, 30)
    u = row_uniforms(0, [0, 1, 2, 3], [0] * 4)
    assert fused(logits, SamplingParams(greedy=True), None) is None
    assert fused(logits, SamplingParams(temperature=0.7, top_k=5), u) is None
    assert fused(logits, SamplingParams(temperature=0.7, top_p=0.9), u) is None
    tok, _ = fused(logits, SamplingParams(temperature=0.7), u)
    assert tok.tolist() == sample_tokens(logits, SamplingParams(temperature=0.7), u)[0].tolist() and fused.calls == 1
    with pytest.warns(UserWarning, match="fused Triton sampler failed .*contiguous"):
        assert fused(logits.t().contiguous().t(), SamplingParams(temperature=0.7), u) is None
    assert fused(logits, SamplingParams(temperature=0.7), u) is None  # for good: sample_tokens from now on
    assert "contiguous" in fused.failed


def test_an_engine_sampling_through_the_kernel_gives_the_same_generations(fresh):
    """The engine's CUDA choice, forced on CPU: the same tokens as its `sample_tokens` path over many steps, and
    log-probs equal to the learner's within 1e-5 with a continued segment."""
    tok, model = fresh
    params = SamplingParams(temperature=T)
    plain = TorchEngine(model, [tok.eos_token_id], max_batch=3, block_size=4)
    fused = TorchEngine(model, [tok.eos_token_id], max_batch=3, block_size=4)
    assert plain.fused_sampler is None  # CPU: off
    fused.fused_sampler = FusedSampler()
    a = plain.generate(_prefixes(7), 24, params, seed=9)
    b = fused.generate(_prefixes(7), 24, params, seed=9)
    assert [o.tokens for o in a] == [o.tokens for o in b]
    assert max(abs(x - y) for oa, ob in zip(a, b) for x, y in zip(oa.logprobs, ob.logprobs)) < 1e-5
    assert fused.fused_sampler.calls >= 24
    assert two_segments_match_the_learner(fused, model, tok, _prefixes(7), params) >= 7 * 13


def test_an_engines_warm_up_compiles_the_kernel_before_its_first_step(fresh, monkeypatch):
    """`TorchEngine.warm_up` (what `reserve` runs at a run's start) sends four rows of the model's vocabulary and
    dtype through the kernel and checks them against `sample_tokens`, so that a timed rollout's first step compiles
    nothing and a kernel that draws wrongly on this device is never used; it is not counted as a step."""
    import ulorl.rollout.engines.torch.triton_sampler as module

    tok, model = fresh
    eng = TorchEngine(model, [tok.eos_token_id], max_batch=3, block_size=4)
    eng.fused_sampler = FusedSampler()
    seen = []
    real = module.fused_sample
    monkeypatch.setattr(module, "fused_sample", lambda logits, *a: seen.append(logits.shape) or real(logits, *a))
    eng.warm_up(64)
    assert seen == [(4, model.lm_head.out_features)] and eng.fused_sampler.calls == 0
    assert eng.fused_sampler.failed is None
    # a kernel that runs but draws wrongly (here: always the most likely token) is caught there and turned off
    monkeypatch.setattr(module, "fused_sample", lambda logits, t, u: (logits.argmax(-1), real(logits, t, u)[1]))
    wrong = FusedSampler()
    with pytest.warns(UserWarning, match="fused Triton sampler is off .*its check at warm-up chose tokens"):
        wrong.warm_up(model.lm_head.out_features, torch.float32, torch.device("cpu"))
    assert wrong.failed and wrong(torch.randn(2, 5), SamplingParams(), torch.zeros(2, dtype=torch.float64)) is None
