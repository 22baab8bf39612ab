"""Configuration of the reward stage (one dataclass, validated on construction).

Secrets: the judge endpoint's API key is never part of the config. The config
holds only the *name* of the environment variable (``api_key_env``) that
contains it, so ``repr(cfg)``, ``cfg.to_dict()``, saved YAML and logs can never
leak it. ``api_key_env`` must look like an environment variable name, which
also catches a key pasted into it by mistake.

A leaf of the config layer (see ``ulorl/config/__init__.py``): it imports only the reward
registries that name the valid choices (``registry``, ``extract``, ``judge``,
``overlong``), never the reward workers. Every error is a ``ConfigError``; build
from a mapping with ``ulorl.config.loader.build(RewardConfig, d, "reward.")``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ulorl.config.checks import share
from ulorl.config.loader import ConfigError, build, check_choice, check_field_types
from ulorl.reward.extract import EXTRACTORS
from ulorl.reward.judge import DEFAULT_JUDGE_PROMPT, JudgeMode, check_prompt_template
from ulorl.reward.overlong import OverlongPolicy
from ulorl.reward.registry import (BuiltinReward, RewardStyle, batch_needs, check_signature, detect_style,
                                  load_function, parse_reward_fn)

__all__ = ["RewardConfig", "RewardFnConfig"]

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def default_name(fn: Any) -> str:
    """Metric name of a reward function: the built-in's name or the function's own name."""
    if callable(fn):
        return getattr(fn, "__name__", type(fn).__name__)
    return str(fn).rpartition(":")[2] if ":" in str(fn) else str(fn)


def check_fn(fn: Any, style: str, key: str) -> None:
    """Load a user function and check its signature now (``ulorl config`` and start-up), naming ``key``.

    The same load, style detection and signature check as ``reward.terms.resolve_callable`` (which builds the
    term later), done here with the registry's functions so the config imports no worker machinery."""
    if callable(fn):
        check_signature(fn, detect_style(fn, style, default_name(fn)), default_name(fn))
        return
    if not isinstance(fn, str) or not fn:
        raise ConfigError(f"{key} must be a built-in name, 'module:function' or 'path/to/file.py:function', "
                          f"got {fn!r}")
    if fn.startswith("<") and fn.endswith(" object>"):  # `to_dict`'s stand-in for a callable object
        raise _code_only(key, fn, "a callable object passed in code")
    if ":" not in fn:
        check_choice(key, fn, BuiltinReward, also="'module:function' or 'path/to/file.py:function'")
        return
    try:
        parse_reward_fn(fn)  # imports it: a typo fails here, not in a worker
        obj = load_function(fn)
        check_signature(obj, detect_style(obj, style, fn), fn)
    except ValueError as e:
        module, _, qualname = fn.rpartition(":")
        if module == "__main__":  # loadable only from the script that defines it
            raise _code_only(key, fn, "a function of the script that ran the training") from None
        if "<lambda>" in qualname or "<locals>" in qualname:
            raise _code_only(key, fn, "a lambda or a function defined inside another function") from None
        raise ConfigError(f"{key}: {e}") from None


def _code_only(key: str, fn: str, what: str) -> ConfigError:
    """The error for a saved config's reward reference that only the code that ran could load (`to_dict` writes a
    callable passed in code as `module:qualname`, another callable object as `<type object>`)."""
    return ConfigError(f"{key}={fn!r} names {what}, which a config cannot load: give it to Trainer(reward_funcs=...) "
                       "again, or move it into a file and name it 'path/to/file.py:function'")


