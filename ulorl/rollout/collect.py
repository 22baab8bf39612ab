"""The step rule of Algorithm 1: rollout rounds until the experience pool holds a batch.

One call to `collect_batch` is the data half of one training step:

1. a rollout round (`SegmentRollout.round`): continued samples from the unfinished
   pool plus new prompt draws decode one segment each;
2. the finished samples are scored by the `score` callable, which sets each
   trajectory's `reward` and, once, its `loss_keep` (the overlong policy's decision);
3. each finished sample joins its group in the experience pool; a group that becomes
   complete is dropped when one of its samples has no computed reward (`reward_failure`:
   its function raised or timed out; a reward that was not computed is never trained as a
   0), else passes dynamic sampling (DAPO; UloRL section 2.3: a group whose rewards are
   all equal gives no gradient) and is admitted, or is dropped; `on_drop` sees each
   dropped group with its reason (`DropReason`);
4. repeat until `n_groups` groups are admitted, then take exactly `n_groups` of them
   (FIFO; leftovers wait for the next step).

The trainer passes the real reward manager as `score`; the planner's simulator
(`ulorl.plan.simulate`) passes a simulated scorer over the same pools and rollout,
so both run this one rule.

Deviations from the paper: DAPO refills the batch by sampling more prompts until it
is full; here the refill is the next rollout round, so a step may take several rounds.
A step that cannot fill its batch within `RoundLimits` ends with the error built by
`stalled` (the trainer's: a `StallError` with `stall_report.json`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import torch

from ulorl.algo import dynamic_sampling as dynamic_sampling_mask
from ulorl.rollout.pools import ExperiencePool, UnfinishedPool
from ulorl.rollout.segment import SegmentRollout
from ulorl.trajectory import Trajectory

if TYPE_CHECKING:
    from ulorl.stall import StallWatch


class DropReason(str, Enum):
    """Why a complete group is not admitted (the `reason` of its samples in samples.jsonl)."""

    ALL_REWARDS_EQUAL = "all_rewards_equal"  # dynamic sampling: no gradient
    REWARD_FAILED = "reward_failed"  # a member's reward function raised or timed out: no reward to train


@dataclass(frozen=True)
class RoundLimits:
    """When a step gives up filling its batch."""

    max_rounds: int  # rollout rounds in all (train.max_rounds_per_step)
    max_idle_rounds: int  # rounds in a row that completed groups and admitted none (train.max_stall_rounds)


@dataclass
class Rounds:
    """How the rollout rounds of one step run: on which weights, scored how, and when they give up."""

    version: int  # the engine's policy version (updates applied to its weights)
    step: int  # updates done: the new samples' `born_step`
    score: Callable[[list[Trajectory]], None]  # sets each finished sample's `reward` and `loss_keep`
    dynamic_sampling: bool  # drop complete groups whose rewards are all equal
    limits: RoundLimits
    watch: StallWatch
    stalled: Callable[[int, str], Exception]  # (rounds, why) -> the error raised when `limits` are hit
    on_drop: Callable[[list[Trajectory], str], None] | None = None  # (group, `DropReason`) of every dropped group


@dataclass
class Collected:
    """A batch of whole groups and what the rounds that made it counted."""

    batch: list[Trajectory]  # exactly n_groups whole groups, group by group
    counts: Counter  # rounds, finished, new_prompts, reprefill, decoded, slots, prefill, prefill_padded, max_staleness,
    # dropped_groups (dynamic sampling), reward_failed_groups, gen_s, reward_s


def collect_batch(rollout: SegmentRollout, unfinished: UnfinishedPool, experience: ExperiencePool, n_groups: int,
                  rounds: Rounds) -> Collected:
    """Run rollout rounds until `n_groups` groups are admitted (`fill_pool`); take them."""
    acc = fill_pool(rollout, unfinished, experience, n_groups, rounds)
    return Collected([t for g in experience.take(n_groups) for t in g], acc)


def fill_pool(rollout: SegmentRollout, unfinished: UnfinishedPool, experience: ExperiencePool, n_groups: int,
              rounds: Rounds) -> Counter:
    """The rounds of `collect_batch` without the take: afterwards the experience pool holds at least `n_groups`
    admitted groups (none are run when it already does). Returns what the rounds counted.

    `train.pipeline=overlap` fills the next step's batch this way while the learner computes the current
    update, so the filled pool is part of the step-boundary state a checkpoint saves."""
    acc: Counter = Counter()
    limits, watch = rounds.limits, rounds.watch
    while experience.num_ready() < n_groups:
        if acc["rounds"] >= limits.max_rounds or watch.idle_rounds >= limits.max_idle_rounds:
            why = (f"no group admitted in {watch.idle_rounds} rollout rounds in a row (train.max_stall_rounds="
                   f"{limits.max_idle_rounds})" if watch.idle_rounds >= limits.max_idle_rounds else
                   f"no full batch of {n_groups} groups after {acc['rounds']} rollout rounds "
                   f"(train.max_rounds_per_step={limits.max_rounds})")
            raise rounds.stalled(acc["rounds"], why)
        tg = time.time()
        res = rollout.round(unfinished, rounds.version, rounds.step)
        acc.update(rounds=1, finished=len(res.finished), new_prompts=res.new_prompts, reprefill=res.reprefill_tokens,
                   decoded=res.decoded_tokens, slots=res.decode_slots, gen_s=time.time() - tg,
                   prefill=res.prefill_tokens, prefill_padded=res.prefill_padded_tokens)
        acc["max_staleness"] = max(acc["max_staleness"], res.max_staleness)
        tr = time.time()
        if res.finished:
            rounds.score(res.finished)
        completed, admitted = admit(experience, res.finished, rounds.dynamic_sampling, watch, acc, rounds.on_drop)
        watch.end_round(completed, admitted, limits.max_idle_rounds)
        acc["reward_s"] += time.time() - tr
    return acc


def admit(experience: ExperiencePool, finished: list[Trajectory], dynamic_sampling: bool, watch: StallWatch,
          acc: Counter, on_drop: Callable[[list[Trajectory], str], None] | None = None) -> tuple[int, int]:
    """Finished (scored) samples join their group; complete groups are admitted or dropped (`drop_reason`).

    Returns (groups completed, groups admitted)."""
    completed = admitted = 0
    for t in finished:
        group = experience.add(t)
        if group is None:
            continue
        completed += 1
        reason = drop_reason(group, dynamic_sampling)
        if reason is None:
            experience.admit(group)
            admitted += 1
        else:
            if on_drop is not None:
                on_drop(group, reason.value)
            acc["reward_failed_groups" if reason is DropReason.REWARD_FAILED else "dropped_groups"] += 1
        watch.record(group, reason is None)
    return completed, admitted


def drop_reason(group: list[Trajectory], dynamic_sampling: bool) -> DropReason | None:
    """Why a complete group is dropped, or None when it is admitted."""
    if any(t.reward_failure is not None for t in group):
        return DropReason.REWARD_FAILED
    if dynamic_sampling and not bool(dynamic_sampling_mask(torch.tensor([g.reward for g in group]),
                                                           [g.group_id for g in group]).any()):
        return DropReason.ALL_REWARDS_EQUAL
    return None
