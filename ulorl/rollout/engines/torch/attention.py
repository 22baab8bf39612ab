"""Attention over the paged KV cache for decode: one batched call per layer (the prefill's: `prefill_attention.py`).

Decode (`paged_decode_attention`) is split-K attention over blocks, as PagedAttention v2 / flash-decoding do:
every block of the pool below the block manager's high-water mark is one entry (a head, with the KV heads as
the batch) of a single attention call, whose query is that block's owner row's query; the call returns each
block's partial output and its log-sum-exp, and `merge_partials` combines the blocks of a row into its exact
softmax over its whole context. No K/V is copied for blocks a row holds alone (the pool itself is the call's
K/V); a row reads only its own blocks; a free block costs one entry whose result is dropped. Beside it: the
rows' partly filled last blocks (one masked call over them, gathered), the prompt blocks a group shares (one
call, gathered; they are few), and on CPU the runs of consecutive blocks of long contexts (a call per run
over a view: `DecodePlan.runs`).

Measured against the alternatives that ship with torch 2.13 on CPU (docs/benchmarks.md, "The paged torch
engine"): `torch.nn.attention.varlen.varlen_attn` (with or without `block_table`) has no CPU kernel (it calls
flash attention's CUDA op); SDPA per row over its gathered blocks costs 2.5-3x the slot engine's per-row views
(the gather copies the context every layer); the split-K call costs 1.0-1.4x them at 64 and 256 rows with
blocks of 32. On CPU the call is `_scaled_dot_product_flash_attention_for_cpu`, the kernel behind
`F.scaled_dot_product_attention` there, which also returns the log-sum-exp; elsewhere an explicit
matmul-softmax-matmul (device-generic, float32 softmax).

GQA: the G query heads of one KV head act as G queries of that head, so K/V are never repeated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class DecodePlan:
    """Which rows read which blocks in one decode step (shared by every layer of the step).

    owner: `(W,)` long, for each pool block below the high-water mark W, the row that holds it alone, or n
        (no row: a free block, or a shared one, read through `shared_*`).
    drop: `(W,)` bool, blocks whose result in the full-block call is dropped: no owner, the owner's last block
        (partly filled, read by the masked call over `last_block`), or a block of a run (below).
    last_block: `(n,)` long, each row's last block; last_mask `(1, n, 1, block_size)` additive float mask:
        0 on its filled positions (this step's token included), -inf after.
    shared_rows, shared_blocks: `(S,)` long, (row, full block) pairs of shared prompt blocks.
    runs: (row, first block, number of blocks) of rows whose first full blocks are consecutive in the pool,
        read as one view of the token layout (a call per run; on CPU one call over a long run costs less than
        its blocks as entries of the batched call).
    """

    n: int
    owner: torch.Tensor
    drop: torch.Tensor
    last_block: torch.Tensor
    last_mask: torch.Tensor
    shared_rows: torch.Tensor
    shared_blocks: torch.Tensor
    runs: list[tuple[int, int, int]]
    rows: torch.Tensor  # (W + n + S + len(runs),) the row of every partial result, in `paged_decode_attention`'s order


def build_decode_plan(n: int, owner_row: torch.Tensor, last_block: torch.Tensor, last_fill: torch.Tensor,
                      block_size: int, dtype: torch.dtype, shared_rows: torch.Tensor, shared_blocks: torch.Tensor,
                      runs: list[tuple[int, int, int]] | None = None, run_blocks: torch.Tensor | None = None
                      ) -> DecodePlan:
    """The plan of a step.

    owner_row: `(W,)` long, the holder row of each block below the high-water mark, or n.
    last_block, last_fill: `(n,)` long, each row's last block and how many of its positions are filled after this
        step's write (1..block_size); every other block of a row is full.
    runs, run_blocks: the runs and `(R,)` every block they cover (left out of the batched call).
    """
    w = owner_row.shape[0]
    drop = owner_row >= n
    drop[last_block[last_block < w]] = True  # blocks taken from the top of the pool lie above W
    if run_blocks is not None and run_blocks.numel():
        drop[run_blocks[run_blocks < w]] = True
    pos = torch.arange(block_size, device=owner_row.device)
    mask = torch.zeros((n, block_size), dtype=dtype, device=owner_row.device)
    mask.masked_fill_(pos[None, :] >= last_fill[:, None], float("-inf"))
    runs = runs or []
    rows = torch.cat([owner_row, torch.arange(n, device=owner_row.device), shared_rows,
                      torch.tensor([r for r, _, _ in runs], dtype=torch.long, device=owner_row.device)])
    return DecodePlan(n, owner_row, drop, last_block, mask[None, :, None, :], shared_rows, shared_blocks, runs, rows)


def attend_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention and its log-sum-exp: q `(B, H, Lq, D)`, k/v `(B, H, Lk, D)`, mask `(B, 1, 1, Lk)` additive or None
    -> output `(B, H, Lq, D)` (q's dtype), lse `(B, H, Lq)` float32.

    Nothing to attend (no query rows, no heads, or no keys: e.g. a step with no full block below the
    high-water mark) gives zeros and lse -inf, the partial that merging ignores; the CPU kernel would
    die of SIGFPE on such shapes."""
    if q.numel() == 0 or k.shape[-2] == 0:
        return (q.new_zeros((*q.shape[:-1], v.shape[-1])),
                torch.full(q.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device))
    if q.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=scale)
    return attend_with_lse_explicit(q, k, v, mask, scale)


