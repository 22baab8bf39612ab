"""MPTs and DMMPTs: dynamic masking of well-mastered positive tokens (UloRL section 3.2).

- An **MPT** (mastered positive token) is a response token whose response has
  reward 1 and whose probability under the current policy is ``>= tau``.
- **DMMPTs** masks the MPTs of response ``i`` only when its mean token entropy
  ``H_i = (1/|o_i|) sum_t H_t`` is below the target entropy ``sigma``:
  ``I(i, t) = [H_i < sigma] * [t is an MPT]``. Masked tokens give no gradient;
  they still count in the loss denominator (Eq. 10, see ``loss.py``); the token
  entropies come from ``logprobs.py``.

Rewards are ``{0, 1}``; "reward 1" is tested as ``reward >= 1 - 1e-6`` to be
robust to float round-off. All outputs are boolean and carry no gradient.

``dmmt`` (not in the paper; an option, not the default) applies DMMPTs' rule to
the mastered tokens of every response, wrong ones included: in a low-entropy
response any token with probability ``>= tau`` gives no gradient. With a
worked-solution task the tokens of a wrong answer before its first slip are the
right answer's tokens; DMMPTs mask them in the right answers, and without this
the wrong answers' negative advantage alone pushes on them.

Deviations from the paper: none in the DMMPT rule itself. The paper computes the
entropy of the whole response; with segment rollout we compute it at training
time under the current policy over all the response's tokens (all segments),
which is exactly the paper's ``H_i`` for the policy being updated.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import torch
from torch import Tensor

from ulorl.algo._common import check_same_shape

_REWARD_ONE_TOL = 1e-6


class EntropyMaskMode(str, Enum):
    """`algo.entropy_mask`: which tokens give no gradient (keys of `ENTROPY_MASKS`)."""

    NONE = "none"  # train on all tokens (the paper's baseline)
    MPT = "mpt"  # mask all well-mastered positive tokens (the paper's Figure 4 ablation)
    DMMPT = "dmmpt"  # mask MPTs only while a response's mean entropy < sigma (UloRL)
    DMMT = "dmmt"  # DMMPTs' rule over the mastered tokens of every response, reward 0 too (not in the paper)


def response_mean_entropy(entropy: Tensor, response_mask: Tensor) -> Tensor:
    """Mean token entropy of each response, ``H_i`` of the paper.

    Args:
        entropy: ``(B, T)`` per-token full-vocabulary entropies.
        response_mask: ``(B, T)`` bool (or 0/1), True on response tokens.

    Returns:
        ``(B,)`` mean entropy over each response's tokens (detached); 0 for a
        response without tokens.
    """
    check_same_shape(entropy=entropy, response_mask=response_mask)
    mask = response_mask.to(entropy.dtype)
    total = (entropy.detach() * mask).sum(dim=-1)
    return total / mask.sum(dim=-1).clamp(min=1)


def mpt_mask(logprobs: Tensor, rewards: Tensor, response_mask: Tensor, tau: float) -> Tensor:
    """Mastered positive tokens.

    Args:
        logprobs: ``(B, T)`` log-prob of each sampled token under the current policy.
        rewards: ``(B,)`` reward of each response, in ``{0, 1}``.
        response_mask: ``(B, T)`` bool, True on response tokens.
        tau: probability threshold (paper: 0.99).

    Returns:
        ``(B, T)`` bool: reward-1 response, ``exp(logprob) >= tau``, response token.
    """
    check_same_shape(logprobs=logprobs, response_mask=response_mask)
    if rewards.shape != logprobs.shape[:1]:
        raise ValueError(f"rewards must be (B,)={tuple(logprobs.shape[:1])}, got {tuple(rewards.shape)}")
    positive = (rewards.detach() >= 1 - _REWARD_ONE_TOL).unsqueeze(-1)  # (B, 1)
    return positive & _mastered(logprobs, response_mask, tau)


def dmmpt_mask(
    logprobs: Tensor,
    entropy: Tensor,
    rewards: Tensor,
    response_mask: Tensor,
    tau: float,
    sigma: float,
) -> Tensor:
    """DMMPT mask: True = the token gives no gradient.

    Args:
        logprobs: ``(B, T)`` log-prob of each sampled token under the current policy.
        entropy: ``(B, T)`` per-token full-vocabulary entropy under the current policy.
        rewards: ``(B,)`` reward of each response, in ``{0, 1}``.
        response_mask: ``(B, T)`` bool, True on response tokens.
        tau: MPT probability threshold (paper: 0.99).
        sigma: target entropy (paper: 0.2); responses with mean entropy
            ``< sigma`` have their MPTs masked.

    Returns:
        ``(B, T)`` bool, True on the MPTs of low-entropy responses.
    """
    check_same_shape(logprobs=logprobs, entropy=entropy, response_mask=response_mask)
    return mpt_mask(logprobs, rewards, response_mask, tau) & _low_entropy(entropy, response_mask, sigma)


def dmmt_mask(logprobs: Tensor, entropy: Tensor, rewards: Tensor, response_mask: Tensor, tau: float, sigma: float
              ) -> Tensor:
    """DMMPTs' rule whatever the reward: True on the tokens with ``exp(logprob) >= tau`` of responses whose mean
    entropy is ``< sigma`` (shapes as :func:`dmmpt_mask`; ``rewards`` is not read)."""
    check_same_shape(logprobs=logprobs, entropy=entropy, response_mask=response_mask)
    return _mastered(logprobs, response_mask, tau) & _low_entropy(entropy, response_mask, sigma)


def _mastered(logprobs: Tensor, response_mask: Tensor, tau: float) -> Tensor:
    """``(B, T)`` bool: response tokens with ``exp(logprob) >= tau``."""
    return (logprobs.detach().exp() >= tau) & response_mask.bool()


def _low_entropy(entropy: Tensor, response_mask: Tensor, sigma: float) -> Tensor:
    """``(B, 1)`` bool: responses whose mean entropy is ``< sigma``."""
    return (response_mean_entropy(entropy, response_mask) < sigma).unsqueeze(-1)


def _no_mask(logprobs, entropy, rewards, response_mask, tau, sigma):
    return torch.zeros_like(response_mask, dtype=torch.bool)


def _mpt(logprobs, entropy, rewards, response_mask, tau, sigma):
    return mpt_mask(logprobs, rewards, response_mask, tau)


# entropy-control registry: (B,T) logprobs, entropy; (B,) rewards; (B,T) mask -> (B,T) bool, True = masked
ENTROPY_MASKS: dict[EntropyMaskMode, Callable[..., Tensor]] = {
    EntropyMaskMode.NONE: _no_mask,
    EntropyMaskMode.MPT: _mpt,
    EntropyMaskMode.DMMPT: dmmpt_mask,
    EntropyMaskMode.DMMT: dmmt_mask,
}
