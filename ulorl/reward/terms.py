"""Reward terms: one configured reward function each, scored, checked and watched for failures.

A :class:`RewardTerm` turns a :class:`RewardBatch` into one :class:`TermResult`
per sample. The manager sums ``weight * score`` over its terms. Three kinds,
chosen by :func:`build_term` from the function and its style (``registry.py``):

- ``VerifierTerm``: a built-in (``rule``/``exact``) or a verl-style function
  given by name: a :class:`RuleVerifier`, so it runs in killable workers with
  the per-item deadline.
- ``LocalVerlTerm``: a verl-style Python callable passed as an object (the
  Python API): called per sample in this process.
- ``BatchTerm``: a TRL-style batch function: called once per batch in this
  process (no deadline: TRL's way, and such functions often hold a model).

Checks, the same for every kind (``check_results``): a score must be finite,
and inside ``[min, max]`` when a range is declared; otherwise
:class:`RewardValueError` names the function, the sample, its data source and
the start of the response. :class:`ErrorWindow` watches each term's last
``ERROR_WINDOW`` samples and raises :class:`RewardFunctionError`, with the
exception text, once more than ``max_error_frac`` of them raised (judged from
``MIN_ERROR_ITEMS`` samples on). Timeouts are not errors here: they are the
deadline doing its job on pathological answers.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ulorl.errors import UlorlError
from ulorl.reward.registry import (RewardStyle, UserRewardFn, check_signature, detect_style, load_function,
                                   parse_result, parse_reward_fn)
from ulorl.reward.rule import RuleVerifier, Status

__all__ = [
    "ERROR_WINDOW",
    "MIN_ERROR_ITEMS",
    "BatchTerm",
    "ErrorWindow",
    "LocalVerlTerm",
    "RewardBatch",
    "RewardError",
    "RewardFunctionError",
    "RewardTerm",
    "RewardValueError",
    "TermResult",
    "VerifierTerm",
    "build_term",
    "check_results",
    "resolve_callable",
]

ERROR_WINDOW = 32
"""Recent samples per term over which the share of failures is measured."""
MIN_ERROR_ITEMS = 8
"""The failure share is judged only once a term has scored this many samples."""
_SHOW_CHARS = 120


class RewardError(UlorlError, RuntimeError):
    """A reward function misbehaved in a way that must stop the run (the message names it and the fix)."""


class RewardValueError(RewardError):
    """A reward that is not finite or outside its declared range."""


class RewardFunctionError(RewardError):
    """A reward function that raised on most of its recent samples."""


@dataclass
class RewardBatch:
    """The samples to score: responses and their columns (lists of one length)."""

    responses: Sequence[str]
    ground_truths: Sequence[str]
    data_sources: Sequence[str | None]
    extra_infos: Sequence[dict | None]
    prompts: Sequence[str | None]

    @classmethod
    def of(cls, responses, ground_truths, data_sources=None, extra_infos=None, prompts=None) -> RewardBatch:
        n = len(responses)
        for name, col in (("ground_truths", ground_truths), ("data_sources", data_sources),
                          ("extra_infos", extra_infos), ("prompts", prompts)):
            if col is not None and len(col) != n:
                raise ValueError(f"{n} responses but {len(col)} {name}")
        return cls(list(responses), list(ground_truths), list(data_sources or [None] * n),
                   list(extra_infos or [None] * n), list(prompts or [None] * n))

    def __len__(self) -> int:
        return len(self.responses)

    def subset(self, idx: Sequence[int]) -> RewardBatch:
        return RewardBatch(*([col[i] for i in idx] for col in (self.responses, self.ground_truths,
                                                                self.data_sources, self.extra_infos, self.prompts)))

    def describe(self, i: int) -> str:
        """``sample 3 (data_source 'gsm8k', ground truth '72', response '...')`` for error messages."""
        resp = str(self.responses[i])
        shown = resp[:_SHOW_CHARS] + ("..." if len(resp) > _SHOW_CHARS else "")
        return (f"sample {i} of the batch (data_source {self.data_sources[i]!r}, ground truth "
                f"{str(self.ground_truths[i])[:60]!r}, response {shown!r})")


@dataclass
class TermResult:
    """One sample's outcome: ``score`` (None: failed or "does not apply"), extra metrics, error text.

    ``uncomputed``: why no reward was computed for the sample (the function raised, or a user function ran
    past its deadline); such a sample must never be trained as if it had scored 0 (``RewardScores``)."""

    score: float | None
    extras: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    prediction: str | None = None  # extracted answer (built-ins only)
    uncomputed: str | None = None

    def __post_init__(self) -> None:
        if self.error is not None and self.uncomputed is None:
            self.uncomputed = f"error: {self.error}"


class RewardTerm(Protocol):
    name: str
    weight: float
    low: float | None
    high: float | None

    def score(self, batch: RewardBatch) -> list[TermResult]: ...

    def counters(self) -> dict[str, int]: ...

    def close(self) -> None: ...


class _Base:
    def __init__(self, name: str, weight: float, low: float | None, high: float | None) -> None:
        self.name, self.weight, self.low, self.high = name, float(weight), low, high

    def counters(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass


class VerifierTerm(_Base):
    """A built-in or a verl-style function by name, in the killable worker pool."""

    def __init__(self, verifier: RuleVerifier, name: str, weight: float = 1.0, low=None, high=None) -> None:
        super().__init__(name, weight, low, high)
        self.verifier = verifier

    def score(self, batch: RewardBatch) -> list[TermResult]:
        """A built-in's timeout is its verdict (an answer it cannot check in time scores 0, as math-verify's own
        timeouts do); a user function's timeout leaves the sample without a reward."""
        verdicts = self.verifier.score_detailed(batch.responses, batch.ground_truths, batch.data_sources,
                                                batch.extra_infos)
        user = isinstance(self.verifier.fn, UserRewardFn)
        return [TermResult(v.score, v.extras, v.error if v.status is Status.ERROR else None, v.prediction,
                           f"timeout: {v.error}" if user and v.status is Status.TIMEOUT else None)
                for v in verdicts]

    def counters(self) -> dict[str, int]:
        return self.verifier.counters

    def close(self) -> None:
        self.verifier.close()


