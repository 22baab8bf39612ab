"""The forward pass of a Llama-family decoder over a slot KV cache, in plain PyTorch.

`SlotDecoder` runs the model's own modules (embeddings, norms, projections, MLPs,
rotary embedding, LM head: the *same* parameters the learner trains, so weights are
shared without a copy) and replaces only the attention bookkeeping:

- `prefill` takes sequences of any lengths packed into one token stream: the linear
  layers see only real tokens (no padding), attention runs per group of equal-length
  sequences (causal), and each sequence's K/V is written into its slot;
- `decode` advances live slots `[0, n)` by one token each: the new K/V is written in
  place at each row's own position, and each row attends over its own context: the
  longest rows (chosen by `split_long_rows`) attend alone over exactly their length, the
  others together under a per-row length mask over the span of the longest of *them*. No
  reallocation, no concatenation, no padding rows, and a short row never pays for the
  longest one's context (at L = 4,096 one long row in 64 made every row attend over 4k
  positions).

Supported: decoder-only models whose layers follow the Llama pattern (`input_layernorm`,
`self_attn.{q,k,v,o}_proj`, optional per-head `q_norm`/`k_norm` as in Qwen3,
`post_attention_layernorm`, `mlp`) with full attention in every layer and rotary
positions: llama, mistral (no sliding window), qwen2, qwen3. Anything else gets a clear
error and can use `rollout.engine=hf`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ulorl.errors import UlorlError
from ulorl.rollout.engines.kv_cache import KVShape, SlotKVCache

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


class UnsupportedModelError(UlorlError, ValueError):
    """The model's architecture is outside what `SlotDecoder` implements (a one-line CLI error)."""


def check_supported(model) -> None:
    """Raise `UnsupportedModelError` naming what is missing."""
    cfg = model.config
    mt = getattr(cfg, "model_type", "?")
    hint = "; use rollout.engine=hf (any transformers causal LM, slower at long outputs) or vllm"
    if mt not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(f"the torch engine supports model types {', '.join(SUPPORTED_MODEL_TYPES)}; "
                                    f"this model is {mt!r}{hint}")
    inner = getattr(model, "model", None)
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(inner, name):
            raise UnsupportedModelError(f"model.model has no {name!r} ({mt}){hint}")
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    window = getattr(cfg, "sliding_window", None) if getattr(cfg, "use_sliding_window", True) else None
    if kinds != {"full_attention"} or (mt == "mistral" and window):
        raise UnsupportedModelError(f"sliding-window attention ({mt}, layer types {sorted(kinds)}) is not "
                                    f"implemented by the torch engine{hint}")


def _norm(module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm; in float32 as one fused `F.rms_norm` (same arithmetic as the Llama/Qwen module, which
    upcasts to float32 anyway, in one op instead of six: the norms are ~15% of a small model's decode step)."""
    eps = getattr(module, "variance_epsilon", None)
    if eps is not None and x.dtype == torch.float32 and module.weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), module.weight, eps)
    return module(x)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `(N, heads, D)`, cos/sin `(N, D)`: rotary embedding as in transformers' Llama/Qwen."""
    return x * cos[:, None] + _rotate_half(x) * sin[:, None]


# The cost of one extra attention call, in row x position units of batched attention, by device type.
# cpu (measured): on the 2-core CPU one call costs ~25 us and one row x position ~0.11 us (64 rows x
#   4,000 positions: 28 ms a layer; one row alone over 4,000: 0.21 ms); `benchmarks/bench_engine_mixed.py`.
# cuda (estimated, not measured): a call costs ~10-30 us of launch and Python, one row x position a few
#   tenths of a nanosecond (1 KiB of K/V at ~4 TB/s), so ~1e5. The lent H200 run used the CPU value: with 512
#   rows of spread lengths every row ran alone, 512 attention calls per layer per decode step, 5-6k tokens/s
#   (docs/scale.md).
CALL_COST = 256
CALL_COSTS = {"cpu": CALL_COST, "cuda": 1 << 17}


def call_cost_for(device: torch.device) -> float:
    """`split_long_rows`' call cost on `device` (an accelerator other than CUDA: CUDA's)."""
    return CALL_COSTS.get(device.type, CALL_COSTS["cuda"])


def split_long_rows(ctx: list[int], call_cost: float = CALL_COST, max_alone: int | None = None
                    ) -> tuple[list[int], int]:
    """Which decode rows attend alone, and the span the others share.

    ctx: each row's context length before this token. Row i attends over `ctx[i] + 1` positions.
    Batched attention over n rows costs about `n x span` (span = the longest context among them + 1);
    a row alone costs its own length plus `call_cost`. Taking the k longest rows out (k <= `max_alone`,
    default every row: with many long rows of spread lengths, all alone is cheapest) minimises
    `n x span_k + sum(alone lengths) + k x call_cost`. Returns (rows to run alone, longest first; the span
    the batched call needs, 0 when every row runs alone). Depends only on `ctx`, so the
    schedule is deterministic.
    """
    n = len(ctx)
    order = sorted(range(n), key=lambda i: -ctx[i])
    best_k, best, alone = 0, n * (ctx[order[0]] + 1) if n else 0, 0
    for k in range(1, (n if max_alone is None else min(n, max_alone)) + 1):
        alone += ctx[order[k - 1]] + 1 + call_cost
        rest = n * (ctx[order[k]] + 1) if k < n else 0
        if rest + alone < best:
            best_k, best = k, rest + alone
    span = ctx[order[best_k]] + 1 if best_k < n else 0
    return order[:best_k], span


