"""GRPO group advantages: hand-computed values and a loop reference."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from ulorl.algo import group_advantages

EPS = 1e-6


def test_two_member_group_uses_unbiased_std() -> None:
    # rewards (1, 0): mean 0.5; unbiased var = (0.5^2 + 0.5^2) / (2 - 1) = 0.5,
    # std = sqrt(0.5) = 0.70711; adv = +-0.5 / (0.70711 + 1e-6) = +-0.70711
    adv = group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([7, 7]))
    expected = 0.5 / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(adv, torch.tensor([expected, -expected]))
    assert abs(adv[0].item() - 0.70711) < 1e-4


def test_group_of_four_one_correct() -> None:
    # rewards (1,0,0,0): mean 0.25; deviations 0.75, -0.25 x3;
    # sum sq = 0.5625 + 3 * 0.0625 = 0.75; unbiased var = 0.75 / 3 = 0.25; std 0.5
    # adv = 0.75 / 0.5 = 1.5 and -0.25 / 0.5 = -0.5 (up to eps)
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long))
    torch.testing.assert_close(adv, torch.tensor([1.5, -0.5, -0.5, -0.5]), atol=1e-5, rtol=0)


def test_group_of_one_gets_mean_zero_std_one() -> None:
    # single sample: mean 0, std 1 -> adv = (r - 0) / (1 + eps)
    adv = group_advantages(torch.tensor([1.0, 0.0]), ["a", "b"])
    torch.testing.assert_close(adv, torch.tensor([1.0 / (1.0 + EPS), 0.0]))
    adv = group_advantages(torch.tensor([1.0]), ["a"], norm_by_std=False)
    torch.testing.assert_close(adv, torch.tensor([1.0]))  # r - 0


def test_all_equal_group_gives_zero() -> None:
    # (1,1,1): mean 1, std 0 -> 0 / (0 + eps) = 0; (0,0): same
    adv = group_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0]), [0, 0, 0, 1, 1])
    torch.testing.assert_close(adv, torch.zeros(5))


def test_no_std_normalisation_is_mean_centring() -> None:
    # group a: (1, 0, 0) mean 1/3 -> (2/3, -1/3, -1/3); group b: (1, 1) -> (0, 0)
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0]), ["a", "a", "a", "b", "b"], norm_by_std=False)
    torch.testing.assert_close(adv, torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0]))


def test_hashable_ids_match_tensor_ids_and_interleaving() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    by_str = group_advantages(rewards, ["p", "q", "p", "q", "p", "q"])
    by_int = group_advantages(rewards, torch.tensor([3, 9, 3, 9, 3, 9]))
    torch.testing.assert_close(by_str, by_int)
    # group p = (1, 1, 0): mean 2/3, deviations 1/3, 1/3, -2/3, sum sq = 2/3, var = 1/3
    std_p = math.sqrt(1 / 3)
    assert by_str[0].item() == pytest.approx((1 / 3) / (std_p + EPS), rel=1e-5)
    assert by_str[4].item() == pytest.approx((-2 / 3) / (std_p + EPS), rel=1e-5)


def test_integer_rewards_become_float() -> None:
    adv = group_advantages(torch.tensor([1, 0]), [0, 0])
    assert adv.dtype == torch.float32


def test_length_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        group_advantages(torch.tensor([1.0, 0.0]), [0, 0, 1])


def _loop_advantages(rewards: list[float], ids: list[int], eps: float, norm_by_std: bool) -> list[float]:
    """Readable reference: one group at a time, Python statistics."""
    out = []
    for r, g in zip(rewards, ids):
        members = [rr for rr, gg in zip(rewards, ids) if gg == g]
        if len(members) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = statistics.mean(members), statistics.stdev(members)  # stdev is unbiased
        out.append((r - mean) / (std + eps) if norm_by_std else r - mean)
    return out


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_loop_equals_vectorised_on_random_inputs(norm_by_std: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        n = int(torch.randint(1, 40, (1,), generator=gen))
        ids = torch.randint(0, 6, (n,), generator=gen)
        # mix binary and continuous rewards
        rewards = torch.randint(0, 2, (n,), generator=gen).double() + 0.1 * torch.rand(n, generator=gen, dtype=torch.float64)
        got = group_advantages(rewards, ids, eps=EPS, norm_by_std=norm_by_std)
        want = _loop_advantages(rewards.tolist(), ids.tolist(), EPS, norm_by_std)
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-9)