class LocalVerlTerm(_Base):
    """A verl-style callable, called per sample in this process."""

    def __init__(self, fn: Callable, name: str, weight: float = 1.0, low=None, high=None) -> None:
        super().__init__(name, weight, low, high)
        self.fn = fn

    def score(self, batch: RewardBatch) -> list[TermResult]:
        out = []
        for i in range(len(batch)):
            try:
                value, extras = parse_result(self.fn(batch.data_sources[i], batch.responses[i],
                                                     batch.ground_truths[i], batch.extra_infos[i]))
                out.append(TermResult(value, extras))
            except Exception as e:  # noqa: BLE001 - user code may raise anything; counted by ErrorWindow
                out.append(TermResult(None, error=f"{type(e).__name__}: {str(e)[:300]}"))
        return out


class BatchTerm(_Base):
    """A TRL-style ``fn(completions, **columns) -> list[float | None]``, once per batch in this process."""

    def __init__(self, fn: Callable, name: str, weight: float = 1.0, low=None, high=None) -> None:
        super().__init__(name, weight, low, high)
        self.fn = fn

    def columns(self, batch: RewardBatch) -> dict[str, list]:
        cols: dict[str, list] = {"completions": list(batch.responses), "prompts": list(batch.prompts),
                                 "ground_truth": list(batch.ground_truths), "data_source": list(batch.data_sources),
                                 "extra_info": list(batch.extra_infos)}
        keys = dict.fromkeys(k for e in batch.extra_infos if isinstance(e, dict) for k in e)
        for k in keys:
            if k not in cols:
                cols[k] = [e.get(k) if isinstance(e, dict) else None for e in batch.extra_infos]
        return cols

    def score(self, batch: RewardBatch) -> list[TermResult]:
        n = len(batch)
        try:
            values = self.fn(**self.columns(batch))
            values = list(values)
            if len(values) != n:
                raise ValueError(f"returned {len(values)} rewards for {n} completions")
        except Exception as e:  # noqa: BLE001 - the whole batch failed
            err = f"{type(e).__name__}: {str(e)[:300]}"
            return [TermResult(None, error=err) for _ in range(n)]
        out = []
        for v in values:
            if v is None:  # TRL: this function does not apply to this sample
                out.append(TermResult(None))
                continue
            try:
                value, extras = parse_result(v)
                out.append(TermResult(value, extras))
            except ValueError as e:
                out.append(TermResult(None, error=f"ValueError: {e}"))
        return out


