"""The built-in tiny model: a Qwen3-architecture causal LM created in code.

`build_tiny_model` writes a normal Hugging Face folder (`config.json`,
`model.safetensors`, `generation_config.json`, `tokenizer.json`, chat template), so
everything downstream loads it exactly like a real model with `from_pretrained`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from ulorl.models.tokenizer import build_tokenizer


@dataclass
class TinyModelSpec:
    """Size of the built-in model (defaults: ~0.65M parameters, fast on 2 CPU cores)."""

    hidden_size: int = 128
    num_layers: int = 3
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 512
    max_positions: int = 4096
    vocab_size: int | None = None  # None: the built-in tokenizer's size; set larger to test big vocabularies


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
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=True, temperature=1.0
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
