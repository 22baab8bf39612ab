"""Generative verifier: a language model judges answer equivalence.

Rules misjudge pairs such as (``27cm``, ``0.27m``) or (``1/2``, ``one half``);
the UloRL paper trained a generative verifier for this. We do not ship such a
model; any chat model can serve as the judge through one of two backends
(``judge_backends.py``): :class:`HFChatBackend`, a local Hugging Face model,
and :class:`OpenAIChatBackend`, any OpenAI-compatible server (vLLM, SGLang, a
hosted API), with a total deadline per request and the API key read from an
environment variable that the config names, never stored or shown.

The judge sees only the extracted final answers (and the question when the
data has one in ``extra_info["question"]``), never the 100k-token reasoning.
Its reply is parsed strictly (:func:`parse_verdict`): after removing
``<think>...</think>``, the last word must be YES or NO and the other verdict
word must not appear. Anything else is a *failure*; failures
(``reward/judge_failures``) and timeouts (``reward/judge_timeouts``) fall back
to the rule verdict (see ``manager.py``). A batch of which every call failed is
logged as a warning with its last error (logger ``ulorl.reward.judge``, which a
run prints): once, and again only after the judge has answered, so that a judge
that is down or misnamed is seen at once, not only in the metrics.
"""

from __future__ import annotations

import logging
import re
import string
import threading
from collections.abc import Sequence
from enum import Enum

from ulorl.reward.judge_backends import ChatBackend, HFChatBackend, JudgeError, JudgeTimeout, OpenAIChatBackend

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_JUDGE_PROMPT",
    "GenerativeVerifier",
    "HFChatBackend",
    "JudgeError",
    "JudgeMode",
    "JudgeTimeout",
    "OpenAIChatBackend",
    "check_prompt_template",
    "parse_verdict",
]

DEFAULT_JUDGE_PROMPT = (
    "You are checking the final answer of a math problem.\n"
    "Question: {question}\n"
    "Predicted answer: {prediction}\n"
    "Reference answer: {reference}\n"
    "Are the two answers equivalent (the same value or set, possibly written in a different "
    "form or unit, e.g. 27cm and 0.27m, 1/2 and 0.5)? "
    "Reply with exactly one word: YES or NO."
)
_PROMPT_FIELDS = {"question", "prediction", "reference"}
_THINK_RE = re.compile(r"<think>.*?(</think>|\Z)", re.S)
_WORD_RE = re.compile(r"[A-Za-z]+")


class JudgeMode(str, Enum):
    """When the judge is consulted."""

    NONE = "none"
    RULE_THEN_JUDGE = "rule_then_judge"  # only where the rule verifier says "not equal"
    JUDGE_ONLY = "judge_only"  # every answer; the rule verdict is only the fallback


def check_prompt_template(template: str) -> None:
    """Raise ``ValueError`` unless ``template`` uses only {question}/{prediction}/{reference}.

    It must contain {prediction} and {reference}.
    """
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        raise ValueError(f"judge prompt template is not a valid format string: {e}") from None
    unknown = fields - _PROMPT_FIELDS
    if unknown:
        raise ValueError(
            f"judge prompt template has unknown fields {sorted(unknown)}; allowed: {sorted(_PROMPT_FIELDS)}"
        )
    missing = {"prediction", "reference"} - fields
    if missing:
        raise ValueError(f"judge prompt template must contain {sorted(missing)}")


def parse_verdict(reply: str) -> bool | None:
    """``True`` for YES, ``False`` for NO, ``None`` when the reply is not a clean verdict.

    Strict: after dropping ``<think>...</think>`` blocks the last word must be
    YES or NO (any case) and the opposite word must not occur anywhere.

    >>> parse_verdict("The values match. YES."), parse_verdict("no"), parse_verdict("YES or NO")
    (True, False, None)
    """
    words = [w.upper() for w in _WORD_RE.findall(_THINK_RE.sub(" ", reply))]
    if not words or words[-1] not in ("YES", "NO"):
        return None
    if len({"YES", "NO"} & set(words)) != 1:
        return None
    return words[-1] == "YES"


