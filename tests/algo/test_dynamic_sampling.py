"""Dynamic sampling filter."""

from __future__ import annotations

import pytest
import torch

from ulorl.algo import dynamic_sampling


def test_keeps_only_mixed_groups() -> None:
    # group a (1,0) mixed -> kept; b (1,1) all equal -> dropped; c (0,0,0) -> dropped;
    # d (0,1,0) mixed -> kept; e single sample -> dropped
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    ids = ["a", "a", "b", "b", "c", "c", "c", "d", "d", "d", "e"]
    got = dynamic_sampling(rewards, ids)
    want = [True, True, False, False, False, False, False, True, True, True, False]
    assert got.tolist() == want
    assert torch.equal(dynamic_sampling(rewards, torch.tensor([0, 0, 1, 1, 2, 2, 2, 3, 3, 3, 4])), got)


def test_loop_equals_vectorised_on_random_inputs() -> None:
    gen = torch.Generator().manual_seed(4)
    for _ in range(20):
        n = int(torch.randint(1, 30, (1,), generator=gen))
        ids = torch.randint(0, 5, (n,), generator=gen)
        rewards = torch.randint(0, 2, (n,), generator=gen).float()
        want = []
        for i in range(n):  # readable loop reference
            group = [float(rewards[j]) for j in range(n) if ids[j] == ids[i]]
            want.append(len(set(group)) > 1)
        assert dynamic_sampling(rewards, ids).tolist() == want


def test_length_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        dynamic_sampling(torch.tensor([1.0]), [0, 1])
