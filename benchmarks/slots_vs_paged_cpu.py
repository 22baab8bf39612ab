"""Issue 26's slots figure as block accounting on CPU: 128 rows of the Qwen3-1.7B shape at L = 16k, long-tailed,
in the pool that slots would need for 25 rows.

`gpu_paged_check.py`'s `slots_vs_paged` runs this on a GPU. What it reports (the pool's peak blocks, the tokens
alive then, preemptions) is bookkeeping of the engine's scheduler and block manager, which decide from lengths and
block counts only, never from the model's numbers or the device: the lengths come from `HazardEOS`, whose stop draws
are the rows' own random streams computed on the host (`sampler.row_uniforms`), and the pool's size in blocks is
the budget over the bytes of a block. So the same counts come out of any model with the same number of pool
blocks, here a tiny one (2 layers, hidden 64) on CPU, with the engine's CUDA block size (64 tokens) and a pool of
exactly as many blocks as the 1.7B shape's slots for 25 rows: 25 x (64 + 16,384) / 64 = 6,425. Its EOS id is one
the model cannot sample (the vocabulary's size), so every row ends where the stop draws say, as on a GPU with
trained weights. Converted to the 1.7B shape's bytes (28 layers x 8 KV heads x 128 x 2 x bf16 = 112 KiB a token).

What differs on the GPU: the decode path (fixed-shape steps over block tables instead of the CPU's split-K plan,
whose compaction and runs move blocks without changing how many are in use), and there, a random-weight model may
sample its EOS id (about 1 in 151,936 a token), ending a row or two early. The first segment (4,096 tokens) is what is
decoded, as in `gpu_paged_check.py`.

    python benchmarks/slots_vs_paged_cpu.py [--rows 128] [--out docs/slots_vs_paged_cpu.json]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from benchlib import emit, machine, quiet_torch  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from forced_eos import HazardEOS  # noqa: E402
from gpu_paged_check import QUICK, SHAPES, build_model  # noqa: E402

from ulorl.plan.memory import ModelShape  # noqa: E402
from ulorl.rollout.engines import SamplingParams, TorchEngine  # noqa: E402
from ulorl.rollout.engines.torch.engine import BLOCK_SIZES  # noqa: E402
from ulorl.rollout.engines.torch.kv_cache import GIB, KVShape  # noqa: E402

PROMPT = 64  # tokens per prompt, as gpu_paged_check.py


def kv_bytes_per_token(shape: dict, dtype: torch.dtype) -> int:
    """K/V bytes a token of a `gpu_paged_check` shape (`KVShape`, the pool's own count)."""
    m = ModelShape.from_config(shape)
    return KVShape(m.layers, m.kv_heads, m.head_dim, dtype).bytes_per_token


def run(rows: int, cap: int, segment: int, mean: float, slot_rows: int, shape: dict | None = None) -> dict:
    """The accounting of `rows` rows decoding `segment` tokens in a pool of `slot_rows` x (prompt + `cap`) tokens, with
    a tiny model of `shape` (default: the 1.7B's model type, 2 layers, hidden 64)."""
    block = BLOCK_SIZES["cuda"]
    pool_blocks = slot_rows * (PROMPT + cap) // block  # the blocks of the slots' memory (whole blocks)
    big_bpt = kv_bytes_per_token(SHAPES["qwen3-1.7b"], torch.bfloat16)
    shape = shape or QUICK["qwen3-1.7b"]
    model = build_model(shape, torch.device("cpu"), torch.float32)
    tiny_bpt = kv_bytes_per_token(shape, torch.float32)
    never = model.config.vocab_size  # an id the sampler cannot draw: rows end only at the stop draws
    eng = TorchEngine(model, [never], max_batch=rows, kv_cache_gib=(pool_blocks + 0.5) * block * tiny_bpt / GIB,
                      block_size=block)
    HazardEOS.install(eng, mean, never)
    prefixes = [[5 + (i * 7 + j) % 400 for j in range(PROMPT)] for i in range(rows)]
    t0 = time.perf_counter()
    outs = eng.generate(prefixes, segment, SamplingParams(temperature=1.0), seed=0)
    seconds = time.perf_counter() - t0
    if eng.cache.num_blocks != pool_blocks:
        raise RuntimeError(f"the pool holds {eng.cache.num_blocks} blocks, not the slots' {pool_blocks}")
    x = eng.stats.extra
    block_gib = block * big_bpt / GIB
    lengths = [len(o.tokens) for o in outs]
    return {"rows": rows, "cap": cap, "segment": segment, "mean_length": mean, "slot_rows_of_pool": slot_rows,
            "block_size": block, "pool_blocks": pool_blocks, "peak_blocks": x.get("peak_blocks", 0),
            "live_tokens_at_peak": x.get("live_tokens_at_peak", 0), "preemptions": x.get("preemptions", 0),
            "finished_in_segment": sum(o.eos for o in outs), "decoded_tokens": sum(lengths),
            "longest": max(lengths),
            "qwen3_1.7b": {"kv_bytes_per_token": big_bpt, "pool_gib": pool_blocks * block_gib,
                           "peak_kv_gib": x.get("peak_blocks", 0) * block_gib,
                           "slots_needed_gib": rows * (PROMPT + cap) * big_bpt / GIB},
            "seconds": seconds}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--cap", type=int, default=16384, help="L: the slots' length per row")
    p.add_argument("--segment", type=int, default=4096, help="new tokens decoded (the first segment of L / 4)")
    p.add_argument("--mean", type=float, default=2048.0, help="mean of the geometric lengths")
    p.add_argument("--slot-rows", type=int, default=25, help="the pool: the memory slots would need for this many rows")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    quiet_torch()
    r = run(args.rows, args.cap, args.segment, args.mean, args.slot_rows)
    big = r["qwen3_1.7b"]
    print(f"{r['rows']} rows, first {r['segment']} tokens of L = {r['cap']}: peak {r['peak_blocks']} of "
          f"{r['pool_blocks']} blocks ({big['peak_kv_gib']:.1f} of {big['pool_gib']:.1f} GiB for the 1.7B shape; all "
          f"rows in slots: {big['slots_needed_gib']:.1f} GiB), {r['preemptions']} preemptions, "
          f"{r['finished_in_segment']} finished", file=sys.stderr)
    return emit({"benchmark": "slots_vs_paged_cpu", "machine": machine(), **r}, args.out)


if __name__ == "__main__":
    sys.exit(main())
