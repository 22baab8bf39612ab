"""`ulorl eval --model PATH --data FILE [FILE ...]`: results.json and report.md in the output folder."""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import fields
from pathlib import Path

from ulorl.config.data import BUILTIN_CHAIN, BadRowPolicy, DataConfig, DataFormat
from ulorl.config.evaluation import EvalConfig
from ulorl.config.loader import build, read_yaml
from ulorl.config.machine import check_device, check_judge_runnable
from ulorl.config.model import MODEL_DTYPES
from ulorl.config.rollout import TorchEngineConfig
from ulorl.config.train import CPU_NUMERICS
from ulorl.data.loaders import load_source
from ulorl.errors import ConfigError, check_choice
from ulorl.evaluation.evaluator import EvalResult, evaluate, reward_failure_note
from ulorl.evaluation.reference import reference_means, referenced_rows, score_eval_references
from ulorl.logging.base import json_text
from ulorl.reward.cli_args import add_reward_arguments, reward_config_from_args

_DEFAULTS = {f.name: f.default for f in fields(EvalConfig) if f.name != "pass_k"}
# flag -> the `eval:` field it sets; a flag left out takes the field from --config's eval section, else the default
_EVAL_FLAGS = ("k", "temperature", "top_p", "top_k", "max_new_tokens", "num_problems", "pass_k", "seed",
               "batch_size", "reference", "reference_problems", "long_tokens")
# flag -> the `data:` field it sets, as for _EVAL_FLAGS
_DATA_FLAGS = ("format", "prompt_key", "answer_key", "data_source_key", "max_prompt_len", "on_bad_row")
_MAX_PROMPT_LEN = 4096  # without a preset: evaluation sets have longer prompts than the training default


def add_eval_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `ulorl eval` (defaults: the paper's evaluation protocol)."""
    parser.add_argument("--model", default=None, help="local HF model folder, a .gguf, or 'builtin' (default: "
                        "model.path of --config, else builtin)")
    parser.add_argument("--data", nargs="+", default=None,
                        help="one or more sources: builtin:chain, .parquet, .jsonl or save_to_disk folders "
                        "(default: data.eval of --config, drawn as its data section says, else builtin:chain)")
    parser.add_argument("--output", "-o", default=None,
                        help="folder for results.json and report.md (default: runs/eval-<timestamp>); an earlier "
                             "evaluation's files there are moved into earlier-<time>/")
    # the evaluation protocol: each flag left out comes from --config's eval section, else the paper's default
    parser.add_argument("--k", type=int, default=None, help=f"samples per problem (default {_DEFAULTS['k']}, "
                        "the paper's)")
    parser.add_argument("--pass-k", type=int, nargs="+", default=None, help="pass@k values to report (<= k)")
    parser.add_argument("--temperature", type=float, default=None, help=f"default {_DEFAULTS['temperature']}")
    parser.add_argument("--top-p", type=float, default=None, help=f"default {_DEFAULTS['top_p']}")
    parser.add_argument("--top-k", type=int, default=None, help=f"-1: off (default {_DEFAULTS['top_k']})")
    parser.add_argument("--max-new-tokens", type=int, default=None, help=f"default {_DEFAULTS['max_new_tokens']}")
    parser.add_argument("--num-problems", type=int, default=None, help="evaluate the first N problems of each set")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="sequences decoded at once (torch engine rows; other engines: prefixes per call)")
    parser.add_argument("--seed", type=int, default=None, help=f"default {_DEFAULTS['seed']}")
    parser.add_argument("--reference", action="store_true", default=None,
                        help="also the exact probability that the sampler writes each row's worked solution "
                             "(extra_info.solution, the built-in tasks'): avg@infinity without sampling noise")
    parser.add_argument("--reference-problems", type=int, default=None,
                        help="with --reference, score the first N problems of each set exactly (>= --num-problems, "
                             "which are sampled): one forward pass each (default: the sampled ones)")
    parser.add_argument("--long-tokens", type=int, default=None,
                        help=f"with --reference, also the mean over problems whose worked solution has at least this "
                             f"many tokens (default {_DEFAULTS['long_tokens']})")
    # how rows are read: each flag left out comes from --config's data section, else the default shown
    parser.add_argument("--format", default=None, choices=[f.value for f in DataFormat],
                        help="how the rows are laid out (default auto: by name and columns)")
    parser.add_argument("--prompt-key", default=None, help="default prompt")
    parser.add_argument("--answer-key", default=None, help="default answer")
    parser.add_argument("--data-source-key", default=None, help="default data_source")
    parser.add_argument("--max-prompt-len", type=int, default=None,
                        help=f"default {_MAX_PROMPT_LEN}; with --config, its data.max_prompt_len as training reads it")
    parser.add_argument("--on-bad-row", default=None, choices=[b.value for b in BadRowPolicy],
                        help="skip: count bad rows in the report and go on (default error)")
    parser.add_argument("--dtype", default="float32", choices=MODEL_DTYPES)
    parser.add_argument("--cpu-numerics", default=None, choices=sorted(CPU_NUMERICS),
                        help="native | portable: pinned CPU kernels, as train.cpu_numerics (default: "
                        "train.cpu_numerics of --config, else native)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--engine", default=None, help="torch | hf | vllm (default: rollout.engine of --config, "
                        "else torch)")
    parser.add_argument("--procs", type=int, default=None, help="torch engine on CPU: processes that share each "
                        "call's rows, one thread each (default: rollout.torch.procs of --config, else 1)")
    parser.add_argument("--system-prompt", default=None, help="system message for every prompt that has none "
                        "(default: data.system_prompt of --config)")
    parser.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                        help='arguments for apply_chat_template, e.g. \'{"enable_thinking": false}\' '
                        "(default: data.chat_template_kwargs of --config)")
    parser.add_argument("--trust-remote-code", action="store_true")
    add_reward_arguments(parser)  # --config / --reward: the same reward settings as training (judge included)
    return parser


