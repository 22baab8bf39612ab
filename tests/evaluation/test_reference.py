"""`reference_logprobs`: the sampler's exact probability of a reference, against the sampler itself."""

from __future__ import annotations

import math

import pytest
import torch

from ulorl.evaluation.reference import reference_logprobs, score_pairs, score_reference
from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.engines.torch.sampler import sample_tokens

GRID = 20_000  # uniforms per position: the sampler's probability of each token to within 1 / GRID


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from ulorl.models import load_model

    m = load_model(str(tiny_model_dir))
    m.eval()
    return m


def _sampler_probs(model, ids: list[int], params: SamplingParams) -> torch.Tensor:
    """`(V,)` how often `sample_tokens` picks each token after `ids`, over an even grid of uniforms."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]  # (V,)
    u = (torch.arange(GRID, dtype=torch.float64) + 0.5) / GRID
    tok, _ = sample_tokens(logits.expand(GRID, -1), params, uniforms=u)
    return torch.bincount(tok, minlength=logits.shape[0]).double() / GRID


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.85), SamplingParams(temperature=0.85, top_p=0.6),
                                    SamplingParams(temperature=1.3, top_k=3)], ids=["plain", "top_p", "top_k"])
def test_each_token_has_the_probability_the_sampler_gives_it(model, params):
    g = torch.Generator().manual_seed(0)
    vocab = model.get_output_embeddings().weight.shape[0]
    prompt = torch.randint(3, vocab, (5,), generator=g).tolist()
    response = torch.randint(3, vocab, (9,), generator=g).tolist()
    lp = reference_logprobs(model, prompt, response, params)
    assert lp.shape == (9,)
    filtered_out = 0
    for t, y in enumerate(response):  # one position at a time, from the prefix alone
        freq = float(_sampler_probs(model, prompt + response[:t], params)[y])
        assert math.exp(float(lp[t])) == pytest.approx(freq, abs=2.0 / GRID)
        filtered_out += freq == 0.0
    if params.top_k > 0:  # random tokens outside the top 3 of a larger vocabulary: -inf, never sampled
        assert filtered_out > 0 and int(torch.isinf(lp).sum()) == filtered_out


def test_chunks_and_the_score_sum_as_one_pass(model):
    params = SamplingParams(temperature=0.85, top_p=0.9)
    prompt, response = [5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15]
    whole = reference_logprobs(model, prompt, response, params)
    torch.testing.assert_close(reference_logprobs(model, prompt, response, params, chunk=3), whole, rtol=0, atol=1e-6)
    s = score_reference(model, prompt, response, params)
    assert s.tokens == 7
    assert s.logprob == pytest.approx(float(whole.double().sum()), rel=1e-12)
    assert s.prob == pytest.approx(math.exp(s.logprob))
    assert s.slips == pytest.approx(sum(1.0 - math.exp(float(x)) for x in whole), rel=1e-9)


def test_greedy_is_certain_on_the_argmax_path_and_impossible_off_it(model):
    prompt, ids = [4, 5, 6], [4, 5, 6]
    with torch.no_grad():
        for _ in range(4):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    greedy = SamplingParams(greedy=True)
    assert torch.equal(reference_logprobs(model, prompt, ids[3:], greedy), torch.zeros(4))
    off = ids[3:-1] + [(ids[-1] + 1) % model.get_output_embeddings().weight.shape[0]]
    assert torch.isinf(reference_logprobs(model, prompt, off, greedy)[-1])


def test_an_empty_reference_is_refused(model):
    with pytest.raises(ValueError, match="non-empty"):
        reference_logprobs(model, [1, 2], [], SamplingParams())


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.85, top_p=0.6), SamplingParams(greedy=True)],
                         ids=["top_p", "greedy"])
def test_batched_pairs_score_as_one_pair_at_a_time(model, params):
    g = torch.Generator().manual_seed(1)
    vocab = model.get_output_embeddings().weight.shape[0]
    sizes = [(3, 1), (9, 4), (2, 12), (5, 5), (1, 1), (7, 2), (4, 9)]  # (prompt, response) lengths, unsorted
    pairs = [(torch.randint(3, vocab, (p,), generator=g).tolist(), torch.randint(3, vocab, (r,), generator=g).tolist())
             for p, r in sizes]
    with torch.no_grad():  # the greedy path of the second pair: a reference the greedy sampler writes (logprob 0)
        ids = pairs[1][0][:]
        for _ in range(4):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    pairs[1] = (pairs[1][0], ids[len(pairs[1][0]):])
    one = [score_reference(model, p, r, params) for p, r in pairs]
    done = []
    model.train()
    got = score_pairs(model, pairs, params, token_budget=24, chunk=5, progress=done.append)  # padded batches
    assert model.training  # its mode restored
    assert sum(done) == len(pairs) and len(done) > 2
    assert [s.tokens for s in got] == [r for _, r in sizes]
    for a, b in zip(got, one):
        assert a.logprob == pytest.approx(b.logprob, rel=1e-5, abs=1e-5)  # -inf == -inf where a token is filtered out
        assert a.slips == pytest.approx(b.slips, rel=1e-5, abs=1e-5)
    if params.greedy:
        assert got[1].logprob == 0.0 and math.isinf(got[0].logprob)
    assert score_pairs(model, [], params) == []
    with pytest.raises(ValueError, match="non-empty response"):
        score_pairs(model, [([1, 2], [3]), ([1], [])], params)
