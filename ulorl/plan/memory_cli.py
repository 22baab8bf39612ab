"""`ulorl plan --memory`: the learner's and the KV cache's memory for a model, L, batch and R, and what fits a GPU.

    ulorl plan --memory --model qwen3-4b --lengths-k 32,64,128 --checkpointing --autocast --sp 2
    ulorl plan --memory --model /models/Qwen3-30B-A3B --gpu-gib 141 --json

The count is `ulorl.plan.memory` (its docstring lists what is and is not counted); docs/benchmarks.md has
it against measured peaks.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from ulorl.plan.memory import GIB, LearnerSetup, fit_table, kv_cache_bytes, learner_memory, load_shape


def add_memory_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory (with --memory)")
    g.add_argument("--model", default="qwen3-4b", help="qwen3-4b | qwen3-30b-a3b | qwen2.5-0.5b | builtin[:preset] "
                   "| a model folder with config.json (default qwen3-4b)")
    g.add_argument("--lengths-k", default="32,64,128", help="tokens per sample in thousands (x1024; default 32,64,128)")
    g.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="model.dtype: weights, gradients, AdamW moments (default float32)")
    g.add_argument("--autocast", action="store_true", help="train.autocast=bfloat16 (matmul outputs at 2 bytes)")
    g.add_argument("--checkpointing", action="store_true", help="model.gradient_checkpointing")
    g.add_argument("--offload", action="store_true", help="model.activation_offload")
    g.add_argument("--sp", type=int, default=1, help="train.sequence_parallel R (default 1)")
    g.add_argument("--fsdp-ranks", type=int, default=1, help="ranks sharing weights/gradients/AdamW (fsdp2)")
    g.add_argument("--logit-chunk", type=int, default=4096,
                   help="train.logit_chunk to plan for (default 4096, as the GPU presets set it; the config's own "
                   "default is 1024)")
    g.add_argument("--single-micro-batch", action="store_true",
                   help="the update is one micro-batch (as benchmarks/bench_learner_long.py measures); default: "
                        "an RL update of several, where every gradient is held from the second on")
    g.add_argument("--kv-seqs", type=int, default=0,
                   help="sequences resident in the rollout engine at full length, for the KV cache (default 0)")
    g.add_argument("--kv-bytes", type=int, default=2, help="bytes per KV value (bfloat16: 2)")
    g.add_argument("--gpu-gib", type=float, default=141.0, help="GPU memory for the fit table (H200: 141)")


def parse_lengths_k(text: str) -> list[int]:
    """`--lengths-k` ("32,64,128", thousands of tokens) -> tokens per sample (x1024); a ValueError naming the flag
    for anything but finite numbers of at least one token."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ValueError(f"--lengths-k {text!r}: give one or more lengths in thousands of tokens (e.g. 32,64,128)")
    lengths = []
    for item in items:
        try:
            tokens = float(item) * 1024
        except ValueError:
            tokens = math.nan
        if not (math.isfinite(tokens) and tokens >= 1):
            raise ValueError(f"--lengths-k {text!r}: {item!r} is not a length of at least one token, in thousands "
                             "(e.g. --lengths-k 32,64,128)")
        lengths.append(int(tokens))
    return lengths


def run_memory(args) -> int:
    try:
        shape = load_shape(args.model)
        lengths = parse_lengths_k(args.lengths_k)
        for flag, value in (("--sp", args.sp), ("--fsdp-ranks", args.fsdp_ranks), ("--logit-chunk", args.logit_chunk),
                            ("--kv-bytes", args.kv_bytes), ("--gpu-gib", args.gpu_gib)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{flag} {value}: must be a positive number")
        if args.kv_seqs < 0:
            raise ValueError(f"--kv-seqs {args.kv_seqs}: must be 0 or more")
        if shape.heads % args.sp or shape.kv_heads % args.sp:
            raise ValueError(f"--sp {args.sp} must divide the {shape.heads} heads and {shape.kv_heads} KV heads")
    except ValueError as e:
        print(f"ulorl plan: error: {e}", file=sys.stderr)
        return 2
    wb = 4 if args.dtype == "float32" else 2
    rows = []
    for L in lengths:
        s = LearnerSetup(tokens=L, weight_bytes=wb, autocast=args.autocast, checkpointing=args.checkpointing,
                         offload=args.offload, sequence_parallel=args.sp, fsdp_ranks=args.fsdp_ranks,
                         logit_chunk=args.logit_chunk, replicated=args.sp > 1 and args.fsdp_ranks == 1,
                         grads_held=not args.single_micro_batch)
        mem = learner_memory(shape, s)
        rows.append({"length": L, **{k: v / GIB if isinstance(v, float) else v for k, v in mem.items()},
                     "kv_cache": kv_cache_bytes(shape, L * args.kv_seqs, args.kv_bytes) / GIB})
    fits = fit_table(shape, lengths, args.gpu_gib,
                     base=LearnerSetup(tokens=1, weight_bytes=wb, autocast=args.autocast,
                                       logit_chunk=args.logit_chunk, grads_held=not args.single_micro_batch))
    if args.json:
        print(json.dumps({"model": args.model, "params": shape.params, "rows": rows, "fits": fits,
                          "gpu_gib": args.gpu_gib}))
        return 0
    print(f"model {args.model}: {_count(shape.params)} parameters, {shape.layers} layers, hidden {shape.hidden}, "
          f"{shape.heads}/{shape.kv_heads} heads; dtype {args.dtype}{' + bf16 autocast' if args.autocast else ''}, "
          f"checkpointing {'on' if args.checkpointing else 'off'}, offload {'on' if args.offload else 'off'}, "
          f"R={args.sp}, FSDP ranks {args.fsdp_ranks}")
    print(f"{'L':>8} {'static':>8} {'kept':>8} {'layer':>8} {'head':>7} {'offload':>8} {'device':>8} {'KV':>7}  GiB")
    for r in rows:
        print(f"{r['length']:>8} {r['static']:8.1f} {r['kept']:8.1f} {r['layer']:8.1f} {r['head']:7.1f} "
              f"{r['offloaded']:8.1f} {r['total_device']:8.1f} {r['kv_cache']:7.1f}")
    print(f"fits {args.gpu_gib:g} GiB per GPU (learner alone; fewest GPUs, then the cheapest setting):")
    for f in fits:
        if f["gpus"] is None:
            print(f"  L={f['length']}: not within 64 GPUs")
        else:
            print(f"  L={f['length']}: {f['gpus']} GPU(s), checkpointing {'on' if f['checkpointing'] else 'off'}, "
                  f"offload {'on' if f['offload'] else 'off'}, R={f['sequence_parallel']}: "
                  f"{f['device_gib']:.1f} GiB")
    return 0


def _count(n: int) -> str:
    """`4.02B`, `795.71K`: a billion-parameter model and the built-in one both readable."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)
