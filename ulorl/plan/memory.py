"""Learner and KV-cache memory of one long sample, counted from the model's shape (`ulorl plan --memory`).

The learner's peak is the static part (weights and AdamW's two moments, resident between updates) plus the
update's increment: gradients and what one micro-batch's forward keeps for backward, counted tensor by
tensor for a Llama/Qwen decoder layer as transformers 5.x runs it (`layer_terms`), per token:

- residual stream (hidden `d`): for each of the two RMSNorms its input, its normalised value and its output
  (the projections' input): `6 d`;
- attention (`q = H x Dh`, `kv = Hkv x Dh`): q after projection and after q_norm's normalisation, q after
  RoPE (sdpa's input), sdpa's output and o_proj's contiguous input: `5 q`; k: `3 kv`; v: `kv`; sdpa's
  log-sum-exp, `H` float32 values (RoPE's products with cos/sin keep nothing of size q: cos and sin need no
  gradient). Models without QK-norm (Qwen2, Llama) keep `3 q + 2 kv`;
- MLP (`I` intermediate): gate, SiLU(gate), up, their product: `4 I`; a mixture of experts keeps that for
  each of its `top_k` experts plus the `top_k` gathered inputs and outputs (`2 top_k d`) and the router
  logits (an approximation of transformers' expert loop).

Attention is the memory-efficient kind (sdpa's flash/efficient kernels, flash-attn): nothing of size
`S x S` is kept. Gradient checkpointing keeps only each layer's input (`d` per token per layer) and
recomputes one layer at a time in backward, so its peak is `layers x d + one layer's terms` per token: flat
in L. Activation offload moves what is kept to CPU memory, leaving one layer's working set on the device.
Sequence parallelism over R ranks divides every per-token term by R. FSDP over W ranks divides the
static part by W (plus one layer's gathered weights and gradients). The LM head's chunked pass
(`ulorl.algo.logprobs`) adds `N x d` gathered hidden states and about two `chunk x V` float32 buffers.
Backward holds, besides what is kept, the gradients in flight for one layer (`backward_terms`). Gradients
grow while kept activations are freed, so the peak is the larger of backward at the top layer and at the
bottom layer (`learner_memory`); with replicated ranks, also the moment after backward when the gradients are
summed through one flat copy (`ulorl.distributed.sharded_learner`). A padded micro-batch adds its boolean
`(rows, 1, S, S)` mask and K and V repeated to every head (transformers' sdpa path with a mask); a micro-batch
after the first holds every gradient from the start. Mixed precision (`autocast`): matmul outputs at 2 bytes,
the residual stream and norms at the weights' dtype (an approximation: the norms' casts are not counted one by
one).

Checked against measured peaks on CPU (float32, `benchmarks/bench_learner_long.py`; docs/benchmarks.md).
Not counted: the allocator's fragmentation and caching (CUDA's caching allocator reserves more than is
allocated; the GPU check compares allocated bytes), NCCL and all-to-all buffers, the rollout engine's
weights (colocated engines add their own copy).

KV cache of the engine: `2 x layers x Hkv x Dh x bytes` per resident token (K and V of every layer).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

GIB = 1024 ** 3


@dataclass(frozen=True)
class ModelShape:
    """What the memory count needs of a decoder-only model (from a transformers config or `KNOWN_SHAPES`)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width; for a mixture of experts, one expert's width
    vocab: int
    params: int  # total parameter count
    qk_norm: bool = True  # Qwen3: RMSNorm on q and k per head
    experts_per_token: int = 0  # top_k of a mixture of experts (0: dense)
    num_experts: int = 0

    @classmethod
    def from_config(cls, cfg) -> ModelShape:
        """From a transformers config (Llama/Qwen2/Qwen3/Qwen3-MoE) or its `config.json` as a dict."""
        get = (lambda k, d=None: cfg.get(k, d)) if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
        layers, d, heads, vocab = get("num_hidden_layers"), get("hidden_size"), get("num_attention_heads"), \
            get("vocab_size")
        kv = get("num_key_value_heads") or heads
        hd = get("head_dim") or d // heads
        top_k, n_exp = get("num_experts_per_tok") or 0, get("num_experts") or 0
        inter = get("moe_intermediate_size") if n_exp else get("intermediate_size")
        qk_norm = "qwen3" in str(get("model_type", "qwen3"))
        attn = d * heads * hd * 2 + d * kv * hd * 2
        attn += 2 * hd if qk_norm else (heads + 2 * kv) * hd if get("model_type") == "qwen2" else 0  # norms; biases
        mlp = 3 * d * inter * (n_exp or 1) + (d * n_exp if n_exp else 0)
        embed = vocab * d * (1 if get("tie_word_embeddings", False) else 2)
        params = layers * (attn + mlp + 2 * d) + embed + d
        return cls(layers, d, heads, kv, hd, inter, vocab, params, qk_norm, top_k, n_exp)


