"""One decode row attending alone over its own context: is the CPU engine's attention at the memory floor?

The shapes of the `builtin:long` model's decode step, one layer: a query of 2 KV heads x 2 query heads each x
32 dims against K/V of 2 heads x `e` positions x 32 dims, float32 (512 bytes of K/V per position), read
as views of one slot of a slot cache. Two ways of
computing it, alternating so drift cancels:
- `sdpa`: `F.scaled_dot_product_attention`, what the slot engine's decoder called (before the paged engine,
  issue 26; its numbers are kept in docs/benchmarks.md);
- `matmul`: an explicit `softmax(q k^T * scale) v`.

Reported per context length: microseconds per call (median over `--passes` passes of `--calls` calls each,
and the range over passes), the K/V read rate of `sdpa` in GB/s, and the greatest difference of the outputs.
One torch thread.

    python benchmarks/bench_attention_alone.py [--passes 5] [--calls 200] [--out docs/bench_attention_alone.json]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from benchlib import emit, machine, quiet_torch

KV_HEADS, GROUP, HEAD_DIM, SCALE = 2, 2, 32, 32 ** -0.5


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=SCALE)


def matmul(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * SCALE, dim=-1), v)


def per_call_us(fn, args: tuple, calls: int) -> float:
    fn(*args)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--lengths", default="512,2048,4096")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    quiet_torch()
    torch.manual_seed(0)
    rows = []
    for e in (int(x) for x in args.lengths.split(",")):
        q = torch.randn(1, KV_HEADS, GROUP, HEAD_DIM)
        # views of one slot of a slot cache sized for L = 4,096, as the decoder reads them
        cache_k, cache_v = (torch.randn(4, KV_HEADS, max(e, 4096), HEAD_DIM) for _ in range(2))
        k, v = cache_k[1:2, :, :e], cache_v[1:2, :, :e]
        times: dict[str, list[float]] = {"sdpa": [], "matmul": []}
        for _ in range(args.passes):
            for name, fn in (("sdpa", sdpa), ("matmul", matmul)):
                times[name].append(per_call_us(fn, (q, k, v), args.calls))
        kv_bytes = 2 * k.numel() * k.element_size()
        row = {"positions": e, "kv_bytes": kv_bytes,
               "max_abs_diff": float((sdpa(q, k, v) - matmul(q, k, v)).abs().max())}
        for name, ts in times.items():
            row[f"{name}_us"] = statistics.median(ts)
            row[f"{name}_us_range"] = [min(ts), max(ts)]
        row["sdpa_gb_per_s"] = kv_bytes / row["sdpa_us"] / 1e3
        rows.append(row)
        print(f"e={e}: sdpa {row['sdpa_us']:.0f} us ({row['sdpa_gb_per_s']:.1f} GB/s), "
              f"matmul {row['matmul_us']:.0f} us", flush=True)
    return emit({"rows": rows, "passes": args.passes, "calls": args.calls, "machine": machine()}, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
