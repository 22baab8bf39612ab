"""Long decoding: does the cost per token stay flat as outputs grow?

16 rows of the built-in model decode N new tokens each (EOS switched off: an id that is
never sampled), temperature 0.85, one torch thread. Variants, alternating so drift cancels:

- `torch`: the default engine (slot KV cache, continuous batching);
- `hf`: the HF engine (transformers forward with a DynamicCache, left padding);
- `static`: `model.generate(cache_implementation="static")` (transformers' StaticCache), tokens only;
- `cb`: transformers' continuous batching, `model.generate_batch(...)` with `return_logprobs=True`
  (paged attention); `--library` only, it is slow on CPU.

Reported per variant and N (256 and 2048): CPU seconds per decode iteration (the call's CPU time / the new
tokens per row it decoded) and the ratio long / short (`stopped_early` names a variant that decoded fewer than
N). Next to it, the physical floor: the KV bytes one iteration must read (16 rows x the mean context x bytes per
token) over this machine's measured memory bandwidth (`torch.sum` over 512 MiB).
Then the torch engine alone decodes 16 x 8192 tokens in a fresh process: tokens/s and that process's peak RSS.

    python benchmarks/bench_long_decode.py [--quick] [--library] [--out docs/bench_long_decode.json]

The last line printed is one JSON object; `ratio` is the torch engine's long/short time per iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

from benchlib import emit, machine, quiet_torch  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROWS = 16


def bandwidth_gbs(mib: int = 512, repeats: int = 5) -> float:
    """Read bandwidth of one thread: bytes summed per second (median)."""
    x = torch.ones(mib * 2**20 // 4)
    x.sum()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        ts.append(time.perf_counter() - t0)
    return x.numel() * 4 / statistics.median(ts) / 1e9


def variants(model, tok, library: bool):
    from transformers import GenerationConfig

    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.registry import build_engine

    V = model.config.vocab_size
    never = V + 7
    params = SamplingParams(temperature=0.85)
    torch_eng, hf_eng = build_engine("torch", model, tok, [never]), build_engine("hf", model, tok, [never])

    def engine(eng):
        def run(prefixes, n, seed):
            outs = eng.generate(prefixes, n, params, seed=seed)
            return sum(len(o.tokens) for o in outs)
        return run

    @torch.no_grad()
    def static(prefixes, n, seed):
        P = max(map(len, prefixes))
        ids = torch.full((len(prefixes), P), tok.pad_token_id)
        attn = torch.zeros((len(prefixes), P), dtype=torch.long)
        for i, x in enumerate(prefixes):
            ids[i, P - len(x):], attn[i, P - len(x):] = torch.tensor(x), 1
        gc = GenerationConfig(do_sample=True, temperature=0.85, top_k=0, top_p=1.0, max_new_tokens=n, min_new_tokens=0,
                              eos_token_id=None, pad_token_id=tok.pad_token_id, cache_implementation="static")
        torch.manual_seed(seed)
        return int(model.generate(input_ids=ids, attention_mask=attn, generation_config=gc)[:, P:].numel())

    def cb(prefixes, n, seed):
        from transformers import ContinuousBatchingConfig

        gc = GenerationConfig(do_sample=True, temperature=0.85, top_k=0, top_p=1.0, max_new_tokens=n,
                              eos_token_id=None, pad_token_id=tok.pad_token_id)
        out = model.generate_batch(prefixes, generation_config=gc, max_new_tokens=n,
                                   continuous_batching_config=ContinuousBatchingConfig(return_logprobs=True, seed=seed))
        return sum(len(o.generated_tokens) for o in out.values())

    runs = {"torch": engine(torch_eng), "hf": engine(hf_eng), "static": static}
    if library:
        runs["cb"] = cb
    return runs, torch_eng


def longest_only(n: int) -> int:
    """The torch engine alone decodes 16 x n tokens; prints one JSON line (tokens/s, peak RSS of this process)."""
    quiet_torch(1)
    from ulorl.models import load_model, load_tokenizer
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.registry import build_engine

    tok, model = load_tokenizer("builtin"), load_model("builtin")
    model.eval()
    prefixes = [[5 + (i * 7 + j) % 40 for j in range(6 + i % 5)] for i in range(ROWS)]
    eng = build_engine("torch", model, tok, [model.config.vocab_size + 7])
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    w0, c0 = time.perf_counter(), time.process_time()
    outs = eng.generate(prefixes, n, SamplingParams(temperature=0.85), seed=0)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    toks = sum(len(o.tokens) for o in outs)
    print(json.dumps({"new_tokens": n, "tokens": toks, "wall_s": wall, "cpu_s": cpu, "tokens_per_s_wall": toks / wall,
                      "tokens_per_s_cpu": toks / cpu, "ms_per_iter_cpu": 1000 * cpu / n,
                      "kv_cache_mib": eng.stats.extra["peak_blocks"] * eng.cache.block_bytes / 2**20,  # blocks in use
                      "rss_before_mib": rss0,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 64 / 512, 1024 long run, one repeat (~1 minute)")
    p.add_argument("--library", action="store_true", help="also transformers' continuous batching (slow on CPU)")
    p.add_argument("--short", type=int, default=256)
    p.add_argument("--long", type=int, default=2048)
    p.add_argument("--longest", type=int, default=8192, help="the torch engine's long run (0: skip)")
    p.add_argument("--repeats", type=int, default=2, help="alternating timed runs per variant and N")
    p.add_argument("--out", default=None)
    p.add_argument("--longest-only", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.longest_only:
        return longest_only(args.longest_only)
    if args.quick:
        args.short, args.long, args.longest, args.repeats = 64, 512, 1024, 1
    quiet_torch(1)
    from ulorl.models import load_model, load_tokenizer

    tok, model = load_tokenizer("builtin"), load_model("builtin")
    model.eval()
    prefixes = [[5 + (i * 7 + j) % 40 for j in range(6 + i % 5)] for i in range(ROWS)]  # 6..10-token prompts
    runs, torch_eng = variants(model, tok, args.library)
    load_before, t_start = os.getloadavg(), time.perf_counter()
    for f in runs.values():
        f(prefixes, 4, 0)  # warm-up
    per_iter: dict[str, dict[int, list[float]]] = {k: {args.short: [], args.long: []} for k in runs}
    short_runs: dict[str, dict[int, int]] = {}  # variant -> N -> new tokens per row it really decoded
    for rep in range(args.repeats):
        for n in (args.short, args.long):
            for k, f in runs.items():
                if k == "cb" and rep > 0:
                    continue  # one pass is enough to see it (it is slow on CPU)
                c0 = time.process_time()
                got = f(prefixes, n, rep)
                if got != ROWS * n:  # transformers' StaticCache path stopped early here: time per iteration it ran
                    print(f"{k} N={n}: decoded {got // ROWS} tokens per row, not {n}", file=sys.stderr)
                    short_runs.setdefault(k, {})[n] = got // ROWS
                per_iter[k][n].append((time.process_time() - c0) / max(got // ROWS, 1))
                print(f"{k:7s} N={n:5d}  {1000 * per_iter[k][n][-1]:.2f} ms/iteration", file=sys.stderr, flush=True)
    bw = bandwidth_gbs()
    bpt = torch_eng.runner.kv_shape().bytes_per_token
    mean_prompt = statistics.mean(map(len, prefixes))

    def floor_ms(n: int) -> float:  # KV bytes read per iteration (mean context over the run) / bandwidth
        return 1000 * ROWS * (mean_prompt + n / 2) * bpt / (bw * 1e9)

    table = {}
    for k, d in per_iter.items():
        s, lg = statistics.median(d[args.short]), statistics.median(d[args.long])
        table[k] = {"ms_per_iter_short": 1000 * s, "ms_per_iter_long": 1000 * lg, "ratio_long_short": lg / s,
                    "all_short_ms": [1000 * x for x in d[args.short]], "all_long_ms": [1000 * x for x in d[args.long]]}
    longest = {}
    if args.longest:  # in a fresh process, so its peak RSS is the engine's alone (the library paths allocate more)
        out = subprocess.run([sys.executable, __file__, "--longest-only", str(args.longest)], check=True,
                             capture_output=True, text=True).stdout
        longest = json.loads(out.strip().splitlines()[-1])
    result = {
        "ratio": table["torch"]["ratio_long_short"],
        "targets": {"ratio_max": 2.5},
        "short": args.short, "long": args.long, "rows": ROWS, "variants": table,
        "floor": {"bandwidth_gbs": bw, "kv_bytes_per_token": bpt, "ms_per_iter_short": floor_ms(args.short),
                  "ms_per_iter_long": floor_ms(args.long)},
        "longest": longest, "stopped_early": short_runs,
        "machine": machine(load_before), "elapsed_s": time.perf_counter() - t_start,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
