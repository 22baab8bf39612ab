"""Models: the built-in tiny model and tokenizer, and loaders for any local HF model.

Importing this package first checks the installed transformers and accelerate (`ulorl.models.versions`), before
any of transformers' model code is imported: an accelerate too old for transformers fails inside that import."""

from ulorl.models.versions import check_installed

check_installed()

from ulorl.models.loading import BUILTIN, eos_token_ids, load_model, load_tokenizer, resolve_model_path  # noqa: E402
from ulorl.models.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from ulorl.models.tokenizer import build_tokenizer  # noqa: E402

__all__ = ["BUILTIN", "TinyModelSpec", "build_tiny_model", "build_tokenizer", "eos_token_ids", "load_model",
           "load_tokenizer", "resolve_model_path"]
