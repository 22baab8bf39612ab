"""The step rule of Algorithm 1: rollout rounds until the experience pool holds a batch.

One call to `collect_batch` is the data half of one training step:

1. a rollout round (`SegmentRollout.round`): continued samples from the unfinished
   pool plus new prompt draws decode one segment each;
2. the finished samples are scored by the `Scorer` it was given, which sets each
   trajectory's `reward` and, once, its `loss_keep` (the overlong policy's decision);
3. each finished sample joins its group in the experience pool; a group that becomes
   complete is dropped when one of its samples has no computed reward (`reward_failure`:
   its function raised or timed out; a reward that was not computed is never trained as a
   0), else passes dynamic sampling (DAPO; UloRL section 2.3: a group whose rewards are
   all equal gives no gradient) and is admitted, or is dropped (`DropReason`);
4. repeat until `n_groups` groups are admitted, then take exactly `n_groups` of them
   (FIFO; leftovers wait for the next step).

The rule calls nothing back up: it gets the scorer and the limits as values, returns the
dropped groups in its result (`Collected.dropped`), and when a step cannot fill its batch
within `RoundLimits` it raises `BatchStalled` with every group it saw. A long wait is never
silent: every `NOTE_EVERY` idle rounds it logs one line (`logging`, logger `ulorl.rollout.collect`).
The trainer passes its reward scorer (`ulorl.run.scoring`) and turns `BatchStalled` into a
report (`ulorl.run.stall`); the planner's simulator (`ulorl.plan.simulate`) passes a simulated
scorer over the same pools and rollout, so both run this one rule.

Deviations from the paper: DAPO refills the batch by sampling more prompts until it
is full; here the refill is the next rollout round, so a step may take several rounds.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

import torch

from ulorl.algo import dynamic_sampling as dynamic_sampling_mask
from ulorl.data.records import counted
from ulorl.rollout.pools import ExperiencePool, UnfinishedPool
from ulorl.rollout.segment import SegmentRollout
from ulorl.trajectory import Trajectory

log = logging.getLogger(__name__)

NOTE_EVERY = 8  # rollout rounds without an admitted group between two progress lines


class DropReason(str, Enum):
    """Why a complete group is not admitted (the `reason` of its samples in samples.jsonl)."""

    ALL_REWARDS_EQUAL = "all_rewards_equal"  # dynamic sampling: no gradient
    REWARD_FAILED = "reward_failed"  # a member's reward function raised or timed out: no reward to train


class Scorer(Protocol):
    """Scores finished samples in place."""

    def score(self, finished: list[Trajectory]) -> None:
        """Set each sample's `reward`, `loss_keep` and `reward_failure` (None when the reward was computed)."""


@dataclass(frozen=True)
class RoundLimits:
    """When a step gives up filling its batch."""

    max_rounds: int  # rollout rounds in all (train.max_rounds_per_step)
    max_idle_rounds: int  # rounds in a row that completed groups and admitted none (train.max_stall_rounds)


@dataclass(frozen=True)
class CollectSettings:
    """How the rollout rounds of one step run: on which weights, scored how, and when they give up."""

    version: int  # the engine's policy version (updates applied to its weights)
    step: int  # updates done: the new samples' `born_step`; the step being collected is `step + 1`
    scorer: Scorer
    dynamic_sampling: bool  # drop complete groups whose rewards are all equal
    limits: RoundLimits


@dataclass
class DroppedGroup:
    group: list[Trajectory]
    reason: DropReason


@dataclass
class Collected:
    """A batch of whole groups and what the rounds that made it counted."""

    batch: list[Trajectory]  # exactly n_groups whole groups, group by group (`fill_pool`: empty)
    counts: Counter  # rounds, finished, new_prompts, reprefill, decoded, slots, prefill, prefill_padded, max_staleness,
    # dropped_groups (dynamic sampling), reward_failed_groups, gen_s, reward_s, procs_busy_s, procs_wait_s
    dropped: list[DroppedGroup] = field(default_factory=list)  # in the order the groups completed


