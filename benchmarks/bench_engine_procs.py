"""One torch engine against the same engine in N processes (`rollout.torch.procs`, `torch/processes.py`), CPU.

Two workloads of the long run (`configs/long.yaml`, `builtin:long`, the odometer task's prompts), lengths from
`HazardEOS` (every token ends a row with probability 1 / `--mean`; the model's own EOS is never used), so both
settings decode the same rows to the same lengths:
- `rounds`: `--rounds` rounds of one training step's segment rollout (L = 4,096, M = 8, decode batch 64, groups
  of 8, K/V kept between rounds), as `bench_kept_rows.py`;
- `eval`: one continuous-batching call of `--eval-prompts` prompts x 4 samples of up to 4,096 tokens, as an
  evaluation sends them (`evaluation/groups.py`).

Each engine process has one torch thread, and the single engine too: the setting the long run uses. Wall seconds
are reported (the engine processes' CPU time is not the driver's), so run it on an otherwise idle machine; the
order of the settings rotates from pass to pass.

    python benchmarks/bench_engine_procs.py [--procs 2] [--passes 2] [--rounds 8] [--eval-prompts 48]
                                            [--out docs/bench_engine_procs.json]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

from bench_kept_rows import long_workload
from benchlib import emit, machine, quiet_torch
from forced_eos import HazardEOS

L, M, BATCH, G, K = 4096, 8, 64, 8, 4


def build(model, procs: int, mean: float, eos: int):
    from ulorl.rollout.engines import TorchEngine
    from ulorl.rollout.engines.torch.processes import ProcessEngine

    if procs == 1:
        eng = TorchEngine(model, [eos], max_batch=256)
        HazardEOS.install(eng, mean, eos)
        return eng
    return ProcessEngine(model, [eos], procs, max_batch=256,
                         setup=functools.partial(HazardEOS.install, mean=mean, eos_id=eos))


def rounds_pass(eng, records, rounds: int, seed: int) -> dict:
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.pools import UnfinishedPool
    from ulorl.rollout.prompt_source import PromptSource
    from ulorl.rollout.segment import SegmentRollout

    rollout = SegmentRollout(eng, PromptSource(records, seed=seed), SamplingParams(temperature=0.85), group_size=G,
                             decode_batch=BATCH, max_response_len=L, num_segments=M, seed=seed)
    pool, decoded, finished = UnfinishedPool(), 0, 0
    w0 = time.perf_counter()
    for _ in range(rounds):
        r = rollout.round(pool, version=0, step=0)
        decoded += r.decoded_tokens
        finished += len(r.finished)
    rollout.end_step()
    return {"wall_s": time.perf_counter() - w0, "decoded_tokens": decoded, "finished": finished}


def eval_pass(eng, records, n: int, seed: int) -> dict:
    from ulorl.rollout.engines import SamplingParams

    prefixes = [list(r.prompt_tokens) for r in records[seed * n:(seed + 1) * n] for _ in range(K)]
    w0 = time.perf_counter()
    outs = eng.generate(prefixes, L, SamplingParams(temperature=0.85), seed=seed)
    return {"wall_s": time.perf_counter() - w0, "decoded_tokens": sum(len(o.tokens) for o in outs),
            "finished": len(outs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--eval-prompts", type=int, default=48)
    ap.add_argument("--mean", type=float, default=1300.0, help="mean answer length of the hazard schedule")
    ap.add_argument("--model", default="builtin:long", help="a model folder (e.g. a long run's warm_start/model)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    quiet_torch(1)
    load0 = os.getloadavg()
    from ulorl.rollout.engines.base import close_engine

    _, model, records = long_workload(args.model)
    eos = model.config.vocab_size + 7  # never sampled: the hazard schedule alone ends rows
    settings = [1, args.procs]
    engines = {p: build(model, p, args.mean, eos) for p in settings}
    workloads = {"rounds": lambda eng, seed: rounds_pass(eng, records, args.rounds, seed),
                 "eval": lambda eng, seed: eval_pass(eng, records, args.eval_prompts, seed)}
    runs = {w: {p: [] for p in settings} for w in workloads}
    for p in range(args.passes):
        for work, fn in workloads.items():
            for procs in settings[p % 2:] + settings[:p % 2]:
                r = fn(engines[procs], p)
                runs[work][procs].append(r)
                print(f"pass {p} {work} procs={procs}: {r['wall_s']:.1f} s wall, decoded {r['decoded_tokens']}, "
                      f"finished {r['finished']}", flush=True)
    for eng in engines.values():
        close_engine(eng)
    result = {
        "workload": {"L": L, "M": M, "decode_batch": BATCH, "group_size": G, "rounds": args.rounds,
                     "eval_prompts": args.eval_prompts, "k": K, "mean_length": args.mean, "model": args.model},
        "procs": args.procs,
        "results": {w: {str(procs): {"wall_s_median": statistics.median(r["wall_s"] for r in v), "passes": v}
                        for procs, v in by.items()} for w, by in runs.items()},
        "speedup_per_pass": {w: [a["wall_s"] / b["wall_s"] for a, b in zip(by[1], by[args.procs])]
                             for w, by in runs.items()},
        "machine": machine(load0),
    }
    return emit(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
