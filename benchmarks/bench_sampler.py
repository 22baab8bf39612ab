"""The torch engine's sampler alone: ms per call of `sample_tokens` for a batch of next-token logits, by rows,
vocabulary and sampling settings, optionally next to the sampler of another commit (`--against REV`), with the same
uniforms.

At a real vocabulary the sampler is not small: one pass over 256 rows x 151,936 float32 logits is 156 MB, and on a
GPU a decode step of the Qwen2.5-0.5B shape at 256 rows x 2k reads ~7.4 GB of weights and K/V, so every pass the
sampler makes is ~2% of that step. `--against` loads `ulorl/rollout/engines/torch/sampler.py` of that commit
(`git show`) and reports, per case, both timings and whether the two chose the same tokens with the same log-probs.

    python benchmarks/bench_sampler.py [--rows 64,256] [--vocab 448,49152,151936] [--against REV] [--device cpu]
        [--dtype float32] [--repeats 5] [--fused] [--out docs/bench_sampler.json]

`--fused` times the fused Triton sampler (`triton_sampler.py`, what the engine samples with on CUDA) beside it in the
temperature-only setting; on CPU only under Triton's interpreter, where its time means nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types

import torch

from benchlib import emit, machine, quiet_torch
from ulorl.rollout.engines import SamplingParams
from ulorl.rollout.engines.torch import sampler as current

SETTINGS = {  # the training rollout's (temperature only) and the evaluation protocol's (the paper's)
    "rollout": SamplingParams(temperature=0.85),
    "paper_eval": SamplingParams(temperature=0.85, top_p=0.95, top_k=20),
}
SAMPLER_PATH = "ulorl/rollout/engines/torch/sampler.py"


def sampler_at(rev: str) -> types.ModuleType:
    """The sampler module of commit `rev` (its `sample_tokens`), loaded from `git show`."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        src = subprocess.run(["git", "-C", root, "show", f"{rev}:{SAMPLER_PATH}"], check=True, capture_output=True,
                             text=True).stdout
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"--against {rev}: git show {rev}:{SAMPLER_PATH} failed: {e.stderr.strip()}") from None
    mod = types.ModuleType(f"sampler_{rev}")
    exec(compile(src, f"{rev}:{SAMPLER_PATH}", "exec"), mod.__dict__)
    return mod


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_sampler(sample_tokens, logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor,
                 repeats: int) -> tuple[list[float], tuple[torch.Tensor, torch.Tensor]]:
    """ms of each of `repeats` calls (after one untimed call), and the last call's (tokens, log-probs)."""
    out = sample_tokens(logits, params, uniforms)
    times = []
    for _ in range(repeats):
        sync(logits.device)
        t0 = time.perf_counter()
        out = sample_tokens(logits, params, uniforms)
        sync(logits.device)
        times.append((time.perf_counter() - t0) * 1000)
    return times, out


def case(rows: int, vocab: int, setting: str, dev: torch.device, dtype: torch.dtype, repeats: int,
         against: types.ModuleType | None, fused: bool = False) -> dict:
    """One case; `fused`: also the fused Triton sampler (`triton_sampler.py`, temperature-only settings) on the same
    logits and uniforms: its ms, and whether it chose `sample_tokens`' tokens."""
    g = torch.Generator().manual_seed(rows * 7 + vocab)
    logits = (torch.randn(rows, vocab, generator=g) * 3).to(dev, dtype)
    uniforms = current.row_uniforms(0, list(range(rows)), [5] * rows, dev)
    params = SETTINGS[setting]
    times, (tok, lp) = time_sampler(current.sample_tokens, logits, params, uniforms, repeats)
    r = {"rows": rows, "vocab": vocab, "setting": setting, "ms": statistics.median(times), "ms_passes": times,
         "mb_per_pass": rows * vocab * 4 / 1e6}
    if against is not None:
        t_old, (tok_old, lp_old) = time_sampler(against.sample_tokens, logits, params, uniforms, repeats)
        r.update(against_ms=statistics.median(t_old), against_ms_passes=t_old,
                 speedup=statistics.median(t_old) / r["ms"],
                 same_tokens=bool(torch.equal(tok, tok_old)), same_logprobs=bool(torch.equal(lp, lp_old)))
    if fused:
        from ulorl.rollout.engines.torch.triton_sampler import FusedSampler

        if FusedSampler.takes(params):
            t_f, (tok_f, lp_f) = time_sampler(FusedSampler(), logits, params, uniforms, repeats)
            r.update(fused_ms=statistics.median(t_f), fused_ms_passes=t_f,
                     fused_speedup=r["ms"] / statistics.median(t_f), fused_same_tokens=bool(torch.equal(tok, tok_f)),
                     fused_max_abs_logprob_diff=float((lp - lp_f).abs().max()))
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="64,256")
    p.add_argument("--vocab", default="448,49152,151936")
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated from {', '.join(SETTINGS)}")
    p.add_argument("--against", default=None, help="a commit whose sampler runs beside this tree's")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--fused", action="store_true", help="also the fused Triton sampler (CUDA, or Triton's interpreter: "
                   "TRITON_INTERPRET=1), temperature-only settings")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    unknown = [s for s in args.settings.split(",") if s not in SETTINGS]
    if unknown:
        p.error(f"--settings: unknown {', '.join(unknown)}; expected some of {', '.join(SETTINGS)}")
    load = os.getloadavg()
    quiet_torch()
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    against = sampler_at(args.against) if args.against else None
    cases = []
    for rows in map(int, args.rows.split(",")):
        for vocab in map(int, args.vocab.split(",")):
            for setting in args.settings.split(","):
                r = case(rows, vocab, setting, dev, dtype, args.repeats, against, args.fused)
                cases.append(r)
                old = f", {args.against} {r['against_ms']:.2f} ms ({r['speedup']:.2f}x, same tokens " \
                      f"{r['same_tokens']})" if against else ""
                fused = f", fused {r['fused_ms']:.2f} ms (same tokens {r['fused_same_tokens']})" \
                    if "fused_ms" in r else ""
                print(f"{rows} x {vocab} {setting}: {r['ms']:.2f} ms{old}{fused}", file=sys.stderr, flush=True)
    return emit({"device": str(dev), "dtype": args.dtype, "against": args.against, "cases": cases,
                 "machine": machine(load)}, args.out)


if __name__ == "__main__":
    sys.exit(main())
