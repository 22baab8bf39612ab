"""A Triton kernel for decode attention over block tables: split-KV (flash-decoding), one KV head's G query heads
per program, two launches per layer.

Issue 26 asks for a library path first and a kernel of our own only where none meets the target. On one H200
(docs/scale.md) the best library path, flex_attention's decoding kernel with CUDA graphs, took 2.63-2.73x the
bandwidth floor at 256 rows x 8k (target 2x): with more (row, KV head) programs than SMs inductor does not split
a row's blocks, and its sm_90 settings are 1 pipeline stage and 2 warps. This kernel is the standard shape of
paged decode (vLLM's PagedAttention v2, flash-decoding), written for our cache layout:

- stage 1, grid `(B, H_kv, S)`: program (b, h, s) takes the s-th of S equal slices of row b's own blocks
  (`cdiv(blocks, S)` each, from the row's context length, so a short row's late slices are empty), reads each
  block's K and V tile once for all G query heads of KV head h (padded to a tile of `GP` >= 16 rows: GQA
  without repeating K/V, any G), and keeps an online softmax; it writes the slice's normalised output and its
  log-sum-exp (float32; an empty slice writes lse = -inf);
- stage 2, grid `(B, H_kv)`: the S slices merged by their log-sum-exps into the row's output, in q's dtype.

Scores and the softmax are float32. The products take the cache's dtype (bfloat16 on a GPU: tensor cores) with
float32 accumulation; float32 inputs use IEEE products, not TF32, so the engine's float32 contract (1e-5 against
the learner) holds. Shapes are fixed by (B, S, the table's width), so a step is capturable as a CUDA graph; the
table and lengths are read on the device, nothing is synchronised with the host.

Runs on CUDA. On CPU, Triton's interpreter (`TRITON_INTERPRET=1` set before this module is imported) runs the
same kernels one program at a time, slowly: that is how the tests check them here. The interpreter's bfloat16
`tl.dot` is wrong in Triton 3.6, so under it the tiles are cast to float32 before the products (`DOT_F32`); the
bfloat16 products themselves run only on a GPU (`benchmarks/gpu_paged_check.py`); `triton_interpreter.py` mends
the interpreter's loop bounds under NumPy 2.4.

Without a GPU, `triton_aot.py` compiles the real (not interpreted) kernels for a CUDA architecture through
Triton's CUDA backend and reports their shared memory, registers and spills (`benchmarks/triton_aot_check.py`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ulorl.rollout.engines.torch.table_attention import triton_interpreting
from ulorl.rollout.engines.torch.triton_interpreter import patch_interpreter
from ulorl.rollout.engines.torch.triton_launch import Launch

INTERPRETING = triton_interpreting()
patch_interpreter()


@triton.jit
def _slice_kernel(Q, K, V, TABLE, CTX, OP, LP,
                  s_qb, s_qh, s_qg, s_kh, s_kt, s_vh, s_vt, s_tb,
                  s_ob, s_oh, s_os, s_og, s_lb, s_lh, s_ls,
                  scale, SPLITS,
                  G: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr, GP: tl.constexpr, DP: tl.constexpr,
                  DOT_F32: tl.constexpr, PRECISION: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    s = tl.program_id(2)
    ctx = tl.load(CTX + b).to(tl.int32)  # the block loop's bounds in 32 bits
    nblk = tl.cdiv(ctx, BLOCK)
    per = tl.cdiv(nblk, SPLITS)
    lo = s * per
    hi = tl.minimum(lo + per, nblk)
    g = tl.arange(0, GP)
    d = tl.arange(0, DP)
    t = tl.arange(0, BLOCK)
    q = tl.load(Q + b * s_qb + h * s_qh + g[:, None] * s_qg + d[None, :],
                mask=(g[:, None] < G) & (d[None, :] < D), other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)
    m = tl.full([GP], float("-inf"), tl.float32)
    den = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, DP], tl.float32)
    for j in range(lo, hi):
        tok = tl.load(TABLE + b * s_tb + j) * BLOCK + t  # (BLOCK,) token slots of the row's j-th block
        if D == DP:  # no mask: unmasked, vectorised loads of whole rows
            k = tl.load(K + h * s_kh + tok[:, None] * s_kt + d[None, :])
            v = tl.load(V + h * s_vh + tok[:, None] * s_vt + d[None, :])
        else:
            k = tl.load(K + h * s_kh + tok[:, None] * s_kt + d[None, :], mask=d[None, :] < D, other=0.0)
            v = tl.load(V + h * s_vh + tok[:, None] * s_vt + d[None, :], mask=d[None, :] < D, other=0.0)
        if DOT_F32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        sc = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # (GP, BLOCK) float32
        sc = tl.where((j * BLOCK + t)[None, :] < ctx, sc, float("-inf"))
        m_new = tl.maximum(m, tl.max(sc, 1))  # finite: position j * BLOCK < ctx
        alpha = tl.exp(m - m_new)
        p = tl.exp(sc - m_new[:, None])
        den = den * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m = m_new
    live = den > 0
    safe = tl.where(live, den, 1.0)
    base = b * s_ob + h * s_oh + s * s_os
    tl.store(OP + base + g[:, None] * s_og + d[None, :], acc / safe[:, None])
    tl.store(LP + b * s_lb + h * s_lh + s * s_ls + g, tl.where(live, m + tl.log(safe), float("-inf")))


@triton.jit
def _merge_kernel(OP, LP, OUT,
                  s_ob, s_oh, s_os, s_og, s_lb, s_lh, s_ls, s_ub, s_uh, s_ug,
                  SPLITS, G: tl.constexpr, D: tl.constexpr, GP: tl.constexpr, DP: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    g = tl.arange(0, GP)
    d = tl.arange(0, DP)
    m = tl.full([GP], float("-inf"), tl.float32)
    den = tl.zeros([GP], tl.float32)
    acc = tl.zeros([GP, DP], tl.float32)
    for s in range(0, SPLITS):
        lse = tl.load(LP + b * s_lb + h * s_lh + s * s_ls + g)
        o = tl.load(OP + b * s_ob + h * s_oh + s * s_os + g[:, None] * s_og + d[None, :])
        m_new = tl.maximum(m, lse)
        ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # no live slice yet: exp(-inf) = 0 on both sides
        alpha = tl.exp(m - ref)
        w = tl.exp(lse - ref)
        den = den * alpha + w
        acc = acc * alpha[:, None] + w[:, None] * o
        m = m_new
    out = acc / den[:, None]  # slice 0 is never empty (ctx >= 1): den > 0
    tl.store(OUT + b * s_ub + h * s_uh + g[:, None] * s_ug + d[None, :], out.to(OUT.dtype.element_ty),
             mask=(g[:, None] < G) & (d[None, :] < D))


def _pow2_at_least_16(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def decode_launches(q: torch.Tensor, k_tokens: torch.Tensor, v_tokens: torch.Tensor, table: torch.Tensor,
                    ctx: torch.Tensor, block_size: int, scale: float, splits: int, num_warps: int = 4,
                    num_stages: int = 2) -> tuple[list[Launch], torch.Tensor]:
    """The two launches of `paged_decode` (same arguments) and the output tensor they fill; `triton_aot.py`
    compiles exactly these for a GPU architecture without launching them."""
    if q.stride(-1) != 1 or k_tokens.stride(-1) != 1 or v_tokens.stride(-1) != 1:
        raise ValueError("paged_decode: q, k_tokens and v_tokens need a contiguous last (head) dimension")
    nb, h, g, d = q.shape
    gp, dp = _pow2_at_least_16(g), _pow2_at_least_16(d)
    op = torch.empty((nb, h, splits, gp, dp), dtype=torch.float32, device=q.device)
    lp = torch.empty((nb, h, splits, gp), dtype=torch.float32, device=q.device)
    out = torch.empty((nb, h, g, d), dtype=q.dtype, device=q.device)
    f32 = q.dtype == torch.float32
    slices = Launch(_slice_kernel, (nb, h, splits), (
        q, k_tokens, v_tokens, table, ctx, op, lp,
        q.stride(0), q.stride(1), q.stride(2), k_tokens.stride(0), k_tokens.stride(1), v_tokens.stride(0),
        v_tokens.stride(1), table.stride(0), *op.stride()[:4], *lp.stride()[:3], scale, splits),
        dict(G=g, D=d, BLOCK=block_size, GP=gp, DP=dp, DOT_F32=INTERPRETING, PRECISION="ieee" if f32 else "tf32",
             num_warps=num_warps, num_stages=num_stages))
    merge = Launch(_merge_kernel, (nb, h), (op, lp, out, *op.stride()[:4], *lp.stride()[:3], *out.stride()[:3],
                                            splits), dict(G=g, D=d, GP=gp, DP=dp, num_warps=num_warps))
    return [slices, merge], out


def paged_decode(q: torch.Tensor, k_tokens: torch.Tensor, v_tokens: torch.Tensor, table: torch.Tensor,
                 ctx: torch.Tensor, block_size: int, scale: float, splits: int, num_warps: int = 4,
                 num_stages: int = 2) -> torch.Tensor:
    """Each row's attention over its own blocks.

    q `(B, H_kv, G, D)`; k_tokens/v_tokens `(H_kv, num_blocks x block_size, D)` (the pool's token view);
    table `(B, W)` long, row b's blocks in order (entries past its last block are not read); ctx `(B,)` long,
    row b's context length (>= 1); `splits` slices per row (S) -> `(B, H_kv, G, D)` in q's dtype.
    """
    launches, out = decode_launches(q, k_tokens, v_tokens, table, ctx, block_size, scale, splits, num_warps,
                                    num_stages)
    for launch in launches:
        launch.run()
    return out
