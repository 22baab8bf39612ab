"""Vectorised token sampling with temperature, top-k and top-p (no per-sample loops)."""

from __future__ import annotations

import torch

from ulorl.rollout.engines.base import SamplingParams


def sample_tokens(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    Args:
        logits: `(B, V)` raw next-token logits.
    Returns:
        tokens `(B,)` long, and their behaviour log-probs `(B,)`:
        `log_softmax(logits / temperature)` of the chosen token, before filtering.
    """
    scaled = logits.float() / params.temperature
    logp = torch.log_softmax(scaled, dim=-1)
    if params.greedy:
        tok = scaled.argmax(dim=-1)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
    filtered = scaled
    if params.top_k > 0 and params.top_k < scaled.shape[-1]:
        kth = torch.topk(filtered, params.top_k, dim=-1).values[:, -1:]
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, idx = torch.sort(filtered, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (probs.cumsum(-1) - probs) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    probs = torch.softmax(filtered, dim=-1)
    tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
