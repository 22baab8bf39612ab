"""IS modes (tois/pois/sais + ours: pois_tis, mask_stale) and the POIS bias diagnostic."""

from __future__ import annotations

import math

import pytest
import torch

from ulorl.algo import ISMode, old_logprobs, pois_bias_by_age, policy_loss, stale_token_policy

ONES = torch.ones(1, 4, dtype=torch.bool)


def test_tois_and_pois_use_current_policy_detached() -> None:
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    blp = torch.tensor([[-1.5, -0.5]])
    for mode in ("tois", "pois", ISMode.POIS):
        old = old_logprobs(mode, lp, blp)
        assert torch.equal(old, lp.detach()) and not old.requires_grad


def test_sais_uses_behaviour_logprobs() -> None:
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    blp = torch.tensor([[-1.5, -0.5]])
    old = old_logprobs("sais", lp, blp, segment_age=None)  # extra keywords are accepted and ignored
    assert torch.equal(old, blp) and not old.requires_grad
    # SAIS ratios: exp(-1 + 1.5) = 1.6487, exp(-2 + 0.5) = 0.2231
    _, m = policy_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool), eps_high=0.28)
    assert m["ratio_mean"] == pytest.approx((math.exp(0.5) + math.exp(-1.5)) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        old_logprobs("sais", lp, None)


def test_unknown_mode_lists_valid_names() -> None:
    lp = torch.zeros(1, 2)
    for call in (
        lambda: old_logprobs("pios", lp, None),
        lambda: stale_token_policy("pios", lp, None, None, torch.ones(1, 2, dtype=torch.bool)),
    ):
        with pytest.raises(ValueError, match="'tois', 'pois', 'sais', 'pois_tis', 'mask_stale'"):
            call()


@pytest.mark.parametrize("mode", ["tois", "pois", "sais"])
def test_paper_modes_have_no_correction(mode: str) -> None:
    lp = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    blp = torch.tensor([[-1.0, -1.5, -0.5, -3.0]])
    age = torch.tensor([[0, 1, 1, 2]])
    pol = stale_token_policy(mode, lp, blp, age, ONES)
    assert torch.equal(pol.old_logprobs, old_logprobs(mode, lp, blp))
    assert torch.equal(pol.token_weights, torch.ones(1, 4)) and not pol.extra_mask.any()


def test_pois_tis_weights_old_segments_only_and_truncates() -> None:
    lp = torch.tensor([[-1.0, -1.0, -1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    blp = torch.tensor([[-1.0, -1.5, -0.5, -3.0]], dtype=torch.float64)
    age = torch.tensor([[0, 1, 1, 2]])
    pol = stale_token_policy("pois_tis", lp, blp, age, ONES, tis_cap=2.0)
    # age 0 -> 1; age 1: exp(-1 + 1.5) = 1.6487, exp(-1 + 0.5) = 0.6065; age 2: exp(2) = 7.39 -> cap 2
    want_w = torch.tensor([[1.0, math.exp(0.5), math.exp(-0.5), 2.0]], dtype=torch.float64)
    torch.testing.assert_close(pol.token_weights, want_w)
    assert not pol.token_weights.requires_grad and not pol.extra_mask.any()
    assert torch.equal(pol.old_logprobs, lp.detach())  # POIS old log-probs: ratios stay 1
    loss, m = policy_loss(lp, pol.old_logprobs, torch.tensor([1.0], dtype=torch.float64), ONES,
                          token_weights=pol.token_weights, extra_mask=pol.extra_mask)
    # per token -A * w, / 4: -(1 + 1.6487 + 0.6065 + 2) / 4 = -1.3138
    assert loss.item() == pytest.approx(-float(want_w.sum()) / 4)
    loss.backward()
    torch.testing.assert_close(lp.grad, -want_w / 4)  # weights are constants: grad = -A w / N
    assert m["ratio_mean"] == 1.0


def test_pois_tis_needs_age_and_behaviour() -> None:
    lp = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="segment_age"):
        stale_token_policy("pois_tis", lp, lp, None, ONES)
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        stale_token_policy("pois_tis", lp, None, torch.zeros(1, 4, dtype=torch.long), ONES)


def test_mask_stale_drops_tokens_older_than_max_age() -> None:
    lp = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    age = torch.tensor([[0, 1, 2, 3, 3]])
    mask = torch.tensor([[True, True, True, True, False]])  # last is padding
    pol = stale_token_policy("mask_stale", lp, None, age, mask, max_age=1)
    assert pol.extra_mask.tolist() == [[False, False, True, True, False]]  # ages 2, 3; pad never
    loss, m = policy_loss(lp, pol.old_logprobs, torch.tensor([1.0], dtype=torch.float64), mask,
                          token_weights=pol.token_weights, extra_mask=pol.extra_mask)
    # kept tokens (ages 0, 1) give -1 each; denominator counts all 4 response tokens: -2 / 4
    assert loss.item() == pytest.approx(-0.5)
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-0.25, -0.25, 0.0, 0.0, 0.0]], dtype=torch.float64))
    assert m["extra_mask_ratio"] == pytest.approx(0.5) and m["mask_ratio"] == 0.0
    # max_age=0: only the newest segment trains
    pol0 = stale_token_policy(ISMode.MASK_STALE, lp, None, age, mask, max_age=0)
    assert pol0.extra_mask.tolist() == [[False, True, True, True, False]]


def test_pois_bias_by_age_hand_values() -> None:
    lp = torch.tensor([[-1.0, -1.0, -1.0, -1.0], [-2.0, -2.0, -2.0, 0.0]], dtype=torch.float64)
    blp = torch.tensor([[-1.1, -0.7, -1.5, -1.0], [-2.0, -2.4, -1.0, 5.0]], dtype=torch.float64)
    age = torch.tensor([[0, 1, 1, 2], [0, 1, 2, 2]])
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    got = pois_bias_by_age(lp, blp, age, mask)
    # |log ratio|: row 0 -> 0.1, 0.3, 0.5, 0.0; row 1 -> 0.0, 0.4, 1.0, (pad: 5.0 ignored)
    # age 0: {0.1, 0.0} mean 0.05 max 0.1; age 1: {0.3, 0.5, 0.4} mean 0.4 max 0.5;
    # age 2: {0.0, 1.0} mean 0.5 max 1.0
    assert set(got) == {0, 1, 2}
    for age_, (mean, mx, n) in {0: (0.05, 0.1, 2), 1: (0.4, 0.5, 3), 2: (0.5, 1.0, 2)}.items():
        assert got[age_]["mean_abs_log_ratio"] == pytest.approx(mean)
        assert got[age_]["max_abs_log_ratio"] == pytest.approx(mx)
        assert got[age_]["num_tokens"] == n
