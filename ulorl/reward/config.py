"""Configuration of the reward stage (one dataclass, validated on construction).

Secrets: the judge endpoint's API key is never part of the config. The config
holds only the *name* of the environment variable (``api_key_env``) that
contains it, so ``repr(cfg)``, ``cfg.to_dict()``, saved YAML and logs can never
leak it. ``api_key_env`` must look like an environment variable name, which
also catches a key pasted into it by mistake.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from ulorl.reward.extract import EXTRACTORS
from ulorl.reward.judge import DEFAULT_JUDGE_PROMPT, JudgeMode, check_prompt_template
from ulorl.reward.overlong import OverlongPolicy
from ulorl.reward.registry import BuiltinReward

__all__ = ["RewardConfig"]

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _choices(enum) -> list[str]:
    return [e.value for e in enum]


@dataclass
class RewardConfig:
    """How responses are scored."""

    fn: str = "rule"
    """Reward function: a built-in name (``rule``, ``exact``) or ``module:function`` (verl signature)."""
    timeout_s: float = 5.0
    """Hard deadline per verified item, seconds; a worker that misses it is killed."""
    num_workers: int = 2
    """Verification worker processes."""
    startup_timeout_s: float = 300.0
    """How long the verification workers' parent process may take to start (imports math-verify/sympy)."""
    max_answer_chars: int = 10_000
    """Extracted answers longer than this score 0 without verification."""
    extractors: dict[str, str] = field(default_factory=dict)
    """data_source -> extractor name (boxed, answer_colon, builtin, default); others use ``default``."""
    judge: str = "none"
    """Generative judge: ``none``, ``rule_then_judge`` (only where the rule says wrong) or ``judge_only``."""
    judge_model_path: str | None = None
    """Local Hugging Face model directory for the judge (exclusive with ``judge_url``)."""
    judge_url: str | None = None
    """OpenAI-compatible server root for the judge, e.g. ``http://127.0.0.1:8000``."""
    judge_model_name: str = "judge"
    """``model`` field sent to the endpoint."""
    api_key_env: str | None = None
    """NAME of the environment variable holding the endpoint's API key (never the key)."""
    judge_timeout_s: float = 30.0
    """Per-request (endpoint) or per-batch (local model) judge deadline, seconds."""
    judge_prompt: str = DEFAULT_JUDGE_PROMPT
    """Prompt template with fields {question}, {prediction}, {reference}."""
    judge_trust_remote_code: bool = False
    """Allow custom modelling code of the local judge model (off by default)."""
    overlong: str = "zero"
    """Truncated responses: ``zero`` (paper), ``filter`` or ``soft_penalty`` (DAPO)."""
    overlong_buffer: int = 0
    """Soft-penalty buffer length in tokens (``soft_penalty`` needs > 0)."""

    def __post_init__(self) -> None:
        if ":" in self.fn:
            mod, _, attr = self.fn.partition(":")
            if not mod or not attr:
                raise ValueError(f"reward.fn must be a built-in name or 'module:function', got {self.fn!r}")
        elif self.fn not in _choices(BuiltinReward):
            raise ValueError(
                f"reward.fn={self.fn!r} is not valid; allowed: {_choices(BuiltinReward)} or 'module:function'"
            )
        if not self.timeout_s > 0:
            raise ValueError(f"reward.timeout_s must be > 0, got {self.timeout_s}")
        if not self.startup_timeout_s > 0:
            raise ValueError(f"reward.startup_timeout_s must be > 0, got {self.startup_timeout_s}")
        if self.num_workers < 1:
            raise ValueError(f"reward.num_workers must be >= 1, got {self.num_workers}")
        if self.max_answer_chars < 1:
            raise ValueError(f"reward.max_answer_chars must be >= 1, got {self.max_answer_chars}")
        for source, name in self.extractors.items():
            if name not in EXTRACTORS:
                raise ValueError(
                    f"reward.extractors[{source!r}]={name!r} is not valid; allowed: {sorted(EXTRACTORS)}"
                )
        if self.judge not in _choices(JudgeMode):
            raise ValueError(f"reward.judge={self.judge!r} is not valid; allowed: {_choices(JudgeMode)}")
        if self.judge != JudgeMode.NONE.value:
            if (self.judge_model_path is None) == (self.judge_url is None):
                raise ValueError(
                    f"reward.judge={self.judge!r} needs exactly one of reward.judge_model_path "
                    "or reward.judge_url"
                )
        if self.judge_url is not None and not self.judge_url.startswith(("http://", "https://")):
            raise ValueError(f"reward.judge_url must start with http:// or https://, got {self.judge_url!r}")
        if self.api_key_env is not None and not _ENV_NAME_RE.match(self.api_key_env):
            raise ValueError(
                "reward.api_key_env must be the NAME of an environment variable (letters, digits, _), "
                "not the key itself"
            )
        if not self.judge_timeout_s > 0:
            raise ValueError(f"reward.judge_timeout_s must be > 0, got {self.judge_timeout_s}")
        check_prompt_template(self.judge_prompt)
        if self.overlong not in _choices(OverlongPolicy):
            raise ValueError(
                f"reward.overlong={self.overlong!r} is not valid; allowed: {_choices(OverlongPolicy)}"
            )
        if self.overlong_buffer < 0:
            raise ValueError(f"reward.overlong_buffer must be >= 0, got {self.overlong_buffer}")
        if self.overlong == OverlongPolicy.SOFT_PENALTY.value and self.overlong_buffer <= 0:
            raise ValueError("reward.overlong='soft_penalty' needs reward.overlong_buffer > 0")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for saving (holds the env var name, never a secret)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RewardConfig:
        """Build from a dict, rejecting unknown keys with the list of valid ones."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown reward config keys {sorted(unknown)}; valid: {sorted(names)}")
        return cls(**d)
