"""The stall report: what a step saw while no group passed dynamic sampling, and the error that ends it.

With a weak model (or a reward that never matches) every group has equal rewards, dynamic
sampling drops it, and a step can roll out for many minutes without a batch. The step rule
(`ulorl.rollout.collect`) counts those rounds itself, logs a line every `NOTE_EVERY` idle
rounds, and past `train.max_stall_rounds` idle rounds in a row (or `train.max_rounds_per_step`
rounds in all) raises `BatchStalled` with every group it completed. `stall_error` turns that
into the run's answer: `stall_report.json` in the run folder (every problem seen: prompt, ground
truth, rewards, the start of one response), the first problems and the reward counts printed,
and a `StallError` whose one-line message ends with a hint chosen from what was seen (all or almost all
wrong, all or almost all right, truncated answers, no dynamic sampling).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from ulorl.data.records import counted
from ulorl.durable import atomic_write_text
from ulorl.errors import UlorlError
from ulorl.logging.base import json_text
from ulorl.rollout.collect import BatchStalled, RoundsSeen
from ulorl.run.console import say
from ulorl.run.samples_log import clip_text

SHOWN = 5  # problems printed (stall_report.json holds all)
MOSTLY = 0.9  # share of the groups all at the lowest (highest) reward for the too-hard (too-easy) hint
TEXT_CHARS = 300  # characters of prompt and response kept per problem
TOO_EASY = "the problems are too easy for the model (ulorl clean --steps too_easy), or set algo.dynamic_sampling=false"


class StallError(UlorlError, RuntimeError):
    """Rollout rounds could not fill a batch (train.max_stall_rounds / train.max_rounds_per_step)."""


def stall_error(stalled: BatchStalled, run_dir: Path, decode: Callable[[list[int]], str],
                dynamic_sampling: bool) -> StallError:
    """Write the report, print its head, and return the error to raise (one line, with a hint);
    `decode(token_ids) -> str` renders prompts and responses."""
    path = Path(run_dir) / "stall_report.json"
    seen = stalled.seen
    problems = problem_rows(seen, decode)
    report = {"step": stalled.step, "rounds": stalled.rounds, "idle_rounds": seen.idle_rounds, "why": stalled.why,
              "reward_counts": dict(Counter("no reward" if t.reward_failure is not None else str(t.reward)
                                            for g, _ in seen.groups for t in g)),
              "problems": problems}
    atomic_write_text(path, json_text(report, indent=1, ensure_ascii=False))
    say(f"step {stalled.step} stalled after {stalled.rounds} rollout rounds: {counted(len(problems), 'group')} "
        f"completed, {sum(p['admitted'] for p in problems)} admitted; rewards seen: {seen.reward_counts()}")
    for p in problems[:SHOWN]:
        say(f"  prompt {p['prompt_id']} ({p['data_source']}), ground truth {p['ground_truth']!r}, rewards "
            f"{p['rewards']}: {clip_text(' '.join(p['response'].split()), 120)!r}")
    if len(problems) > SHOWN:
        say(f"  ... {len(problems) - SHOWN} more in {path}")
    return StallError(f"step {stalled.step}: {stalled.why}; the problems and rewards seen are in {path}. "
                      f"Hint: {hint(seen, dynamic_sampling)}")


def problem_rows(seen: RoundsSeen, decode: Callable[[list[int]], str]) -> list[dict]:
    """One row per completed group: its problem, rewards, truncations and the start of its first response."""
    out = []
    for group, admitted in seen.groups:
        t = group[0]
        out.append({"group_id": t.group_id, "prompt_id": t.prompt_id, "data_source": t.data_source,
                    "ground_truth": t.ground_truth, "admitted": admitted,
                    "rewards": [None if g.reward_failure is not None else g.reward for g in group],
                    "reward_failures": [g.reward_failure for g in group if g.reward_failure is not None],
                    "truncated": sum(g.truncated for g in group),
                    "prompt": clip_text(decode(t.prompt_tokens), TEXT_CHARS),
                    "response": clip_text(decode(t.response_tokens), TEXT_CHARS)})
    return out


def hint(seen: RoundsSeen, dynamic_sampling: bool) -> str:
    """The likeliest fix, from the rewards and truncations seen."""
    failed = [t.reward_failure for g, _ in seen.groups for t in g if t.reward_failure is not None]
    unscored = sum(any(t.reward_failure is not None for t in g) for g, _ in seen.groups)
    if unscored and 2 * unscored >= len(seen.groups):
        return (f"{unscored} of {len(seen.groups)} groups hold samples without a reward ({len(failed)} samples: "
                f"the reward function failed or ran past reward.timeout_s; the first: {failed[0]}), and such a group "
                "is dropped, never trained: fix the function, or raise reward.timeout_s")
    rewards = [t.reward for g, _ in seen.groups for t in g]
    truncated = sum(t.truncated for g, _ in seen.groups for t in g)
    if not dynamic_sampling or not rewards:
        return ("answers run over many segments, so few groups complete per round: raise rollout.decode_batch "
                "or train.max_rounds_per_step")
    if truncated > len(rewards) / 2:
        return (f"{truncated} of {len(rewards)} answers hit rollout.max_response_len (scored 0): raise it, or "
                "prompt for shorter answers")
    low, high = min(rewards), max(rewards)
    if high <= 0:
        return ("no answer was scored right: compare `response` with `ground_truth` in stall_report.json (a "
                "reward that never matches?), warm-start the model (model.warm_start=sft), use easier data, or "
                "set algo.dynamic_sampling=false")
    if low == high:
        return f"every answer was scored the same: {TOO_EASY}"
    groups = [[t.reward for t in g] for g, _ in seen.groups]
    all_low = sum(all(r == low for r in g) for g in groups)
    all_high = sum(all(r == high for r in g) for g in groups)
    if all_low >= MOSTLY * len(groups):
        return (f"in {all_low} of {len(groups)} groups every answer got the lowest reward seen ({low:g}): the "
                f"model rarely solves these problems; warm-start it (model.warm_start=sft, more sft.steps), use "
                f"easier data, or set algo.dynamic_sampling=false")
    if all_high >= MOSTLY * len(groups):
        return f"in {all_high} of {len(groups)} groups every answer got the highest reward seen ({high:g}): {TOO_EASY}"
    return "rewards rarely differ within a group: use more samples per problem (rollout.group_size) or " \
           "algo.dynamic_sampling=false"
