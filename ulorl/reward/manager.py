"""The trainer's entry point to the reward stage: ``RewardManager(RewardConfig)``.

It composes the rule verifier (``rule.py``: extraction + math-verify or a user
function, in killable workers), the optional generative judge (``judge.py``)
and the overlong policy (``overlong.py``), and keeps the counters the trainer
logs (``metrics()``: values since the previous call).

Judge modes:

- ``rule_then_judge``: the rule verdict first; the judge is asked only where
  the rule says 0 and an answer was extracted (cheap path first). YES turns
  the reward into 1 (``reward/judge_flips``); NO, a failure or a timeout keeps
  the rule's 0.
- ``judge_only``: the judge decides every item that has an extracted answer;
  the rule verifier runs only for items whose judgement failed or timed out
  (their fallback). With a user ``module:function`` reward, a YES scores 1.0
  and a NO 0.0.

Items without an extracted answer, or with one longer than
``max_answer_chars``, never reach the judge and score 0 under a built-in reward.

``metrics()`` adds ``reward/judge_flips`` (rule 0 turned into 1 by the judge),
``timing_s/reward_score`` (seconds inside ``score``) and
``timing_s/reward_judge`` (seconds waiting for the judge) to the verifier's
and the judge's ``reward/*`` counters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from ulorl.reward.config import RewardConfig
from ulorl.reward.judge import GenerativeVerifier, JudgeMode
from ulorl.reward.overlong import apply_overlong_policy
from ulorl.reward.registry import UserRewardFn
from ulorl.reward.rule import RuleVerifier

__all__ = ["RewardManager", "build_judge"]


def build_judge(cfg: RewardConfig) -> GenerativeVerifier | None:
    """The judge described by ``cfg`` (``None`` when ``cfg.judge == "none"``)."""
    if cfg.judge == JudgeMode.NONE.value:
        return None
    if cfg.judge_url is not None:
        return GenerativeVerifier.from_url(
            cfg.judge_url,
            cfg.judge_model_name,
            api_key_env=cfg.api_key_env,
            timeout_s=cfg.judge_timeout_s,
            prompt_template=cfg.judge_prompt,
        )
    assert cfg.judge_model_path is not None
    return GenerativeVerifier.from_pretrained(
        cfg.judge_model_path,
        trust_remote_code=cfg.judge_trust_remote_code,
        timeout_s=cfg.judge_timeout_s,
        prompt_template=cfg.judge_prompt,
    )


class RewardManager:
    """Scores responses as configured; a context manager that stops its workers on exit."""

    def __init__(self, cfg: RewardConfig) -> None:
        self.cfg = cfg
        self.mode = JudgeMode(cfg.judge)
        self.judge = build_judge(cfg)  # first: a missing API key fails before workers start
        try:
            self.verifier = RuleVerifier(
                timeout_s=cfg.timeout_s,
                num_workers=cfg.num_workers,
                fn=cfg.fn,
                extractors=cfg.extractors,
                max_answer_chars=cfg.max_answer_chars,
                startup_timeout_s=cfg.startup_timeout_s,
            )
        except BaseException:
            if self.judge is not None:
                self.judge.close()
            raise
        self._lock = threading.Lock()
        self._extra = {"judge_flips": 0, "timing_s/reward_score": 0.0, "timing_s/reward_judge": 0.0}
        self._last: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        """Stop workers and judge threads (idempotent)."""
        self.verifier.close()
        if self.judge is not None:
            self.judge.close()

    def __enter__(self) -> RewardManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metrics -------------------------------------------------------------------
    def _totals(self) -> dict[str, float]:
        totals: dict[str, float] = dict(self.verifier.counters)
        if self.judge is not None:
            totals.update(self.judge.counters)
        else:
            totals.update({"reward/judge_calls": 0, "reward/judge_failures": 0, "reward/judge_timeouts": 0})
        with self._lock:
            totals["reward/judge_flips"] = self._extra["judge_flips"]
            totals["timing_s/reward_score"] = self._extra["timing_s/reward_score"]
            totals["timing_s/reward_judge"] = self._extra["timing_s/reward_judge"]
        return totals

    def metrics(self) -> dict[str, float]:
        """Counters and timings accumulated since the previous call."""
        totals = self._totals()
        with self._lock:
            delta = {k: float(v) - float(self._last.get(k, 0.0)) for k, v in totals.items()}
            self._last = totals
        return delta

    # -- scoring -------------------------------------------------------------------
    def score(
        self,
        responses: Sequence[str],
        ground_truths: Sequence[str],
        data_sources: Sequence[str] | None = None,
        extra_infos: Sequence[dict | None] | None = None,
    ) -> list[float]:
        """One reward per response (see the module docstring for the judge modes)."""
        start = time.perf_counter()
        judge_s = 0.0
        if self.mode is JudgeMode.JUDGE_ONLY:
            rewards, judge_s = self._score_judge_only(responses, ground_truths, data_sources, extra_infos)
        else:
            verdicts = self.verifier.score_detailed(responses, ground_truths, data_sources, extra_infos)
            rewards = [v.score for v in verdicts]
            if self.mode is JudgeMode.RULE_THEN_JUDGE:
                if isinstance(self.verifier.fn, UserRewardFn):  # extract only for the judge
                    preds = self.verifier.extract(responses, data_sources)
                else:
                    preds = [v.prediction for v in verdicts]
                todo = [i for i, (r, p) in enumerate(zip(rewards, preds)) if r <= 0 and self._judgeable(p)]
                judge_s = self._judge_failed(todo, preds, ground_truths, extra_infos, rewards)
        with self._lock:
            self._extra["timing_s/reward_score"] += time.perf_counter() - start
            self._extra["timing_s/reward_judge"] += judge_s
        return rewards

    def apply_overlong(self, rewards: Any, lengths: Any, truncated: Any, max_len: int) -> tuple[Any, Any]:
        """:func:`apply_overlong_policy` with this config's policy and buffer."""
        return apply_overlong_policy(
            self.cfg.overlong, rewards, lengths, truncated, max_len, self.cfg.overlong_buffer
        )

    def _judgeable(self, pred: str | None) -> bool:
        return bool(pred) and len(pred) <= self.cfg.max_answer_chars  # type: ignore[arg-type]

    def _judge_failed(self, todo, preds, ground_truths, extra_infos, rewards) -> float:
        """rule_then_judge: a YES on item ``i`` in ``todo`` sets ``rewards[i] = 1``; returns seconds."""
        if not todo or self.judge is None:
            return 0.0
        start = time.perf_counter()
        questions = [_question(extra_infos, i) for i in todo]
        verdicts = self.judge.judge([preds[i] for i in todo], [str(ground_truths[i]) for i in todo], questions)
        flips = 0
        for i, v in zip(todo, verdicts, strict=True):
            if v:  # NO, failure (None) and timeout keep the rule's verdict
                rewards[i] = 1.0
                flips += 1
        with self._lock:
            self._extra["judge_flips"] += flips
        return time.perf_counter() - start

    def _score_judge_only(self, responses, ground_truths, data_sources, extra_infos) -> tuple[list[float], float]:
        n = len(responses)
        if len(ground_truths) != n:
            raise ValueError(f"{n} responses but {len(ground_truths)} ground_truths")
        preds = self.verifier.extract(responses, data_sources)
        todo = [i for i, p in enumerate(preds) if self._judgeable(p)]
        rewards: list[float | None] = [None] * n
        start = time.perf_counter()
        verdicts = self.judge.judge(  # type: ignore[union-attr]
            [preds[i] for i in todo],
            [str(ground_truths[i]) for i in todo],
            [_question(extra_infos, i) for i in todo],
        )
        judge_s = time.perf_counter() - start
        for i, v in zip(todo, verdicts, strict=True):
            if v is not None:
                rewards[i] = 1.0 if v else 0.0
        fallback = [i for i in range(n) if rewards[i] is None]
        if fallback:
            sub = self.verifier.score(
                [responses[i] for i in fallback],
                [ground_truths[i] for i in fallback],
                [data_sources[i] for i in fallback] if data_sources is not None else None,
                [extra_infos[i] for i in fallback] if extra_infos is not None else None,
            )
            for i, s in zip(fallback, sub, strict=True):
                rewards[i] = s
        return rewards, judge_s  # type: ignore[return-value]


def _question(extra_infos: Sequence[dict | None] | None, i: int) -> str:
    if extra_infos is None or not isinstance(extra_infos[i], dict):
        return ""
    return str(extra_infos[i].get("question", ""))
