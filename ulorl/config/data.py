"""`DataConfig`: where the prompts come from and how rows are read and checked.

A leaf of the config layer (see `ulorl/config/__init__.py`): it imports no loader; errors are `ConfigError`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ulorl.config.checks import seed
from ulorl.config.loader import ConfigError, check_choice, check_field_types
from ulorl.tasks import TASKS, UNIFORM_TASKS


class DataFormat(str, Enum):
    """How a source's rows are laid out (see docs/data.md)."""

    AUTO = "auto"  # by extension/folder; schema (verl vs flat keys) from the columns
    VERL = "verl"  # prompt = chat messages, answer = reward_model.ground_truth (parquet or jsonl)
    JSONL = "jsonl"  # JSON lines with configurable keys
    TRL = "trl"  # TRL-style `prompt` column (string or messages) + answer column (parquet, jsonl or folder)
    DISK = "disk"  # a `datasets.save_to_disk` folder, configurable keys


class BadRowPolicy(str, Enum):
    ERROR = "error"  # raise DataError naming file, row and field
    SKIP = "skip"  # skip the row and count it in the LoadReport


class PrefilterMethod(str, Enum):
    """How `data.prefilter` judges a training problem before RL (`ulorl.run.prefilter`)."""

    NONE = "none"  # every training prompt stays
    EXACT = "exact"  # the starting policy's exact P(worked solution) p: all k right p^k, all hard_k wrong (1-p)^hard_k


@dataclass
class PrefilterConfig:
    """`data.prefilter`: before RL, drop training problems whose groups the policy RL starts from would write all
    right (the paper's "too easy" cleaning, SPEC section 6) and, optionally, all wrong; decided once per run."""

    method: str = "none"  # none | exact (rows need extra_info.solution, as the built-in tasks have)
    k: int | None = None  # the k of "all k right / wrong" (paper: 8); None: rollout.group_size
    too_easy: bool = True  # drop a problem with probability p^k (the paper's rule)
    too_hard: bool = False  # drop a problem with probability (1 - p)^hard_k (not in the paper)
    hard_k: int | None = None  # the k of "all k wrong"; None: k. Larger keeps more rarely solved problems

    def __post_init__(self) -> None:
        check_field_types(self, "data.prefilter.")
        if isinstance(self.method, PrefilterMethod):
            self.method = self.method.value
        check_choice("data.prefilter.method", self.method, PrefilterMethod)
        if self.k is not None and self.k < 1:
            raise ConfigError(f"data.prefilter.k must be >= 1 (or null: rollout.group_size), got {self.k}")
        if self.hard_k is not None and self.hard_k < 1:
            raise ConfigError(f"data.prefilter.hard_k must be >= 1 (or null: data.prefilter.k), got {self.hard_k}")
        if self.method != "none" and not (self.too_easy or self.too_hard):
            raise ConfigError(f"data.prefilter.method={self.method} with too_easy and too_hard both false drops "
                              "nothing: set one of them, or method none")

    def ks(self, group_size: int) -> tuple[int, int]:
        """(k, hard_k) with their defaults filled in: k is the group size unless set, hard_k is k unless set."""
        k = self.k or group_size
        return k, self.hard_k or k


BUILTIN_CHAIN = "builtin:chain"
# arguments of apply_chat_template that the loader sets (data.chat_template_kwargs cannot override them)
_TEMPLATE_ARGS = {"conversation", "add_generation_prompt", "tokenize", "continue_final_message", "return_dict"}


