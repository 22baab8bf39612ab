"""`ulorl clean`: run cleaning steps over a dataset and write the cleaned file plus a report.

`clean_rows` applies the steps in order; every step sees only the rows the earlier
steps kept. The report (`OUTPUT.report.json`, i.e. the output path + `.report.json`)
lists per step how many rows were kept, changed and removed, counts by reason and
the first few examples of each reason (row = index in the input file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ulorl.cleaning.steps import (MODEL_STEPS, RULE_STEPS, STEPS, Action, CleanContext, CleanOptions, CleanStep,
                                  parse_steps)
from ulorl.config.data import BadRowPolicy, DataConfig, DataFormat
from ulorl.config.machine import check_device, check_judge_runnable
from ulorl.config.model import MODEL_DTYPES
from ulorl.data.formats import Storage, detect_storage, disk_splits, output_storage, write_rows
from ulorl.data.loaders import read_source, validate_source
from ulorl.data.records import DataError, counted
from ulorl.data.validate import RowSchema, ValidRow, get_path, guess_schema, set_path
from ulorl.durable import atomic_write_text
from ulorl.errors import ConfigError
from ulorl.reward.cli_args import add_reward_arguments, reward_config_from_args
from ulorl.rollout.engines.registry import EngineName

EXAMPLES_PER_REASON = 3
EXAMPLE_CHARS = 200


@dataclass
class StepReport:
    name: str
    n_in: int = 0
    n_kept: int = 0
    n_changed: int = 0
    n_removed: int = 0
    reasons: dict[str, int] = field(default_factory=dict)  # "removed: why" / "changed: why" -> count
    examples: list[dict] = field(default_factory=list)


@dataclass
class CleanReport:
    n_in: int
    n_out: int = 0
    steps: list[StepReport] = field(default_factory=list)
    validation: dict = field(default_factory=dict)  # bad input rows skipped before cleaning (run_clean)

    def to_dict(self) -> dict:
        return asdict(self)


def _example(row_id: int, ctx: CleanContext, before: dict, d) -> dict:
    ex = {"row": row_id, "action": d.action.value, "reason": d.reason,
          "question": ctx.question(before)[:EXAMPLE_CHARS], "answer": ctx.answer(before)[:EXAMPLE_CHARS]}
    if d.note:
        ex["note"] = d.note
    if d.row is not None:
        ex["new_answer"] = ctx.answer(d.row)[:EXAMPLE_CHARS]
        if ctx.question(d.row) != ctx.question(before):
            ex["new_question"] = ctx.question(d.row)[:EXAMPLE_CHARS]
    return ex


def _model_context(ctx: CleanContext, stack: contextlib.ExitStack, model_paths: list[str] | None,
                   device: str, dtype: str, engine: str) -> None:
    """Fill in samplers (one per model path), the reward scorer and the answer extractor when missing."""
    o = ctx.options
    if not ctx.samplers:
        if not model_paths:
            raise DataError(f"cleaning steps {[s.value for s in MODEL_STEPS]} need at least one model (--model PATH)")
        from ulorl.cleaning.model_sampler import ResponseSampler
        from ulorl.rollout.engines.base import SamplingParams

        ctx.samplers = [ResponseSampler.from_path(p, device=device, dtype=dtype, engine=engine,
                                                  params=SamplingParams(temperature=o.temperature),
                                                  max_new_tokens=o.max_new_tokens, batch_size=o.batch_size,
                                                  seed=o.seed) for p in model_paths]
    if ctx.score_fn is None:
        from ulorl.reward import RewardManager
        from ulorl.config import RewardConfig

        ctx.score_fn = stack.enter_context(RewardManager(RewardConfig())).score
    if ctx.extract_fn is None:
        from ulorl.reward import extract_answer

        ctx.extract_fn = extract_answer


def clean_rows(
    rows: list[dict],
    steps: str | list[str | CleanStep],
    *,
    model_paths: list[str] | None = None,
    k: int = 8,
    schema: RowSchema | None = None,
    options: CleanOptions | None = None,
    samplers: list | None = None,
    score_fn=None,
    extract_fn=None,
    row_ids: list[int] | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    reward=None,
    engine: str = EngineName.HF.value,
) -> tuple[list[dict], CleanReport]:
    """Apply `steps` in order to (validated) rows; return the kept rows and the report.

    `schema` says where prompt/answer/data source live (default: guessed from the first
    row, verl's or flat `prompt`/`answer`). Model-based steps use `samplers` (callables
    `(messages_list, k) -> list[list[str]]`) or load one `ResponseSampler` per model path
    behind the registry engine `engine`;
    `score_fn` defaults to the reward package's `RewardManager`. `options.k` overrides `k`.
    """
    step_list = parse_steps(steps)
    options = options or CleanOptions(k=k)
    schema = schema or guess_schema(rows[0] if rows else None, "prompt", "answer", "data_source")
    ctx = CleanContext(schema, options, list(samplers or []), score_fn, extract_fn)
    ids = list(row_ids) if row_ids is not None else list(range(len(rows)))
    report = CleanReport(n_in=len(rows))
    current = list(zip(ids, rows))
    with contextlib.ExitStack() as stack:
        if any(s in MODEL_STEPS for s in step_list) and current:
            if ctx.score_fn is None and reward is not None:  # the run's reward settings (judge included)
                from ulorl.reward import RewardManager

                ctx.score_fn = stack.enter_context(RewardManager(reward)).score
            _model_context(ctx, stack, model_paths, device, dtype, engine)
        for step in step_list:
            sr = StepReport(name=step.value, n_in=len(current))
            decisions = STEPS[step]([r for _, r in current], ctx)
            nxt = []
            for (rid, row), d in zip(current, decisions):
                if d.action is Action.REMOVED:
                    sr.n_removed += 1
                elif d.action is Action.CHANGED:
                    sr.n_changed += 1
                    nxt.append((rid, d.row))
                else:
                    sr.n_kept += 1
                    nxt.append((rid, row))
                if d.action is not Action.KEPT:
                    key = f"{d.action.value}: {d.reason}"
                    sr.reasons[key] = sr.reasons.get(key, 0) + 1
                    if sum(e["reason"] == d.reason for e in sr.examples) < EXAMPLES_PER_REASON:
                        sr.examples.append(_example(rid, ctx, row, d))
            report.steps.append(sr)
            current = nxt
    report.n_out = len(current)
    return [r for _, r in current], report


def add_clean_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `ulorl clean`."""
    o = CleanOptions()
    parser.add_argument("--input", required=True, help=".parquet, .jsonl or save_to_disk folder (or builtin:chain)")
    parser.add_argument("--output", "-o", required=True,
                        help="cleaned file (.jsonl or .parquet; default: input's format)")
    parser.add_argument("--steps", default=None,
                        help=f"comma-separated, in order, from {[s.value for s in CleanStep]} "
                             "(default: the rule steps, plus too_easy,consensus when --model is given)")
    parser.add_argument("--model", nargs="+", action="extend", default=[], help="model folder(s) for model steps")
    parser.add_argument("--k", type=int, default=o.k, help="samples per problem and model")
    parser.add_argument("--temperature", type=float, default=o.temperature)
    parser.add_argument("--max-new-tokens", type=int, default=o.max_new_tokens)
    parser.add_argument("--batch-size", type=int, default=o.batch_size)
    parser.add_argument("--seed", type=int, default=o.seed)
    parser.add_argument("--max-answer-chars", type=int, default=o.max_answer_chars)
    parser.add_argument("--max-list-items", type=int, default=o.max_list_items)
    parser.add_argument("--consensus-threshold", type=float, default=o.consensus_threshold)
    parser.add_argument("--format", default="auto", choices=[f.value for f in DataFormat],
                        help="how the input is laid out (default: by name and columns)")
    parser.add_argument("--prompt-key", default="prompt")
    parser.add_argument("--answer-key", default="answer")
    parser.add_argument("--data-source-key", default="data_source")
    parser.add_argument("--on-bad-row", default="error", choices=[b.value for b in BadRowPolicy],
                        help="skipped rows are counted in the report")
    parser.add_argument("--engine", default=EngineName.HF.value, choices=[e.value for e in EngineName],
                        help="engine the model steps sample through (default hf: any transformers LM)")
    parser.add_argument("--dtype", default="float32", choices=MODEL_DTYPES)
    parser.add_argument("--device", default="cpu")
    add_reward_arguments(parser)  # --config / --reward: how model samples are scored, as in training
    return parser