def attend_with_lse_explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                             scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """`attend_with_lse` as matmul-softmax-matmul (any device; the softmax in float32)."""
    s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    if mask is not None:
        s = s + mask.float()
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.exp(s - lse[..., None]).to(v.dtype), v)
    return o, lse


def merge_partials(o: torch.Tensor, lse: torch.Tensor, row: torch.Tensor, n: int) -> torch.Tensor:
    """Combine per-block partial results into each row's attention.

    o `(B, H, G, D)`, lse `(B, H, G)` float32 (-inf: dropped), row `(B,)` long in [0, n] (n: dropped) ->
    `(n, H, G, D)` in o's dtype: `sum_b exp(lse_b - LSE) o_b` with `LSE = logsumexp_b lse_b` over a row's blocks.
    """
    m = torch.full((n + 1, *lse.shape[1:]), float("-inf"), device=lse.device)
    m = m.scatter_reduce(0, row[:, None, None].expand_as(lse), lse, "amax")
    w = torch.exp(lse - m[row])  # (B, H, G); a dropped block: exp(-inf) = 0
    w = torch.nan_to_num(w, nan=0.0)  # the unused row n may hold -inf - -inf
    den = torch.zeros(m.shape, device=lse.device).index_add_(0, row, w)
    num = torch.zeros((n + 1, *o.shape[1:]), device=o.device).index_add_(0, row, o.float() * w[..., None])
    return (num[:n] / den[:n, ..., None]).to(o.dtype)


def paged_decode_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, plan: DecodePlan,
                           scale: float, k_tokens: torch.Tensor | None = None,
                           v_tokens: torch.Tensor | None = None) -> torch.Tensor:
    """One decode step's attention for every row, each over its own blocks.

    q `(n, H_kv, G, D)`; k_pool/v_pool `(H_kv, num_blocks, block_size, D)`; k_tokens/v_tokens the same memory as
    `(H_kv, num_blocks x block_size, D)` (needed for `plan.runs`) -> `(n, H_kv, G, D)`.
    The partial results merged: every full block below the high-water mark (one call with the blocks as
    heads, the pool's own view, no mask), the rows' last blocks (gathered, masked), the shared prompt blocks
    (gathered), and each run (a view).
    """
    w = plan.owner.shape[0]
    qpad = torch.cat([q, q.new_zeros((1, *q.shape[1:]))])
    o, lse = attend_with_lse(qpad[plan.owner].transpose(0, 1).contiguous(), k_pool[:, :w], v_pool[:, :w], None, scale)
    parts_o = [o.transpose(0, 1)]  # (W, H_kv, G, D)
    parts_lse = [lse.transpose(0, 1).masked_fill(plan.drop[:, None, None], float("-inf"))]
    qt = q.transpose(0, 1).contiguous()  # (H_kv, n, G, D)
    o, lse = attend_with_lse(qt, k_pool[:, plan.last_block], v_pool[:, plan.last_block], plan.last_mask, scale)
    parts_o.append(o.transpose(0, 1))
    parts_lse.append(lse.transpose(0, 1))
    if plan.shared_rows.numel():
        o, lse = attend_with_lse(qt[:, plan.shared_rows], k_pool[:, plan.shared_blocks], v_pool[:, plan.shared_blocks],
                                 None, scale)
        parts_o.append(o.transpose(0, 1))
        parts_lse.append(lse.transpose(0, 1))
    bs = k_pool.shape[2]
    for r, first, count in plan.runs:
        span = slice(first * bs, (first + count) * bs)
        o, lse = attend_with_lse(q[r:r + 1], k_tokens[None, :, span], v_tokens[None, :, span], None, scale)
        parts_o.append(o)
        parts_lse.append(lse)
    return merge_partials(torch.cat(parts_o), torch.cat(parts_lse), plan.rows, plan.n)