class GenerativeVerifier:
    """Ask a chat model whether predicted and reference answers are equivalent.

    Build it with :meth:`from_url` (OpenAI-compatible server) or
    :meth:`from_pretrained` (local HF model), or pass any :class:`ChatBackend`.
    :meth:`judge` returns ``True`` / ``False`` per pair, or ``None`` where the
    judge failed or timed out (counted in :attr:`counters`).
    """

    def __init__(self, backend: ChatBackend, *, prompt_template: str = DEFAULT_JUDGE_PROMPT) -> None:
        check_prompt_template(prompt_template)
        self.backend = backend
        self.prompt_template = prompt_template
        self._counters = {"judge_calls": 0, "judge_failures": 0, "judge_timeouts": 0}
        self._down = False  # every call of the last batch failed (and that was said)
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        model_name: str = "judge",
        *,
        prompt_template: str = DEFAULT_JUDGE_PROMPT,
        **backend_kwargs,
    ) -> GenerativeVerifier:
        """Judge served by an OpenAI-compatible endpoint at ``url``; ``backend_kwargs`` are ``OpenAIChatBackend``'s
        (``api_key_env``, ``timeout_s``, ``max_tokens``, ``max_concurrency``)."""
        return cls(OpenAIChatBackend(url, model_name, **backend_kwargs), prompt_template=prompt_template)

    @classmethod
    def from_pretrained(
        cls,
        model_path: str,
        *,
        trust_remote_code: bool = False,
        timeout_s: float = 30.0,
        prompt_template: str = DEFAULT_JUDGE_PROMPT,
        **backend_kwargs,
    ) -> GenerativeVerifier:
        """Judge run from a local Hugging Face model directory."""
        backend = HFChatBackend(
            model_path, trust_remote_code=trust_remote_code, timeout_s=timeout_s, **backend_kwargs
        )
        return cls(backend, prompt_template=prompt_template)

    @property
    def counters(self) -> dict[str, int]:
        """Cumulative ``reward/judge_*`` counters."""
        with self._lock:
            return {f"reward/{k}": v for k, v in self._counters.items()}

    def judge(
        self,
        predictions: Sequence[str],
        references: Sequence[str],
        questions: Sequence[str] | None = None,
    ) -> list[bool | None]:
        """Verdict per (prediction, reference) pair; ``None`` = failure or timeout."""
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
        qs = questions if questions is not None else [""] * len(predictions)
        conversations = [
            [{"role": "user", "content": self.prompt_template.format(question=q, prediction=p, reference=r)}]
            for p, r, q in zip(predictions, references, qs, strict=True)
        ]
        replies = self.backend.chat_many(conversations)
        verdicts: list[bool | None] = []
        failures = timeouts = 0
        last_error = ""
        for reply in replies:
            if isinstance(reply, JudgeTimeout):
                timeouts += 1
                verdicts.append(None)
                last_error = str(reply)
            elif isinstance(reply, BaseException):
                failures += 1
                verdicts.append(None)
                last_error = f"{type(reply).__name__}: {reply}"
            else:
                v = parse_verdict(reply)
                failures += v is None
                verdicts.append(v)
                if v is None:
                    last_error = f"a reply with no single YES or NO: {reply[:80]!r}"
        with self._lock:
            self._counters["judge_calls"] += len(conversations)
            self._counters["judge_failures"] += failures
            self._counters["judge_timeouts"] += timeouts
            down = bool(conversations) and failures + timeouts == len(conversations)
            newly_down, self._down = down and not self._down, down if conversations else self._down
        if newly_down:
            log.warning("the judge failed every call of a batch (%d; the last: %s): their items keep the rule's "
                        "verdict. Counted in reward/judge_failures and reward/judge_timeouts; said again only after "
                        "the judge has answered", len(conversations), last_error)
        return verdicts

    def close(self) -> None:
        """Release the backend (threads / model)."""
        self.backend.close()

    def __enter__(self) -> GenerativeVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
