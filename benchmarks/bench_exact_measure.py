"""The exact measure (`ulorl.evaluation.reference.score_pairs`): one forward a pair against padded batches under a
token budget, on the demo SFT's `sft.until_p` check (its 256 validation problems, `configs/demo.yaml`).

For each pass: seconds for the 256 problems one pair at a time (`score_reference`, what `score_pairs` did before it
batched), then with `score_pairs` at each token budget, and how far the batched probabilities and log-probabilities
are from one pair at a time (the matrix shapes differ, so the rounding does). The model is the built-in one with its
random weights unless `--model` names a folder (the demo's warm start, `RUN/warm_start/model`): a forward costs the
same whatever the weights, but the differences are the trained model's only with it.

    python benchmarks/bench_exact_measure.py [--model PATH] [--budgets 1024,2048,4096,8192] [--passes 3]
        [--threads 2] [--out docs/bench_exact_measure.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from benchlib import emit, machine
from ulorl.config import load_run_config
from ulorl.evaluation.reference import score_pairs, score_reference
from ulorl.models import load_model, load_tokenizer
from ulorl.run.sft import valid_sequences


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--budgets", default="1024,2048,4096,8192")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the demo's SFT uses the process's)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    cfg = load_run_config("configs/demo.yaml")
    tok, model = load_tokenizer(args.model), load_model(args.model)
    model.eval()
    seqs = valid_sequences(tok, cfg.sft)
    params = cfg.eval.sampling()
    budgets = [int(b) for b in args.budgets.split(",")]
    runs: dict[str, list[float]] = {"one_at_a_time": [], **{str(b): [] for b in budgets}}
    gaps: dict[str, dict] = {}
    for _ in range(args.passes):
        s, one = timed(lambda: [score_reference(model, p, r, params) for p, r in seqs])
        runs["one_at_a_time"].append(s)
        for b in budgets:
            s, got = timed(lambda: score_pairs(model, seqs, params, token_budget=b))
            runs[str(b)].append(s)
            gaps[str(b)] = {"max_abs_prob": max(abs(x.prob - y.prob) for x, y in zip(got, one)),
                            "max_abs_logprob": max(abs(x.logprob - y.logprob) for x, y in zip(got, one)),
                            "mean_prob_change": sum(x.prob - y.prob for x, y in zip(got, one)) / len(seqs),
                            "identical": sum(x.logprob == y.logprob for x, y in zip(got, one))}
    lengths = [len(p) + len(r) for p, r in seqs]
    one_median = statistics.median(runs["one_at_a_time"])
    result = {
        "what": "the exact measure of the demo SFT's 256 validation problems (sft.until_p's check): one forward a "
                "pair (score_reference) against score_pairs's padded batches at each token budget (seconds per "
                "check, every pass; speedup of the medians; distance from one pair at a time)",
        "model": args.model, "problems": len(seqs), "tokens_mean": sum(lengths) / len(lengths),
        "tokens_max": max(lengths), "seconds": runs,
        "speedup": {b: one_median / statistics.median(runs[b]) for b in runs if b != "one_at_a_time"},
        "distance_from_one_at_a_time": gaps, "machine": machine(load)}
    return emit(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
