"""Full-vocabulary token entropy (UloRL Eq. 8, inner sum).

``H_t = -sum_j p_tj log p_tj`` with ``p_t = softmax(logits_t / temperature)``.
Log-probs, ratios and entropies are all computed from logits divided by the
sampling temperature, as verl does (SPEC section 5).

Numerical care: the computation goes through ``log_softmax`` in at least
float32 (bf16/fp16 inputs are upcast), and the ``p log p`` term is set to 0
wherever ``p == 0``, so logits of magnitude ``1e30`` or entries equal to
``-inf`` (e.g. vocabulary masking) never produce ``0 * -inf = NaN``. A row
whose logits are all ``-inf`` has no distribution; it gets entropy 0.

Deviations from the paper: none. The learner is expected to call this on
chunks of logits (the ``(..., V)`` tensor is materialised a few times).
"""

from __future__ import annotations

import torch
from torch import Tensor


def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy of ``softmax(logits / temperature)`` over the last dimension.

    Args:
        logits: ``(..., V)``, e.g. ``(B, T, V)``.
        temperature: sampling temperature (> 0).

    Returns:
        ``(...)`` entropies in nats, e.g. ``(B, T)``; dtype float32 or wider
        (float64 inputs stay float64). Differentiable.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    dtype = torch.promote_types(logits.dtype, torch.float32)
    z = logits.to(dtype)
    if temperature != 1.0:
        z = z / temperature
    logp = torch.log_softmax(z, dim=-1)
    p = logp.exp()
    # Entries with p == 0 (underflow or a -inf logit) contribute exactly 0. Both
    # factors are replaced *before* multiplying so neither the forward
    # (0 * -inf) nor the backward (grad * -inf) can produce NaN; rows of all
    # -inf (NaN after log_softmax) fail ``p > 0`` too and get entropy 0.
    live = p > 0
    zero = torch.zeros_like(p)
    p_logp = torch.where(live, p, zero) * torch.where(live, logp, zero)
    return -p_logp.sum(dim=-1)
