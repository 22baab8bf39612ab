"""Split a batch of whole groups over data-parallel ranks.

Groups are never split: GRPO advantages are computed over the whole batch before
sharding (`Learner.advantages`), so this is only about balancing work. Greedy
longest-processing-time assignment: groups in decreasing order of tokens
(prompt + response), each to the rank with the fewest tokens so far (ties: lower
rank). Deterministic, so every rank computes the same split without communicating.
"""

from __future__ import annotations

from ulorl.trajectory import Trajectory


def shard_groups(trajs: list[Trajectory], world_size: int) -> list[list[int]]:
    """Indices into `trajs` of each rank's shard, `world_size` lists, each in batch order.

    A rank gets no samples when there are fewer groups than ranks (it still takes part
    in every collective, contributing zero tokens and zero gradient).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(trajs):
        groups.setdefault(t.group_id, []).append(i)
    size = {g: sum(len(trajs[i].prompt_tokens) + trajs[i].response_len for i in idx) for g, idx in groups.items()}
    load = [0] * world_size
    shards: list[list[int]] = [[] for _ in range(world_size)]
    for g in sorted(groups, key=lambda g: (-size[g], groups[g][0])):
        r = min(range(world_size), key=lambda k: (load[k], k))
        load[r] += size[g]
        shards[r] += groups[g]
    return [sorted(s) for s in shards]
