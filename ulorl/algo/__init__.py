"""Pure tensor functions of the UloRL algorithm (no config objects inside).

- :mod:`~ulorl.algo.advantage`: GRPO group advantages.
- :mod:`~ulorl.algo.entropy_mask`: MPTs and DMMPTs.
- :mod:`~ulorl.algo.logprobs`: chunked log-probs and full-vocabulary token entropy.
- :mod:`~ulorl.algo.importance`: TOIS / POIS / SAIS (+ ours: pois_tis,
  mask_stale) and the POIS bias diagnostic.
- :mod:`~ulorl.algo.loss`: clipped surrogate with Eq. 10 aggregation.
- :mod:`~ulorl.algo.dynamic_sampling`: dynamic-sampling filter.

See docs/algorithm.md for the equations and our deviations from the paper.
"""

from ulorl.algo.advantage import group_advantages
from ulorl.algo.dynamic_sampling import dynamic_sampling
from ulorl.algo.entropy_mask import dmmpt_mask, mpt_mask, response_mean_entropy
from ulorl.algo.importance import (
    ISMode,
    StaleTokenPolicy,
    old_logprobs,
    pois_bias_by_age,
    stale_token_policy,
)
from ulorl.algo.logprobs import chunked_logprobs_entropy
from ulorl.algo.loss import AggMode, aggregate_loss, policy_loss

__all__ = [
    "AggMode",
    "ISMode",
    "StaleTokenPolicy",
    "aggregate_loss",
    "chunked_logprobs_entropy",
    "dmmpt_mask",
    "dynamic_sampling",
    "group_advantages",
    "mpt_mask",
    "old_logprobs",
    "pois_bias_by_age",
    "policy_loss",
    "response_mean_entropy",
    "stale_token_policy",
]
