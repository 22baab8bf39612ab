"""MPTs and DMMPTs: hand cases and loop reference."""

from __future__ import annotations

import math

import torch

from ulorl.algo import dmmpt_mask, mpt_mask, response_mean_entropy
from ulorl.algo.entropy_mask import ENTROPY_MASKS, EntropyMaskMode, dmmt_mask

TAU, SIGMA = 0.99, 0.2
HI = math.log(0.995)  # p = 0.995 >= tau
LO = math.log(0.5)  # p = 0.5 < tau


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # 3 responses x 4 positions; row 2 has one padding position
    logprobs = torch.tensor([[HI, LO, HI, HI], [HI, HI, LO, HI], [HI, HI, HI, 0.0]])
    rewards = torch.tensor([1.0, 0.0, 1.0])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    return logprobs, rewards, mask


def test_mpt_only_on_reward_one_confident_response_tokens() -> None:
    logprobs, rewards, mask = _batch()
    got = mpt_mask(logprobs, rewards, mask, TAU)
    want = torch.tensor(
        [
            [True, False, True, True],  # reward 1: p = .995, .5, .995, .995
            [False, False, False, False],  # reward 0: never an MPT
            [True, True, True, False],  # reward 1, last position is padding
        ]
    )
    assert torch.equal(got, want)


def test_mpt_threshold_is_inclusive_and_reward_tolerant() -> None:
    # p exactly tau counts (>=); reward 1 - 1e-7 counts as 1
    lp = torch.tensor([[math.log(TAU), math.log(0.98)]], dtype=torch.float64)
    got = mpt_mask(lp, torch.tensor([1.0 - 1e-7]), torch.ones(1, 2, dtype=torch.bool), TAU)
    assert got.tolist() == [[True, False]]


def test_response_mean_entropy_ignores_padding() -> None:
    # row 0: (0.1 + 0.3) / 2 = 0.2 (the 9.0 is padding); row 1 has no tokens -> 0
    ent = torch.tensor([[0.1, 0.3, 9.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    torch.testing.assert_close(response_mean_entropy(ent, mask), torch.tensor([0.2, 0.0]))


def test_dmmpt_masks_only_when_mean_entropy_below_sigma() -> None:
    logprobs, rewards, mask = _batch()
    # row 0 mean entropy 0.1 < 0.2 -> its MPTs masked
    # row 1 mean entropy 0.1 but reward 0 -> nothing masked
    # row 2 mean entropy (0.3 + 0.3 + 0.3) / 3 = 0.3 >= 0.2 -> nothing masked (pad 0.0 ignored)
    entropy = torch.tensor([[0.1] * 4, [0.1] * 4, [0.3, 0.3, 0.3, 0.0]])
    got = dmmpt_mask(logprobs, entropy, rewards, mask, TAU, SIGMA)
    want = torch.zeros(3, 4, dtype=torch.bool)
    want[0] = torch.tensor([True, False, True, True])
    assert torch.equal(got, want)
    # raise sigma to 0.35: row 2 (0.3 < 0.35) now masked on its 3 response tokens
    got = dmmpt_mask(logprobs, entropy, rewards, mask, TAU, 0.35)
    want[2] = torch.tensor([True, True, True, False])
    assert torch.equal(got, want)


def test_dmmt_masks_mastered_tokens_of_wrong_responses_too() -> None:
    logprobs, rewards, mask = _batch()
    entropy = torch.tensor([[0.1] * 4, [0.1] * 4, [0.3, 0.3, 0.3, 0.0]])
    got = dmmt_mask(logprobs, entropy, rewards, mask, TAU, SIGMA)
    want = torch.zeros(3, 4, dtype=torch.bool)
    want[0] = torch.tensor([True, False, True, True])  # as DMMPTs: reward 1, mean entropy 0.1
    want[1] = torch.tensor([True, True, False, True])  # reward 0, mean entropy 0.1: its p >= tau tokens too
    assert torch.equal(got, want)  # row 2: mean entropy 0.3 >= sigma, nothing
    assert torch.equal(got & (rewards[:, None] == 1), dmmpt_mask(logprobs, entropy, rewards, mask, TAU, SIGMA))


def test_dmmpt_boundary_equal_sigma_not_masked() -> None:
    # H_i == sigma is not "< sigma"
    lp = torch.full((1, 2), HI)
    got = dmmpt_mask(lp, torch.full((1, 2), 0.25), torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool), TAU, 0.25)
    assert not got.any()


def _loop_dmmpt(lp, ent, rew, mask, tau, sigma):
    """Readable reference, one token at a time."""
    b, t = lp.shape
    out = torch.zeros(b, t, dtype=torch.bool)
    for i in range(b):
        toks = [j for j in range(t) if mask[i, j]]
        h = sum(float(ent[i, j]) for j in toks) / max(len(toks), 1)
        for j in toks:
            is_mpt = float(rew[i]) >= 1 - 1e-6 and math.exp(float(lp[i, j])) >= tau
            out[i, j] = is_mpt and h < sigma
    return out


def _loop_mpt(lp, rew, mask, tau):
    return _loop_dmmpt(lp, torch.zeros_like(lp), rew, mask, tau, sigma=1.0)  # sigma > 0 = entropy -> MPTs


def test_loop_equals_vectorised_on_random_inputs() -> None:
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        b, t = 6, 9
        # probabilities concentrated near the threshold
        p = 0.97 + 0.03 * torch.rand(b, t, generator=gen, dtype=torch.float64)
        lp = p.log()
        ent = 0.4 * torch.rand(b, t, generator=gen, dtype=torch.float64)
        rew = torch.randint(0, 2, (b,), generator=gen).double()
        lengths = torch.randint(0, t + 1, (b,), generator=gen)
        mask = torch.arange(t)[None, :] < lengths[:, None]
        assert torch.equal(mpt_mask(lp, rew, mask, TAU), _loop_mpt(lp, rew, mask, TAU))
        assert torch.equal(dmmpt_mask(lp, ent, rew, mask, TAU, SIGMA), _loop_dmmpt(lp, ent, rew, mask, TAU, SIGMA))


def test_registry_covers_every_mode_and_matches_the_functions():
    logprobs, rewards, mask = _batch()
    entropy = torch.full_like(logprobs, 0.1)  # every response's mean entropy 0.1 < sigma: DMMPT masks its MPTs
    assert set(ENTROPY_MASKS) == set(EntropyMaskMode)
    got = {m: ENTROPY_MASKS[m](logprobs, entropy, rewards, mask, TAU, SIGMA) for m in EntropyMaskMode}
    assert not got[EntropyMaskMode.NONE].any() and got[EntropyMaskMode.NONE].shape == mask.shape
    assert torch.equal(got[EntropyMaskMode.MPT], mpt_mask(logprobs, rewards, mask, TAU))
    assert torch.equal(got[EntropyMaskMode.DMMPT], dmmpt_mask(logprobs, entropy, rewards, mask, TAU, SIGMA))
    assert torch.equal(got[EntropyMaskMode.DMMT], dmmt_mask(logprobs, entropy, rewards, mask, TAU, SIGMA))