@dataclass
class RewardFnConfig:
    """One weighted reward function of ``reward.fns``."""

    fn: str = "rule"
    """A built-in (``rule``, ``exact``), ``module:function`` or ``path/to/file.py:function`` (or a callable in code)."""
    weight: float = 1.0
    """Its weight in the summed reward."""
    name: str | None = None
    """Metric name (``rewards/<name>/mean``); default: the built-in's or the function's name."""
    style: str = "auto"
    """``auto`` (from the signature), ``verl`` (per sample) or ``batch`` (TRL: ``fn(completions, **columns)``)."""
    min: float | None = None
    """Declared lowest reward: a lower one stops the run with an error naming the function and sample."""
    max: float | None = None
    """Declared highest reward (same check)."""

    def __post_init__(self) -> None:
        check_field_types(self, "", skip=("fn",))
        check_choice("style", self.style, RewardStyle)
        if not math.isfinite(self.weight):
            raise ConfigError(f"weight must be finite, got {self.weight}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ConfigError(f"min={self.min} > max={self.max}")
        if self.name is None:
            self.name = default_name(self.fn)
        check_fn(self.fn, self.style, "fn")


@dataclass
class RewardConfig:
    """How responses are scored."""

    fn: str = "rule"
    """Reward function: a built-in (``rule``, ``exact``), ``module:function`` or ``path/to/file.py:function``."""
    fns: list[RewardFnConfig] = field(default_factory=list)
    """Several weighted reward functions (summed); when set, ``fn`` must stay ``rule`` and is ignored."""
    max_error_frac: float = 0.5
    """Stop the run when a reward function raised on more than this share of its last 32 samples (1.0: never)."""
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
        self.fns = [build(RewardFnConfig, f, f"reward.fns[{i}].") if isinstance(f, dict) else f
                    for i, f in enumerate(self.fns)]
        check_field_types(self, "reward.", skip=("fn",))
        if self.fns:
            if self.fn != BuiltinReward.RULE.value:
                raise ConfigError(f"reward.fn={self.fn!r} and reward.fns are both set: set either reward.fn or "
                                  "reward.fns, not both")
            names = [f.name for f in self.fns]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ConfigError(f"reward.fns: names {dup} appear twice; give each entry its own 'name'")
        else:
            check_fn(self.fn, RewardStyle.AUTO.value, "reward.fn")
        share("reward.max_error_frac", self.max_error_frac)
        if not self.timeout_s > 0:
            raise ConfigError(f"reward.timeout_s must be > 0, got {self.timeout_s}")
        if not self.startup_timeout_s > 0:
            raise ConfigError(f"reward.startup_timeout_s must be > 0, got {self.startup_timeout_s}")
        if self.num_workers < 1:
            raise ConfigError(f"reward.num_workers must be >= 1, got {self.num_workers}")
        if self.max_answer_chars < 1:
            raise ConfigError(f"reward.max_answer_chars must be >= 1, got {self.max_answer_chars}")
        for source, name in self.extractors.items():
            check_choice(f"reward.extractors[{source!r}]", name, sorted(EXTRACTORS))
        check_choice("reward.judge", self.judge, JudgeMode)
        if self.judge != JudgeMode.NONE.value:
            if (self.judge_model_path is None) == (self.judge_url is None):
                raise ConfigError(
                    f"reward.judge={self.judge!r} needs exactly one of reward.judge_model_path "
                    "or reward.judge_url"
                )
        if self.judge_url is not None and not self.judge_url.startswith(("http://", "https://")):
            raise ConfigError(f"reward.judge_url must start with http:// or https://, got {self.judge_url!r}")
        if self.api_key_env is not None and not _ENV_NAME_RE.match(self.api_key_env):
            raise ConfigError(
                "reward.api_key_env must be the NAME of an environment variable (letters, digits, _), "
                "not the key itself"
            )
        if not self.judge_timeout_s > 0:
            raise ConfigError(f"reward.judge_timeout_s must be > 0, got {self.judge_timeout_s}")
        try:
            check_prompt_template(self.judge_prompt)
        except ValueError as e:
            raise ConfigError(f"reward.judge_prompt: {e}") from None
        check_choice("reward.overlong", self.overlong, OverlongPolicy)
        if self.overlong_buffer < 0:
            raise ConfigError(f"reward.overlong_buffer must be >= 0, got {self.overlong_buffer}")
        if self.overlong == OverlongPolicy.SOFT_PENALTY.value and self.overlong_buffer <= 0:
            raise ConfigError("reward.overlong='soft_penalty' needs reward.overlong_buffer > 0")

    def functions(self) -> list[RewardFnConfig]:
        """The reward functions to sum: ``fns``, or ``fn`` alone with weight 1."""
        return list(self.fns) or [RewardFnConfig(fn=self.fn)]

    def check_rows(self, rows: Sequence[Any], source: str) -> None:
        """Every row of `source` (`PromptRecord`s) holds the `extra_info` keys that a batch function requires
        (`batch_needs`: parameters ulorl passes from those keys, as TRL passes a dataset's columns); else a
        `ConfigError` naming the function's key, the parameters and the first row without them."""
        for i, f in enumerate(self.functions()):
            if not callable(f.fn) and ":" not in str(f.fn):  # a built-in
                continue
            obj = f.fn if callable(f.fn) else load_function(f.fn)
            if detect_style(obj, f.style, default_name(obj)) is not RewardStyle.BATCH or not batch_needs(obj):
                continue
            for row in rows:
                have = row.extra_info if isinstance(row.extra_info, dict) else {}
                missing = [k for k in batch_needs(obj) if k not in have]
                if missing:
                    raise ConfigError(
                        f"{f'reward.fns[{i}].fn' if self.fns else 'reward.fn'}: reward function "
                        f"{default_name(obj)!r} (style batch) requires {missing}, which ulorl passes from the rows' "
                        f"extra_info keys; row {row.prompt_id} of {source} has none such (its extra_info keys: "
                        f"{sorted(have) or 'none'}): add them to the data, or give those parameters defaults")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for saving (holds the env var name, never a secret)."""
        return dataclasses.asdict(self)
