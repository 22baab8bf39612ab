"""Rounds of one step with and without K/V kept between rounds (`rollout/engines/torch/kept_rows.py`), CPU.

The long run's rollout (`configs/long.yaml`): L = 4,096, M = 8 (512 tokens per round), decode batch 64, groups of
8, `builtin:long`, the odometer task's prompts. Within one training step the weights do not change, so a sample
continued in the next round can resume from the K/V its engine kept instead of a prefill of prompt + response
so far. Lengths come from `HazardEOS` alone (every token ends a row with probability 1 / `--mean`, the model's
own EOS is never used; the long run's trained answers averaged 1,316 tokens on the AMD EPYC): the same schedule
for both settings, as each row's stop draws depend only on (seed, row, position).

Each pass runs `--rounds` rounds from the same state in every setting, in an order that rotates from pass to
pass, so a shared machine's drift cancels: the paged engine keeping rows (`on`, the default), the same engine
prefilling every continued row again (`off`), and with `--slots COMMIT` the slot engine that the paged engine
replaced (issue 26's "today's engine", read from git as `bench_paged_engine.py` does, with the same hazard
schedule). Reported: process CPU seconds and wall seconds per setting (median over passes, and each pass's
ratio against `on`), prefilled and decoded tokens, rows resumed.

    python benchmarks/bench_kept_rows.py [--rounds 8] [--passes 3] [--mean 1300] [--slots 938417f]
                                         [--out docs/bench_kept_rows.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench_paged_engine import load_old_engine, old_stops
from benchlib import emit, machine, quiet_torch
from forced_eos import HAZARD_SALT, HazardEOS

L, M, BATCH, G = 4096, 8, 64, 8


def slot_engine(old, model, mean: float, eos_id: int):
    """The slot engine with the hazard schedule of `HazardEOS` (the same draws: seed, row, tokens so far)."""
    from ulorl.rollout.engines.torch.sampler import row_uniforms

    old_stops(old, eos_id, lambda run, rows: (
        row_uniforms(run.seed ^ HAZARD_SALT, rows, [run.n_new[r] for r in rows]) < 1 / mean).tolist())
    return old.TorchEngine(model, [eos_id], max_batch=256)


def one_pass(model, tok, records, setting: str, rounds: int, mean: float, seed: int, old=None) -> dict:
    from ulorl.rollout.engines import SamplingParams, TorchEngine
    from ulorl.rollout.pools import UnfinishedPool
    from ulorl.rollout.prompt_source import PromptSource
    from ulorl.rollout.segment import SegmentRollout

    eos = model.config.vocab_size + 7  # never sampled: the hazard schedule alone ends rows
    if setting == "slots":
        eng = slot_engine(old, model, mean, eos)
    else:
        eng = TorchEngine(model, [eos], max_batch=256)
        HazardEOS.install(eng, mean, eos)
        eng.keeps_rows = setting == "on"
    rollout = SegmentRollout(eng, PromptSource(records, seed=seed), SamplingParams(temperature=0.85), group_size=G,
                             decode_batch=BATCH, max_response_len=L, num_segments=M, seed=seed)
    pool = UnfinishedPool()
    c0, w0 = time.process_time(), time.perf_counter()
    decoded = reprefill = finished = 0
    for _ in range(rounds):
        r = rollout.round(pool, version=0, step=0)
        decoded += r.decoded_tokens
        reprefill += r.reprefill_tokens
        finished += len(r.finished)
    rollout.end_step()
    return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0, "decoded_tokens": decoded,
            "prefill_tokens": eng.stats.prefill_tokens, "reprefill_tokens": reprefill, "finished": finished,
            "resumed_rows": eng.stats.extra.get("resumed_rows", 0)}


def long_workload(model_path: str):
    """(tokenizer, model in eval mode, 400 train prompts of the long run's size law): what the long-run engine
    benchmarks decode."""
    from ulorl.config import DataConfig
    from ulorl.data import load_prompts
    from ulorl.models import load_model, load_tokenizer

    tok, model = load_tokenizer(model_path), load_model(model_path)
    model.eval()
    data = DataConfig(train="builtin:odometer", eval=None, alpha=0.5, uniform=0.1, train_size=400)
    records, _ = load_prompts(data, tok)
    return tok, model, records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--mean", type=float, default=1300.0, help="mean answer length of the hazard schedule")
    ap.add_argument("--model", default="builtin:long", help="a model folder (e.g. a long run's warm_start/model)")
    ap.add_argument("--slots", default=None, metavar="COMMIT", help="also the slot engine at COMMIT (e.g. 938417f)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    quiet_torch(1)
    load0 = os.getloadavg()
    tok, model, records = long_workload(args.model)
    settings = ["on", "off"] + (["slots"] if args.slots else [])
    old = load_old_engine(args.slots) if args.slots else None
    runs: dict[str, list[dict]] = {k: [] for k in settings}
    for p in range(args.passes):
        for setting in settings[p % len(settings):] + settings[: p % len(settings)]:
            r = one_pass(model, tok, records, setting, args.rounds, args.mean, seed=p, old=old)
            runs[setting].append(r)
            print(f"pass {p} {setting}: {r['cpu_s']:.1f} CPU s, {r['wall_s']:.1f} s wall, "
                  f"prefilled {r['prefill_tokens']}, decoded {r['decoded_tokens']}, resumed {r['resumed_rows']}",
                  flush=True)
    result = {
        "workload": {"L": L, "M": M, "decode_batch": BATCH, "group_size": G, "rounds": args.rounds,
                     "mean_length": args.mean, "model": args.model, "slots_commit": args.slots},
        "settings": {k: {"cpu_s_median": statistics.median(r["cpu_s"] for r in v),
                         "wall_s_median": statistics.median(r["wall_s"] for r in v),
                         "cpu_over_on_per_pass": [r["cpu_s"] / on["cpu_s"] for r, on in zip(v, runs["on"])],
                         "passes": v} for k, v in runs.items()},
        "machine": machine(load0),
    }
    return emit(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
