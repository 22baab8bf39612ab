"""The built-in tiny model: a Qwen3-architecture causal LM created in code.

`build_tiny_model` writes a normal Hugging Face folder (`config.json`,
`model.safetensors`, `generation_config.json`, `tokenizer.json`, chat template), so
everything downstream loads it exactly like a real model with `from_pretrained`.

Presets (`PRESETS`, `model.path=builtin:<preset>`): `default` is the demo's model;
`long` is the same size made for answers of thousands of tokens (the `odometer`
task). With the defaults, a model trained on 200-token sequences fails further out
(measured: teacher-forced error 4% at tokens 200-300, 46% at 500-1000, 76% at
2000-4000; docs/task.md): Qwen3's QK-norm bounds an attention logit by sqrt(head_dim) x g_q x g_k
(5.7 at init), so a head that should read one token five positions back loses it
among thousands of others (e^5.7 / 4000 < 10%), and RoPE's low frequencies (periods
of thousands of tokens at base 10,000) behave at long range in ways a short
sequence never shows. `long` starts the QK-norm gains at `qk_norm_init` (logit bound
x4) and uses base `rope_theta = 10` (every frequency turns within ~50 tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from ulorl.errors import ConfigError
from ulorl.models.tokenizer import build_tokenizer


@dataclass
class TinyModelSpec:
    """Size of the built-in model (defaults: 795,712 parameters, fast on 2 CPU cores)."""

    hidden_size: int = 128
    num_layers: int = 3
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 512
    max_positions: int = 4096
    vocab_size: int | None = None  # None: the built-in tokenizer's size; set larger to test big vocabularies
    rope_theta: float = 10000.0  # RoPE base
    qk_norm_init: float = 1.0  # initial gain of every q_norm / k_norm (attention logits scale with its square)


PRESETS: dict[str, TinyModelSpec] = {
    "default": TinyModelSpec(),
    "long": TinyModelSpec(max_positions=8192, rope_theta=10.0, qk_norm_init=2.0),
}


def tiny_preset(name: str) -> TinyModelSpec:
    """The spec of a named preset (`default`, `long`)."""
    if name not in PRESETS:
        valid = ", ".join("builtin" if p == "default" else f"builtin:{p}" for p in PRESETS)
        raise ConfigError(f"builtin:{name}: no such built-in model preset; choose one of: {valid}")
    return PRESETS[name]


def build_tiny_model(out_dir: str | Path, spec: TinyModelSpec | None = None, seed: int = 0) -> Path:
    """Create the tiny model with random weights and its tokenizer, save them to `out_dir`."""
    spec = spec or TinyModelSpec()
    out = Path(out_dir)
    tok = build_tokenizer()
    vocab_size = spec.vocab_size or len(tok)
    if vocab_size < len(tok):
        raise ValueError(f"TinyModelSpec.vocab_size={vocab_size} is smaller than the tokenizer ({len(tok)})")
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.fill_(spec.qk_norm_init)
            layer.self_attn.k_norm.weight.fill_(spec.qk_norm_init)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=True, temperature=1.0
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