def _name(source: str) -> str:
    return source if source.startswith("builtin:") else Path(source).name


def set_names(sources: list[str]) -> list[str]:
    """The result name of each source: its file name, or the source as given where two share a file name (each is
    evaluated and reported on its own). A source given twice is a `ConfigError`."""
    twice = sorted({s for s in sources if sources.count(s) > 1})
    if twice:
        raise ConfigError(f"--data {' '.join(twice)}: given more than once; name each source once")
    short = [_name(s) for s in sources]
    return [n if short.count(n) == 1 else s for n, s in zip(short, sources)]


def _preset(args: argparse.Namespace, section: str) -> dict:
    """One section of the `--config` preset ({} without one)."""
    if not args.config:
        return {}
    data = read_yaml(Path(args.config)) or {}  # a file that does not parse or read: one line naming it
    if not isinstance(data, dict) or not isinstance(data.get(section) or {}, dict):
        raise ConfigError(f"config file {args.config}: expected a mapping with a '{section}:' mapping")
    return data.get(section) or {}


def eval_config(args: argparse.Namespace) -> EvalConfig:
    """The evaluation protocol: the flags given, else --config's `eval:` section, else `EvalConfig`'s defaults."""
    merged = dict(_preset(args, "eval"))
    given = {k: getattr(args, k) for k in _EVAL_FLAGS if getattr(args, k) is not None}
    merged.update(given)
    cfg = _build_named(EvalConfig, merged, "eval.", given, args)
    if args.pass_k and max(args.pass_k) > cfg.k:  # asked for by name: not dropped as a preset's larger ones are
        raise ConfigError(f"--pass-k {' '.join(map(str, args.pass_k))}: pass@k needs k samples a problem, and "
                          f"--k is {cfg.k}; raise --k to {max(args.pass_k)} or drop the larger values")
    return cfg


