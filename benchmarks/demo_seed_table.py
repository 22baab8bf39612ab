"""The demo's seed table (issue 30, item 1 for the demo) in one command: `ulorl train` from each SFT seed with each
training seed, and where on the held-out set each warm start and its RL stand.

    python benchmarks/demo_seed_table.py                                   # the config as written
    python benchmarks/demo_seed_table.py --set sft.until_p=0.7 --out docs/demo_seed_table_p70.json

For each pair S/T of `--pairs`, `ulorl train --config C sft.seed=S train.seed=T` runs whole (SFT warm start,
evaluation, RL, evaluation) with the `--set` overrides into RUNS/<tag>/S_T (the tag names the overrides). A run
with its summary is not run again; an interrupted one resumes (`--resume auto`), so the script can be re-run at
will. Each row gives the SFT's steps, its last learning rate and its last `sft/p_valid` check, held-out avg@k
before and after RL with the paired change, the same by problem size (`by_size`: the task's steps, mean accuracy
before and after), and the run's phase times. Runs go one at a time: on 2 cores two runs side by side would
change each other's times, not their numbers. The last line printed is one JSON object (also written to `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchlib import emit, machine
from long_seed_table import ULORL, _pairs, _run, _tag

SIZE_BUCKETS = ((1, 4), (5, 8), (9, 16), (17, 32), (33, 64))  # the chain task's steps; answers of 2n + 3 tokens


def held_out_sizes(config: str, sets: list[str]) -> tuple[list[int], int]:
    """The size of each held-out problem the evaluation samples, in order, and its `eval.k`."""
    from ulorl.config import load_run_config
    from ulorl.data import load_prompts
    from ulorl.models import load_tokenizer

    cfg = load_run_config(config, sets)
    rows, _ = load_prompts(cfg.data, load_tokenizer(cfg.model.path), "eval")
    return [r.extra_info["size"] for r in cfg.eval.sampled(rows)], cfg.eval.k


def by_size(sizes: list[int], k: int, correct: dict) -> dict:
    """Mean held-out accuracy before and after RL per bucket of problem size (`sizes`, from `held_out_sizes`), from
    the run's per-problem correct counts (`history.json`'s `eval_correct`, over `k` samples each)."""
    out = {}
    for lo, hi in SIZE_BUCKETS:
        idx = [i for i, n in enumerate(sizes) if lo <= n <= hi]
        if idx:
            out[f"{lo}-{hi}"] = {"problems": len(idx), **{
                when: round(sum(correct[when][i] for i in idx) / (len(idx) * k), 4) for when in ("before", "after")}}
    return out


def main() -> int:
    from ulorl.evaluation.metrics import z_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/demo.yaml")
    ap.add_argument("--pairs", default="0/0,1/0,2/0,0/1,0/2", help="SFT_SEED/TRAIN_SEED, comma-separated")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run (repeat)")
    ap.add_argument("--runs", default="runs/demo_seed_table", help="where the runs go")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pairs = _pairs(args.pairs, {})
    load0 = os.getloadavg()
    tag = _tag(args.set)
    sizes, k = held_out_sizes(args.config, args.set)
    table = {}
    for sft_seed, train_seed in pairs:
        run = Path(args.runs) / tag / f"{sft_seed}_{train_seed}"
        if not (run / "summary.json").exists():
            run.parent.mkdir(parents=True, exist_ok=True)
            _run([*ULORL, "train", "--config", args.config, "-o", str(run), "--resume", "auto",
                  f"sft.seed={sft_seed}", f"train.seed={train_seed}", *args.set], run.parent / f"{run.name}.log")
        summary = json.loads((run / "summary.json").read_text())
        with open(run / "warm_start" / "metrics.jsonl") as f:
            sft = [json.loads(line) for line in f]
        checks = [r["sft/p_valid"] for r in sft if "sft/p_valid" in r]
        paired = summary["eval_paired"]
        correct = json.loads((run / "history.json").read_text())["eval_correct"]
        row = {"run": str(run),
               "sft": {"steps": len(sft), "last_lr": sft[-1]["sft/lr"], "p_valid": checks[-1] if checks else None},
               "before": summary["eval_before"]["avg@k"], "after": summary["eval_after"]["avg@k"],
               "paired": {k: paired[k] for k in ("delta", "se", "z", "better", "worse")},
               "by_size": by_size(sizes, k, correct),
               "phase_s": summary["phase_s"], "wall_s": summary["wall_s"]}
        table[f"{sft_seed}/{train_seed}"] = row
        print(f"{sft_seed}/{train_seed}: SFT {row['sft']['steps']} steps, avg@k {row['before']:.3f} -> "
              f"{row['after']:.3f}, {paired['delta'] * 100:+.1f} points (z {z_text(paired['z'])})", flush=True)
    return emit({"config": args.config, "sets": args.set, "pairs": table, "machine": machine(load0)}, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
