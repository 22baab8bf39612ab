"""Data: loaders (verl parquet, JSONL, TRL, save_to_disk, the built-in task), validation, cleaning."""

from ulorl.data.clean import CleanReport, add_clean_arguments, clean_rows, run_clean
from ulorl.data.clean_steps import CleanOptions, CleanStep
from ulorl.data.config import BUILTIN_CHAIN, BadRowPolicy, DataConfig, DataFormat
from ulorl.data.loaders import load_prompts, load_source, render_prompt
from ulorl.data.records import DataError, LoadReport, PromptRecord

__all__ = ["BUILTIN_CHAIN", "BadRowPolicy", "CleanOptions", "CleanReport", "CleanStep", "DataConfig", "DataError",
           "DataFormat", "LoadReport", "PromptRecord", "add_clean_arguments", "clean_rows", "load_prompts",
           "load_source", "render_prompt", "run_clean"]
