"""The run's `Scorer` (`ulorl.rollout.collect.Scorer`): rewards for finished samples, then the overlong policy.

The step rule gets one `RewardScorer` per step as a value; it calls `score` on every round's
finished samples and never reaches back into the run.
"""

from __future__ import annotations

import torch

from ulorl.config import RunConfig
from ulorl.reward import RewardError, apply_overlong_policy
from ulorl.rollout.segment import SampleError
from ulorl.trajectory import Trajectory


class RewardScorer:
    """Scores with `reward` (a `RewardManager`: rule/judge in worker processes) for step `step` of a run."""

    def __init__(self, reward, tokenizer, cfg: RunConfig, step: int) -> None:
        self.reward, self.tokenizer, self.step = reward, tokenizer, step
        self.overlong, self.overlong_buffer = cfg.reward.overlong, cfg.reward.overlong_buffer
        self.max_response_len = cfg.rollout.max_response_len

    def score(self, finished: list[Trajectory]) -> None:
        """Set each sample's `reward`, `reward_failure` and, once, its `loss_keep` (the overlong policy's)."""
        texts = self.tokenizer.batch_decode([t.response_tokens for t in finished], skip_special_tokens=True)
        prompts = self.tokenizer.batch_decode([t.prompt_tokens for t in finished], skip_special_tokens=True)
        try:
            scored = self.reward.score_detailed(texts, [t.ground_truth for t in finished],
                                                [t.data_source for t in finished],
                                                extra_infos=[t.extra_info for t in finished], prompts=prompts)
        except RewardError:  # a reward function's own fault: its message names the function, sample and fix
            raise
        except Exception as e:
            raise SampleError(f"step {self.step}: reward scoring", finished, e) from e
        rewards, keep = apply_overlong_policy(
            self.overlong, torch.tensor(scored.rewards, dtype=torch.float32),
            torch.tensor([t.response_len for t in finished]), torch.tensor([t.truncated for t in finished]),
            self.max_response_len, self.overlong_buffer)
        for t, r, k, why in zip(finished, rewards.tolist(), keep.tolist(), scored.uncomputed):
            t.reward, t.loss_keep, t.reward_failure = float(r), bool(k), why
