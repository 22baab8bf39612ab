"""Token sampling with temperature, top-k and top-p, vectorised, with one random stream per row.

Each row's random number for its t-th new token is a hash of (call seed, row index, t), not a draw from a
shared generator, so what a row samples does not depend on which other rows share its batch: a preempted
and resumed row, a row admitted later, or a different `max_batch` give the same tokens (up to float
rounding of the logits). The draw is inverse-CDF sampling of the filtered distribution, on the logits'
device, with no host synchronisation.
"""

from __future__ import annotations

import numpy as np
import torch

from ulorl.rollout.engines.base import SamplingParams

_MASK32 = 0xFFFFFFFF


def _mix32(x: np.ndarray) -> np.ndarray:
    """A 32-bit integer hash (lowbias32), on uint64 arrays (products wrap mod 2^64; only their low 32 bits are kept)."""
    x = x & _MASK32
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & _MASK32
    x = ((x ^ (x >> 15)) * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def row_uniforms(seed: int, rows, steps, device: torch.device | str | None = None) -> torch.Tensor:
    """Uniform numbers in [0, 1) `(B,)` float64, a function of (seed, rows[i], steps[i]) only.

    rows, steps: `(B,)` non-negative integers (lists or tensors). Computed in numpy on the host (a few dozen
    integer ops over B numbers: torch's per-op overhead made this ~5% of a small model's decode step), returned
    on `device` (default: rows' device when it is a tensor, else CPU)."""
    if device is None:
        device = rows.device if isinstance(rows, torch.Tensor) else "cpu"
    r = np.asarray(rows.cpu() if isinstance(rows, torch.Tensor) else rows, dtype=np.uint64)
    t = np.asarray(steps.cpu() if isinstance(steps, torch.Tensor) else steps, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = _mix32(np.uint64(seed & _MASK32) ^ _mix32(r + np.uint64(0x9E3779B9 * ((seed >> 32) & 0xFF))))
        h = _mix32(h ^ _mix32(t * np.uint64(0x632BE5AB) + np.uint64(0x85EBCA6B)))
        lo = _mix32(h + np.uint64(0x27D4EB2F))
    u = ((h >> np.uint64(5)).astype(np.float64) * 67108864.0 + (lo >> np.uint64(6)).astype(np.float64)) \
        / 9007199254740992.0  # 53 random bits
    return torch.from_numpy(u).to(device)


def filter_logits(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """`(N, V)` temperature-scaled logits with the tokens outside top-k, then outside the top-p nucleus, set to
    -inf: `softmax` of the result is the distribution that `sample_tokens` draws from (top_k <= 0: no top-k)."""
    filtered = scaled
    if 0 < top_k < scaled.shape[-1]:
        kth = torch.topk(filtered, top_k, dim=-1).values[:, -1:]
        filtered = filtered.masked_fill(filtered < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, idx = torch.sort(filtered, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    return filtered


def sample_tokens(logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor | None = None,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    Args:
        logits: `(B, V)` raw next-token logits (any float dtype; computed in float32).
        uniforms: `(B,)` the rows' random numbers (`row_uniforms`); None: drawn from `generator`.
    Returns:
        tokens `(B,)` long, and their behaviour log-probs `(B,)` float32:
        `log_softmax(logits / temperature)` of the chosen token, before filtering.
    """
    scaled = logits.float() / params.temperature
    logp = torch.log_softmax(scaled, dim=-1)
    if params.greedy:
        tok = scaled.argmax(dim=-1)
        return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
    probs = torch.softmax(filter_logits(scaled, params.top_k, params.top_p), dim=-1)
    if uniforms is None:
        uniforms = torch.rand(probs.shape[0], generator=generator, dtype=torch.float64, device=probs.device)
    cdf = probs.double().cumsum(-1)
    u = uniforms.to(cdf.device)[:, None] * cdf[:, -1:]
    tok = torch.searchsorted(cdf, u, right=True).squeeze(-1)
    # a token of probability 0 is never chosen: clamp past the end, then step back over zero-probability tails
    tok = torch.minimum(tok, (probs > 0).long().cumsum(-1).argmax(-1))
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