def resolve_callable(fn: str | Callable, style: str | RewardStyle, name: str) -> tuple[Callable, RewardStyle]:
    """Load ``fn`` (a reference or a callable), tell its style and check its signature."""
    obj = load_function(fn) if isinstance(fn, str) else fn
    st = detect_style(obj, style, name)
    check_signature(obj, st, name)
    return obj, st


def build_term(fn: str | Callable, *, name: str, weight: float = 1.0, style: str = "auto", low=None, high=None,
               verifier_kw: dict[str, Any] | None = None) -> RewardTerm:
    """The term for a built-in name, a ``module:function`` / ``file.py:function`` reference or a callable."""
    kw = dict(verifier_kw or {})
    if isinstance(fn, str) and ":" not in fn:
        builtin = parse_reward_fn(fn)
        return VerifierTerm(RuleVerifier(fn=builtin.value, **kw), name, weight, low, high)
    obj, st = resolve_callable(fn, style, name)
    if st is RewardStyle.BATCH:
        return BatchTerm(obj, name, weight, low, high)
    if isinstance(fn, str):
        return VerifierTerm(RuleVerifier(fn=str(UserRewardFn(fn)), **kw), name, weight, low, high)
    return LocalVerlTerm(obj, name, weight, low, high)


def check_results(term: RewardTerm, results: list[TermResult], batch: RewardBatch) -> None:
    """Raise :class:`RewardValueError` at the first non-finite or out-of-range score, naming it."""
    for i, r in enumerate(results):
        if r.score is None:
            continue
        if not math.isfinite(r.score):
            raise RewardValueError(f"reward function {term.name!r} returned {r.score} for {batch.describe(i)}: "
                                   "rewards must be finite; fix the function")
        if (term.low is not None and r.score < term.low) or (term.high is not None and r.score > term.high):
            raise RewardValueError(f"reward function {term.name!r} returned {r.score} for {batch.describe(i)}, "
                                   f"outside its declared range [{term.low}, {term.high}]: fix the function or "
                                   "its min/max in reward.fns")


class ErrorWindow:
    """Failures of one term over its last ``size`` samples; ``update`` raises past ``max_frac``."""

    def __init__(self, name: str, max_frac: float, size: int = ERROR_WINDOW, min_items: int = MIN_ERROR_ITEMS):
        self.name, self.max_frac, self.min_items = name, max_frac, min_items
        self.recent: deque[bool] = deque(maxlen=size)
        self.total = 0

    def update(self, results: list[TermResult], batch: RewardBatch) -> None:
        first = next((i for i, r in enumerate(results) if r.error is not None), None)
        for r in results:
            self.recent.append(r.error is not None)
        self.total += sum(r.error is not None for r in results)
        bad = sum(self.recent)
        if first is not None and len(self.recent) >= self.min_items and bad > self.max_frac * len(self.recent):
            raise RewardFunctionError(
                f"reward function {self.name!r} failed on {bad} of its last {len(self.recent)} samples "
                f"(more than reward.max_error_frac={self.max_frac}); in this batch, {batch.describe(first)}: "
                f"{results[first].error}. Fix the function, or raise reward.max_error_frac (1.0 never stops: the "
                "samples it fails on are dropped, never trained)"
            )
