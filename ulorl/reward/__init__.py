"""Rewards for verifiable answers: extraction, rule verifier, generative judge, overlong policy.

Public API::

    from ulorl.reward import RewardConfig, RewardManager
    with RewardManager(RewardConfig(fn="rule", timeout_s=5.0)) as rm:
        rewards = rm.score(responses, ground_truths, data_sources)
        rm.metrics()  # {"reward/timeouts": ..., "reward/errors": ..., "timing_s/reward": ...}

Lower-level pieces: :class:`RuleVerifier` (math-verify in killable worker
processes), :class:`GenerativeVerifier` (LLM judge, local HF model or an
OpenAI-compatible endpoint), :func:`extract_answer`, :func:`apply_overlong_policy`.
See ``docs/rewards.md``. Importing this package does not import torch,
transformers or math-verify (they load on first use).
"""

from ulorl.reward.config import RewardConfig
from ulorl.reward.extract import Extractor, extract_answer, register_extractor
from ulorl.reward.judge import GenerativeVerifier, JudgeMode, parse_verdict
from ulorl.reward.manager import RewardManager
from ulorl.reward.overlong import OverlongPolicy, apply_overlong_policy
from ulorl.reward.registry import BuiltinReward
from ulorl.reward.rule import RuleVerifier, Status, Verdict

__all__ = [
    "BuiltinReward",
    "Extractor",
    "GenerativeVerifier",
    "JudgeMode",
    "OverlongPolicy",
    "RewardConfig",
    "RewardManager",
    "RuleVerifier",
    "Status",
    "Verdict",
    "apply_overlong_policy",
    "extract_answer",
    "parse_verdict",
    "register_extractor",
]
