"""`ulorl sft` end to end: warm start, then held-out accuracy and the length distribution.

The report (`sft_report.json` in the run folder) gives the SFT's steps (and its last checks' mean P(worked
solution): at length with `sft.check_every` on odometer, `p_long`; of the SFT's size law with `sft.until_p`,
`p_valid`), avg@k / pass@k on the
held-out split and the response-length distribution of the SFT model's samples
(mean, p50, p90, max, max/mean), the evidence that the built-in task is long-tailed;
with `eval.reference`, also the exact P(worked solution) means (`ulorl.evaluation.reference`).
With `data.eval: null` the warm start is made and the report's `eval` is null.
"""

from __future__ import annotations

from pathlib import Path

from ulorl.config import RunConfig
from ulorl.data import load_prompts
from ulorl.durable import atomic_write_text
from ulorl.errors import UlorlError
from ulorl.evaluation import evaluate, reward_failure_note
from ulorl.evaluation.reference import reference_means, referenced_rows, score_eval_references
from ulorl.logging.base import json_text
from ulorl.models import eos_token_ids, load_model, load_tokenizer
from ulorl.reward import RewardManager
from ulorl.rollout.engines.base import close_engine
from ulorl.rollout.engines.registry import build_engine
from ulorl.run.console import say
from ulorl.run.session import set_aside_earlier_run
from ulorl.run.sft import run_sft, sft_outcome
from ulorl.run.sft_state import SETTINGS_FILE, STATE_FILE, finished, has_state, settings_changes, sft_settings


# what `ulorl sft` writes into its folder (`cmd_sft`: config.yaml; `run_sft`: the rest)
REPORT_FILE = "sft_report.json"
SFT_OUTPUTS = ("model", "metrics.jsonl", "loss.png", REPORT_FILE, "config.yaml", SETTINGS_FILE, STATE_FILE)
# what only a `ulorl train` run leaves in its folder
TRAIN_OUTPUTS = ("checkpoints", "summary.json", "samples.jsonl")


def prepare_sft_dir(run_dir: Path, settings: dict) -> None:
    """Make `run_dir` ready for a `ulorl sft` whose settings are `settings` (`sft_settings`): an SFT interrupted
    there under the same settings stays, to be continued; an earlier SFT's outputs are moved aside (never
    overwritten); a folder that holds a `ulorl train` run is refused (the SFT would overwrite its config.yaml and
    metrics.jsonl)."""
    train_run = [n for n in TRAIN_OUTPUTS if (run_dir / n).exists()]
    if train_run:
        raise UlorlError(f"{run_dir} holds a `ulorl train` run ({', '.join(train_run)}): an SFT there would "
                         f"overwrite its config.yaml and metrics.jsonl; choose another --output-dir")
    if _continues(run_dir, settings):
        return
    set_aside_earlier_run(run_dir, SFT_OUTPUTS, "SFT")


def _continues(run_dir: Path, settings: dict) -> bool:
    """Whether `run_dir` holds an SFT of `settings` that was interrupted: in its training (its saved state), or
    after it, before its report was written."""
    undone = has_state(run_dir) or (finished(run_dir) and not (run_dir / REPORT_FILE).exists())
    return undone and settings_changes(run_dir, settings) == []


def evaluate_model(cfg: RunConfig, model_path: str, progress: bool = True) -> dict:
    """Held-out evaluation of `model_path` with `cfg.eval` (returns summary + length ratio)."""
    tok = load_tokenizer(model_path, cfg.model.trust_remote_code)
    model = load_model(model_path, cfg.model.dtype, cfg.model.trust_remote_code, cfg.train.device)
    rows, _ = load_prompts(cfg.data, tok, "eval")
    ev = cfg.eval
    # before sampling: rows without a worked solution (or too few rows) are refused at once
    scored = referenced_rows(ev, rows, f"data.eval={cfg.data.eval}", "eval.reference=true") if ev.reference else []
    engine = build_engine(cfg.rollout.engine, model, tok, eos_token_ids(model, tok), torch=cfg.rollout.torch)
    try:
        with RewardManager(cfg.reward) as rm:
            res = evaluate(engine, tok, rows, ev, rm.score_detailed, name="held-out", progress=progress)
        if note := reward_failure_note(res):
            say(note)
    finally:
        close_engine(engine)
    summary = dict(res.summary)
    if ev.reference:
        summary.update(reference_means(score_eval_references(model, tok, scored, ev, progress), ev.long_tokens))
    mean = summary.get("response_length/mean", 0.0)
    summary["response_length/max_over_mean"] = summary.get("response_length/max", 0.0) / mean if mean else 0.0
    return summary


def sft_and_report(cfg: RunConfig, run_dir: str | Path) -> dict:
    run_dir = Path(run_dir)
    if _continues(run_dir, sft_settings(cfg.model, cfg.sft, cfg.eval.sampling())) and finished(run_dir):
        say(f"the SFT in {run_dir} is done and its report is not: its model is evaluated")
        model_dir = run_dir / "model"
    else:
        model_dir = run_sft(cfg.model, cfg.sft, run_dir, progress=cfg.logging.progress,
                            check_params=cfg.eval.sampling())
    report = {"model": str(model_dir), "sft": sft_outcome(run_dir), "eval": None}
    if cfg.data.eval:
        report["eval"] = evaluate_model(cfg, str(model_dir), cfg.logging.progress)
    else:
        say("data.eval is null: the warm start is not evaluated")
    atomic_write_text(run_dir / REPORT_FILE, json_text(report, indent=1))
    return report


def format_sft_report(report: dict, run_dir: str | Path, config: str | None = None) -> str:
    """`ulorl sft`'s closing lines: the steps, the held-out figures, where the model is and how to use it (with the
    `--config` the SFT was given)."""
    sft, ev, model = report["sft"], report["eval"], report["model"]
    preset = f" --config {config}" if config else ""
    checks = "".join(f"   last check {k} {sft[k]:.3f}" for k in ("p_valid", "p_long") if sft.get(k) is not None)
    lines = ["", "=== ulorl sft: summary ===", f"steps: {sft['steps']}{checks}"]
    if ev:
        rates = "  ".join(f"{k} {v:.4f}" for k, v in ev.items() if k.startswith(("avg@", "pass@")))
        lines += [f"held-out ({ev['num_problems']} problems, k = {ev['k']}): {rates}",
                  f"response length: mean {ev['response_length/mean']:.1f}  p50 {ev['response_length/p50']:.0f}  "
                  f"p90 {ev['response_length/p90']:.0f}  max {ev['response_length/max']:.0f}   truncation rate "
                  f"{ev['truncation_rate']:.3f}"]
    lines += [f"model: {model} (a Hugging Face folder)",
              f"  RL from it:    ulorl train{preset} model.path={model} model.warm_start=none",
              f"  evaluate it:   ulorl eval --model {model}",
              f"report: {Path(run_dir) / 'sft_report.json'}"]
    return "\n".join(lines)
