"""Models: the built-in tiny model and tokenizer, and loaders for any local HF model."""

from ulorl.models.loading import BUILTIN, eos_token_ids, load_model, load_tokenizer, resolve_model_path
from ulorl.models.tiny import TinyModelSpec, build_tiny_model
from ulorl.models.tokenizer import build_tokenizer

__all__ = ["BUILTIN", "TinyModelSpec", "build_tiny_model", "build_tokenizer", "eos_token_ids", "load_model",
           "load_tokenizer", "resolve_model_path"]
