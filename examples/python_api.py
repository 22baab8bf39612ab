"""UloRL from Python, in the manner of TRL's GRPOTrainer: config in code, reward functions as objects.

    python examples/python_api.py                  # SFT warm start of the built-in tiny model, then 20 RL steps
    python examples/python_api.py --quick          # seconds: no warm start, a few tiny steps (the test runs this)

Two reward functions, summed with weights: a verl-style per-sample check of the final
answer (its dict's extra key `answered` is logged as a metric) and a TRL-style batch
function (`completions` plus the dataset's columns) that rewards shorter answers a little.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ulorl.api import Trainer, make_config


def correct_answer(data_source, solution_str, ground_truth, extra_info=None):
    """verl style, one sample: 1.0 when the number after the last `answer` is the ground truth."""
    found = re.findall(r"answer\s+(-?\d+)", solution_str)
    return {"score": float(bool(found) and found[-1] == ground_truth.strip()), "answered": float(bool(found))}


def brevity(completions, **columns):
    """TRL style, one batch: a small bonus in [0, 1] for answers under 40 words."""
    return [max(0.0, 1.0 - len(c.split()) / 40) for c in completions]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output-dir", default="runs/python-api")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="no warm start, tiny rollouts: a smoke run in seconds")
    args = p.parse_args(argv)

    overrides = {"train.steps": args.steps, "checkpoint.every": 0, "eval.num_problems": 50, "eval.k": 4}
    if args.quick:
        overrides.update({"model.warm_start": "none", "data.train_size": 40, "data.eval_size": 8,
                          "eval.num_problems": 8, "eval.k": 2, "eval.max_new_tokens": 16, "eval.pass_k": [1, 2],
                          "rollout.max_response_len": 16, "rollout.num_segments": 2, "rollout.group_size": 2,
                          "rollout.decode_batch": 4, "train.train_groups": 1, "algo.dynamic_sampling": False,
                          "logging.progress": False, "logging.loggers": ["jsonl"], "reward.num_workers": 1})
    cfg = make_config(None if args.quick else Path(__file__).resolve().parents[1] / "configs" / "demo.yaml", overrides)
    trainer = Trainer(cfg, reward_funcs=[correct_answer, brevity], reward_weights=[1.0, 0.1],
                      output_dir=args.output_dir)
    summary = trainer.train()
    before, after = summary["eval_before"] or {}, summary["eval_after"] or {}
    print(f"{summary['steps']} steps, {summary['trained_samples']} samples trained; held-out avg@k "
          f"{before.get('avg@k', float('nan')):.3f} -> {after.get('avg@k', float('nan')):.3f}; run folder "
          f"{summary['run_dir']}")
    return summary


if __name__ == "__main__":
    main()
