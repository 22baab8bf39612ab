"""Rewards for verifiable answers: extraction, rule verifier, generative judge, overlong policy.

Public API::

    from ulorl.reward import RewardManager
    from ulorl.config import RewardConfig
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

from ulorl.lazy_exports import lazy_exports

# public name -> the submodule that defines it, imported on first use (see ulorl/lazy_exports.py)
_EXPORTS = {
    "apply_overlong_policy": "overlong",
    "BuiltinReward": "registry",
    "extract_answer": "extract",
    "Extractor": "extract",
    "GenerativeVerifier": "judge",
    "JudgeMode": "judge",
    "load_function": "registry",
    "OverlongPolicy": "overlong",
    "parse_verdict": "judge",
    "register_extractor": "extract",
    "RewardError": "terms",
    "RewardFunctionError": "terms",
    "RewardManager": "manager",
    "RewardScores": "manager",
    "RewardStyle": "registry",
    "RewardValueError": "terms",
    "RuleVerifier": "rule",
    "Status": "rule",
    "Verdict": "rule",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
