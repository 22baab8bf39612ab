"""Stall watch: what a step saw while no group passed dynamic sampling, and the error that ends it.

With a weak model (or a reward that never matches) every group has equal rewards,
dynamic sampling drops it, and a step can roll out for many minutes without a
batch. `StallWatch` keeps, for the current step, every completed group and whether
it was admitted. A round that completes groups and admits none is an idle round; every
`NOTE_EVERY` idle rounds in a row it prints one line (so a long wait is never
silent); after `train.max_stall_rounds` idle rounds in a row (or
`train.max_rounds_per_step` rounds in all) the trainer calls `fail`, which
writes `stall_report.json` in the run folder (every problem seen: prompt, ground
truth, rewards, the start of one response), prints the first problems and the
reward counts, and returns a `StallError` whose one-line message ends with a hint
chosen from what was seen (all wrong, all right, truncated answers, no dynamic
sampling).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ulorl.samples_log import clip_text
from ulorl.errors import UlorlError

NOTE_EVERY = 8  # rollout rounds without an admitted group between two progress lines
SHOWN = 5  # problems printed (stall_report.json holds all)
TEXT_CHARS = 300  # characters of prompt and response kept per problem


class StallError(UlorlError, RuntimeError):
    """Rollout rounds could not fill a batch (train.max_stall_rounds / train.max_rounds_per_step)."""


class StallWatch:
    """Groups completed during one step; `decode(token_ids) -> str` renders prompts and responses."""

    def __init__(self, step: int, decode, say) -> None:
        self.step, self.decode, self.say = step, decode, say
        self.groups: list[tuple[list, bool]] = []  # (trajectories, admitted)
        self.idle_rounds = 0  # rounds in a row without an admitted group

    def record(self, group: list, admitted: bool) -> None:
        self.groups.append((group, admitted))

    def end_round(self, completed: int, admitted: int, limit: int) -> None:
        """Count a round that completed groups but admitted none (rounds that completed none do not count:
        long answers need several rounds per group, and `train.max_rounds_per_step` bounds those)."""
        if admitted:
            self.idle_rounds = 0
        elif completed:
            self.idle_rounds += 1
            self._note(limit)

    def _note(self, limit: int) -> None:
        if self.idle_rounds % NOTE_EVERY == 0 and self.idle_rounds < limit:
            dropped = [g for g, ok in self.groups if not ok]
            self.say(f"step {self.step}: {self.idle_rounds} rollout rounds without an admitted group "
                     f"({len(dropped)} dropped, rewards seen: {self.reward_counts()}); stopping at "
                     f"train.max_stall_rounds={limit}")

    def reward_counts(self) -> str:
        counts = Counter(t.reward for g, _ in self.groups for t in g)
        return ", ".join(f"{r:g} x{n}" for r, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "none yet"

    def problems(self) -> list[dict]:
        out = []
        for group, admitted in self.groups:
            t = group[0]
            out.append({"group_id": t.group_id, "prompt_id": t.prompt_id, "data_source": t.data_source,
                        "ground_truth": t.ground_truth, "admitted": admitted,
                        "rewards": [g.reward for g in group],
                        "truncated": sum(g.truncated for g in group),
                        "prompt": clip_text(self.decode(t.prompt_tokens), TEXT_CHARS),
                        "response": clip_text(self.decode(t.response_tokens), TEXT_CHARS)})
        return out

    def hint(self, dynamic_sampling: bool) -> str:
        rewards = [t.reward for g, _ in self.groups for t in g]
        truncated = sum(t.truncated for g, _ in self.groups for t in g)
        if not dynamic_sampling or not rewards:
            return ("answers run over many segments, so few groups complete per round: raise rollout.decode_batch "
                    "or train.max_rounds_per_step")
        if truncated > len(rewards) / 2:
            return (f"{truncated} of {len(rewards)} answers hit rollout.max_response_len (scored 0): raise it, or "
                    "prompt for shorter answers")
        if max(rewards) <= 0:
            return ("no answer was scored right: compare `response` with `ground_truth` in stall_report.json (a "
                    "reward that never matches?), warm-start the model (model.warm_start=sft), use easier data, or "
                    "set algo.dynamic_sampling=false")
        if min(rewards) == max(rewards):
            return "every answer was scored the same: the problems are too easy for the model (ulorl clean " \
                   "--steps too_easy), or set algo.dynamic_sampling=false"
        return "rewards rarely differ within a group: use more samples per problem (rollout.group_size) or " \
               "algo.dynamic_sampling=false"

    def fail(self, run_dir: Path, rounds: int, why: str, dynamic_sampling: bool) -> StallError:
        """Write the report, print its head, and return the error to raise (one line, with a hint)."""
        path = Path(run_dir) / "stall_report.json"
        problems = self.problems()
        report = {"step": self.step, "rounds": rounds, "idle_rounds": self.idle_rounds, "why": why,
                  "reward_counts": dict(Counter(str(t.reward) for g, _ in self.groups for t in g)),
                  "problems": problems}
        path.write_text(json.dumps(report, indent=1, ensure_ascii=False))
        self.say(f"step {self.step} stalled after {rounds} rollout rounds: {len(problems)} groups completed, "
                 f"{sum(p['admitted'] for p in problems)} admitted; rewards seen: {self.reward_counts()}")
        for p in problems[:SHOWN]:
            self.say(f"  prompt {p['prompt_id']} ({p['data_source']}), ground truth {p['ground_truth']!r}, rewards "
                     f"{p['rewards']}: {clip_text(' '.join(p['response'].split()), 120)!r}")
        if len(problems) > SHOWN:
            self.say(f"  ... {len(problems) - SHOWN} more in {path}")
        return StallError(f"step {self.step}: {why}; the problems and rewards seen are in {path}. "
                          f"Hint: {self.hint(dynamic_sampling)}")
