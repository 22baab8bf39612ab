"""Token sampling with temperature, top-k and top-p, vectorised, with one random stream per row.

Each row's random number for its t-th new token is a hash of (call seed, row index, t), not a draw from a
shared generator, so what a row samples does not depend on which other rows share its batch: a preempted
and resumed row, a row admitted later, or a different `max_batch` give the same tokens (up to float
rounding of the logits). The draw is inverse-CDF sampling of the filtered distribution, on the logits'
device, with no host synchronisation (top-k with top-p asks one boolean: whether a row has ties at its k-th value).

Cost: at a vocabulary of 152k each full pass over `(B, V)` floats is a large share of a GPU decode step (256 rows:
156 MB a pass), so the sampler makes few: the cumulative sum is taken in float64 directly from the float32
probabilities, the last token of positive probability is found by one search of that sum, and top-p after top-k
sorts only the k kept tokens (`_nucleus_of_top_k`), never the vocabulary. The floats are those of the plain
formulation (`probs.double().cumsum()`, a sort of the whole row), and so are the tokens, but where that left the
choice to an unspecified order (tokens of equal logits at the nucleus's edge) or a 2^-53 event (a draw rounded up
to the total past a probability below 1e-16): tests/rollout/engines/test_sampler.py, `benchmarks/bench_sampler.py`.
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
    filtered, top = scaled, None
    if 0 < top_k < scaled.shape[-1]:
        # one more than k when the nucleus follows: the (k+1)-th value tells whether the k-th has ties
        top = torch.topk(scaled, top_k + 1 if top_p < 1.0 else top_k, dim=-1)
        filtered = scaled.masked_fill(scaled < top.values[:, top_k - 1: top_k], float("-inf"))
    if top_p < 1.0:
        if top is not None and not bool((top.values[:, top_k] == top.values[:, top_k - 1]).any()):
            return _nucleus_of_top_k(filtered, top.values[:, :top_k], top.indices[:, :top_k], top_p)
        sorted_logits, idx = torch.sort(filtered, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        filtered = filtered.masked_fill(drop, float("-inf"))
    return filtered


def _nucleus_of_top_k(filtered: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, top_p: float
                      ) -> torch.Tensor:
    """The top-p step of `filter_logits` when exactly k tokens survived top-k (no ties at the k-th value), without
    sorting the vocabulary: the descending sort of `filtered` `(N, V)` is then `values` `(N, k)` followed by -inf,
    whose softmax is taken over the whole row as the sort's is (the same floats: a softmax over k values alone
    rounds differently). Tokens `indices` `(N, k)`."""
    k = values.shape[-1]
    row = torch.full_like(filtered, float("-inf"))
    row[:, :k] = values
    probs = torch.softmax(row, dim=-1)[:, :k]
    drop = (probs.cumsum(-1) - probs) >= top_p
    return filtered.scatter(-1, indices, values.masked_fill(drop, float("-inf")))


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
    cdf = torch.cumsum(probs, dim=-1, dtype=torch.float64)  # (B, V): no float64 copy of `probs` first
    total = cdf[:, -1:].contiguous()
    tok = torch.searchsorted(cdf, uniforms.to(cdf.device)[:, None] * total, right=True)
    # a token of probability 0 is never chosen: below the total the first cdf entry past u is a token whose
    # probability moved the cdf; a draw rounded up to the total would step past the end, so it takes the token where
    # the cdf first reaches its total (the last one that moved it)
    tok = torch.minimum(tok, torch.searchsorted(cdf, total, right=False)).squeeze(-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
