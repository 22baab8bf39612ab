"""chunked_logprobs_entropy's entropy: exact values, naive agreement and numerical robustness.

The function takes hidden states and a head; `_entropy(logits)` feeds it one position
at a time with hidden `[[1]]` and head `logits[:, None]`, so the logits it sees are
exactly `logits` (`-inf` entries included, which a full identity head would turn into
`0 * -inf = NaN`).
"""

from __future__ import annotations

import math

import torch

from ulorl.algo import chunked_logprobs_entropy


def _entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """`(..., V)` logits -> `(...)` entropies, through the chunked function."""
    rows = logits.reshape(-1, logits.shape[-1])
    one = torch.ones(1, 1, dtype=logits.dtype)
    ents = [chunked_logprobs_entropy(one, row[:, None], torch.zeros(1, dtype=torch.long), temperature)[1]
            for row in rows]
    return torch.cat(ents).reshape(logits.shape[:-1])


def _naive_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    p = torch.softmax(logits / temperature, dim=-1)
    return -(p * torch.log(p)).sum(dim=-1)


def test_uniform_gives_log_v() -> None:
    # p_j = 1/V -> H = -V * (1/V) log(1/V) = log V, for any temperature
    for v in (2, 7, 50_000):
        logits = torch.zeros(3, v)
        torch.testing.assert_close(_entropy(logits), torch.full((3,), math.log(v)))
        torch.testing.assert_close(_entropy(logits, temperature=0.85), torch.full((3,), math.log(v)))


def test_two_point_hand_value() -> None:
    # logits (0, log 3) -> p = (1/4, 3/4); H = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335
    h = _entropy(torch.tensor([0.0, math.log(3.0)]))
    assert abs(h.item() - 0.562335) < 1e-5


def test_matches_naive_on_normal_logits_with_temperature() -> None:
    logits = torch.randn(4, 5, 33, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
    for t in (1.0, 0.85, 1.7):
        got = _entropy(logits, temperature=t)
        assert got.shape == (4, 5)
        assert got.dtype == torch.float32  # computed in float32, as in the learner
        torch.testing.assert_close(got, _naive_entropy(logits, t).float())


def test_finite_for_huge_magnitudes() -> None:
    # one dominant logit -> one-hot -> H = 0; two tied huge logits -> H = log 2
    logits = torch.tensor([[1e30, -1e30, 0.0], [1e30, 1e30, -1e30], [-1e30, -1e30, -1e30]])
    h = _entropy(logits)
    assert torch.isfinite(h).all()
    torch.testing.assert_close(h, torch.tensor([0.0, math.log(2.0), math.log(3.0)]))
    assert torch.isfinite(_entropy(logits, temperature=0.5)).all()


def test_finite_with_minus_inf_entries() -> None:
    # (0, 0, -inf) -> p = (1/2, 1/2, 0): H = log 2, the -inf entry contributes 0 (not 0 * -inf)
    logits = torch.tensor([[0.0, 0.0, -math.inf], [1.0, -math.inf, -math.inf]])
    h = _entropy(logits)
    torch.testing.assert_close(h, torch.tensor([math.log(2.0), 0.0]))


def test_entropy_is_detached_and_logprob_gradient_finite() -> None:
    # the entropy only feeds the DMMPT mask (no gradient); the log-prob's gradient stays finite
    hidden = torch.randn(6, 4, generator=torch.Generator().manual_seed(3), requires_grad=True)
    weight = torch.randn(9, 4, generator=torch.Generator().manual_seed(4), requires_grad=True)
    lp, ent = chunked_logprobs_entropy(hidden, weight, torch.arange(6), temperature=0.85, chunk=4)
    assert not ent.requires_grad
    lp.sum().backward()
    assert torch.isfinite(hidden.grad).all() and torch.isfinite(weight.grad).all()


def test_bf16_is_upcast() -> None:
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    h = _entropy(logits)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, _naive_entropy(logits.float()))
