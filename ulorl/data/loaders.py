"""Load prompts from any supported source into `PromptRecord`s (see docs/data.md).

Sources: `builtin:chain` or `builtin:odometer` (built-in tasks; the eval split uses a different seed
than train), a `.parquet` / `.jsonl` file or a `datasets.save_to_disk` folder. Every
row is validated first (bad rows raise `DataError` or are skipped and counted, per
`on_bad_row`), then rendered with the tokenizer's chat template when it has one
(plain text otherwise, contents joined by blank lines). Prompts longer than
`max_prompt_len` tokens are dropped and counted, never truncated.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from ulorl.config.data import DataConfig, DataFormat
from ulorl.data.formats import Storage, check_readable, detect_storage, read_rows
from ulorl.data.records import DataError, LoadReport, PromptRecord, RowIssue, counted
from ulorl.data.validate import RowSchema, ValidRow, guess_schema, validate_row, verl_schema
from ulorl.tasks import TASKS, task_rows

EVAL_SEED_OFFSET = 1_000_003  # built-in eval problems use seed + this, so they differ from train's
BUILTINS = tuple(TASKS)  # builtin:chain, builtin:odometer (ulorl.tasks)


@dataclass
class RawSource:
    """The rows of one source with how they were read (cleaning writes them back the same way)."""

    name: str
    rows: list[dict | RowIssue]
    storage: Storage | None  # None for built-in sources
    schema: RowSchema


def builtin_rows(source: str, cfg: DataConfig, split: str) -> list[dict]:
    """The rows of built-in task `source` for `split` as `cfg` draws them (size, seed, size law); a train
    row's index is its `prompt_id`."""
    _check_builtin(source)
    if split == "train":
        uniform = cfg.uniform if cfg.train_uniform is None else cfg.train_uniform
        return task_rows(source, cfg.train_size, seed=cfg.seed, split="train", alpha=cfg.alpha, uniform=uniform)
    return task_rows(source, cfg.eval_size, seed=cfg.seed + EVAL_SEED_OFFSET, split=split, alpha=cfg.alpha,
                     uniform=cfg.uniform)


def _storage_for(path: str, fmt: DataFormat) -> Storage:
    if fmt is DataFormat.JSONL:
        return Storage.JSONL
    if fmt is DataFormat.DISK:
        return Storage.DISK
    return detect_storage(path)  # auto, verl and trl: parquet, jsonl or folder by name


def check_sources(cfg: DataConfig, splits: tuple[str, ...] = ("train", "eval")) -> None:
    """DataError naming the first source of `splits` that cannot be read: an unknown built-in task, a file or
    folder that is not there, an extension no format reads. Nothing is read: `ulorl train` checks this at
    start, whether or not a warm start follows (before one, the data is also loaded: `run.session.check_data`,
    which is all `ulorl sft` asks of its held-out set)."""
    fmt = DataFormat(cfg.format)
    for source in [s for split in splits for s in cfg.sources(split)]:
        if source.startswith("builtin:"):
            _check_builtin(source)
        else:
            check_readable(source, _storage_for(source, fmt))


def _check_builtin(source: str) -> None:
    if source not in BUILTINS:
        raise DataError(f"unknown built-in source {source!r}; valid: {list(BUILTINS)}")


def read_source(source: str, cfg: DataConfig, split: str = "train") -> RawSource:
    """Read a source's raw rows and decide its schema (no validation yet)."""
    if source.startswith("builtin:"):
        return RawSource(source, list(builtin_rows(source, cfg, split)), None, verl_schema())
    fmt = DataFormat(cfg.format)
    storage = _storage_for(source, fmt)
    rows = read_rows(source, storage, split)
    if fmt is DataFormat.VERL:
        schema = verl_schema(cfg.prompt_key, cfg.data_source_key)
    elif fmt is DataFormat.AUTO:
        first = next((r for r in rows if isinstance(r, dict)), None)
        schema = guess_schema(first, cfg.prompt_key, cfg.answer_key, cfg.data_source_key)
    else:
        schema = RowSchema(cfg.prompt_key, cfg.answer_key, cfg.data_source_key)
    return RawSource(source, rows, storage, schema)


