"""Chunked log-prob and entropy of sampled tokens, without the full `(T, V)` logits.

For long responses the float32 logits of every position (T x V) dominate memory
(128k x 152k x 4 B = 78 GB). We project hidden states to logits one chunk of
positions at a time; under autograd each chunk is wrapped in activation
checkpointing, so its logits are recomputed in backward instead of kept. Peak
logits memory is `chunk x V`, independent of T.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from ulorl.algo import token_entropy


def _chunk_fn(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
              temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    lp = logp.gather(-1, targets[:, None]).squeeze(-1)
    with torch.no_grad():
        ent = token_entropy(logits.detach())
    return lp, ent


def chunked_logprobs_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                             temperature: float = 1.0, chunk: int = 1024,
                             bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and full-vocabulary entropies of `softmax(hidden @ weight.T / temperature)`.

    Args:
        hidden: `(N, H)` hidden states that predict each target (N positions, any batch layout).
        weight: `(V, H)` output projection (the LM head); `bias` `(V,)` or None.
        targets: `(N,)` long, the sampled tokens.
    Returns:
        logprobs `(N,)` (differentiable w.r.t. hidden and weight), entropy `(N,)` (detached).
    """
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} positions, targets {targets.shape[0]}")
    lps, ents = [], []
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    for lo in range(0, hidden.shape[0], chunk):
        h, t = hidden[lo : lo + chunk], targets[lo : lo + chunk]
        if grad:
            lp, ent = checkpoint(_chunk_fn, h, weight, bias, t, temperature, use_reentrant=False)
        else:
            lp, ent = _chunk_fn(h, weight, bias, t, temperature)
        lps.append(lp)
        ents.append(ent)
    if not lps:
        z = hidden.new_zeros(0, dtype=torch.float32)
        return z, z
    return torch.cat(lps), torch.cat(ents)
