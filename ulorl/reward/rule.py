"""Rule verifier: final-answer extraction plus math-verify, in killable workers.

``RuleVerifier.score`` runs, per item:

1. extraction of the final answer in the trainer process (``extract.py``,
   linear time; the extractor is chosen by data source);
2. cheap checks: no answer -> 0 (``reward/no_answer``); an answer longer than
   ``max_answer_chars`` -> 0 (``reward/too_long``);
3. normalisation of the answer and of each accepted form of the reference
   (``normalize.py``: units and counted nouns, ``\\text{}``, money, degrees,
   thousands separators, sympy syntax, "X, or equivalently Y"); a form whose
   unit differs from the answer's is ruled out; the answer equal to a form
   after that (whitespace and ``$`` dropped) -> 1, two plain numbers are
   compared exactly, both without math-verify (``reward/fast_path``);
4. otherwise ``math_verify.verify(parse(gold), parse(pred))`` (gold first) for
   each remaining form, in the worker pool (``pool.py``) with a hard per-item
   deadline; a timeout or an exception scores 0 and is counted
   (``reward/timeouts``, ``reward/errors``).

Both strings are parsed as ``\\boxed{...}`` content, as verl does for the
reference, so bare LaTeX (``\\frac12``), plain expressions (``1/2``) and sets
all parse. Math-verify's own ``signal.alarm`` timeouts are switched off inside
the workers (``parsing_timeout=None``, ``timeout_seconds=None``): they fail
outside the main thread and cannot stop C code; the parent's kill does both.

With a user verl-style reward (``module:function`` or ``file.py:function``),
steps 1-2 are skipped: the function receives the whole response in a worker,
under the same deadline, and its ``(score, extras)`` come back in the
:class:`Verdict` unchecked (``terms.py`` checks them and names the function).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ulorl.reward.extract import ExtractorMap
from ulorl.reward.normalize import gold_alternatives, normalize, units_conflict
from ulorl.reward.pool import OK, TIMEOUT, WorkerPool
from ulorl.reward.registry import BuiltinReward, UserRewardFn, parse_reward_fn

__all__ = ["RuleVerifier", "Status", "Verdict", "math_equal", "math_equal_any", "normalize_answer"]

_MATH_EQUAL_REF = "ulorl.reward.rule:math_equal_any"
_USER_FN_REF = "ulorl.reward.registry:call_user_fn"
_mv = None  # math_verify module, imported on first use


_PLAIN_NUMBER = re.compile(r"^[-+]?\d{1,30}(\.\d{1,30})?$")


def plain_numbers_equal(pred: str, gold: str) -> bool | None:
    """Exact verdict when both answers are plain decimal numbers (no worker needed), else None."""
    from decimal import Decimal

    a, b = normalize_answer(pred), normalize_answer(gold)
    if _PLAIN_NUMBER.match(a) and _PLAIN_NUMBER.match(b):
        return Decimal(a) == Decimal(b)
    return None


def normalize_answer(s: str) -> str:
    """Normalisation for the fast path: no surrounding/inner whitespace, no ``$``."""
    return "".join(s.split()).replace("$", "")


_PARSE_CONFIG: list | None = None


def parse_config() -> list:
    """Math-verify's LaTeX + expression extraction, with its unit stripping off: it reads ``3t`` as 3 (tonnes)
    and ``-36 m`` as -36 (metres), so ``3t`` equalled ``3``. Units are handled by ``normalize.py`` instead."""
    global _PARSE_CONFIG
    if _PARSE_CONFIG is None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig
        from math_verify.parser import NormalizationConfig

        norm = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all")
        _PARSE_CONFIG = [LatexExtractionConfig(normalization_config=norm), ExprExtractionConfig()]
    return _PARSE_CONFIG


def math_equal_any(pred: str, golds: list[str]) -> float:
    """1.0 when ``pred`` is equivalent to any of ``golds`` (a ground truth's accepted forms), else 0.0."""
    return 1.0 if any(math_equal(pred, g) for g in golds) else 0.0


def math_equal(pred: str, gold: str) -> float:
    """1.0 when ``pred`` is equivalent to ``gold`` by math-verify, else 0.0.

    Runs without math-verify's signal timeouts: call it only under an external
    deadline (the worker pool) or on trusted input.
    """
    global _mv
    if _mv is None:
        import math_verify
        import math_verify.grader
        import math_verify.parser

        # we disable its timeouts on purpose; silence its one-time warning
        math_verify.parser.TIMEOUT_WARNING_SHOWN = True
        math_verify.grader.TIMEOUT_WARNING_SHOWN = True
        _mv = math_verify
    cfg = parse_config()
    gold_parsed = _mv.parse("\\boxed{" + gold + "}", cfg, parsing_timeout=None)
    if not gold_parsed:
        return 0.0
    pred_parsed = _mv.parse("\\boxed{" + pred + "}", cfg, parsing_timeout=None)
    if not pred_parsed:
        return 0.0
    return 1.0 if _mv.verify(gold_parsed, pred_parsed, timeout_seconds=None) else 0.0


_WARMUP_PAIRS = [
    ("\\frac{1}{2}", "0.5"),
    ("12", "12.0"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("(x+1)^2", "x^2+2x+1"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("(1,2]", "(1, 2]"),
    ("\\frac{\\pi}{2}", "\\pi/2"),
    ("x=3", "3"),
    ("10\\%", "0.1"),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "(1,2)"),
]


def warmup() -> None:
    """Exercise math-verify's lazy imports and grammars once (the pool's zygote does this
    before forking workers, so first-use costs never count against an item's deadline)."""
    for pred, gold in _WARMUP_PAIRS:
        math_equal(pred, gold)


class Status(str, Enum):
    """How an item's score was decided."""

    OK = "ok"  # verified by math-verify / the user function
    FAST = "fast"  # normalised strings equal
    NO_ANSWER = "no_answer"
    TOO_LONG = "too_long"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Verdict:
    """Score of one response, the extracted answer (``None`` for user functions) and why.

    ``extras`` holds the numeric extra keys a user function returned in its dict;
    ``error`` the exception text when the item failed (``status`` ERROR)."""

    score: float
    prediction: str | None
    status: Status
    extras: dict = field(default_factory=dict)
    error: str | None = None


_COUNTERS = ("items", "timeouts", "errors", "too_long", "no_answer", "fast_path", "worker_restarts")


class RuleVerifier:
    """Score responses against references with extraction + math-verify in killable workers.

    Args:
        timeout_s: hard deadline per verified item (seconds).
        num_workers: worker processes.
        fn: ``"rule"`` (math-verify), ``"exact"`` (normalised string match, no
            workers) or a user ``"module:function"`` (verl signature).
        extractors: data source -> extractor name (others use the default chain).
        max_answer_chars: longer extracted answers score 0 without verification.
        fast_path: score 1 without math-verify when normalised strings are equal.
        chunk_size: items per pipe message (default: ~4 chunks per worker, <= 32).
        memory_mb: optional address-space limit per worker.

    Usable from any thread and as a context manager (``close()`` stops workers).
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        num_workers: int = 2,
        *,
        fn: str = BuiltinReward.RULE.value,
        extractors: Mapping[str, str] | None = None,
        max_answer_chars: int = 10_000,
        fast_path: bool = True,
        chunk_size: int | None = None,
        memory_mb: int | None = None,
        startup_timeout_s: float = 300.0,
    ) -> None:
        if max_answer_chars < 1:
            raise ValueError(f"max_answer_chars must be >= 1, got {max_answer_chars}")
        self.fn = parse_reward_fn(fn)
        self.extractors = ExtractorMap(extractors)
        self.max_answer_chars = int(max_answer_chars)
        self.fast_path = fast_path
        self.chunk_size = chunk_size
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._last_read = dict(self._counters)
        self._counter_lock = threading.Lock()
        self._pool: WorkerPool | None = None
        if self.fn != BuiltinReward.EXACT:
            if isinstance(self.fn, UserRewardFn):
                warmup = [("ulorl.reward.registry:load_function", (str(self.fn),))]
            else:
                warmup = [("ulorl.reward.rule:warmup", ())]
            self._pool = WorkerPool(num_workers, timeout_s, warmup=warmup, memory_mb=memory_mb,
                                    startup_timeout_s=startup_timeout_s)

    # -- lifecycle -----------------------------------------------------------------
    def close(self) -> None:
        """Stop the worker processes (idempotent)."""
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> RuleVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_ready(self) -> None:
        """Block until the workers are up (otherwise the first ``score`` call waits)."""
        if self._pool is not None:
            self._pool.wait_ready()

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the verification workers (empty for ``fn="exact"``)."""
        return self._pool.pids if self._pool is not None else []

    # -- counters ------------------------------------------------------------------
    @property
    def counters(self) -> dict[str, int]:
        """Cumulative counters since construction, named ``reward/<name>``."""
        with self._counter_lock:
            c = dict(self._counters)
        c["worker_restarts"] = self._pool.restarts if self._pool else 0
        return {f"reward/{k}": v for k, v in c.items()}

    def metrics(self) -> dict[str, float]:
        """Counters accumulated since the previous call to ``metrics()``."""
        now = self.counters
        with self._counter_lock:
            delta = {k: float(v - self._last_read.get(k, 0)) for k, v in now.items()}
            self._last_read = now
        return delta

    def _count(self, name: str, n: int = 1) -> None:
        with self._counter_lock:
            self._counters[name] += n

    # -- scoring -------------------------------------------------------------------
    def extract(self, responses: Sequence[str], data_sources: Sequence[str | None] | None = None) -> list[str | None]:
        """Extracted final answers (``None`` when nothing is found)."""
        sources = data_sources if data_sources is not None else [None] * len(responses)
        return [self.extractors.extract(r, s) for r, s in zip(responses, sources, strict=True)]

    def score(
        self,
        responses: Sequence[str],
        ground_truths: Sequence[str],
        data_sources: Sequence[str | None] | None = None,
        extra_infos: Sequence[Any] | None = None,
    ) -> list[float]:
        """Rewards for ``responses`` against ``ground_truths`` (one float each)."""
        return [v.score for v in self.score_detailed(responses, ground_truths, data_sources, extra_infos)]

    def score_detailed(
        self,
        responses: Sequence[str],
        ground_truths: Sequence[str],
        data_sources: Sequence[str | None] | None = None,
        extra_infos: Sequence[Any] | None = None,
    ) -> list[Verdict]:
        """Like :meth:`score` but returns a :class:`Verdict` (score, answer, status) per item."""
        n = len(responses)
        if len(ground_truths) != n:
            raise ValueError(f"{n} responses but {len(ground_truths)} ground_truths")
        if data_sources is not None and len(data_sources) != n:
            raise ValueError(f"{n} responses but {len(data_sources)} data_sources")
        if extra_infos is not None and len(extra_infos) != n:
            raise ValueError(f"{n} responses but {len(extra_infos)} extra_infos")
        self._count("items", n)
        if isinstance(self.fn, UserRewardFn):
            return self._score_user(responses, ground_truths, data_sources, extra_infos)
        return self._score_builtin(responses, ground_truths, data_sources)

    def _score_user(self, responses, ground_truths, data_sources, extra_infos) -> list[Verdict]:
        sources = data_sources if data_sources is not None else [None] * len(responses)
        extras = extra_infos if extra_infos is not None else [None] * len(responses)
        items = [
            (str(self.fn), s, r, g, e)
            for r, g, s, e in zip(responses, ground_truths, sources, extras, strict=True)
        ]
        assert self._pool is not None
        outcomes = self._pool.map(_USER_FN_REF, items, self.chunk_size)
        return [self._from_outcome(o, None) for o in outcomes]

    def _score_builtin(self, responses, ground_truths, data_sources) -> list[Verdict]:
        preds = self.extract(responses, data_sources)
        verdicts: list[Verdict | None] = [None] * len(preds)
        todo: dict[int, tuple[str, list[str]]] = {}
        for i, (pred, gold) in enumerate(zip(preds, ground_truths, strict=True)):
            if not pred:
                verdicts[i] = Verdict(0.0, pred, Status.NO_ANSWER)
                self._count("no_answer")
            elif len(pred) > self.max_answer_chars:
                verdicts[i] = Verdict(0.0, pred, Status.TOO_LONG)
                self._count("too_long")
            else:
                verdict, left = self._settle(pred, str(gold))
                if verdict is not None:
                    verdicts[i] = verdict
                else:
                    todo[i] = left
        if todo:
            assert self._pool is not None
            items = list(todo.values())
            outcomes = self._pool.map(_MATH_EQUAL_REF, items, self.chunk_size)
            for i, o in zip(todo, outcomes, strict=True):
                verdicts[i] = self._from_outcome(o, preds[i])
        return verdicts  # type: ignore[return-value]

    def _settle(self, pred: str, gold: str) -> tuple[Verdict | None, tuple[str, list[str]]]:
        """Decide ``pred`` against ``gold`` without math-verify when possible (normalised strings, plain numbers).

        Returns ``(verdict, ())`` or ``(None, (pred_text, gold_texts))`` for the workers: the normalised answer and
        the ground truth's accepted forms that are still open (units that conflict rule a form out)."""
        p = normalize(pred)
        forms = [normalize(g) for g in gold_alternatives(gold)] or [normalize(gold)]
        forms = [g for g in forms if not units_conflict(p, g)]
        if not forms:
            return Verdict(0.0, pred, Status.FAST if self.fast_path else Status.OK), ("", [])
        if self.fast_path or self.fn == BuiltinReward.EXACT:
            if any(normalize_answer(p.text) == normalize_answer(g.text) for g in forms):
                self._count("fast_path")
                return Verdict(1.0, pred, Status.FAST), ("", [])
            if self.fn == BuiltinReward.EXACT:
                return Verdict(0.0, pred, Status.OK), ("", [])
            same = [plain_numbers_equal(p.text, g.text) for g in forms]
            if all(x is not None for x in same):  # plain numbers: "3" vs "7" needs no math-verify round trip
                self._count("fast_path")
                return Verdict(float(any(same)), pred, Status.FAST), ("", [])
        return None, (p.text, [g.text for g in forms])

    def _from_outcome(self, o, pred: str | None) -> Verdict:
        if o.status == OK:
            if isinstance(o.value, tuple):  # a user function: (score, extras); checked by the caller
                return Verdict(float(o.value[0]), pred, Status.OK, dict(o.value[1]))
            return Verdict(float(o.value), pred, Status.OK)
        if o.status == TIMEOUT:
            self._count("timeouts")
            return Verdict(0.0, pred, Status.TIMEOUT, error=o.error)
        self._count("errors")
        return Verdict(0.0, pred, Status.ERROR, error=o.error)
