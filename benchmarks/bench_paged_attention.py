"""One layer of decode attention over a paged KV cache on CPU: the torch paths, side by side.

The `builtin:long` model's shapes (2 KV heads x 2 query heads each x 32 dims, float32), rows with a long tail
of contexts (or all equal), K/V in blocks scattered over a pool. Variants:
- `slot_rows`: the slot engine's schedule (each row alone over a view of its contiguous slot), the reference;
- `gather_rows`: SDPA per row over its blocks gathered into a contiguous copy;
- `split_k`: one call with every pool block as an entry (the owner row's query), log-sum-exp merge (the paged
  engine's batched call, `rollout/engines/torch/attention.py`);
- `split_k_pairs`: the same over (row, block) pairs gathered from the pool (what shared blocks need);
- `varlen`: `torch.nn.attention.varlen.varlen_attn` (with `block_table`): reported as unavailable when it raises.

Reported: ms per call (median of 5 passes of 20 calls), the greatest difference to `slot_rows`. One torch thread.

    python benchmarks/bench_paged_attention.py [--out docs/bench_paged_attention.json]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from benchlib import emit, machine, quiet_torch

HK, G, D, SCALE = 2, 2, 32, 32 ** -0.5
FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def contexts(kind: str, n: int) -> list[int]:
    if kind == "tail":  # most rows short, a few up to 4k
        g = torch.Generator().manual_seed(1)
        return [int(20 + 4000 * torch.rand((), generator=g).item() ** 6) for _ in range(n)]
    return [2048] * n


def setup(ctx: list[int], bs: int):
    """Pool (H_kv, blocks, bs, D) with each row's blocks scattered, and the same K/V as slots."""
    nbl = [-(-(c + 1) // bs) for c in ctx]
    tot = sum(nbl)
    perm = torch.randperm(tot + 8)[:tot]
    pk, pv = torch.randn(HK, tot + 8, bs, D), torch.randn(HK, tot + 8, bs, D)
    tables, at = [], 0
    for b in nbl:
        tables.append(perm[at:at + b])
        at += b
    sk, sv = torch.zeros(len(ctx), HK, max(ctx) + 1, D), torch.zeros(len(ctx), HK, max(ctx) + 1, D)
    for r, t in enumerate(tables):
        e = ctx[r] + 1
        sk[r, :, :e] = pk[:, t].reshape(HK, -1, D)[:, :e]
        sv[r, :, :e] = pv[:, t].reshape(HK, -1, D)[:, :e]
    return pk, pv, tables, sk, sv


def merge(o, lse, row, n):
    m = torch.full((n + 1, HK, G), float("-inf")).scatter_reduce(0, row[:, None, None].expand_as(lse), lse, "amax")
    w = torch.nan_to_num(torch.exp(lse - m[row]))
    den = torch.zeros(n + 1, HK, G).index_add_(0, row, w)
    return (torch.zeros(n + 1, HK, G, D).index_add_(0, row, o * w[..., None]) / den[..., None])[:n]


def slot_rows(q, ctx, sk, sv):
    return torch.cat([F.scaled_dot_product_attention(q[i:i + 1], sk[i:i + 1, :, :c + 1], sv[i:i + 1, :, :c + 1],
                                                     scale=SCALE) for i, c in enumerate(ctx)])


def gather_rows(q, ctx, pk, pv, tables):
    return torch.cat([F.scaled_dot_product_attention(q[i:i + 1], pk[:, t].reshape(1, HK, -1, D)[:, :, :c + 1],
                                                     pv[:, t].reshape(1, HK, -1, D)[:, :, :c + 1], scale=SCALE)
                      for i, (c, t) in enumerate(zip(ctx, tables))])


def split_k_plan(ctx, tables, bs, nb):
    owner, fill = torch.full((nb,), len(ctx)), torch.zeros(nb, dtype=torch.long)
    for r, t in enumerate(tables):
        owner[t] = r
        f = torch.full((len(t),), bs)
        f[-1] = ctx[r] + 1 - (len(t) - 1) * bs
        fill[t] = f
    open_ = torch.arange(bs)[None, :] < fill[:, None]
    open_[fill == 0, 0] = True
    mask = torch.zeros(nb, bs).masked_fill(~open_, float("-inf"))[None, :, None, :]
    return owner, fill == 0, mask


def split_k(q, pk, pv, owner, empty, mask):
    qe = torch.cat([q, q.new_zeros(1, HK, G, D)])[owner].transpose(0, 1).contiguous()
    o, lse = FLASH(qe, pk, pv, attn_mask=mask, scale=SCALE)
    lse = lse.transpose(0, 1).masked_fill(empty[:, None, None], float("-inf"))
    return merge(o.transpose(0, 1), lse, owner, q.shape[0])


def split_k_pairs(q, pk, pv, rows, blocks, mask):
    o, lse = FLASH(q[rows].transpose(0, 1).contiguous(), pk[:, blocks], pv[:, blocks], attn_mask=mask, scale=SCALE)
    return merge(o.transpose(0, 1), lse.transpose(0, 1), rows, q.shape[0])


def ms(fn, *a) -> float:
    fn(*a)
    passes = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            fn(*a)
        passes.append((time.perf_counter() - t0) / 20 * 1e3)
    return statistics.median(passes)


def varlen_available() -> str:
    from torch.nn.attention.varlen import varlen_attn

    q, k = torch.randn(2, 4, D), torch.randn(8, HK, D)
    cu = torch.tensor([0, 1, 2], dtype=torch.int32)
    try:
        varlen_attn(q, k, k, cu, torch.tensor([0, 4, 8], dtype=torch.int32), 1, 4, enable_gqa=True)
        return "ok"
    except Exception as e:  # report what torch says, whatever it raises
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    args = p.parse_args()
    quiet_torch(1)
    torch.manual_seed(0)
    rows = []
    for n, kind in ((64, "tail"), (256, "tail"), (64, "even")):
        ctx = contexts(kind, n)
        for bs in (16, 32, 64):
            pk, pv, tables, sk, sv = setup(ctx, bs)
            q = torch.randn(n, HK, G, D)
            owner, empty, mask = split_k_plan(ctx, tables, bs, pk.shape[1])
            prow = torch.cat([torch.full((len(t),), r) for r, t in enumerate(tables)])
            pblk = torch.cat(tables)
            pmask = mask[:, pblk]
            ref = slot_rows(q, ctx, sk, sv)
            diff = max(float((f - ref).abs().max()) for f in (
                gather_rows(q, ctx, pk, pv, tables), split_k(q, pk, pv, owner, empty, mask),
                split_k_pairs(q, pk, pv, prow, pblk, pmask)))
            r = {"rows": n, "contexts": kind, "block_size": bs, "live_tokens": sum(ctx) + n,
                 "slot_rows_ms": ms(slot_rows, q, ctx, sk, sv), "gather_rows_ms": ms(gather_rows, q, ctx, pk, pv, tables),
                 "split_k_ms": ms(split_k, q, pk, pv, owner, empty, mask),
                 "split_k_pairs_ms": ms(split_k_pairs, q, pk, pv, prow, pblk, pmask), "max_abs_diff": diff}
            rows.append(r)
            print(r, flush=True)
    return emit({"benchmark": "bench_paged_attention", "rows": rows, "varlen_attn_cpu": varlen_available(),
                 "machine": machine()}, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
