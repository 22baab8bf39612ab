"""Dynamic sampling: drop groups whose rewards are all equal (DAPO, as adopted in UloRL section 2.3).

A group in which every response has the same reward has all-zero GRPO
advantages and gives no gradient; DAPO removes such groups from the batch.
A group of one sample is "all equal" and is dropped too.

Deviations from the paper: none. DAPO refills the batch by sampling more
prompts until it is full; that policy belongs to the experience pool / rollout
(``ulorl.rollout``), not to this pure filter.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ulorl.algo._common import GroupIds, group_index


def dynamic_sampling(rewards: Tensor, group_ids: GroupIds) -> Tensor:
    """Keep-mask of responses whose group has non-identical rewards.

    Args:
        rewards: ``(N,)`` scalar reward of each response.
        group_ids: ``(N,)`` tensor or length-``N`` sequence of hashables.

    Returns:
        ``(N,)`` bool, True for members of groups with ``max(r) != min(r)``.
        Vectorised with ``scatter_reduce``; no Python loop over samples.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be (N,), got shape {tuple(rewards.shape)}")
    r = rewards.detach()
    index, num_groups = group_index(group_ids, device=r.device)
    if index.numel() != r.numel():
        raise ValueError(f"{r.numel()} rewards but {index.numel()} group ids")
    empty = torch.zeros(num_groups, dtype=r.dtype, device=r.device)
    g_max = empty.scatter_reduce(0, index, r, reduce="amax", include_self=False)
    g_min = empty.scatter_reduce(0, index, r, reduce="amin", include_self=False)
    return (g_max != g_min)[index]
