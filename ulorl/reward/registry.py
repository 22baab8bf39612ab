"""Reward functions by name: built-ins (a str Enum) and user ``module:function``.

Built-ins:

- ``rule``: extract the final answer, then math-verify equivalence with the
  reference (in the killable worker pool). Reward in {0, 1}.
- ``exact``: extract the final answer, then compare normalised strings
  (strip, no whitespace, no ``$``) in the trainer process. Reward in {0, 1}.
  Enough for the built-in integer task and much cheaper.

A user function follows verl's signature
``compute_score(data_source, solution_str, ground_truth, extra_info=None)``
and returns a float or a dict with a ``"score"`` key. It receives the whole
response and runs in the worker pool with the same hard deadline as ``rule``.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

from ulorl.reward.pool import resolve_function

__all__ = ["BuiltinReward", "UserRewardFn", "call_user_fn", "parse_reward_fn", "score_from_result"]


class BuiltinReward(str, Enum):
    """Names of the built-in reward functions."""

    RULE = "rule"
    EXACT = "exact"


class UserRewardFn(str):
    """A ``module:function`` reference to a verl-style ``compute_score``."""


def parse_reward_fn(name: str, *, check_import: bool = True) -> BuiltinReward | UserRewardFn:
    """Resolve a reward-function name.

    ``"rule"`` / ``"exact"`` give a :class:`BuiltinReward`; ``"pkg.mod:fn"`` gives a
    :class:`UserRewardFn` (imported once here when ``check_import`` so that a typo
    fails at start-up, not in a worker). Anything else raises ``ValueError``
    listing the valid names.
    """
    if isinstance(name, BuiltinReward):
        return name
    if ":" in name:
        module_name, _, attr = name.partition(":")
        if not module_name or not attr:
            raise ValueError(f"user reward function must look like 'module:function', got {name!r}")
        if check_import:
            try:
                resolve_function(name)
            except (ImportError, AttributeError, TypeError) as e:
                raise ValueError(f"cannot load user reward function {name!r}: {e}") from e
        return UserRewardFn(name)
    try:
        return BuiltinReward(name)
    except ValueError:
        valid = [b.value for b in BuiltinReward]
        raise ValueError(
            f"unknown reward function {name!r}; valid: {valid} or 'module:function'"
        ) from None


def score_from_result(result: Any) -> float:
    """Turn a user function's return value (number or ``{"score": ...}``) into a float."""
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"reward dict has no 'score' key (keys: {sorted(result)[:10]})")
        result = result["score"]
    if isinstance(result, bool):
        return float(result)
    value = float(result)
    if not math.isfinite(value):
        raise ValueError(f"reward is not finite: {value}")
    return value


def call_user_fn(
    ref: str, data_source: str | None, solution_str: str, ground_truth: str, extra_info: Any
) -> float:
    """Worker-side entry point: call the user function ``ref`` and return its score."""
    fn = _USER_FN_CACHE.get(ref)
    if fn is None:
        fn = _USER_FN_CACHE[ref] = resolve_function(ref)
    return score_from_result(fn(data_source, solution_str, ground_truth, extra_info))


_USER_FN_CACHE: dict[str, Any] = {}