def _build_named(cls, merged: dict, prefix: str, given, args: argparse.Namespace):
    """`build(cls, merged, prefix)`, its error named as the user gave the value: the flag (a key in `given`, a
    flag of the same name), or --config's file."""
    try:
        return build(cls, merged, prefix)
    except ConfigError as e:
        key = re.search(rf"{re.escape(prefix)}(\w+)", str(e))
        if key and key.group(1) in given:
            raise ConfigError(f"--{key.group(1).replace('_', '-')}: {e}") from e
        raise ConfigError(f"config file {args.config}: {e}") if key and args.config else e


def model_path(args: argparse.Namespace) -> str:
    """`--model`, else --config's `model.path`, else the built-in model."""
    return args.model or str(_preset(args, "model").get("path") or "builtin")


def run_config_of(model: str) -> Path | None:
    """The `config.yaml` of the `ulorl train` / `ulorl sft` run folder a model folder sits in (RUN/export,
    RUN/warm_start/model, RUN/checkpoints/step_N/model, an SFT run's RUN/model), or None. A run's config is the
    one with an `eval:` section, so a stray config.yaml above an unrelated folder is not taken for one; a run without
    a held-out set (`data.eval: null`) gives None too: its config has nothing to score the model on."""
    import yaml

    if not Path(model).is_dir():  # a .gguf file, a package's name, the built-in model
        return None
    for folder in list(Path(model).resolve().parents)[:3]:
        config = folder / "config.yaml"
        try:
            if config.is_file() and isinstance(data := yaml.safe_load(config.read_text()), dict) and "eval" in data:
                if not _has_held_out(data):
                    return None
                relative = os.path.relpath(config)  # as the user would type it, where it is below this folder
                return config if relative.startswith("..") else Path(relative)
        except (OSError, yaml.YAMLError):  # not a run's config: no hint
            continue
    return None


def _has_held_out(run_config: dict) -> bool:
    """Whether a run's config names a held-out set: `data.eval` not null (absent: the default, the built-in task)."""
    data = run_config.get("data") or {}
    return isinstance(data, dict) and data.get("eval", BUILTIN_CHAIN) is not None


def data_sources(args: argparse.Namespace) -> list[str]:
    """`--data`, else --config's `data.eval` (one source or a list), else the built-in chain task."""
    if args.data:
        return list(args.data)
    data = _preset(args, "data")
    if "eval" not in data:
        return [BUILTIN_CHAIN]
    sources = data["eval"]
    if not sources:
        raise ConfigError(f"{args.config}: data.eval is null, so there is no held-out set to evaluate; "
                          "name one with --data")
    return list(sources) if isinstance(sources, list) else [sources]


def data_config(args: argparse.Namespace, cfg: EvalConfig) -> DataConfig:
    """How the sources are read and drawn.

    With --config: its `data:` section as training reads it (so a built-in task's held-out set is the one its
    training run evaluates on: size law, seed, size), with at least `num_problems` problems drawn. Without one:
    prompts of up to 4,096 tokens, and a built-in task of `num_problems` problems drawn with the evaluation seed.
    The reading flags win over both."""
    if args.config:  # its sources are the ones evaluated (`data_sources`); its train split's settings do not apply
        merged = {k: v for k, v in _preset(args, "data").items() if k not in ("train", "eval", "train_uniform")}
        size = merged.get("eval_size", DataConfig.eval_size)
        if isinstance(size, int):  # anything else: DataConfig names the field
            merged["eval_size"] = max(size, cfg.num_problems or 0, cfg.reference_problems or 0)
    else:
        merged = {"max_prompt_len": _MAX_PROMPT_LEN, "seed": cfg.seed,
                  "eval_size": cfg.reference_problems or cfg.num_problems or DataConfig.eval_size}
    given = {k: getattr(args, k) for k in _DATA_FLAGS if getattr(args, k) is not None}
    sources = data_sources(args)  # what is read, so that a size law is checked against those tasks
    merged |= given | {"shuffle": False, "train": sources, "eval": sources} | _prompt_options(args)
    return _build_named(DataConfig, merged, "data.", given, args)


