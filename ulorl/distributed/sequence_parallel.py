"""Ulysses sequence parallelism: one sample's tokens split over the R ranks of a group.

Each rank runs the backbone on its contiguous shard of `S / R` positions (RoPE sees the shard's global
positions). Around attention, an all-to-all turns `(B, H, S/R, D)` (all heads, my positions) into
`(B, H/R, S, D)` (my heads, all positions), attention runs causally over the whole sequence for those
heads, and a second all-to-all turns the output back. Everything else (norms, MLP, the chunked
log-prob/entropy head) runs on the rank's own positions, so activations and logit chunks per rank are
1/R of one process's. The backward of an all-to-all is the inverse all-to-all (it only moves data), so
autograd gives every rank its part of the gradient; the learner then sums parameter gradients over the
group as it does over data-parallel ranks. The scheme is DeepSpeed-Ulysses' (as verl uses it); the
code is ours, on transformers' attention interface (`AttentionInterface.register`): the model's
attention layers call `ulysses_attention`, which wraps the model's own kernel (sdpa by default).

Constraints: heads and KV heads must divide by R (`check_heads`; verl repeats KV heads instead, not done
here); a micro-batch holds one sample (a causal mask over the gathered sequence cannot separate packed
samples); the sample is right-padded to a multiple of R, and the pads, after every real token, are never
attended to by one. One sequence-parallel group per process (the attention function is registered once).

Deviation from verl: the loss is not computed on the shard. Each rank's `(n_r,)` log-probs and entropies
are all-gathered into the sample's `(N,)` (`gather_shards`; backward hands each rank the gradient of its
own slice), and every rank computes the same loss on them: the DMMPT mask needs each response's mean
entropy and `seq-mean` losses need whole responses, and `N` floats cost nothing next to the `N x V` head,
which does run on the shard.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ulorl.errors import ConfigError

ATTN_NAME = "ulorl_ulysses"
_state: dict = {"group": None, "inner": None}


def check_heads(config, r: int, key: str = "train.sequence_parallel") -> None:
    """Raise a ConfigError naming `key` when the model's heads or KV heads do not divide by `r`."""
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    if heads % r or kv % r:
        ok = [d for d in range(1, heads + 1) if heads % d == 0 and kv % d == 0]
        raise ConfigError(f"{key}={r}: the model has {heads} attention heads and {kv} KV heads; Ulysses "
                          f"splits both over the ranks, so {key} must divide both (valid: {ok})")


def _all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    """`(R, ...)` chunk j goes to rank j; returns `(R, ...)` with chunk j from rank j."""
    x = x.contiguous()
    out = torch.empty_like(x)  # after contiguous(): empty_like keeps a view's strides
    dist.all_to_all_single(out, x, group=group)
    return out


def heads_to_seq(x: torch.Tensor, group) -> torch.Tensor:
    """`(B, H, s, D)` my positions, all heads -> `(B, H/R, R*s, D)` my heads, all positions (in rank order)."""
    r = dist.get_world_size(group)
    B, H, s, D = x.shape
    y = _all_to_all(x.reshape(B, r, H // r, s, D).transpose(0, 1), group)  # (R, B, H/R, s, D): from rank j
    return y.permute(1, 2, 0, 3, 4).reshape(B, H // r, r * s, D)


def seq_to_heads(x: torch.Tensor, group) -> torch.Tensor:
    """The inverse of `heads_to_seq`: `(B, H/R, R*s, D)` -> `(B, H, s, D)`."""
    r = dist.get_world_size(group)
    B, h, S, D = x.shape
    y = _all_to_all(x.reshape(B, h, r, S // r, D).permute(2, 0, 1, 3, 4), group)  # (R, B, H/R, s, D)
    return y.transpose(0, 1).reshape(B, r * h, S // r, D)


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return heads_to_seq(x, group)

    @staticmethod
    def backward(ctx, g):
        return seq_to_heads(g, ctx.group), None


class _SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return seq_to_heads(x, group)

    @staticmethod
    def backward(ctx, g):
        return heads_to_seq(g, ctx.group), None


def ulysses_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers attention function: `query` `(B, H, s, D)`, `key`/`value` `(B, Hkv, s, D)` of this rank's
    positions -> `(B, s, H, D)` output, attention computed causally over all `R * s` positions.

    `attention_mask` (built by the model for the local `s x s` block) is ignored: the gathered sequence is one
    causal sample."""
    group = _state["group"]
    q, k, v = (_HeadsToSeq.apply(t, group) for t in (query, key, value))
    kwargs.pop("is_causal", None)
    out, _ = _state["inner"](module, q, k, v, None, is_causal=True, **kwargs)  # (B, S, H/R, D)
    return _SeqToHeads.apply(out.transpose(1, 2), group).transpose(1, 2).contiguous(), None


def install_ulysses(model: torch.nn.Module, group) -> None:
    """Route `model`'s attention through `ulysses_attention` over `group` (wrapping its current kernel)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    check_heads(model.config, dist.get_world_size(group))
    current = model.config._attn_implementation
    if current != ATTN_NAME:
        _state["inner"] = ALL_ATTENTION_FUNCTIONS[current] if current in ALL_ATTENTION_FUNCTIONS else \
            sdpa_attention_forward
    _state["group"] = group
    AttentionInterface.register(ATTN_NAME, ulysses_attention)
    if ATTN_NAME not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
    model.set_attn_implementation(ATTN_NAME)


class _GatherShards(torch.autograd.Function):
    """Concatenate every rank's `(n_r,)` piece in rank order; backward returns this rank's slice (every rank
    computes the same loss on the whole, so no sum over ranks)."""

    @staticmethod
    def forward(ctx, x, sizes, rank, group):
        m = max(sizes)
        buf = torch.zeros(m, dtype=x.dtype, device=x.device)
        buf[: x.shape[0]] = x
        parts = [torch.empty_like(buf) for _ in sizes]
        dist.all_gather(parts, buf, group=group)
        ctx.lo, ctx.n = sum(sizes[:rank]), sizes[rank]
        return torch.cat([p[:n] for p, n in zip(parts, sizes)])

    @staticmethod
    def backward(ctx, g):
        return g[ctx.lo : ctx.lo + ctx.n], None, None, None


def gather_shards(x: torch.Tensor, sizes: list[int], rank: int, group) -> torch.Tensor:
    """`(n_rank,)` -> `(sum(sizes),)`, differentiable (see `_GatherShards`)."""
    return _GatherShards.apply(x, list(sizes), rank, group)


def shard_bounds(seq_len: int, r: int) -> int:
    """Positions per rank: `seq_len` rounded up to a multiple of `r`, divided by `r`."""
    return -(-seq_len // r)