def validate_source(raw: RawSource, on_bad_row: str, skip_hint: str = "data.on_bad_row=skip"
                    ) -> tuple[list[ValidRow], LoadReport]:
    """Validate every row; with on_bad_row='error' raise on the first bad row (counting the others).

    `skip_hint` is how the caller's user skips bad rows (a config key, or a CLI flag for `ulorl clean`)."""
    report = LoadReport(source=raw.name, n_rows=len(raw.rows))
    default_source = Path(raw.name).stem if raw.storage is not None else raw.name
    valid, issues = [], []
    for i, row in enumerate(raw.rows):
        v = validate_row(row, i, raw.schema, default_source)
        (issues if isinstance(v, RowIssue) else valid).append(v)
    if issues and on_bad_row == "error":
        more = f" ({counted(len(issues) - 1, 'more bad row')})" if len(issues) > 1 else ""
        raise DataError(f"{issues[0].message(raw.name)}{more}; fix the data or set {skip_hint}")
    for issue in issues:
        report.add_bad(issue)
    return valid, report


def render_prompt(tokenizer, messages: list[dict], system_prompt: str | None = None,
                  template_kwargs: dict | None = None) -> str:
    """The prompt text: chat template with the generation prompt, or the contents joined (no template).

    `system_prompt` becomes the first message when the row has no system message of its own (a row's
    own system message wins); `template_kwargs` go to `apply_chat_template` (e.g. `enable_thinking`)."""
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                             **(template_kwargs or {}))
    return "\n\n".join(m["content"] for m in messages)


def encode_prompts(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of rendered prompts (special tokens added only when there is no chat template)."""
    if not texts:
        return []
    special = not getattr(tokenizer, "chat_template", None)
    return tokenizer(texts, add_special_tokens=special)["input_ids"]


def load_source(source: str, tokenizer, cfg: DataConfig, split: str = "train", id_offset: int = 0,
                skip_hint: str = "data.on_bad_row=skip") -> tuple[list[PromptRecord], LoadReport]:
    """Load, validate, render and length-filter one source (no shuffling).

    A record's `prompt_id` is its row index plus `id_offset` (rows of the sources loaded before it);
    `skip_hint` is how the caller's user skips bad rows, as for `validate_source`."""
    raw = read_source(source, cfg, split)
    valid, report = validate_source(raw, cfg.on_bad_row, skip_hint)
    rendered: list[tuple[ValidRow, str]] = []
    for v in valid:
        try:
            rendered.append((v, render_prompt(tokenizer, v.messages, cfg.system_prompt, cfg.chat_template_kwargs)))
        except Exception as e:  # the template rejected these messages (roles, order, ...)
            issue = RowIssue(v.index, raw.schema.prompt_key, "bad_messages", "messages the chat template accepts",
                             f"{type(e).__name__}: {e}")
            if cfg.on_bad_row == "error":
                raise DataError(f"{issue.message(raw.name)}; fix the data or set {skip_hint}") from e
            report.add_bad(issue)
    token_lists = encode_prompts(tokenizer, [t for _, t in rendered])
    records = []
    for (v, text), tokens in zip(rendered, token_lists):
        if len(tokens) > cfg.max_prompt_len:
            report.add_too_long(v.index)
            continue
        records.append(PromptRecord(v.index + id_offset, list(tokens), text, v.answer, v.data_source, v.extra_info))
    report.n_loaded = len(records)
    return records, report


def load_prompts(cfg: DataConfig, tokenizer, split: str = "train") -> tuple[list[PromptRecord], LoadReport]:
    """The prompts of `cfg.train` (split='train', shuffled when cfg.shuffle) or `cfg.eval` (split='eval').

    Several sources are concatenated in the order given; prompt ids count rows across them (the second
    source's first row has id = the first source's row count), so they stay unique and stable."""
    sources = cfg.sources(split)
    if not sources:
        raise ValueError("data.eval is null: there is no evaluation set to load")
    records, parts = [], []
    for source in sources:
        recs, rep = load_source(source, tokenizer, cfg, split, id_offset=sum(p.n_rows for p in parts))
        records += recs
        parts.append(rep)
    report = LoadReport.combine(parts)
    if not records:
        raise report.nothing_usable("data.max_prompt_len", cfg.max_prompt_len)
    if split == "train" and cfg.shuffle:
        random.Random(cfg.seed).shuffle(records)
    return records, report
