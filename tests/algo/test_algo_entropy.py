"""token_entropy: exact values, naive agreement and numerical robustness."""

from __future__ import annotations

import math

import torch

from ulorl.algo import token_entropy


def _naive_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    p = torch.softmax(logits / temperature, dim=-1)
    return -(p * torch.log(p)).sum(dim=-1)


def test_uniform_gives_log_v() -> None:
    # p_j = 1/V -> H = -V * (1/V) log(1/V) = log V, for any temperature
    for v in (2, 7, 50_000):
        logits = torch.zeros(3, v)
        torch.testing.assert_close(token_entropy(logits), torch.full((3,), math.log(v)))
        torch.testing.assert_close(token_entropy(logits, temperature=0.85), torch.full((3,), math.log(v)))


def test_two_point_hand_value() -> None:
    # logits (0, log 3) -> p = (1/4, 3/4); H = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.562335
    h = token_entropy(torch.tensor([0.0, math.log(3.0)]))
    assert abs(h.item() - 0.562335) < 1e-5


def test_matches_naive_on_normal_logits_with_temperature() -> None:
    logits = torch.randn(4, 5, 33, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
    for t in (1.0, 0.85, 1.7):
        got = token_entropy(logits, temperature=t)
        assert got.shape == (4, 5)
        torch.testing.assert_close(got, _naive_entropy(logits, t))


def test_finite_for_huge_magnitudes() -> None:
    # one dominant logit -> one-hot -> H = 0; two tied huge logits -> H = log 2
    logits = torch.tensor([[1e30, -1e30, 0.0], [1e30, 1e30, -1e30], [-1e30, -1e30, -1e30]])
    h = token_entropy(logits)
    assert torch.isfinite(h).all()
    torch.testing.assert_close(h, torch.tensor([0.0, math.log(2.0), math.log(3.0)]))
    assert torch.isfinite(token_entropy(logits, temperature=0.5)).all()


def test_finite_with_minus_inf_entries_forward_and_backward() -> None:
    # (0, 0, -inf) -> p = (1/2, 1/2, 0): H = log 2, the -inf entry contributes 0 (not 0 * -inf)
    logits = torch.tensor([[0.0, 0.0, -math.inf], [1.0, -math.inf, -math.inf]], requires_grad=True)
    h = token_entropy(logits)
    torch.testing.assert_close(h.detach(), torch.tensor([math.log(2.0), 0.0]))
    h.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_all_minus_inf_row_is_finite() -> None:
    h = token_entropy(torch.full((2, 4), -math.inf))
    torch.testing.assert_close(h, torch.zeros(2))


def test_bf16_is_upcast() -> None:
    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    h = token_entropy(logits)
    assert h.dtype == torch.float32
    torch.testing.assert_close(h, _naive_entropy(logits.float()))
