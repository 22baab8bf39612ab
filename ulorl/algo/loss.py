"""Clipped policy-gradient loss with DMMPT masking and token-level aggregation (UloRL Eq. 10).

Per token, with ``r_t = exp(logprob_t - old_logprob_t)``::

    l_t = -min(r_t * A, clip(r_t, 1 - eps_low, 1 + eps_high) * A)      (DAPO clip-higher)
    l_t = 0                                   where the DMMPT mask (or extra_mask) is True
    l_t = w_t * l_t                           with optional detached token_weights (pois_tis)

``token-mean`` aggregation (Eq. 10) is ``sum_{i,t} l_t / sum_i |o_i|``: the
denominator counts *all* response tokens, masked ones included, so masking a
token removes its gradient without re-weighting the others. Pass
``num_tokens`` = the number of response tokens of the whole (global) batch to
make gradient accumulation over micro-batches equal one full-batch step.

Aggregation registry (:class:`AggMode`):

- ``token-mean``: ``sum l / num_tokens`` (default ``num_tokens`` = response tokens here).
- ``seq-mean-token-mean``: mean over sequences of each sequence's token mean.
- ``seq-mean-token-sum``: mean over sequences of each sequence's token sum.
For the ``seq-*`` modes ``num_tokens``, when given, is the number of
*sequences* of the global batch (the divisor of the sum over sequences).

Deviations / choices (ours): no KL term (as the paper). ``log r`` is clamped
to ``[-20, 20]`` before ``exp`` (as verl) so a drifted SAIS ratio cannot
overflow. ``approx_kl`` is the k3 estimator ``(r - 1) - log r`` of
``KL(pi_old || pi_theta)`` averaged over response tokens (non-negative, low
variance); with POIS/TOIS it is exactly 0 at the first update.
``pg_clipfrac`` counts response tokens (masked ones included) whose clipped
branch is active; ``pg_clipfrac_lower`` / ``pg_clipfrac_upper`` split it by side.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import torch
from torch import Tensor

from ulorl.algo._common import check_same_shape, parse_mode

_LOG_RATIO_CLAMP = 20.0


class AggMode(str, Enum):
    """How per-token losses ``(B, T)`` are reduced to a scalar."""

    TOKEN_MEAN = "token-mean"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"


def _token_mean(loss_mat: Tensor, mask: Tensor, num_tokens: float | None) -> Tensor:
    denom = mask.sum().clamp(min=1) if num_tokens is None else num_tokens
    return (loss_mat * mask).sum() / denom


def _seq_mean_token_mean(loss_mat: Tensor, mask: Tensor, num_seqs: float | None) -> Tensor:
    seq = (loss_mat * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)  # (B,)
    return seq.sum() / (loss_mat.shape[0] if num_seqs is None else num_seqs)


def _seq_mean_token_sum(loss_mat: Tensor, mask: Tensor, num_seqs: float | None) -> Tensor:
    seq = (loss_mat * mask).sum(dim=-1)  # (B,)
    return seq.sum() / (loss_mat.shape[0] if num_seqs is None else num_seqs)


_AGGREGATORS: dict[AggMode, Callable[[Tensor, Tensor, float | None], Tensor]] = {
    AggMode.TOKEN_MEAN: _token_mean,
    AggMode.SEQ_MEAN_TOKEN_MEAN: _seq_mean_token_mean,
    AggMode.SEQ_MEAN_TOKEN_SUM: _seq_mean_token_sum,
}


def aggregate_loss(
    loss_mat: Tensor,
    response_mask: Tensor,
    agg: str | AggMode = "token-mean",
    num_tokens: float | None = None,
) -> Tensor:
    """Reduce per-token losses to a scalar.

    Args:
        loss_mat: ``(B, T)`` per-token losses (already 0 where masked by DMMPTs).
        response_mask: ``(B, T)`` bool, True on response tokens (the
            denominators count these, masked DMMPTs included).
        agg: one of :class:`AggMode`.
        num_tokens: global denominator: response tokens (``token-mean``) or
            sequences (``seq-*``) of the whole batch; default: this batch's.

    Returns:
        ``()`` scalar loss.
    """
    check_same_shape(loss_mat=loss_mat, response_mask=response_mask)
    if num_tokens is not None and num_tokens <= 0:
        raise ValueError(f"num_tokens must be > 0, got {num_tokens}")
    mask = response_mask.to(loss_mat.dtype)
    return _AGGREGATORS[parse_mode(AggMode, agg)](loss_mat, mask, num_tokens)


def _masked_mean(x: Tensor, mask: Tensor, count: Tensor) -> float:
    """Mean of ``x`` ``(B, T)`` over ``mask`` ``(B, T)`` bool, given the mask's count."""
    return float(torch.where(mask, x, torch.zeros_like(x)).sum() / count)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    dmmpt_mask: Tensor | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    agg: str | AggMode = "token-mean",
    num_tokens: float | None = None,
    token_weights: Tensor | None = None,
    extra_mask: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped surrogate loss of UloRL Eq. 10 (DAPO clip-higher, no KL).

    Args:
        logprobs: ``(B, T)`` log-probs of the sampled tokens under the current
            policy (carries the gradient).
        old_logprobs: ``(B, T)`` log pi_old (detached here), see
            :func:`ulorl.algo.old_logprobs`.
        advantages: ``(B,)`` per response, or ``(B, T)`` per token.
        response_mask: ``(B, T)`` bool, True on response tokens.
        dmmpt_mask: ``(B, T)`` bool, True = token masked (no gradient, still
            counted in the denominator); see :func:`ulorl.algo.dmmpt_mask`.
        eps_low: lower clip range, ratio floor ``1 - eps_low``.
        eps_high: upper clip range, ratio ceiling ``1 + eps_high``.
        agg: loss aggregation, one of :class:`AggMode`.
        num_tokens: global denominator for gradient accumulation (response
            tokens for ``token-mean``, sequences for ``seq-*``).
        token_weights: ``(B, T)`` optional detached multiplier of the per-token
            loss (``pois_tis`` importance weights).
        extra_mask: ``(B, T)`` optional bool, True = no gradient for another
            reason (``mask_stale``); counted in the denominator like DMMPTs.

    Returns:
        ``(loss, metrics)``: ``()`` scalar loss and a dict of python floats:
        ``pg_loss``, ``pg_clipfrac`` (+ ``_lower`` / ``_upper``), ``mask_ratio``
        (DMMPT-masked / response tokens), ``extra_mask_ratio``, ``approx_kl``
        (k3), ``ratio_mean``, ``ratio_max``, ``token_weight_mean``.
    """
    check_same_shape(
        logprobs=logprobs, old_logprobs=old_logprobs, response_mask=response_mask,
        dmmpt_mask=dmmpt_mask, token_weights=token_weights, extra_mask=extra_mask,
    )
    if advantages.dim() == 1:
        if advantages.shape[0] != logprobs.shape[0]:
            raise ValueError(f"advantages (B,) must have B={logprobs.shape[0]}, got {advantages.shape[0]}")
        advantages = advantages.unsqueeze(-1)  # (B, 1), broadcast over T
    elif advantages.shape != logprobs.shape:
        raise ValueError(f"advantages must be (B,) or (B, T), got {tuple(advantages.shape)}")
    mask = response_mask.bool()
    adv = torch.where(mask, advantages.detach().to(logprobs.dtype), 0.0)  # (B, T)

    # Zero the log-ratio outside the response first, so garbage (even -inf/NaN)
    # log-probs on padding can never leak NaN into the loss or the gradient.
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), torch.zeros_like(logprobs))
    log_ratio = log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()  # (B, T)
    surr = ratio * adv
    surr_clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.minimum(surr, surr_clipped)  # (B, T)

    keep = mask
    if dmmpt_mask is not None:
        keep = keep & ~dmmpt_mask.bool()
    if extra_mask is not None:
        keep = keep & ~extra_mask.bool()
    if token_weights is not None:
        per_token = per_token * token_weights.detach().to(per_token.dtype)
    loss_mat = torch.where(keep, per_token, torch.zeros_like(per_token))
    loss = aggregate_loss(loss_mat, mask, agg, num_tokens)

    with torch.no_grad():
        count = mask.sum().clamp(min=1).to(ratio.dtype)
        f = ratio.dtype
        clipped = surr_clipped < surr  # the clipped branch is the min
        lower = clipped & (ratio < 1.0 - eps_low)
        upper = clipped & (ratio > 1.0 + eps_high)
        k3 = (ratio - 1.0) - log_ratio  # >= 0, estimates KL(pi_old || pi_theta)
        metrics = {
            "pg_loss": float(loss.detach()),
            "pg_clipfrac": _masked_mean(clipped.to(f), mask, count),
            "pg_clipfrac_lower": _masked_mean(lower.to(f), mask, count),
            "pg_clipfrac_upper": _masked_mean(upper.to(f), mask, count),
            "mask_ratio": 0.0 if dmmpt_mask is None else _masked_mean(dmmpt_mask.to(f), mask, count),
            "extra_mask_ratio": 0.0 if extra_mask is None else _masked_mean(extra_mask.to(f), mask, count),
            "approx_kl": _masked_mean(k3, mask, count),
            "ratio_mean": _masked_mean(ratio, mask, count),
            "ratio_max": float(torch.where(mask, ratio, torch.zeros_like(ratio)).max()) if mask.any() else 0.0,
            "token_weight_mean": (
                1.0 if token_weights is None else _masked_mean(token_weights.detach().to(f), mask, count)
            ),
        }
    return loss, metrics
