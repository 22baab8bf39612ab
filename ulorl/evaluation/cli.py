"""`ulorl eval --model PATH --data FILE [FILE ...]`: results.json and report.md in the output folder."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path

from ulorl.config.data import DataConfig
from ulorl.config.evaluation import EvalConfig
from ulorl.config.loader import build
from ulorl.data.loaders import load_source
from ulorl.errors import ConfigError
from ulorl.evaluation.evaluator import EvalResult, evaluate
from ulorl.reward.cli_args import add_reward_arguments, reward_config_from_args

_DEFAULTS = {f.name: f.default for f in fields(EvalConfig) if f.name != "pass_k"}
# flag -> the `eval:` field it sets; a flag left out takes the field from --config's eval section, else the default
_EVAL_FLAGS = ("k", "temperature", "top_p", "top_k", "max_new_tokens", "num_problems", "pass_k", "seed",
               "batch_size")


def add_eval_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of `ulorl eval` (defaults: the paper's evaluation protocol)."""
    parser.add_argument("--model", default=None, help="local HF model folder, a .gguf, or 'builtin' (default: "
                        "model.path of --config, else builtin)")
    parser.add_argument("--data", nargs="+", default=["builtin:chain"],
                        help="one or more sources: builtin:chain, .parquet, .jsonl or save_to_disk folders")
    parser.add_argument("--output", "-o", default="runs/eval", help="folder for results.json and report.md")
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
    parser.add_argument("--format", default="auto", help="auto | verl | jsonl | trl | disk")
    parser.add_argument("--prompt-key", default="prompt")
    parser.add_argument("--answer-key", default="answer")
    parser.add_argument("--data-source-key", default="data_source")
    parser.add_argument("--max-prompt-len", type=int, default=4096)
    parser.add_argument("--on-bad-row", default="error", help="error | skip")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--engine", default=None, help="torch | hf | vllm (default: rollout.engine of --config, "
                        "else torch)")
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


def _preset(args: argparse.Namespace, section: str) -> dict:
    """One section of the `--config` preset ({} without one)."""
    if not args.config:
        return {}
    import yaml

    return (yaml.safe_load(Path(args.config).read_text()) or {}).get(section) or {}


def eval_config(args: argparse.Namespace) -> EvalConfig:
    """The evaluation protocol: the flags given, else --config's `eval:` section, else `EvalConfig`'s defaults."""
    merged = dict(_preset(args, "eval"))
    merged.update({k: getattr(args, k) for k in _EVAL_FLAGS if getattr(args, k) is not None})
    return build(EvalConfig, merged, "eval.")


def model_path(args: argparse.Namespace) -> str:
    """`--model`, else --config's `model.path`, else the built-in model."""
    return args.model or str(_preset(args, "model").get("path") or "builtin")


def _engine_name(args: argparse.Namespace) -> str:
    if args.engine:
        return args.engine
    engine = _preset(args, "rollout").get("engine")
    if engine:
        return str(engine)
    from ulorl.config import RolloutConfig

    return RolloutConfig().engine


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


def run_eval(args: argparse.Namespace) -> int:
    """Evaluate `args.model` on every `args.data` source; write results.json and report.md."""
    from ulorl.models import eos_token_ids, load_model, load_tokenizer
    from ulorl.reward import RewardManager
    from ulorl.rollout.engines.registry import build_engine

    reward_cfg = reward_config_from_args(args)  # a bad function fails here, before any model loads
    cfg, path = eval_config(args), model_path(args)
    data_cfg = DataConfig(format=args.format, prompt_key=args.prompt_key, answer_key=args.answer_key,
                          data_source_key=args.data_source_key, max_prompt_len=args.max_prompt_len,
                          on_bad_row=args.on_bad_row, eval_size=cfg.num_problems or DataConfig.eval_size,
                          seed=cfg.seed, shuffle=False, **_prompt_options(args))
    tokenizer = load_tokenizer(path, trust_remote_code=args.trust_remote_code)
    sets = {}
    for source in args.data:  # load (and validate) everything before the first sample is drawn
        records, report = load_source(source, tokenizer, data_cfg, split="eval")
        print(report.summary())
        sets[_name(source)] = records
    model = load_model(path, dtype=args.dtype, trust_remote_code=args.trust_remote_code, device=args.device)
    engine = build_engine(_engine_name(args), model, tokenizer, eos_token_ids(model, tokenizer),
                          max_batch=cfg.batch_size, model_path=path, seed=cfg.seed)
    results: dict[str, EvalResult] = {}
    with RewardManager(reward_cfg) as rm:
        for name, records in sets.items():
            results[name] = evaluate(engine, tokenizer, records, cfg, rm.score, name=name)
            s = results[name].summary
            print(f"{name}: avg@{cfg.k}={s['avg@k']:.4f} " + " ".join(
                f"{k}={v:.4f}" for k, v in s.items() if k.startswith("pass@")) +
                f" truncation_rate={s['truncation_rate']:.3f} mean_length={s['response_length/mean']:.1f}")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True, mode=0o700)  # private, like every run folder
    payload = {"model": path, "datasets": {n: r.to_dict() for n, r in results.items()}}
    (out / "results.json").write_text(json.dumps(payload, indent=2))
    md = [f"# Evaluation of `{path}`", ""] + [r.to_markdown() for r in results.values()]
    (out / "report.md").write_text("\n".join(md))
    print(f"wrote {out / 'results.json'} and {out / 'report.md'}")
    return 0
