"""Data: loaders (verl parquet, JSONL, TRL, save_to_disk, the built-in task), validation, and rows grouped by
length into padded batches (`batching.py`: the SFT's batches, the exact measure's forwards).

A leaf of the package: nothing here imports rollout, reward, evaluation or an engine. Cleaning,
which samples models and scores answers, lives above it in :mod:`ulorl.cleaning`. The `data:`
config section is `ulorl.config.data`.
"""

from ulorl.data.loaders import check_sources, load_prompts, load_source, render_prompt
from ulorl.data.records import DataError, LoadReport, PromptRecord

__all__ = ["DataError", "LoadReport", "PromptRecord", "check_sources", "load_prompts", "load_source",
           "render_prompt"]