def cpu_numerics(args: argparse.Namespace) -> str:
    """`--cpu-numerics`, else --config's `train.cpu_numerics`, else native (checked as the config checks it)."""
    mode = args.cpu_numerics or _preset(args, "train").get("cpu_numerics") or "native"
    check_choice("train.cpu_numerics", mode, CPU_NUMERICS)
    return mode


def _engine_name(args: argparse.Namespace) -> str:
    if args.engine:
        from ulorl.rollout.engines.registry import EngineName

        check_choice("--engine", args.engine, EngineName)
        return args.engine
    engine = _preset(args, "rollout").get("engine")
    if engine:
        return str(engine)
    from ulorl.config import RolloutConfig

    return RolloutConfig().engine


def torch_options(args: argparse.Namespace) -> TorchEngineConfig:
    """The torch engine's options: --config's `rollout.torch`, `--procs` over it."""
    merged = dict(_preset(args, "rollout").get("torch") or {})
    given = {"procs": args.procs} if args.procs is not None else {}
    return _build_named(TorchEngineConfig, merged | given, "rollout.torch.", given, args)


def _prompt_options(args: argparse.Namespace) -> dict:
    """system_prompt and chat_template_kwargs: the flags, else the preset's data section."""
    data = _preset(args, "data")
    kwargs = data.get("chat_template_kwargs") or {}
    if args.chat_template_kwargs is not None:
        try:
            kwargs = json.loads(args.chat_template_kwargs)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--chat-template-kwargs: not JSON ({e}); "
                              "e.g. '{\"enable_thinking\": false}'") from None
        if not isinstance(kwargs, dict):
            raise ConfigError("--chat-template-kwargs: expected a JSON object")
    system = args.system_prompt if args.system_prompt is not None else data.get("system_prompt")
    return {"system_prompt": system, "chat_template_kwargs": kwargs}


def add_reference(result: EvalResult, model, tokenizer, records: list, cfg: EvalConfig) -> None:
    """The exact P(worked solution) of each problem `cfg.referenced` names, under the evaluation's sampling, into
    `result`: in the rows of the sampled ones (`reference_prob`, `reference_tokens`), in `result.reference_only`
    for the rest, and their means (`reference/p_correct`, `reference/p_correct_long` over the problems of >=
    `cfg.long_tokens` solution tokens, and how many: `reference/problems`)."""
    scored = cfg.referenced(records)
    scores = score_eval_references(model, tokenizer, scored, cfg, progress=True)
    n = len(result.per_problem)
    for row, sc in zip(result.per_problem, scores):
        row.update(reference_prob=sc.prob, reference_tokens=sc.tokens)
    result.reference_only = [{"prompt_id": rec.prompt_id, "reference_prob": sc.prob, "reference_tokens": sc.tokens}
                             for rec, sc in zip(scored[n:], scores[n:])]
    result.summary.update(reference_means(scores, cfg.long_tokens))


def context_warning(path, sets: dict[str, list], max_new_tokens: int) -> str | None:
    """A line when the longest prompt loaded and `max_new_tokens` reach past the positions the model was made for
    (as `ulorl train` says at start: transformers goes on with RoPE past them without a word)."""
    from ulorl.models.loading import positions_short_of

    longest = max((len(r.prompt_tokens) for records in sets.values() for r in records), default=0)
    positions = positions_short_of(path, longest + max_new_tokens)
    if positions is None:
        return None
    return (f"warning: the longest prompt ({longest:,} tokens) + --max-new-tokens ({max_new_tokens:,}) = "
            f"{longest + max_new_tokens:,} positions, past the {positions:,} of {path} (max_position_embeddings): "
            "positions beyond it are extrapolated")


EVAL_OUTPUTS = ("results.json", "report.md")  # what `ulorl eval` writes into its folder