class SlotDecoder:
    """Prefill and decode over a `SlotKVCache` with the modules of a transformers model."""

    def __init__(self, model) -> None:
        check_supported(model)
        self.model = model
        cfg = model.config
        attn = model.model.layers[0].self_attn
        self.num_heads, self.num_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = attn.head_dim
        self.group = self.num_heads // self.num_kv
        self.scale = attn.scaling
        # `split_long_rows`; inf: every row in one batched call (the old schedule)
        self.call_cost = call_cost_for(self.device)

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    def kv_shape(self) -> KVShape:
        return KVShape(len(self.model.model.layers), self.num_kv, self.head_dim, self.model.lm_head.weight.dtype)

    def _qkv(self, attn, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """h `(N, hidden)` -> q `(N, H, D)`, k and v `(N, H_kv, D)`, rotary applied to q and k."""
        n = h.shape[0]
        q = attn.q_proj(h).view(n, self.num_heads, self.head_dim)
        k = attn.k_proj(h).view(n, self.num_kv, self.head_dim)
        v = attn.v_proj(h).view(n, self.num_kv, self.head_dim)
        if hasattr(attn, "q_norm"):
            q, k = _norm(attn.q_norm, q), _norm(attn.k_norm, k)
        return _rope(q, cos, sin), _rope(k, cos, sin), v

    def _embed(self, ids: torch.Tensor, pos: torch.Tensor):
        x = self.model.model.embed_tokens(ids)  # (N, hidden)
        cos, sin = self.model.model.rotary_emb(x[None], pos[None])  # (1, N, D) each
        return x, cos[0], sin[0]

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(_norm(self.model.model.norm, x))

    def prefill(self, cache: SlotKVCache, seqs: list[list[int]], slots: list[int]) -> torch.Tensor:
        """Write the K/V of each sequence into its slot; return next-token logits `(len(seqs), V)`."""
        dev = self.device
        lens = [len(s) for s in seqs]
        offsets = [0]
        for n in lens[:-1]:
            offsets.append(offsets[-1] + n)
        ids = torch.tensor([t for s in seqs for t in s], device=dev)
        pos = torch.cat([torch.arange(n, device=dev) for n in lens])
        groups: dict[int, list[int]] = {}
        for i, n in enumerate(lens):
            groups.setdefault(n, []).append(i)
        # per length group: token index matrix (n_g, len) into the packed stream, and the slots
        plan = [(torch.tensor([offsets[i] for i in idx], device=dev)[:, None] + torch.arange(n, device=dev),
                 torch.tensor([slots[i] for i in idx], device=dev), n) for n, idx in groups.items()]
        x, cos, sin = self._embed(ids, pos)
        for li, layer in enumerate(self.model.model.layers):
            attn = layer.self_attn
            q, k, v = self._qkv(attn, _norm(layer.input_layernorm, x), cos, sin)
            out = torch.empty_like(q)
            for tok_idx, slot_idx, n in plan:
                kg, vg = k[tok_idx].transpose(1, 2), v[tok_idx].transpose(1, 2)  # (n_g, H_kv, n, D)
                cache.k[li][slot_idx, :, :n] = kg
                cache.v[li][slot_idx, :, :n] = vg
                if self.group > 1:
                    kg, vg = kg.repeat_interleave(self.group, dim=1), vg.repeat_interleave(self.group, dim=1)
                og = F.scaled_dot_product_attention(q[tok_idx].transpose(1, 2), kg, vg, is_causal=True,
                                                    scale=self.scale)  # (n_g, H, n, D)
                out[tok_idx] = og.transpose(1, 2)
            x = x + attn.o_proj(out.reshape(x.shape[0], -1))
            x = x + layer.mlp(_norm(layer.post_attention_layernorm, x))
        last = torch.tensor([o + n - 1 for o, n in zip(offsets, lens)], device=dev)
        return self._logits(x[last])

    def decode(self, cache: SlotKVCache, tokens: torch.Tensor, ctx: list[int]) -> torch.Tensor:
        """Feed `tokens` `(n,)` to slots `[0, n)`, each at its position `ctx[i]` (its current length);
        return next-token logits `(n, V)`."""
        dev, n = self.device, tokens.shape[0]
        pos = torch.tensor(ctx, device=dev)
        alone, span = split_long_rows(ctx, self.call_cost)
        mask = (torch.arange(span, device=dev)[None, :] <= pos[:, None])[:, None, None, :]  # (n, 1, 1, span)
        rows = torch.arange(n, device=dev)
        x, cos, sin = self._embed(tokens, pos)
        for li, layer in enumerate(self.model.model.layers):
            attn = layer.self_attn
            q, k, v = self._qkv(attn, _norm(layer.input_layernorm, x), cos, sin)
            kc, vc = cache.k[li], cache.v[li]
            kc[rows, :, pos] = k
            vc[rows, :, pos] = v
            # grouped-query attention without copying K/V: the G query heads of a KV head act as G queries
            q = q.view(n, self.num_kv, self.group, self.head_dim)
            if span:  # rows run alone below get a truncated window here, overwritten
                o = F.scaled_dot_product_attention(q, kc[:n, :, :span], vc[:n, :, :span], attn_mask=mask,
                                                   scale=self.scale)
            else:
                o = torch.empty_like(q)
            for i in alone:  # views of the slot's own context: no copy, no mask
                e = ctx[i] + 1
                o[i:i + 1] = F.scaled_dot_product_attention(q[i:i + 1], kc[i:i + 1, :, :e], vc[i:i + 1, :, :e],
                                                             scale=self.scale)
            x = x + attn.o_proj(o.reshape(n, -1))
            x = x + layer.mlp(_norm(layer.post_attention_layernorm, x))
        return self._logits(x)
