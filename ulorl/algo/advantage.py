"""GRPO group-normalised advantages (UloRL section 2 / DAPO recipe).

For sample ``i`` of group ``g`` with reward ``r_i``::

    A_i = (r_i - mean_g) / (std_g + eps)      (norm_by_std=True)
    A_i =  r_i - mean_g                       (norm_by_std=False, Dr.GRPO style)

``std_g`` is the *unbiased* (Bessel-corrected, ``n - 1``) standard deviation
of the group, as ``torch.std`` and therefore verl's GRPO estimator use.
A group of one sample gets mean 0 and std 1 (verl's convention), so its
advantage is ``r / (1 + eps)``; such groups are normally removed earlier by
dynamic sampling.

Deviations from the paper: none. The paper uses GRPO advantages without
further detail; the group-of-one convention and the unbiased std follow verl,
on which the authors built. The advantage of a response is one scalar that is
broadcast to all its tokens by :func:`ulorl.algo.policy_loss`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ulorl.algo._common import GroupIds, group_index


def group_advantages(
    rewards: Tensor,
    group_ids: GroupIds,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> Tensor:
    """GRPO advantages, one per response.

    Args:
        rewards: ``(N,)`` scalar reward of each response.
        group_ids: ``(N,)`` tensor or length-``N`` sequence of hashables; the
            responses sharing an id were sampled from the same prompt.
        eps: added to the group std before dividing.
        norm_by_std: divide by ``std_g + eps`` (GRPO) or not (mean-centring only).

    Returns:
        ``(N,)`` advantages, same floating dtype as ``rewards`` (float32 if
        ``rewards`` is integral). Vectorised: group statistics are computed
        with ``index_add_``; no Python loop over samples.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be (N,), got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.to(torch.float32)
    index, num_groups = group_index(group_ids, device=r.device)
    if index.numel() != r.numel():
        raise ValueError(f"{r.numel()} rewards but {index.numel()} group ids")

    zeros = torch.zeros(num_groups, dtype=r.dtype, device=r.device)
    counts = zeros.index_add(0, index, torch.ones_like(r))  # (G,)
    mean = zeros.index_add(0, index, r) / counts  # (G,)
    centred = r - mean[index]  # (N,)
    sq_sum = zeros.index_add(0, index, centred * centred)  # (G,)
    std = (sq_sum / (counts - 1).clamp(min=1)).sqrt()  # unbiased, (G,)

    single = counts == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)

    adv = r - mean[index]
    if norm_by_std:
        adv = adv / (std[index] + eps)
    return adv
