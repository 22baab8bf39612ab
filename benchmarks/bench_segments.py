"""Segment-rollout speedup: time per trained sample for M = 1, 2, 4, 8 on the built-in long-tailed task.

Same model (an SFT warm start of the tiny model), data, seed and number of trained samples for every M; the
configurations alternate within one session (M=1,2,4,8,1,2,4,8,...) so machine drift cancels. The learning
rate is tiny so the policy, and so the length distribution, stays the same across configurations: we measure
the system, not learning.

Reported per M: steady-state time per step and per trained sample, speedup over M=1, decode-slot utilisation
(useful tokens / (batch rows x decode iterations)), re-prefill tokens as a share of decoded tokens, mean
staleness (versions between a sample's first segment and its update), and the ideal bound for M=1 waste:
E[max length in a synchronous round] / E[length], measured on the M=1 rounds.

    python benchmarks/bench_segments.py [--quick] [--model PATH] [--out docs/bench_segments.json]

The last line printed is one JSON object with at least `speedup` per M and `ideal_speedup`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch


def run_config(model_path: str, m: int, steps: int, warmup: int, args) -> dict:
    from ulorl.config import load_run_config
    from ulorl.session import TrainSession
    from ulorl.trainer import train_step

    run_dir = Path(args.work) / f"M{m}-{time.time_ns()}"
    cfg = load_run_config(None, [
        f"model.path={model_path}", "model.warm_start=none", "data.eval=null", "logging.progress=false",
        "logging.loggers=[jsonl]", f"rollout.num_segments={m}", f"rollout.max_response_len={args.max_len}",
        f"rollout.decode_batch={args.decode_batch}", "rollout.group_size=8", f"train.train_groups={args.groups}",
        "train.lr=1e-9", "algo.dynamic_sampling=false", "checkpoint.every=0", "reward.num_workers=1",
        f"train.seed={args.seed}", "train.max_rounds_per_step=1000"])
    s = TrainSession(cfg, run_dir)
    rows = []
    try:
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            met = train_step(s)
            dt = time.perf_counter() - t0
            if i >= warmup:
                rows.append({"step_s": dt, "gen_s": met["timing_s/gen"], "update_s": met["timing_s/update"],
                             "samples": args.groups * 8, "decoded": met["rollout/decoded_tokens"],
                             "reprefill": met["rollout/reprefill_tokens"], "util": met["rollout/slot_utilisation"],
                             "rounds": met["rollout/rounds"]})
        staleness = []
        for line in (run_dir / "samples.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec["status"] == "trained" and rec["step"] > warmup:
                staleness.append(rec["step"] - 1 - rec["versions"][0])
    finally:
        s.close()
    n = sum(r["samples"] for r in rows)
    return {"M": m, "step_s": sum(r["step_s"] for r in rows) / len(rows),
            "s_per_sample": sum(r["step_s"] for r in rows) / n,
            "gen_s_per_sample": sum(r["gen_s"] for r in rows) / n,
            "update_s_per_step": sum(r["update_s"] for r in rows) / len(rows),
            "slot_utilisation": sum(r["util"] * r["decoded"] for r in rows) / max(sum(r["decoded"] for r in rows), 1),
            "reprefill_share": sum(r["reprefill"] for r in rows) / max(sum(r["decoded"] for r in rows), 1),
            "mean_staleness": statistics.mean(staleness) if staleness else 0.0,
            "rounds_per_step": sum(r["rounds"] for r in rows) / len(rows), "trained_samples": n}


def ideal_bound(model_path: str, args) -> dict:
    """E[max len per synchronous round] / E[len] from M=1-style rounds of the same engine and batch."""
    from ulorl.data import DataConfig, load_prompts
    from ulorl.models import eos_token_ids, load_model, load_tokenizer
    from ulorl.rollout.engines import HFEngine, SamplingParams

    tok, model = load_tokenizer(model_path), load_model(model_path)
    eng = HFEngine(model, tok.pad_token_id, eos_token_ids(model, tok))
    prompts, _ = load_prompts(DataConfig(eval=None), tok, "train")
    maxes, lens = [], []
    G = 8
    per_round = args.decode_batch // G
    for r in range(args.ideal_rounds):
        batch = prompts[r * per_round:(r + 1) * per_round]
        outs = eng.generate([p.prompt_tokens for p in batch for _ in range(G)], args.max_len,
                            SamplingParams(temperature=0.85), seed=r)
        ls = [len(o.tokens) for o in outs]
        maxes.append(max(ls))
        lens += ls
    mean = statistics.mean(lens)
    return {"ideal_speedup": statistics.mean(maxes) / mean, "length_mean": mean, "length_max": max(lens),
            "length_p50": statistics.median(lens), "round_max_mean": statistics.mean(maxes)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small run (< 2 minutes on 2 cores)")
    p.add_argument("--model", default=None, help="SFT model folder (default: make one with a short `ulorl sft`)")
    p.add_argument("--segments", default="1,2,4,8")
    p.add_argument("--repeats", type=int, default=2, help="alternating passes over the M values")
    p.add_argument("--steps", type=int, default=8, help="measured steps per configuration and pass")
    p.add_argument("--warmup", type=int, default=4, help="unmeasured steps first (pools fill up)")
    p.add_argument("--max-len", type=int, default=160)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--groups", type=int, default=8, help="groups per update (8 x G = the decode batch)")
    p.add_argument("--ideal-rounds", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="runs/bench_segments")
    p.add_argument("--out", default=None, help="also write the JSON result here")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.steps, args.warmup, args.ideal_rounds = 1, 4, 2, 3
    torch.set_num_threads(2)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    model = args.model
    if model is None:
        from ulorl.config import ModelConfig, SFTConfig
        from ulorl.sft import run_sft

        model = str(run_sft(ModelConfig(), SFTConfig(), Path(args.work) / "sft", progress=False))
    ms = [int(x) for x in args.segments.split(",")]
    per_m: dict[int, list[dict]] = {m: [] for m in ms}
    for rep in range(args.repeats):
        for m in ms:
            r = run_config(model, m, args.steps, args.warmup, args)
            per_m[m].append(r)
            print(f"pass {rep + 1} M={m}: {r['s_per_sample'] * 1000:.1f} ms/sample, step {r['step_s']:.2f}s, "
                  f"util {r['slot_utilisation']:.2f}", file=sys.stderr, flush=True)
    agg = {m: {k: statistics.mean(r[k] for r in rs) for k in rs[0] if k != "M"} for m, rs in per_m.items()}
    base = agg[ms[0]]["s_per_sample"]
    ideal = ideal_bound(model, args)
    result = {"speedup": {str(m): base / agg[m]["s_per_sample"] for m in ms},
              "gen_speedup": {str(m): agg[ms[0]]["gen_s_per_sample"] / agg[m]["gen_s_per_sample"] for m in ms},
              **ideal, "per_M": {str(m): agg[m] for m in ms},
              "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work")}}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