def output_dir(args: argparse.Namespace) -> Path:
    """`--output`, else `runs/eval-<timestamp>`, created private (0700) as every run folder; an `OSError` naming it
    when it is a file, lies under one or cannot be written."""
    from ulorl.run.checkpoint import make_run_dir

    return make_run_dir(args.output or Path("runs") / f"eval-{time.strftime('%Y%m%d-%H%M%S')}")


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate `args.model` on every `args.data` source; write results.json and report.md."""
    from ulorl.durable import atomic_write_text
    from ulorl.models import eos_token_ids, load_model, load_tokenizer
    from ulorl.models.loading import is_builtin, resolve_model_path
    from ulorl.reward import RewardManager
    from ulorl.rollout.engines.base import close_engine
    from ulorl.rollout.engines.registry import build_engine
    from ulorl.run.numerics import apply_cpu_numerics, numerics_report
    from ulorl.run.session import set_aside_earlier_run

    numerics = cpu_numerics(args)
    apply_cpu_numerics(numerics)  # before any tensor operation, as `ulorl train` does
    check_device("--device", args.device, "--device cpu")
    reward_cfg = reward_config_from_args(args)  # a bad function fails here, before any model loads
    check_judge_runnable(reward_cfg)  # and a judge without its key or with an unusable local model
    cfg, path = eval_config(args), model_path(args)
    data_cfg, sources = data_config(args, cfg), data_sources(args)
    # resolved as the loaders will (a GGUF converts once), an unusable model named as the user gave it
    resolve_model_path(path, "--model" if args.model else "model.path")
    tokenizer = load_tokenizer(path, trust_remote_code=args.trust_remote_code)
    sets = {}
    for source, name in zip(sources, set_names(sources)):  # load and validate all before the first sample is drawn
        records, report = load_source(source, tokenizer, data_cfg, split="eval", skip_hint="--on-bad-row skip")
        if not records:  # before the model loads
            raise report.nothing_usable("--max-prompt-len", data_cfg.max_prompt_len)
        print(report.summary())
        if cfg.reference:
            referenced_rows(cfg, records, source, "--reference")
        reward_cfg.check_rows(records, source)
        sets[name] = records
    warning = context_warning(path, sets, cfg.max_new_tokens)
    if warning:
        print(warning)
    if is_builtin(path):
        print(f"note: --model {path} is the built-in tiny model with random weights, not a trained one (a run's: "
              "--model RUN/export)")
    elif not args.config and (run_config := run_config_of(path)) is not None:
        print(f"note: {path} comes from the run in {run_config.parent}, whose report scored it with that run's "
              f"`eval:` settings and held-out set; add --config {run_config} to score it the same way (flags "
              "still win)")
    model = load_model(path, dtype=args.dtype, trust_remote_code=args.trust_remote_code, device=args.device)
    out = output_dir(args)  # once the model and data load; an unusable folder fails before the evaluation
    engine = build_engine(_engine_name(args), model, tokenizer, eos_token_ids(model, tokenizer),
                          max_batch=cfg.batch_size, model_path=path, seed=cfg.seed, torch=torch_options(args))
    results: dict[str, EvalResult] = {}
    try:
        with RewardManager(reward_cfg) as rm:
            for name, records in sets.items():
                results[name] = evaluate(engine, tokenizer, records, cfg, rm.score_detailed, name=name)
                if note := reward_failure_note(results[name]):
                    print(note)
                if cfg.reference:
                    add_reference(results[name], model, tokenizer, records, cfg)
                s = results[name].summary
                print(f"{name}: avg@{cfg.k}={s['avg@k']:.4f} " + " ".join(
                    f"{k}={v:.4f}" for k, v in s.items() if k.startswith(("pass@", "reference/"))) +
                    f" truncation_rate={s['truncation_rate']:.3f} mean_length={s['response_length/mean']:.1f}")
    finally:
        close_engine(engine)
    set_aside_earlier_run(out, EVAL_OUTPUTS, "evaluation")
    payload = {"model": path, "datasets": {n: r.to_dict() for n, r in results.items()},
               "cpu_numerics": numerics_report(numerics)}
    atomic_write_text(out / "results.json", json_text(payload, indent=2))
    md = [f"# Evaluation of `{path}`", ""] + [r.to_markdown() for r in results.values()]
    atomic_write_text(out / "report.md", "\n".join(md))
    print(f"wrote {out / 'results.json'} and {out / 'report.md'}")
    return 0