def _output_storage(output: str, input_storage: Storage | None) -> Storage:
    if Path(output).suffix or Path(output).is_dir():
        return output_storage(output)
    if input_storage is None:
        raise DataError(f"--output {output!r}: name it .jsonl or .parquet")
    return input_storage


def _input_storage(args: argparse.Namespace) -> Storage | None:
    """The input's storage as `read_source` will see it; a name it cannot place is an error naming --format."""
    if args.input.startswith("builtin:"):
        return None
    fixed = {DataFormat.JSONL.value: Storage.JSONL, DataFormat.DISK.value: Storage.DISK}
    return fixed.get(args.format) or detect_storage(args.input, "pass --format jsonl or --format disk")


def _decoded_prompt(row: dict, v: ValidRow, schema: RowSchema) -> dict:
    """The row with its prompt as validated text when it was stored as bytes (a binary parquet column)."""
    raw = get_path(row, schema.prompt_key)
    binary = isinstance(raw, (bytes, bytearray)) or (
        isinstance(raw, (list, tuple)) and any(isinstance(m, dict) and any(isinstance(x, bytes) for x in m.values())
                                               for m in raw))
    return set_path(row, schema.prompt_key, v.prompt) if binary else row


def run_clean(args: argparse.Namespace) -> int:
    """Read, validate, clean and write; the report goes to `<output>.report.json`."""
    reward = reward_config_from_args(args)  # a bad reward function fails before any data or model loads
    if args.model:  # the model steps score samples with it: its judge too
        check_judge_runnable(reward)
    data_cfg = DataConfig(format=args.format, prompt_key=args.prompt_key, answer_key=args.answer_key,
                          data_source_key=args.data_source_key, on_bad_row=args.on_bad_row)
    if args.steps is not None and not args.steps.strip(", "):  # `--steps ""` ran the default steps, silently
        raise DataError(f"--steps {args.steps!r}: names no step; leave it out for the default steps or name some "
                        f"of {[s.value for s in CleanStep]}")
    steps = args.steps or ",".join(s.value for s in RULE_STEPS + (MODEL_STEPS if args.model else []))
    try:
        options = CleanOptions(k=args.k, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                               batch_size=args.batch_size, seed=args.seed, max_answer_chars=args.max_answer_chars,
                               max_list_items=args.max_list_items, consensus_threshold=args.consensus_threshold)
    except ValueError as e:  # named as the flag the user typed: clean.max_new_tokens -> --max-new-tokens
        raise ConfigError(re.sub(r"clean\.(\w+)", lambda m: "--" + m.group(1).replace("_", "-"), str(e))) from None
    try:
        parse_steps(steps)  # fail on a typo before reading anything
    except ValueError as e:
        raise DataError(f"--steps: {e}") from None
    if any(s in MODEL_STEPS for s in parse_steps(steps)) and not args.model:
        raise DataError(f"--steps {steps}: steps {[s.value for s in MODEL_STEPS]} need at least one --model PATH")
    if args.model:  # the model steps run on it
        check_device("--device", args.device, "--device cpu")
    out_storage = _output_storage(args.output, _input_storage(args))
    raw = read_source(args.input, data_cfg, split="train")
    if (splits := disk_splits(args.input, "train")) is not None and splits[1]:  # said, not dropped in silence
        print(f"note: {args.input} is a DatasetDict; its '{splits[0]}' split is cleaned, not {', '.join(splits[1])} "
              f"(give {Path(args.input) / splits[1][0]} as --input to clean that one)")
    if not raw.rows:
        raise DataError(f"{args.input}: no rows to clean (the file is empty); nothing was written")
    valid, load_report = validate_source(raw, args.on_bad_row, skip_hint="--on-bad-row skip")
    if not valid:  # skipped, every one: a wrong --prompt-key or --format reads so, and an empty output hid it
        raise DataError(f"{args.input}: no usable row ({counted(len(raw.rows), 'bad row')} skipped; first: "
                        f"{load_report.examples[0]}); nothing was written (--prompt-key, --answer-key and --format "
                        "say how rows are read)")
    load_report.n_loaded = len(valid)
    rows = [_decoded_prompt(raw.rows[v.index], v, raw.schema) for v in valid]
    cleaned, report = clean_rows(rows, steps, model_paths=args.model, schema=raw.schema, options=options,
                                 row_ids=[v.index for v in valid], device=args.device, dtype=args.dtype,
                                 reward=reward, engine=args.engine)
    report.validation = asdict(load_report)
    write_rows(cleaned, args.output, out_storage)
    report_path = Path(f"{Path(args.output)}.report.json")  # beside the output, also when given as `out.jsonl/`
    atomic_write_text(report_path, json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    print(f"{args.input}: {counted(load_report.n_rows, 'row')}, {counted(load_report.n_skipped, 'bad row')} skipped")
    for s in report.steps:
        print(f"  {s.name}: {s.n_in} in, {s.n_removed} removed, {s.n_changed} changed")
    print(f"wrote {counted(len(cleaned), 'row')} to {args.output} and the report to {report_path}")
    return 0
