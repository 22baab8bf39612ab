"""The forward pass of a Llama-family decoder over the paged KV cache, in plain PyTorch.

`ModelRunner` runs the model's own modules (embeddings, norms, projections, MLPs, rotary embedding, LM
head: the *same* parameters the learner trains, so weights are shared without a copy when the engine's
dtype is the model's) and replaces only the attention bookkeeping:

- `prefill` takes sequences of any lengths packed into one token stream: the linear layers see only real
  tokens (no padding), attention is causal within each sequence (`prefill_attention.py`: per-length SDPA, or
  torch's `varlen_attn` in one call per layer on CUDA), and each token's K/V is written into its block;
- `decode` advances every live row by one token: the new K/V is written in place at the row's position in
  its last block, and one attention call per layer reads each row's own blocks
  (`attention.paged_decode_attention`, split-K over the pool: CPU);
- `decode_table` does the same with fixed shapes (padded block tables, `table_attention.py`), the form a
  CUDA graph can capture (`graph_decoder.py`).

Supported: decoder-only models whose layers follow the Llama pattern (`input_layernorm`,
`self_attn.{q,k,v,o}_proj`, optional per-head `q_norm`/`k_norm` as in Qwen3, `post_attention_layernorm`,
`mlp`) with full attention in every layer and rotary positions: llama, mistral (no sliding window), qwen2,
qwen3. Anything else gets a clear error and can use `rollout.engine=hf`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ulorl.errors import UlorlError
from ulorl.rollout.engines.torch.attention import DecodePlan, paged_decode_attention
from ulorl.rollout.engines.torch.kv_cache import KVShape, PagedKVCache
from ulorl.rollout.engines.torch.prefill_attention import SDPAPrefill

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


class UnsupportedModelError(UlorlError, ValueError):
    """The model's architecture is outside what `ModelRunner` implements (a one-line CLI error)."""


_HINT = "; use rollout.engine=hf (any transformers causal LM, slower at long outputs) or vllm"


def check_supported_config(cfg) -> None:
    """Raise `UnsupportedModelError` when the transformers config `cfg` names an architecture outside what
    `ModelRunner` implements (its model type, or sliding-window attention): known before the weights load."""
    mt = getattr(cfg, "model_type", "?")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(f"the torch engine supports model types {', '.join(SUPPORTED_MODEL_TYPES)}; "
                                    f"this model is {mt!r}{_HINT}")
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    window = getattr(cfg, "sliding_window", None) if getattr(cfg, "use_sliding_window", True) else None
    if kinds != {"full_attention"} or (mt == "mistral" and window):
        raise UnsupportedModelError(f"sliding-window attention ({mt}, layer types {sorted(kinds)}) is not "
                                    f"implemented by the torch engine{_HINT}")


def check_supported(model) -> None:
    """Raise `UnsupportedModelError` naming what is missing: in the config (`check_supported_config`), or among the
    modules the runner calls."""
    check_supported_config(model.config)
    inner = getattr(model, "model", None)
    for name in ("embed_tokens", "layers", "norm", "rotary_emb"):
        if not hasattr(inner, name):
            raise UnsupportedModelError(f"model.model has no {name!r} ({model.config.model_type}){_HINT}")


