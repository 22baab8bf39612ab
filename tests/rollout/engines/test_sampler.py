"""The sampler's filters: top-k then top-p by hand, and the nucleus taken within the top k (no sort of the
vocabulary) against the sort over the whole row, to the float."""

from __future__ import annotations

import math

import pytest
import torch

from ulorl.rollout.engines import SamplingParams
from ulorl.rollout.engines.torch.sampler import filter_logits, row_uniforms, sample_tokens

NEG = float("-inf")


def test_top_k_then_top_p_by_hand():
    # probabilities of the 4 tokens kept by top-k 4, in descending order: 0.4, 0.3, 0.2, 0.1 (token 5 is cut by
    # top-k). Mass before each: 0, 0.4, 0.7, 0.9: top-p 0.7 keeps the tokens whose mass before is below 0.7
    p = [0.1, 0.4, 0.0, 0.2, 0.3]
    logits = torch.tensor([[math.log(x) if x else -30.0 for x in p]])
    out = filter_logits(logits, top_k=4, top_p=0.7)
    assert torch.isinf(out[0]).tolist() == [True, False, True, True, False]
    assert out[0, 1] == logits[0, 1] and out[0, 4] == logits[0, 4]  # kept logits are unchanged
    # top-p 0.71: the token after 0.7 of mass (0.2) is kept too
    assert torch.isinf(filter_logits(logits, top_k=4, top_p=0.71)[0]).tolist() == [True, False, True, False, False]


def _top_k_then_sorted_nucleus(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """The reference: top-k by threshold (ties at the k-th value kept), then the nucleus through the sort of the
    whole vocabulary (`filter_logits` without top-k sorts)."""
    kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
    return filter_logits(scaled.masked_fill(scaled < kth, NEG), top_k=-1, top_p=top_p)


@pytest.mark.parametrize("vocab", [5, 64, 448, 3000])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_the_nucleus_within_the_top_k_equals_the_sort_of_the_whole_row(vocab, ties):
    g = torch.Generator().manual_seed(vocab)
    scaled = torch.randn(300, vocab, generator=g) * (0.5 + 4 * torch.rand(300, 1, generator=g))
    if ties:  # logits on a coarse grid: many rows have ties at the k-th value, which the sort must decide
        scaled = (scaled * 2).round() / 2
    for top_k, top_p in [(1, 0.5), (3, 0.9), (4, 0.95), (20, 0.95), (20, 0.3), (vocab - 1, 0.8)]:
        if not 0 < top_k < vocab:
            continue
        out = filter_logits(scaled, top_k, top_p)
        assert torch.equal(out, _top_k_then_sorted_nucleus(scaled, top_k, top_p)), (top_k, top_p)
        kept = torch.isfinite(out).sum(-1)
        assert int(kept.min()) >= 1 and int(kept.max()) <= (vocab if ties else top_k)


def test_a_draw_rounded_up_to_the_total_takes_the_last_kept_token():
    # top-k 2 of [3, 0, 2, -1] keeps tokens 0 and 2; u just below 1 must land on the kept token that comes last
    # in vocabulary order, never on the cut token after it; u = 1 (a product u x total rounded up to the total,
    # which a search for the first cdf entry above it would put past the end) too
    logits = torch.tensor([[3.0, 0.0, 2.0, -1.0]] * 4)
    u = torch.tensor([1 - 2**-53, 0.9999999, 0.0, 1.0], dtype=torch.float64)
    tok, lp = sample_tokens(logits, SamplingParams(temperature=1.0, top_k=2), u)
    assert tok.tolist() == [2, 2, 0, 2]
    assert torch.allclose(lp, torch.log_softmax(logits[0], -1)[[2, 2, 0, 2]])  # before filtering (the contract)


PAPER_EVAL = SamplingParams(temperature=0.85, top_k=20, top_p=0.95)


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.85), PAPER_EVAL], ids=["plain", "paper_eval"])
def test_the_sampler_draws_by_inverse_cdf_row_by_row(params):
    """Vectorised `sample_tokens` against a per-row loop over Python floats: the first token whose cumulative
    probability passes u."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 200, generator=g) * 3
    u = row_uniforms(5, list(range(64)), [7] * 64)
    tok, lp = sample_tokens(logits, params, u)
    scaled = logits / params.temperature
    probs = torch.softmax(filter_logits(scaled, params.top_k, params.top_p), -1).double()
    for i in range(64):
        row, total = probs[i].tolist(), 0.0
        for p in row:  # summed in order, as a cumulative sum is
            total += p
        target, acc, pick = float(u[i]) * total, 0.0, None
        for j, p in enumerate(row):
            acc += p
            if acc > target and p > 0:
                pick = j
                break
        assert pick == int(tok[i])
        assert float(lp[i]) == pytest.approx(float(torch.log_softmax(scaled[i], -1)[pick]), abs=1e-6)
