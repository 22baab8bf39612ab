"""Decode attention in a long-tailed batch: does a short row pay for the longest row's context?

One segment round at L = 4,096 and M = 8, as the long run has them: 64 rows decode 512 new tokens (EOS
switched off) after prefixes of mixed length, through the torch engine, one torch thread, temperature 0.85.

- `tail`: 48 fresh prompts of 20 tokens, 8 continued samples of 512-1,536 tokens, 8 of 2,560-3,584 (the
  long tail of a segment round: most rows are short, a few carry thousands of tokens);
- `even`: 64 fresh prompts of 20 tokens (no tail: nothing to split).

Two schedules of the same decode, alternating so drift cancels:
- `split` (the default): `decoder.split_long_rows` lets the longest rows attend alone over their own length;
- `batched` (`SlotDecoder.call_cost = inf`, the schedule before): all rows in one attention call over the
  longest row's span, under a per-row mask.

Reported: CPU seconds per round (median over `--repeats`), the ratio batched / split, and the greatest
|logit| difference of one decode step between the two schedules on the `tail` batch (float32 rounding).

    python benchmarks/bench_engine_mixed.py [--repeats 3] [--out docs/bench_engine_mixed.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from benchlib import emit, machine, quiet_torch

NEW = 512


def batches() -> dict[str, list[list[int]]]:
    def prefix(i: int, n: int) -> list[int]:
        return [5 + (i * 7 + j) % 40 for j in range(n)]

    tail = ([prefix(i, 20) for i in range(48)] + [prefix(i, 512 + 128 * i) for i in range(8)]
            + [prefix(i, 2560 + 128 * i) for i in range(8)])
    return {"tail": tail, "even": [prefix(i, 20) for i in range(64)]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    quiet_torch(1)
    from ulorl.models import load_model, load_tokenizer
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.kv_cache import SlotKVCache
    from ulorl.rollout.engines.registry import build_engine

    tok, model = load_tokenizer("builtin"), load_model("builtin")
    model.eval()
    eng = build_engine("torch", model, tok, [model.config.vocab_size + 7], max_batch=64)  # EOS never sampled
    dec = eng.decoder
    params = SamplingParams(temperature=0.85)
    costs = {"split": dec.call_cost, "batched": float("inf")}
    load_before = os.getloadavg()
    secs: dict[str, dict[str, list[float]]] = {w: {s: [] for s in costs} for w in batches()}
    for rep in range(args.repeats):
        for w, prefixes in batches().items():
            for s, cost in costs.items():
                dec.call_cost = cost
                c0 = time.process_time()
                outs = eng.generate(prefixes, NEW, params, seed=rep)
                secs[w][s].append(time.process_time() - c0)
                assert all(len(o.tokens) == NEW for o in outs)
                print(f"{w:5s} {s:8s} {secs[w][s][-1]:.2f} s", flush=True)
    # the same decode step under both schedules: a schedule, not a different function
    prefixes = batches()["tail"]
    lens = [len(x) for x in prefixes]
    logits = {}
    for s, cost in costs.items():
        dec.call_cost = cost
        cache = SlotKVCache(dec.kv_shape(), len(prefixes), max(lens) + 1, dec.device, 4.0)
        with torch.no_grad():
            dec.prefill(cache, prefixes, list(range(len(prefixes))))
            logits[s] = dec.decode(cache, torch.full((len(prefixes),), 9), lens)
    dec.call_cost = costs["split"]
    med = {w: {s: statistics.median(v) for s, v in d.items()} for w, d in secs.items()}
    return emit({"benchmark": "bench_engine_mixed", "rows": 64, "new_tokens": NEW, "repeats": args.repeats,
                 "cpu_s_per_round": med, "cpu_s_all": secs,
                 "batched_over_split": {w: med[w]["batched"] / med[w]["split"] for w in med},
                 "max_abs_logit_diff": float((logits["split"] - logits["batched"]).abs().max()),
                 "machine": machine(load_before)}, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
