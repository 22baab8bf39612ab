"""policy_loss / aggregate_loss: Eq. 10 denominator, clip-higher, POIS gradient, accumulation."""

from __future__ import annotations

import math

import pytest
import torch

from ulorl.algo import AggMode, aggregate_loss, old_logprobs, policy_loss

MASK = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)  # 5 response tokens


def _leaf(values: list[list[float]]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def test_eq10_denominator_counts_masked_tokens() -> None:
    lp = _leaf([[-1.0, -2.0, -0.5], [-0.1, -0.3, 0.0]])
    dm = torch.tensor([[True, False, False], [False, False, False]])
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    loss, m = policy_loss(lp, lp.detach(), adv, MASK, dmmpt_mask=dm)
    # ratio 1 everywhere -> per-token loss -A: row 0 -1 (first masked), row 1 +2 (last is pad)
    # kept sum = -1 - 1 + 2 + 2 = 2; Eq. 10 divides by all 5 response tokens -> 0.4 (not 2/4)
    assert loss.item() == pytest.approx(0.4)
    assert m["mask_ratio"] == pytest.approx(1 / 5)
    assert m["pg_loss"] == pytest.approx(0.4)
    # explicit global denominator: 2 / 10 = 0.2
    loss10, _ = policy_loss(lp, lp.detach(), adv, MASK, dmmpt_mask=dm, num_tokens=10)
    assert loss10.item() == pytest.approx(0.2)


def test_pois_ratios_one_and_gradient_is_minus_a_over_num_tokens() -> None:
    lp = _leaf([[-1.0, -2.0, -0.5], [-0.1, -0.3, -7.0]])
    dm = torch.tensor([[True, False, False], [False, False, False]])
    adv = torch.tensor([1.5, -2.0], dtype=torch.float64)
    old = old_logprobs("pois", lp, None)
    loss, m = policy_loss(lp, old, adv, MASK, dmmpt_mask=dm)
    assert m["ratio_mean"] == 1.0 and m["ratio_max"] == 1.0
    assert m["pg_clipfrac"] == 0.0 and m["approx_kl"] == 0.0
    loss.backward()
    # d/dlp of -exp(lp - sg(lp)) * A / 5 = -A / 5 on kept tokens; 0 on masked (0,0) and pad (1,2)
    want = torch.tensor([[0.0, -1.5 / 5, -1.5 / 5], [2.0 / 5, 2.0 / 5, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(lp.grad, want)


def _ratio_case(eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    # row 0 A = +1, row 1 A = -1; ratios 1.5, 1.25, 0.5, 0.75 in both rows
    ratios = torch.tensor([1.5, 1.25, 0.5, 0.75], dtype=torch.float64)
    old = torch.full((2, 4), -1.0, dtype=torch.float64)
    lp = (old + ratios.log()).clone().requires_grad_(True)
    adv = torch.tensor([[1.0] * 4, [-1.0] * 4], dtype=torch.float64)  # (B, T) form
    loss, m = policy_loss(lp, old, adv, torch.ones(2, 4, dtype=torch.bool), eps_low=eps_low, eps_high=eps_high)
    loss.backward()
    return loss, lp.grad, m


def test_clip_higher_is_asymmetric_on_correct_sides() -> None:
    loss, grad, m = _ratio_case(eps_low=0.2, eps_high=0.28)
    # A=+1: -min(r, clip(r, .8, 1.28)): r=1.5 -> -1.28 (clipped); 1.25 -> -1.25 (inside 1.28);
    #       0.5 -> -0.5 (min picks r); 0.75 -> -0.75
    # A=-1: -min(-r, -clip(r)): 1.5 -> 1.5; 1.25 -> 1.25; 0.5 -> 0.8 (clipped); 0.75 -> 0.8 (clipped)
    # sum = -3.78 + 4.35 = 0.57; /8 = 0.07125
    assert loss.item() == pytest.approx(0.57 / 8)
    # gradient: 0 where clipped, -A * r / 8 elsewhere
    want = torch.tensor([[0.0, -1.25, -0.5, -0.75], [1.5, 1.25, 0.0, 0.0]], dtype=torch.float64) / 8
    torch.testing.assert_close(grad, want)
    assert m["pg_clipfrac"] == pytest.approx(3 / 8)
    assert m["pg_clipfrac_upper"] == pytest.approx(1 / 8)
    assert m["pg_clipfrac_lower"] == pytest.approx(2 / 8)


def test_symmetric_clip_clips_ratio_1_25() -> None:
    loss, grad, m = _ratio_case(eps_low=0.2, eps_high=0.2)
    # vs clip-higher, A=+1 row: r=1.25 -> -1.2 (now clipped, +0.05) and r=1.5 -> -1.2 (+0.08)
    # sum = 0.57 + 0.05 + 0.08 = 0.70; /8 = 0.0875. The A=-1 row is unchanged (lower side).
    assert loss.item() == pytest.approx(0.70 / 8)
    assert grad[0, 1].item() == 0.0
    assert m["pg_clipfrac"] == pytest.approx(4 / 8)


def test_advantage_per_response_equals_per_token_broadcast() -> None:
    lp = torch.randn(3, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    old = lp + 0.3
    adv = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    mask = torch.ones(3, 4, dtype=torch.bool)
    a, _ = policy_loss(lp, old, adv, mask)
    b, _ = policy_loss(lp, old, adv[:, None].expand(3, 4), mask)
    torch.testing.assert_close(a, b)


def test_aggregation_modes_hand_values() -> None:
    lp = torch.zeros(2, 3, dtype=torch.float64)
    adv = torch.tensor([1.0, -3.0], dtype=torch.float64)
    # per-token loss -A: row 0 (-1, -1, -1), row 1 (3, 3, pad)
    for agg, default, with_n4 in [
        ("token-mean", (-3 + 6) / 5, (-3 + 6) / 4),  # 0.6, num_tokens=4 -> 0.75
        ("seq-mean-token-mean", (-1 + 3) / 2, (-1 + 3) / 4),  # 1.0, 4 sequences -> 0.5
        ("seq-mean-token-sum", (-3 + 6) / 2, (-3 + 6) / 4),  # 1.5, 4 sequences -> 0.75
    ]:
        assert policy_loss(lp, lp, adv, MASK, agg=agg)[0].item() == pytest.approx(default)
        assert policy_loss(lp, lp, adv, MASK, agg=AggMode(agg), num_tokens=4)[0].item() == pytest.approx(with_n4)


def test_unknown_agg_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="token-mean.*seq-mean-token-mean.*seq-mean-token-sum"):
        aggregate_loss(torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), agg="seq-sum")


def test_approx_kl_is_k3_and_ratio_mean() -> None:
    old = torch.zeros(1, 4, dtype=torch.float64)
    lp = old + 0.1
    _, m = policy_loss(lp, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 4, dtype=torch.bool))
    # k3 = (r - 1) - log r with r = e^0.1: 1.105171 - 1 - 0.1 = 0.0051709
    assert m["approx_kl"] == pytest.approx(math.exp(0.1) - 1.1)
    assert m["ratio_mean"] == pytest.approx(math.exp(0.1))


def test_token_weights_scale_loss_and_gradient() -> None:
    lp = _leaf([[-1.0, -1.0]])
    w = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    loss, m = policy_loss(lp, lp.detach(), torch.tensor([2.0], dtype=torch.float64), torch.ones(1, 2, dtype=torch.bool), token_weights=w)
    # per token -A * w = (-2, -1); / 2 tokens = -1.5; grad = -A * w / 2 = (-1, -0.5)
    assert loss.item() == pytest.approx(-1.5)
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-1.0, -0.5]], dtype=torch.float64))
    assert m["token_weight_mean"] == pytest.approx(0.75)


