"""Step throughput of `train.pipeline=overlap` against sync training, on the demo workload (issue 19).

Each configuration trains the demo (`configs/demo.yaml`: tiny model, chain task, L = 160, G = 8,
6 groups per update) from the same warm start for `--warmup + --steps` steps without evaluation or
checkpoints, and reports trained samples per second over the last `--steps` steps (the sum of
`timing_s/step`). Configurations alternate within each pass, so slow drift of a shared machine hits
all of them alike; the spread over passes is reported.

    sync M=1       the synchronous loop without segments (POIS = on-policy at M = 1; 2 torch threads)
    sync M=4       segment rollout (the demo)
    overlap M=4    segment rollout, the learner in its own process (1 thread each side)
    overlap M=1

The bound the issue names is printed beside the measurement: (generation + update) / max(generation,
update) of the sync M=4 run, times the segment gain (sync M=4 over sync M=1).

    .venv/bin/python benchmarks/bench_pipeline.py --model runs/demo/warm_start/model --out docs/bench_pipeline.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from benchlib import emit, machine, quiet_torch

from ulorl.config import load_run_config
from ulorl.run.loop import train

CONFIGS = {
    "sync M=1": ["rollout.num_segments=1"],
    "sync M=4": [],
    "overlap M=4": ["train.pipeline=overlap"],
    "overlap M=1": ["rollout.num_segments=1", "train.pipeline=overlap"],
}


def run_one(model: str, extra: list[str], steps: int, warmup: int, threads: int) -> dict:
    """Train the demo for warmup + steps steps; per-step times of the last `steps`."""
    torch.set_num_threads(threads)
    overrides = [f"model.path={model}", "model.warm_start=none", "data.eval=null", f"train.steps={warmup + steps}",
                 "checkpoint.every=0", "logging.progress=false", "logging.loggers=[jsonl]", *extra]
    cfg = load_run_config("configs/demo.yaml", overrides)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.time()
        train(cfg, Path(d) / "run")
        wall = time.time() - t0
        rows = [json.loads(line) for line in (Path(d) / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = rows[-1]["train/trained_samples"] - (rows[warmup - 1]["train/trained_samples"] if warmup else 0)
    rows = rows[warmup:]
    step_s = sum(r["timing_s/step"] for r in rows)
    gen = sum(r["timing_s/gen"] + r["timing_s/reward"] for r in rows)
    upd = sum(r.get("timing_s/update_compute", r["timing_s/update"]) for r in rows)
    out = {"samples_per_s": trained / step_s,
           "step_s": step_s / len(rows), "gen_s": gen / len(rows), "update_s": upd / len(rows), "wall_s": wall}
    if "pipeline/overlap_efficiency" in rows[0]:
        out["overlap_efficiency"] = statistics.mean(r["pipeline/overlap_efficiency"] for r in rows)
        out["wait_for_update_s"] = statistics.mean(r["pipeline/wait_for_update_s"] for r in rows)
        out["learner_idle_s"] = statistics.mean(r["pipeline/learner_idle_s"] for r in rows)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the demo's warm start (a model folder)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the sync runs (overlap: 1 + 1)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    quiet_torch(args.threads)
    load = tuple(round(x, 2) for x in os.getloadavg())
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for p in range(args.passes):
        order = list(CONFIGS) if p % 2 == 0 else list(reversed(CONFIGS))
        for name in order:
            runs[name].append(run_one(args.model, CONFIGS[name], args.steps, args.warmup, args.threads))
            print(name, {k: round(v, 3) for k, v in runs[name][-1].items()}, flush=True)
    mean = {name: {k: statistics.mean(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    s4, s1 = mean["sync M=4"], mean["sync M=1"]
    segment_gain = s4["samples_per_s"] / s1["samples_per_s"]
    bound = (s4["gen_s"] + s4["update_s"]) / max(s4["gen_s"], s4["update_s"]) * segment_gain
    ratio = [o["samples_per_s"] / s["samples_per_s"] for o, s in zip(runs["overlap M=4"], runs["sync M=1"])]
    result = {
        "benchmark": "bench_pipeline", "steps": args.steps, "warmup": args.warmup, "passes": args.passes,
        "machine": machine(load), "runs": runs, "mean": mean,
        "overlap_m4_over_sync_m1": {"per_pass": ratio, "pooled": mean["overlap M=4"]["samples_per_s"]
                                    / s1["samples_per_s"]},
        "segment_gain_sync": segment_gain,
        "overlap_gain_m4": mean["overlap M=4"]["samples_per_s"] / s4["samples_per_s"],
        "bound": bound,
    }
    return emit(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
