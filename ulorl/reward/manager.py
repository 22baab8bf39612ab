"""The trainer's entry point to the reward stage: ``RewardManager(RewardConfig)``.

It builds one reward term per configured function (``terms.py``: a built-in
rule verifier or a verl-style function in killable workers, a TRL-style batch
function or a Python callable in this process), sums ``weight * score`` over
them, applies the optional generative judge (``judge.py``) to the *first*
function, and keeps the counters the trainer logs (``metrics()``: values since
the previous call). Every score is checked (finite, inside a declared range)
and each function's failures are watched (``reward.max_error_frac``): both stop
the run with an error that names the function and the sample.

Judge modes (on the first function):

- ``rule_then_judge``: the function's verdict first; the judge is asked only
  where it gave <= 0 and an answer was extracted (cheap path first). YES turns
  that score into 1 (``reward/judge_flips``); NO, a failure or a timeout keeps
  it.
- ``judge_only``: the judge decides every item that has an extracted answer
  (YES 1.0, NO 0.0); the function runs only for items whose judgement failed
  or timed out, or that have no answer (their fallback).

Items without an extracted answer, or with one longer than
``max_answer_chars``, never reach the judge and score 0 under a built-in reward.

``metrics()`` adds ``reward/judge_flips``, ``timing_s/reward_score`` (seconds
inside ``score``), ``timing_s/reward_judge`` (seconds waiting for the judge)
and, per function, ``rewards/<name>/mean``, ``/std``, ``/errors`` and
``rewards/<name>/<key>`` for extra dict keys, to the verifiers' (summed) and
the judge's ``reward/*`` counters.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ulorl.config.reward import RewardConfig
from ulorl.reward.extract import ExtractorMap
from ulorl.reward.judge import GenerativeVerifier, JudgeMode
from ulorl.reward.rule import RuleVerifier
from ulorl.reward.terms import (ErrorWindow, RewardBatch, RewardTerm, TermResult, VerifierTerm, build_term,
                                check_results)

__all__ = ["RewardManager", "RewardScores", "build_judge"]


@dataclass(frozen=True)
class RewardScores:
    """What ``RewardManager.score_detailed`` computed for a batch (lists of the batch's length)."""

    rewards: list[float]  # sum(weight * score) over the functions
    uncomputed: list[str | None]  # None, or why this sample has no reward ("<function>: error: ..." / "timeout: ...")


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
        self.extractors = ExtractorMap(cfg.extractors)
        self.judge = build_judge(cfg)  # first: a missing API key fails before workers start
        kw = {"timeout_s": cfg.timeout_s, "num_workers": cfg.num_workers, "extractors": cfg.extractors,
              "max_answer_chars": cfg.max_answer_chars, "startup_timeout_s": cfg.startup_timeout_s}
        self.terms: list[RewardTerm] = []
        try:
            for f in cfg.functions():
                self.terms.append(build_term(f.fn, name=str(f.name), weight=f.weight, style=f.style,
                                             low=f.min, high=f.max, verifier_kw=kw))
        except BaseException:
            self.close()
            raise
        self.windows = [ErrorWindow(t.name, cfg.max_error_frac) for t in self.terms]
        self._lock = threading.Lock()
        self._extra = {"judge_flips": 0, "timing_s/reward_score": 0.0, "timing_s/reward_judge": 0.0}
        self._last: dict[str, float] = {}
        self._stats: dict[str, list[float]] = {}  # metric -> [sum, sum of squares, count] since metrics()

    @property
    def verifier(self) -> RuleVerifier | None:
        """The first term's rule verifier (``None`` when that term is not a verifier)."""
        t = self.terms[0] if self.terms else None
        return t.verifier if isinstance(t, VerifierTerm) else None

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        """Stop workers and judge threads (idempotent)."""
        for t in getattr(self, "terms", []):
            t.close()
        if self.judge is not None:
            self.judge.close()

    def __enter__(self) -> RewardManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metrics -------------------------------------------------------------------
    def _totals(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for t in self.terms:  # several verifiers (e.g. rule + a verl function): counters add up
            for k, v in t.counters().items():
                totals[k] = totals.get(k, 0) + v
        for k in ("items", "timeouts", "errors", "too_long", "no_answer", "fast_path", "worker_restarts"):
            totals.setdefault(f"reward/{k}", 0)
        if self.judge is not None:
            totals.update(self.judge.counters)
        else:
            totals.update({"reward/judge_calls": 0, "reward/judge_failures": 0, "reward/judge_timeouts": 0})
        with self._lock:
            totals["reward/judge_flips"] = self._extra["judge_flips"]
            totals["timing_s/reward_score"] = self._extra["timing_s/reward_score"]
            totals["timing_s/reward_judge"] = self._extra["timing_s/reward_judge"]
        for t, w in zip(self.terms, self.windows, strict=True):
            totals[f"rewards/{t.name}/errors"] = w.total
        return totals

    def metrics(self) -> dict[str, float]:
        """Counters and timings accumulated since the previous call, and per-function means over that span:
        ``rewards/<name>/mean`` and ``/std`` (samples the function scored) and ``rewards/<name>/<key>`` for each
        numeric extra key its dicts returned."""
        totals = self._totals()
        with self._lock:
            delta = {k: float(v) - float(self._last.get(k, 0.0)) for k, v in totals.items()}
            self._last = totals
            for key, (s, sq, n) in self._stats.items():
                delta[key] = s / n
                if key.endswith("/mean"):
                    delta[key[: -len("mean")] + "std"] = math.sqrt(max(sq / n - (s / n) ** 2, 0.0))
            self._stats = {}
        return delta

    def _observe(self, key: str, value: float) -> None:
        acc = self._stats.setdefault(key, [0.0, 0.0, 0])
        acc[0] += value
        acc[1] += value * value
        acc[2] += 1

    # -- scoring -------------------------------------------------------------------
    def score(
        self,
        responses: Sequence[str],
        ground_truths: Sequence[str],
        data_sources: Sequence[str] | None = None,
        extra_infos: Sequence[dict | None] | None = None,
        prompts: Sequence[str | None] | None = None,
    ) -> list[float]:
        """One reward per response: ``sum(weight * score)`` over the functions (a score of None counts 0).

        For evaluation, where a sample whose reward failed counts as not correct. Training uses
        ``score_detailed``, which also says which samples have no computed reward."""
        return self.score_detailed(responses, ground_truths, data_sources, extra_infos, prompts).rewards

    def score_detailed(
        self,
        responses: Sequence[str],
        ground_truths: Sequence[str],
        data_sources: Sequence[str] | None = None,
        extra_infos: Sequence[dict | None] | None = None,
        prompts: Sequence[str | None] | None = None,
    ) -> RewardScores:
        """Rewards (``sum(weight * score)`` over the functions) and, per sample, why it has none, if so.

        The judge (module docstring) applies to the first function. Raises :class:`RewardValueError` for a
        non-finite or out-of-range reward and :class:`RewardFunctionError` when a function keeps failing."""
        start = time.perf_counter()
        batch = RewardBatch.of(responses, ground_truths, data_sources, extra_infos, prompts)
        totals = [0.0] * len(batch)
        uncomputed: list[str | None] = [None] * len(batch)
        judge_s = 0.0
        try:
            for k, (term, window) in enumerate(zip(self.terms, self.windows, strict=True)):
                if k == 0 and self.mode is JudgeMode.JUDGE_ONLY:
                    results, judge_s = self._score_judge_only(term, batch)
                else:
                    results = term.score(batch)
                    if k == 0 and self.mode is JudgeMode.RULE_THEN_JUDGE:
                        judge_s = self._judge_failed(batch, results)
                check_results(term, results, batch)
                window.update(results, batch)
                with self._lock:
                    for i, r in enumerate(results):
                        if r.uncomputed is not None and uncomputed[i] is None:
                            uncomputed[i] = f"{term.name}: {r.uncomputed}"
                        if r.score is not None:
                            totals[i] += term.weight * r.score
                            self._observe(f"rewards/{term.name}/mean", r.score)
                        for key, v in r.extras.items():
                            self._observe(f"rewards/{term.name}/{key}", v)
        finally:
            with self._lock:
                self._extra["timing_s/reward_score"] += time.perf_counter() - start
                self._extra["timing_s/reward_judge"] += judge_s
        return RewardScores(totals, uncomputed)

    def _judgeable(self, pred: str | None) -> bool:
        return bool(pred) and len(pred) <= self.cfg.max_answer_chars  # type: ignore[arg-type]

    def _predictions(self, batch: RewardBatch) -> list[str | None]:
        """Extracted answers for the judge (the same extractor map the rule verifier uses)."""
        return [self.extractors.extract(r, s) for r, s in zip(batch.responses, batch.data_sources, strict=True)]

    def _judge_failed(self, batch: RewardBatch, results: list[TermResult]) -> float:
        """rule_then_judge: a YES where the first function gave <= 0 sets that score to 1; returns seconds."""
        if self.judge is None:
            return 0.0
        preds = self._predictions(batch)
        todo = [i for i, (r, p) in enumerate(zip(results, preds)) if (r.score or 0.0) <= 0 and self._judgeable(p)]
        if not todo:
            return 0.0
        start = time.perf_counter()
        verdicts = self.judge.judge([preds[i] for i in todo], [str(batch.ground_truths[i]) for i in todo],
                                    [_question(batch.extra_infos, i) for i in todo])
        flips = 0
        for i, v in zip(todo, verdicts, strict=True):
            if v:  # NO, failure (None) and timeout keep the function's verdict
                results[i] = TermResult(1.0, results[i].extras, None, preds[i])
                flips += 1
        with self._lock:
            self._extra["judge_flips"] += flips
        return time.perf_counter() - start

    def _score_judge_only(self, term: RewardTerm, batch: RewardBatch) -> tuple[list[TermResult], float]:
        """judge_only: the judge decides items with an answer; the function scores only the rest."""
        preds = self._predictions(batch)
        todo = [i for i, p in enumerate(preds) if self._judgeable(p)]
        results: list[TermResult | None] = [None] * len(batch)
        start = time.perf_counter()
        verdicts = self.judge.judge(  # type: ignore[union-attr]
            [preds[i] for i in todo],
            [str(batch.ground_truths[i]) for i in todo],
            [_question(batch.extra_infos, i) for i in todo],
        )
        judge_s = time.perf_counter() - start
        for i, v in zip(todo, verdicts, strict=True):
            if v is not None:
                results[i] = TermResult(1.0 if v else 0.0, prediction=preds[i])
        fallback = [i for i in range(len(batch)) if results[i] is None]
        if fallback:
            for i, r in zip(fallback, term.score(batch.subset(fallback)), strict=True):
                results[i] = r
        return results, judge_s  # type: ignore[return-value]


def _question(extra_infos: Sequence[dict | None] | None, i: int) -> str:
    if extra_infos is None or not isinstance(extra_infos[i], dict):
        return ""
    return str(extra_infos[i].get("question", ""))