@dataclass
class DataConfig:
    """Prompt data for training and evaluation."""

    train: str | list[str] = BUILTIN_CHAIN  # builtin:chain | .parquet/.jsonl/save_to_disk folder | a list of them
    eval: str | list[str] | None = BUILTIN_CHAIN  # same choices; None: no held-out evaluation
    format: str = "auto"  # auto | verl | jsonl | trl | disk
    prompt_key: str = "prompt"  # column holding the prompt (string or chat messages)
    answer_key: str = "answer"  # for jsonl/trl/disk; verl uses reward_model.ground_truth (dotted paths allowed)
    data_source_key: str = "data_source"  # column naming the source (default: the file's stem)
    max_prompt_len: int = 512  # prompts longer than this (in tokens) are dropped and counted
    on_bad_row: str = "error"  # error | skip
    train_size: int = 4000  # built-in task only
    eval_size: int = 200  # built-in task only
    alpha: float | None = None  # built-in task only: size-law exponent of both splits (None: the task's own)
    uniform: float = 0.0  # odometer only: share of problems (both splits) with sizes uniform on the task's range
    train_uniform: float | None = None  # odometer only: the train split's share instead (None: `uniform`)
    seed: int = 0  # built-in task seed (eval uses a different one) and shuffle seed
    shuffle: bool = True  # shuffle the training prompts once at load time
    system_prompt: str | None = None  # a system message put first in every prompt that has none
    # extra keyword arguments of tokenizer.apply_chat_template, e.g. {enable_thinking: false} for Qwen3
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    prefilter: PrefilterConfig = field(default_factory=PrefilterConfig)  # training problems dropped before RL

    def __post_init__(self) -> None:
        check_field_types(self, "data.")
        if isinstance(self.format, DataFormat):
            self.format = self.format.value
        if isinstance(self.on_bad_row, BadRowPolicy):
            self.on_bad_row = self.on_bad_row.value
        check_choice("data.format", self.format, DataFormat)
        check_choice("data.on_bad_row", self.on_bad_row, BadRowPolicy)
        if isinstance(self.train, (list, tuple)):
            self.train = list(self.train)
        if isinstance(self.eval, (list, tuple)):
            self.eval = list(self.eval)
        if not self.train or (isinstance(self.train, list) and not all(self.train)):
            raise ConfigError("data.train must name a source (builtin:chain or a file/folder path) or a list of them")
        if self.eval == "" or self.eval == [] or (isinstance(self.eval, list) and not all(self.eval)):
            raise ConfigError("data.eval must name a source, a list of sources, or be null")
        reserved = sorted(set(self.chat_template_kwargs) & _TEMPLATE_ARGS)
        if reserved:
            raise ConfigError(f"data.chat_template_kwargs may not set {reserved}: ulorl sets them itself")
        for name in ("prompt_key", "answer_key", "data_source_key"):
            if not getattr(self, name):
                raise ConfigError(f"data.{name} must be a non-empty column name (dotted paths allowed)")
        for name in ("max_prompt_len", "train_size", "eval_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"data.{name} must be >= 1, got {getattr(self, name)}")
        if self.alpha is not None and not self.alpha > 0:
            raise ConfigError(f"data.alpha must be > 0 (or null: the task's own), got {self.alpha}")
        if not 0.0 <= self.uniform <= 1.0:
            raise ConfigError(f"data.uniform must be in [0, 1], got {self.uniform}")
        if self.train_uniform is not None and not 0.0 <= self.train_uniform <= 1.0:
            raise ConfigError(f"data.train_uniform must be in [0, 1] or null (data.uniform), got {self.train_uniform}")
        seed("data.seed", self.seed)
        self._check_uniform_tasks()

    def _check_uniform_tasks(self) -> None:
        """`data.uniform` (train and eval; train's unless `data.train_uniform` is set) and `data.train_uniform`
        reach a built-in task's size law: one without `uniform` (builtin:chain) cannot take them."""
        reach = [("data.train_uniform", self.train_uniform, "train"), ("data.uniform", self.uniform, "eval")]
        if self.train_uniform is None:
            reach.append(("data.uniform", self.uniform, "train"))
        for key, value, split in reach:
            for source in self.sources(split) if value else []:
                if source in TASKS and source not in UNIFORM_TASKS:
                    raise ConfigError(f"{key}={value} is for {', '.join(sorted(UNIFORM_TASKS))} (a share of sizes "
                                      f"drawn uniformly), not {source} (data.{split}); leave it at its default")

    def sources(self, split: str) -> list[str]:
        """The sources of `split` ('train' or 'eval') as a list (empty when data.eval is null)."""
        check_choice("split", split, ["train", "eval"])
        value = self.train if split == "train" else self.eval
        if value is None:
            return []
        return list(value) if isinstance(value, list) else [value]