# public configs (config.json of each model; nothing downloaded here)
KNOWN_SHAPES: dict[str, dict] = {
    "qwen3-4b": {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 2560, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936,
                 "tie_word_embeddings": True},
    "qwen3-30b-a3b": {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048,
                      "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                      "vocab_size": 151936, "tie_word_embeddings": False},
    "qwen2.5-0.5b": {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 4864, "vocab_size": 151936,
                     "tie_word_embeddings": True},
}


def load_shape(name: str) -> ModelShape:
    """A `KNOWN_SHAPES` name, `builtin[:preset]`, or a model folder with a `config.json`."""
    if name.lower() in KNOWN_SHAPES:
        return ModelShape.from_config(KNOWN_SHAPES[name.lower()])
    if name == "builtin" or name.startswith("builtin:"):
        from ulorl.models.tiny import tiny_preset
        from ulorl.models.tokenizer import build_tokenizer

        s = tiny_preset(name.partition(":")[2] or "default")
        return ModelShape.from_config({"model_type": "qwen3", "num_hidden_layers": s.num_layers,
                                       "hidden_size": s.hidden_size, "num_attention_heads": s.num_heads,
                                       "num_key_value_heads": s.num_kv_heads, "head_dim": s.hidden_size // s.num_heads,
                                       "intermediate_size": s.intermediate_size,
                                       "vocab_size": s.vocab_size or len(build_tokenizer()),
                                       "tie_word_embeddings": True})
    path = Path(name) / "config.json"
    if not path.exists():
        raise ValueError(f"--model {name!r}: not one of {sorted(KNOWN_SHAPES)}, builtin[:preset], or a folder "
                         "with a config.json")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"--model {name!r}: {path} is not JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"--model {name!r}: {path} holds {type(cfg).__name__}, not a model config")
    if isinstance(cfg.get("text_config"), dict):  # a multimodal model: its language model's shape
        cfg = {"model_type": cfg.get("model_type"), **cfg["text_config"]}
    missing = [k for k in SHAPE_KEYS if not isinstance(cfg.get(k), int)]
    if missing:
        raise ValueError(f"--model {name!r}: {path} lacks {', '.join(missing)} (a decoder model's config has "
                         "them); the planner sizes Llama, Qwen2, Qwen3 and Qwen3-MoE shapes")
    return ModelShape.from_config(cfg)


SHAPE_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")  # `from_config` needs these


@dataclass(frozen=True)
class LearnerSetup:
    """The settings memory depends on (the config keys in the comments)."""

    tokens: int  # tokens of the micro-batch (prompt + response; one long sample: its length)
    weight_bytes: int = 4  # model.dtype: master weights, gradients and AdamW moments
    autocast: bool = False  # train.autocast=bfloat16|float16: matmul outputs at 2 bytes
    checkpointing: bool = False  # model.gradient_checkpointing
    offload: bool = False  # model.activation_offload
    sequence_parallel: int = 1  # train.sequence_parallel
    fsdp_ranks: int = 1  # ranks the weights, gradients and optimizer state are sharded over (fsdp2)
    logit_chunk: int = 1024  # train.logit_chunk
    # train.packing=false: the micro-batch is this many rows, each padded to tokens / padded_rows, under an
    # attention mask; 0: packed rows (no mask)
    padded_rows: int = 0
    # not the update's first micro-batch: every weight's gradient exists from the ones before (an RL update of
    # many samples), so the top layer's moment holds all gradients, not only the head's
    grads_held: bool = False
    # distributed.sharding=replicate over several ranks (R > 1 with the weights unsharded): after backward the
    # gradients are summed through one flattened copy of them all
    replicated: bool = False


def layer_terms(m: ModelShape) -> dict[str, float]:
    """Values kept per token by one decoder layer's forward, by where they come from (see the module docstring)."""
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    attn = (5 * q + 3 * kv + kv) if m.qk_norm else (3 * q + kv + kv)
    if m.experts_per_token:
        mlp = m.experts_per_token * (4 * m.intermediate + 2 * m.hidden) + m.num_experts
    else:
        mlp = 4 * m.intermediate
    return {"residual": 6 * m.hidden, "attention": attn, "lse": m.heads, "mlp": mlp}


def backward_terms(m: ModelShape) -> float:
    """Values per token alive in one layer's backward beyond what forward kept: the residual stream's gradient
    (`2 d`) and, net of the saved tensors freed as it goes, one `I`-wide MLP gradient (per expert for a
    mixture of experts): the product's gradient gives way to SiLU's and up's while the product is freed."""
    width = m.experts_per_token * m.intermediate if m.experts_per_token else m.intermediate
    return 2 * m.hidden + width


def learner_memory(m: ModelShape, s: LearnerSetup) -> dict[str, float]:
    """Bytes of the learner's peak: `static` (weights, gradients, AdamW moments), `update_increment` (what one
    update adds to the weights and optimizer state already in memory) and `total_device` (static + increment
    minus what is offloaded), with the parts the peak is made of.

    Gradients grow while activations shrink in backward, so the peak is the larger of two moments: backward
    of the top layer (everything kept, one layer's working set, the head's gradient) and backward of the
    bottom layer (every gradient, one layer kept and its working set)."""
    t = s.tokens / s.sequence_parallel
    ab = 2 if s.autocast else s.weight_bytes
    rb = s.weight_bytes
    terms = layer_terms(m)
    per_layer = (terms["residual"] * rb + (terms["attention"] + terms["mlp"]) * ab + terms["lse"] * 4) * t
    working = backward_terms(m) * ab * t
    head_params = m.vocab * m.hidden
    grad_all = m.params * s.weight_bytes / s.fsdp_ranks
    grad_head = head_params * s.weight_bytes / s.fsdp_ranks
    weights = m.params * s.weight_bytes / s.fsdp_ranks
    adam = 2 * m.params * s.weight_bytes / s.fsdp_ranks
    if s.fsdp_ranks > 1:  # one layer's weights and gradients gathered whole at a time
        weights += (m.params - head_params) / m.layers * s.weight_bytes * 2
    final_norm = 2 * m.hidden * rb * t
    mask = 0.0
    if s.padded_rows:  # a boolean (rows, 1, S, S) mask; with a mask, sdpa gets K and V repeated to every head
        q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
        mask = s.padded_rows * (t / s.padded_rows) ** 2
        repeated = 2 * (q - kv) * ab * t
        per_layer += repeated
        working += repeated  # their gradients, summed back onto the KV heads
    if s.checkpointing:  # each layer's input kept; the layer in backward recomputed whole
        kept, layer = m.layers * m.hidden * rb * t + final_norm + mask, per_layer + working
        kept_bottom = m.hidden * rb * t + mask
    else:
        kept, layer = m.layers * per_layer + final_norm + mask, working
        kept_bottom = per_layer + mask
    head = 2 * m.hidden * rb * t + 2 * min(s.logit_chunk, t) * m.vocab * 4  # gathered hidden + its gradient
    offloaded = kept if s.offload else 0.0
    top = kept + max(layer, head) + (grad_all if s.grads_held else grad_head)
    bottom = kept_bottom + layer + grad_all
    reduce = 2 * grad_all if s.replicated else 0.0
    moments = {"top layer": top, "bottom layer": bottom, "gradient all-reduce": reduce}
    peak_at = max(moments, key=moments.get)
    out = {"weights": weights, "grads": grad_all, "adam": adam, "static": weights + adam, "kept": kept,
           "layer": layer, "head": head, "offloaded": offloaded, "update_increment": moments[peak_at],
           "peak_at": peak_at}
    device_top = top - offloaded
    device_bottom = bottom - (kept_bottom if s.offload and not s.checkpointing else 0.0)
    out["total_device"] = out["static"] + max(device_top, device_bottom, reduce)
    return out


def kv_cache_bytes(m: ModelShape, tokens: int, kv_bytes: int = 2) -> float:
    """K and V of every layer for `tokens` resident tokens (all sequences' prompt + response)."""
    return 2.0 * m.layers * m.kv_heads * m.head_dim * kv_bytes * tokens


def fit_table(m: ModelShape, lengths: list[int], gpu_gib: float, max_ranks: int = 64,
              base: LearnerSetup | None = None) -> list[dict]:
    """For each length: the fewest GPUs (FSDP ranks = data x sequence ranks) with which one sample fits in
    `gpu_gib`, trying in order no checkpointing, checkpointing, checkpointing + offload, then R = 1, 2, 4, 8
    (R dividing the heads and KV heads). A row per length with the first setting that fits (or none)."""
    base = base or LearnerSetup(tokens=1, weight_bytes=4, autocast=True)
    rows = []
    rs = [r for r in (1, 2, 4, 8) if m.heads % r == 0 and m.kv_heads % r == 0]
    for L in lengths:
        found = None
        for ranks in (1, 2, 4, 8, 16, 32, 64):
            if ranks > max_ranks or found:
                break
            for ckpt, off in ((False, False), (True, False), (True, True)):
                for r in (x for x in rs if ranks % x == 0):
                    s = replace(base, tokens=L, checkpointing=ckpt, offload=off, sequence_parallel=r,
                                fsdp_ranks=ranks)
                    mem = learner_memory(m, s)
                    if mem["total_device"] <= gpu_gib * GIB:
                        found = {"length": L, "gpus": ranks, "checkpointing": ckpt, "offload": off,
                                 "sequence_parallel": r, "device_gib": mem["total_device"] / GIB}
                        break
                if found:
                    break
        rows.append(found or {"length": L, "gpus": None})
    return rows


def describe(m: ModelShape) -> dict:
    return asdict(m)
