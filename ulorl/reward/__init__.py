"""Rewards for verifiable answers: extraction, rule verifier, generative judge, overlong policy.

Public API::

    from ulorl.reward import RewardConfig, RewardManager
    with RewardManager(RewardConfig(fn="rule", timeout_s=5.0)) as rm:
        rewards = rm.score(responses, ground_truths, data_sources)
        rm.metrics()  # {"reward/timeouts": ..., "rewards/rule/mean": ..., "timing_s/reward_score": ...}

Several weighted functions: ``RewardConfig(fns=[RewardFnConfig("rule"),
RewardFnConfig("my_rewards.py:format_reward", weight=0.2, max=1.0)])``; a
user function may be verl-style (per sample) or TRL-style (per batch).

Lower-level pieces: :class:`RuleVerifier` (math-verify in killable worker
processes), :class:`GenerativeVerifier` (LLM judge, local HF model or an
OpenAI-compatible endpoint), :func:`extract_answer`, :func:`apply_overlong_policy`.
See ``docs/rewards.md``. Importing this package does not import torch,
transformers or math-verify (they load on first use).
"""

from ulorl.reward.config import RewardConfig, RewardFnConfig
from ulorl.reward.extract import Extractor, extract_answer, register_extractor
from ulorl.reward.judge import GenerativeVerifier, JudgeMode, parse_verdict
from ulorl.reward.manager import RewardManager
from ulorl.reward.overlong import OverlongPolicy, apply_overlong_policy
from ulorl.reward.registry import BuiltinReward, RewardStyle, load_function
from ulorl.reward.rule import RuleVerifier, Status, Verdict
from ulorl.reward.terms import RewardError, RewardFunctionError, RewardValueError

__all__ = [
    "BuiltinReward",
    "Extractor",
    "GenerativeVerifier",
    "JudgeMode",
    "OverlongPolicy",
    "RewardConfig",
    "RewardError",
    "RewardFnConfig",
    "RewardFunctionError",
    "RewardManager",
    "RewardStyle",
    "RewardValueError",
    "RuleVerifier",
    "Status",
    "Verdict",
    "apply_overlong_policy",
    "extract_answer",
    "load_function",
    "parse_verdict",
    "register_extractor",
]