def test_garbage_on_padding_never_gives_nan() -> None:
    lp = _leaf([[-1.0, -math.inf, math.nan]])
    mask = torch.tensor([[True, False, False]])
    old = torch.tensor([[-1.0, 0.0, math.inf]], dtype=torch.float64)
    loss, m = policy_loss(lp, old, torch.tensor([1.0], dtype=torch.float64), mask)
    loss.backward()
    assert math.isfinite(loss.item()) and all(math.isfinite(v) for v in m.values())
    assert torch.isfinite(lp.grad).all()


def _tiny_model_logprobs(w: torch.Tensor, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """A linear 'language model': features (B, T, D) @ W (D, V) -> log-prob of tokens (B, T)."""
    return torch.log_softmax(x @ w, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_gradient_accumulation_equals_full_batch(agg: str) -> None:
    gen = torch.Generator().manual_seed(6)
    b, t, d, v = 6, 5, 4, 7
    x = torch.randn(b, t, d, generator=gen, dtype=torch.float64)
    tokens = torch.randint(0, v, (b, t), generator=gen)
    lengths = torch.tensor([5, 1, 3, 0, 4, 2])  # unequal token counts per micro-batch
    mask = torch.arange(t)[None, :] < lengths[:, None]
    adv = torch.randn(b, generator=gen, dtype=torch.float64)
    dm = (torch.rand(b, t, generator=gen) < 0.2) & mask
    w_old = torch.randn(d, v, generator=gen, dtype=torch.float64)
    w = (w_old + 0.3 * torch.randn(d, v, generator=gen, dtype=torch.float64)).requires_grad_(True)
    old = _tiny_model_logprobs(w_old, x, tokens)  # SAIS-like old policy, so some ratios clip

    def loss_of(rows: slice, num: float | None) -> torch.Tensor:
        lp = _tiny_model_logprobs(w, x[rows], tokens[rows])
        return policy_loss(lp, old[rows], adv[rows], mask[rows], dmmpt_mask=dm[rows],
                           eps_low=0.2, eps_high=0.28, agg=agg, num_tokens=num)[0]

    (full_grad,) = torch.autograd.grad(loss_of(slice(None), None), w)
    denom = float(mask.sum()) if agg == "token-mean" else float(b)  # tokens or sequences
    micro = [slice(0, 2), slice(2, 4), slice(4, 6)]
    acc = sum(torch.autograd.grad(loss_of(s, denom), w)[0] for s in micro)
    torch.testing.assert_close(acc, full_grad, atol=1e-6, rtol=0)
    # without the global denominator, micro-batch means do not add up to the full-batch step
    naive = sum(torch.autograd.grad(loss_of(s, None), w)[0] for s in micro)
    assert not torch.allclose(naive, full_grad, atol=1e-6)