def _norm(module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm through `F.rms_norm` where that keeps the arithmetic or fuses it: in float32 on any
    device (the Llama/Qwen module's own arithmetic, as it upcasts to float32 anyway; on CPU torch's composite runs
    its six operations without the module's Python, on CUDA one fused kernel: the norms are ~15% of a small
    model's decode step), and on CUDA in any dtype (the fused kernel, float32 inside: one kernel instead of the
    module's eight in bfloat16, rounding once where the module rounds after normalising and again after the
    weight, so the outputs differ by at most a bfloat16 step). Elsewhere (bfloat16 on CPU) the module itself."""
    eps = getattr(module, "variance_epsilon", None)
    if eps is not None and x.dtype == module.weight.dtype and (x.dtype == torch.float32 or x.is_cuda):
        return F.rms_norm(x, (x.shape[-1],), module.weight, eps)
    return module(x)


def _signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin `(N, D)` with its first half negated: what `_rope` multiplies the rolled x by (built once a step)."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x `(N, heads, D)`, cos and `_signed_sin(sin)` `(N, D)`: rotary embedding as in transformers' Llama/Qwen,
    `x * cos + rotate_half(x) * sin` with rotate_half(x) = (-x_2, x_1), written as `x * cos + roll(x, D/2) *
    signed_sin`: the sign moves from x onto sin, which is exact (the same numbers bit for bit), and a layer runs
    two operations fewer (a roll where rotate_half runs a neg and a cat, for q and for k)."""
    return x * cos[:, None] + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin[:, None]


class ModelRunner:
    """Prefill and decode over a `PagedKVCache` with the modules of a transformers model."""

    def __init__(self, model) -> None:
        check_supported(model)
        self.model = model
        cfg = model.config
        attn = model.model.layers[0].self_attn
        self.num_heads, self.num_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = attn.head_dim
        self.group = self.num_heads // self.num_kv
        self.scale = attn.scaling
        self.prefill_attention = SDPAPrefill()  # the packed prefill's attention (`prefill_attention.py`)

    @property
    def device(self) -> torch.device:
        return self.model.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.lm_head.weight.dtype

    def kv_shape(self) -> KVShape:
        return KVShape(len(self.model.model.layers), self.num_kv, self.head_dim, self.dtype)

    def _qkv(self, attn, h: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor):
        """h `(N, hidden)` -> q `(N, H, D)`, k and v `(N, H_kv, D)`, rotary applied to q and k."""
        n = h.shape[0]
        q = attn.q_proj(h).view(n, self.num_heads, self.head_dim)
        k = attn.k_proj(h).view(n, self.num_kv, self.head_dim)
        v = attn.v_proj(h).view(n, self.num_kv, self.head_dim)
        if hasattr(attn, "q_norm"):
            q, k = _norm(attn.q_norm, q), _norm(attn.k_norm, k)
        return _rope(q, cos, signed_sin), _rope(k, cos, signed_sin), v

    def _embed(self, ids: torch.Tensor, pos: torch.Tensor):
        x = self.model.model.embed_tokens(ids)  # (N, hidden)
        cos, sin = self.model.model.rotary_emb(x[None], pos[None])  # (1, N, D) each
        return x, cos[0].to(x.dtype), _signed_sin(sin[0].to(x.dtype))

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(_norm(self.model.model.norm, x))

    def prefill(self, cache: PagedKVCache, seqs: list[list[int]], tables: list[list[int]]) -> torch.Tensor:
        """Write the K/V of each sequence into its blocks (`tables[i]`, enough for `len(seqs[i])` tokens);
        return next-token logits `(len(seqs), V)`."""
        dev, bs = self.device, cache.block_size
        lens = [len(s) for s in seqs]
        ids = torch.tensor([t for s in seqs for t in s], device=dev)
        pos_host = np.concatenate([np.arange(n) for n in lens])  # on the host: two copies, not a few ops per sequence
        block_host = np.concatenate([np.asarray(t, dtype=np.int64)[: -(-n // bs)].repeat(bs)[:n]
                                     for t, n in zip(tables, lens)])
        pos, block = torch.from_numpy(pos_host).to(dev), torch.from_numpy(block_host).to(dev)
        offset = pos % bs
        x, cos, signed_sin = self._embed(ids, pos)
        attend, layout = self.prefill_attention, self.prefill_attention.layout(lens, dev)
        for li, layer in enumerate(self.model.model.layers):
            attn = layer.self_attn
            q, k, v = self._qkv(attn, _norm(layer.input_layernorm, x), cos, signed_sin)
            cache.write(li, block, offset, k, v)
            out = attend(q, k, v, layout, self.scale)
            x = x + attn.o_proj(out.reshape(x.shape[0], -1))
            x = x + layer.mlp(_norm(layer.post_attention_layernorm, x))
        last = torch.tensor(lens, device=dev).cumsum(0) - 1
        return self._logits(x[last])

    def decode(self, cache: PagedKVCache, tokens: torch.Tensor, pos: torch.Tensor, block: torch.Tensor,
               plan: DecodePlan) -> torch.Tensor:
        """Feed `tokens` `(n,)` at positions `pos` `(n,)` (each row's current length), writing their K/V at
        `(block, pos % block_size)`; return next-token logits `(n, V)`. Attention: the split-K plan."""
        def attend(li: int, q: torch.Tensor) -> torch.Tensor:
            return paged_decode_attention(q, cache.k[li], cache.v[li], plan, self.scale, cache.k_tokens[li],
                                          cache.v_tokens[li])

        return self._decode_layers(cache, tokens, pos, block * cache.block_size + pos % cache.block_size, attend)

    def decode_table(self, cache: PagedKVCache, tokens: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor,
                     table: torch.Tensor, ctx: torch.Tensor, backend) -> torch.Tensor:
        """`decode` with fixed shapes (capturable as a CUDA graph): K/V written at token slots `slot` `(n,)`, each
        row attending over its blocks `table` `(n, W)` up to `ctx` `(n,)` through `backend`
        (`table_attention.py`)."""
        step = backend.prepare(table, ctx, cache.block_size, cache.num_blocks + 1, self.group)

        def attend(li: int, q: torch.Tensor) -> torch.Tensor:
            return backend.attend(q, cache.k_tokens[li], cache.v_tokens[li], step, self.scale)

        return self._decode_layers(cache, tokens, pos, slot, attend)

    def _decode_layers(self, cache: PagedKVCache, tokens: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor,
                       attend) -> torch.Tensor:
        """The layers of one decode step; `attend(layer, q)` maps q `(n, H_kv, G, D)` to the same shape."""
        n = tokens.shape[0]
        x, cos, signed_sin = self._embed(tokens, pos)
        for li, layer in enumerate(self.model.model.layers):
            attn = layer.self_attn
            q, k, v = self._qkv(attn, _norm(layer.input_layernorm, x), cos, signed_sin)
            cache.write_slots(li, slot, k, v)
            o = attend(li, q.view(n, self.num_kv, self.group, self.head_dim))
            x = x + attn.o_proj(o.reshape(n, -1))
            x = x + layer.mlp(_norm(layer.post_attention_layernorm, x))
        return self._logits(x)
