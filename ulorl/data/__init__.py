"""Data: loaders (verl parquet, JSONL, TRL, save_to_disk, the built-in task) and validation.

A leaf of the package: nothing here imports rollout, reward, evaluation or an
engine. Cleaning, which samples models and scores answers, lives above it in
:mod:`ulorl.cleaning`.
"""

from ulorl.lazy_exports import lazy_exports

# public name -> the submodule that defines it, imported on first use (see ulorl/lazy_exports.py)
_EXPORTS = {
    "BadRowPolicy": "config",
    "BUILTIN_CHAIN": "config",
    "DataConfig": "config",
    "DataError": "records",
    "DataFormat": "config",
    "load_prompts": "loaders",
    "load_source": "loaders",
    "LoadReport": "records",
    "PromptRecord": "records",
    "render_prompt": "loaders",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
