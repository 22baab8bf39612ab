"""Log-probs and full-vocabulary entropies of the sampled tokens, chunked (UloRL Eq. 10's ``H``).

The learner's one pass from hidden states to the two per-token quantities the
algorithm needs: ``log pi_theta(o_t)`` (ratios, MPTs) and the token entropy
``H_t = -sum_j p_tj log p_tj`` over the full vocabulary, whose mean over a
response is the ``H_i`` of the DMMPT rule (Eq. 10, section 3.2; see
``entropy_mask.py``). ``p_t = softmax(logits_t / temperature)``: log-probs and
entropies are computed from logits divided by the sampling temperature, as verl
does (SPEC section 5). This is the package's only entropy implementation.

Memory: for long responses the float32 logits of every position (T x V) dominate
(128k x 152k x 4 B = 78 GB). We project hidden states to logits one chunk of
positions at a time, inside one autograd function that keeps only the chunk's
hidden states and its `(chunk,)` log-sum-exp for backward; backward recomputes the
chunk's logits and turns them into the gradient in place. Peak logits memory is
about one `chunk x V` float32 buffer (plus a copy for low-precision heads), independent
of T (the earlier `checkpoint` + `log_softmax` + `token_entropy` version held about eight).

Numerics: computed in float32 (low-precision heads are upcast); ``p log p`` is
``torch.special.entr``, so entries with ``p == 0`` (underflow, ``-inf`` logits)
contribute exactly 0. The entropy is detached: the algorithm uses it only in the
DMMPT mask, which carries no gradient.

Deviations from the paper: none.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def _chunk_logits(hidden, weight, bias, temperature) -> torch.Tensor:
    """`(n, V)` float32 logits / temperature, in a fresh buffer we may overwrite."""
    logits = F.linear(hidden, weight, bias)
    logits = logits.float() if logits.dtype != torch.float32 else logits
    return logits.div_(temperature) if temperature != 1.0 else logits


class _ChunkLogProbEntropy(torch.autograd.Function):
    """`(n,)` log-probs of `targets` under `softmax(hidden @ weight.T + bias) / temperature` and entropies."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature):
        z = _chunk_logits(hidden, weight, bias, temperature)
        z_target = z.gather(-1, targets[:, None]).squeeze(-1)
        z_max = z.max(dim=-1).values
        e = z.sub_(z_max[:, None]).exp_()  # in place (torch.logsumexp would allocate another (n, V))
        total = e.sum(-1)
        lse = z_max + total.log()  # (n,)
        lp = z_target - lse
        p = e.div_(total[:, None])  # softmax, in place
        ent = torch.special.entr(p, out=p).sum(-1)  # -sum p log p; entr(0) = 0
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(ent)
        return lp, ent

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_lp, grad_ent):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        t = ctx.temperature
        g = _chunk_logits(hidden, weight, bias, t).sub_(lse[:, None]).exp_()  # recomputed softmax
        # d lp_i / d z_ij = onehot_ij - p_ij, and z = logits / t
        g.mul_(-grad_lp[:, None]).scatter_add_(-1, targets[:, None], grad_lp[:, None].to(g.dtype))
        if t != 1.0:
            g.div_(t)
        g = g.to(hidden.dtype)
        grad_h = g @ weight if ctx.needs_input_grad[0] else None
        grad_w = g.T @ hidden if ctx.needs_input_grad[1] else None
        grad_b = g.sum(0) if bias is not None and ctx.needs_input_grad[2] else None
        return grad_h, grad_w, grad_b, None, None


def chunked_logprobs_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                             temperature: float = 1.0, chunk: int = 1024,
                             bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs and full-vocabulary entropies of `softmax(hidden @ weight.T / temperature)`.

    Args:
        hidden: `(N, H)` hidden states that predict each target (N positions, any batch layout).
        weight: `(V, H)` output projection (the LM head); `bias` `(V,)` or None.
        targets: `(N,)` long, the sampled tokens.
    Returns:
        logprobs `(N,)` float32 (differentiable w.r.t. hidden, weight and bias), entropy `(N,)` (detached).
    """
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"hidden has {hidden.shape[0]} positions, targets {targets.shape[0]}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    lps, ents = [], []
    for lo in range(0, hidden.shape[0], chunk):
        lp, ent = _ChunkLogProbEntropy.apply(hidden[lo : lo + chunk], weight, bias, targets[lo : lo + chunk],
                                             float(temperature))
        lps.append(lp)
        ents.append(ent)
    if not lps:
        z = hidden.new_zeros(0, dtype=torch.float32)
        return z, z
    if len(lps) == 1:
        return lps[0], ents[0]
    return torch.cat(lps), torch.cat(ents)
