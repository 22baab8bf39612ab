"""What to do with responses cut off at the global length limit.

Three policies (registry keyed by the str Enum :class:`OverlongPolicy`):

- ``zero`` (the UloRL paper's choice): a truncated response gets reward 0 and
  is trained on like any other.
- ``filter`` (DAPO overlong filtering): truncated responses are dropped from
  the batch (``keep_mask`` False); their rewards are left as they are. The
  paper found this made lengths grow fast.
- ``soft_penalty`` (DAPO soft overlong punishment): with
  ``L_exp = max_len - buffer_len``, a response of length ``L > L_exp`` gets
  ``-min(1, (L - L_exp) / buffer_len)`` *added* to its reward; truncation
  itself is not special-cased (a truncated response has ``L = max_len`` and
  gets the full -1). The paper found it no better than ``zero``.

Pure function on tensors; torch is imported on call so that importing
``ulorl.reward`` stays light (the reward workers import it too).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

__all__ = ["OverlongPolicy", "apply_overlong_policy"]


class OverlongPolicy(str, Enum):
    """Names of the overlong policies."""

    ZERO = "zero"
    FILTER = "filter"
    SOFT_PENALTY = "soft_penalty"


def _zero(rewards, lengths, truncated, max_len, buffer_len):
    return rewards.masked_fill(truncated, 0.0), None


def _filter(rewards, lengths, truncated, max_len, buffer_len):
    return rewards.clone(), ~truncated


def _soft_penalty(rewards, lengths, truncated, max_len, buffer_len):
    if buffer_len <= 0 or buffer_len > max_len:
        raise ValueError(f"soft_penalty needs 0 < buffer_len <= max_len, got {buffer_len} and {max_len}")
    expected = max_len - buffer_len
    excess = (lengths.to(rewards.dtype) - expected).clamp(min=0.0)
    return rewards - (excess / buffer_len).clamp(max=1.0), None


_POLICIES: dict[OverlongPolicy, Callable] = {
    OverlongPolicy.ZERO: _zero,
    OverlongPolicy.FILTER: _filter,
    OverlongPolicy.SOFT_PENALTY: _soft_penalty,
}


def apply_overlong_policy(
    policy: str | OverlongPolicy,
    rewards: Any,
    lengths: Any,
    truncated: Any,
    max_len: int,
    buffer_len: int = 0,
) -> tuple[Any, Any]:
    """Apply an overlong policy.

    Args:
        policy: ``"zero"``, ``"filter"`` or ``"soft_penalty"``.
        rewards: (N,) float rewards (tensor, array or list).
        lengths: (N,) response lengths in tokens.
        truncated: (N,) bool, True where the response hit the global limit.
        max_len: global maximum response length ``L_max``.
        buffer_len: soft-penalty buffer (used by ``soft_penalty`` only).

    Returns:
        ``(rewards, keep_mask)``: (N,) float32 tensor of new rewards (a new
        tensor, the input is not modified) and (N,) bool tensor, False for
        samples to drop.
    """
    import torch

    try:
        fn = _POLICIES[OverlongPolicy(policy)]
    except ValueError:
        valid = [p.value for p in OverlongPolicy]
        raise ValueError(f"unknown overlong policy {policy!r}; valid: {valid}") from None
    r = torch.as_tensor(rewards, dtype=torch.float32)
    lens = torch.as_tensor(lengths)
    trunc = torch.as_tensor(truncated, dtype=torch.bool)
    if not (r.shape == lens.shape == trunc.shape) or r.dim() != 1:
        raise ValueError(
            f"rewards, lengths, truncated must be 1-D of equal length, got {tuple(r.shape)}, "
            f"{tuple(lens.shape)}, {tuple(trunc.shape)}"
        )
    new_r, keep = fn(r, lens, trunc, int(max_len), int(buffer_len))
    if keep is None:
        keep = torch.ones_like(trunc)
    return new_r, keep