@dataclass
class RoundsSeen:
    """Every group the rounds of one call completed, admitted or not, and the idle rounds in a row at the end."""

    groups: list[tuple[list[Trajectory], bool]] = field(default_factory=list)  # (trajectories, admitted)
    idle_rounds: int = 0  # rounds in a row that completed groups and admitted none

    def reward_counts(self) -> str:
        """`0 x12, 1 x4, no reward x2`: how often each reward was seen, most frequent first (`no reward`: a sample
        whose reward was not computed)."""
        counts = Counter("no reward" if t.reward_failure is not None else f"{t.reward:g}"
                         for g, _ in self.groups for t in g)
        return ", ".join(f"{r} x{n}" for r, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "none yet"


class BatchStalled(RuntimeError):
    """The rounds of step `step` could not fill a batch within their `RoundLimits`; `seen` holds what they saw."""

    def __init__(self, why: str, step: int, rounds: int, seen: RoundsSeen, dropped: list[DroppedGroup]) -> None:
        super().__init__(f"step {step}: {why}")
        self.why, self.step, self.rounds, self.seen, self.dropped = why, step, rounds, seen, dropped


def collect_batch(rollout: SegmentRollout, unfinished: UnfinishedPool, experience: ExperiencePool, n_groups: int,
                  settings: CollectSettings) -> Collected:
    """Run rollout rounds until `n_groups` groups are admitted (`fill_pool`); take them."""
    got = fill_pool(rollout, unfinished, experience, n_groups, settings)
    got.batch = [t for g in experience.take(n_groups) for t in g]
    return got


def fill_pool(rollout: SegmentRollout, unfinished: UnfinishedPool, experience: ExperiencePool, n_groups: int,
              settings: CollectSettings) -> Collected:
    """The rounds of `collect_batch` without the take: afterwards the experience pool holds at least `n_groups`
    admitted groups (none are run when it already does). Returns what the rounds counted and dropped.

    `train.pipeline=overlap` fills the next step's batch this way while the learner computes the current
    update, so the filled pool is part of the step-boundary state a checkpoint saves."""
    try:
        return _fill(rollout, unfinished, experience, n_groups, settings)
    finally:
        rollout.end_step()


def _fill(rollout: SegmentRollout, unfinished: UnfinishedPool, experience: ExperiencePool, n_groups: int,
          settings: CollectSettings) -> Collected:
    counts: Counter = Counter()
    out, seen, limits = Collected([], counts), RoundsSeen(), settings.limits
    while experience.num_ready() < n_groups:
        if counts["rounds"] >= limits.max_rounds or seen.idle_rounds >= limits.max_idle_rounds:
            why = (f"no group admitted in {seen.idle_rounds} rollout rounds in a row (train.max_stall_rounds="
                   f"{limits.max_idle_rounds})" if seen.idle_rounds >= limits.max_idle_rounds else
                   f"no full batch of {counted(n_groups, 'group')} after {counts['rounds']} rollout rounds "
                   f"(train.max_rounds_per_step={limits.max_rounds})")
            raise BatchStalled(why, settings.step + 1, counts["rounds"], seen, out.dropped)
        tg = time.time()
        res = rollout.round(unfinished, settings.version, settings.step)
        counts.update(rounds=1, finished=len(res.finished), new_prompts=res.new_prompts,
                      reprefill=res.reprefill_tokens, decoded=res.decoded_tokens, slots=res.decode_slots,
                      gen_s=time.time() - tg, prefill=res.prefill_tokens, prefill_padded=res.prefill_padded_tokens,
                      procs_busy_s=res.procs_busy_s, procs_wait_s=res.procs_wait_s)
        counts["max_staleness"] = max(counts["max_staleness"], res.max_staleness)
        tr = time.time()
        if res.finished:
            settings.scorer.score(res.finished)
        completed, admitted = admit_groups(experience, res.finished, settings.dynamic_sampling, out, seen)
        end_round(seen, completed, admitted, settings.step + 1, limits.max_idle_rounds)
        counts["reward_s"] += time.time() - tr
    return out


def admit_groups(experience: ExperiencePool, finished: list[Trajectory], dynamic_sampling: bool, out: Collected,
                 seen: RoundsSeen) -> tuple[int, int]:
    """Finished (scored) samples join their group; complete groups are admitted or dropped (`drop_reason`) into
    `out` and recorded in `seen`. Returns (groups completed, groups admitted)."""
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
            out.dropped.append(DroppedGroup(group, reason))
            out.counts["reward_failed_groups" if reason is DropReason.REWARD_FAILED else "dropped_groups"] += 1
        seen.groups.append((group, reason is None))
    return completed, admitted


def end_round(seen: RoundsSeen, completed: int, admitted: int, step: int, limit: int) -> None:
    """Count a round that completed groups but admitted none (rounds that completed none do not count: long
    answers need several rounds per group, and `train.max_rounds_per_step` bounds those); every `NOTE_EVERY`
    such rounds in a row, log where the step stands."""
    if admitted:
        seen.idle_rounds = 0
    elif completed:
        seen.idle_rounds += 1
        if seen.idle_rounds % NOTE_EVERY == 0 and seen.idle_rounds < limit:
            dropped = sum(not ok for _, ok in seen.groups)
            log.info(f"step {step}: {seen.idle_rounds} rollout rounds without an admitted group ({dropped} dropped, "
                     f"rewards seen: {seen.reward_counts()}); stopping at train.max_stall_rounds={limit}")


def drop_reason(group: list[Trajectory], dynamic_sampling: bool) -> DropReason | None:
    """Why a complete group is dropped, or None when it is admitted."""
    if any(t.reward_failure is not None for t in group):
        return DropReason.REWARD_FAILED
    if dynamic_sampling and not bool(dynamic_sampling_mask(torch.tensor([g.reward for g in group]),
                                                           [g.group_id for g in group]).any()):
        return DropReason.ALL_REWARDS_EQUAL
    return None
