"""Decode attention over padded block tables: fixed shapes, no host synchronisation (the CUDA-graph path).

The split-K call of `attention.py` sizes its work by the pool's high-water mark and its lists of shared blocks
and runs, which change every step: the right shape for CPU, where it was measured fastest, and the wrong one
for a captured CUDA graph, whose every tensor must keep its shape and address. Here a step is described by

- `table` `(B, W)` long: row b's blocks in order, padded (with the pool's scratch block) to the width W;
- `ctx` `(B,)` long: row b's context length, this step's token included (>= 1).

and a backend turns that into each row's attention over its own blocks. Three backends, keyed by `TableBackend`:

- `flex`: `torch.nn.attention.flex_attention` over the pool as one key/value sequence, with a `BlockMask`
  whose KV indices are the rows' physical blocks (as torch's experimental `PagedAttention` does); its
  `mask_mod` maps a physical position back to the row's logical position. Compiled (Triton) on CUDA it
  reads each row's blocks in place, no copy; eager (CPU, tests) it is a reference that materialises the
  scores over the whole pool. The compiled kernel requires the mask's KV extent to cover the key length, so
  the KV index tensor spans the pool (`(B, 1, 1, pool blocks)` int32, the table in its first columns);
  compiled by torch's CPU backend this construction matches the gather (`test_compiled_flex_equals_the_gather`,
  slow). GQA: a KV head's G query heads are passed as G query positions of that head, so K/V are never
  repeated and G need not be a power of two (flex decoding's GQA requires one; the Qwen2.5-0.5B shape has
  G = 7). Compiled with a static batch, one kernel per batch bucket: only then does inductor use its decoding
  kernel (`FlexAttention.__init__`).
- `triton`: our own Triton kernel (`triton_decode.py`): split-KV over each row's blocks, the G query heads of a
  KV head in one program. Written because flex's decoding kernel stayed above issue 26's 2x bandwidth target on
  an H200; CUDA only (on CPU under Triton's interpreter, for tests). Slices per row: `splits`, or by default
  enough for about two programs per SM (`auto_splits`).
- `gather`: the rows' blocks copied into `(H_kv, B, W x block_size, D)`, then matmul-softmax-matmul in
  float32 with a length mask. Any device, no compiler; it reads each row's table width, so callers bucket W
  to the batch's longest row.

Each takes `prepare(table, ctx, block_size, num_blocks, q_len)` once per step (shared by all layers) and
`attend(q, ...)` per layer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

import torch

from ulorl.errors import check_choice


FLEX_RECOMPILE_LIMIT = 128  # compiled flex kernels kept per process: batch buckets (36 for 512 rows), with room
MAX_SPLITS = 16  # the triton backend's slices per row at most


class TableBackend(str, Enum):
    """`rollout.torch.decode_attention` values that decode over block tables (`split_k` is `attention.py`)."""

    FLEX = "flex"
    GATHER = "gather"
    TRITON = "triton"


@dataclass
class TableStep:
    """What every layer of one decode step shares: the tables and whatever the backend derived from them."""

    table: torch.Tensor  # (B, W) long
    ctx: torch.Tensor  # (B,) long
    extra: object = None  # backend-specific (a BlockMask, or gather indices and mask)


class GatherAttention:
    """Copy each row's blocks, then attend with a length mask (device-generic)."""

    name = "gather"
    fixed_width = False  # reads all W blocks of every row: W is bucketed to the longest row

    def prepare(self, table: torch.Tensor, ctx: torch.Tensor, block_size: int, num_blocks: int, q_len: int
                ) -> TableStep:
        b, w = table.shape
        offsets = torch.arange(block_size, device=table.device)
        slots = (table[:, :, None] * block_size + offsets).reshape(b, w * block_size)
        pos = torch.arange(w * block_size, device=table.device)
        mask = torch.zeros((b, w * block_size), dtype=torch.float32, device=table.device)
        mask.masked_fill_(pos[None, :] >= ctx[:, None], float("-inf"))
        return TableStep(table, ctx, (slots, mask))

    def attend(self, q: torch.Tensor, k_tokens: torch.Tensor, v_tokens: torch.Tensor, step: TableStep,
               scale: float) -> torch.Tensor:
        """q `(B, H_kv, G, D)`, k_tokens/v_tokens `(H_kv, num_blocks x block_size, D)` -> `(B, H_kv, G, D)`."""
        slots, mask = step.extra
        k, v = k_tokens[:, slots], v_tokens[:, slots]  # (H_kv, B, S, D)
        qh = q.transpose(0, 1)  # (H_kv, B, G, D)
        s = torch.matmul(qh, k.transpose(-1, -2)).float() * scale + mask[None, :, None, :]
        p = torch.softmax(s, dim=-1).to(v.dtype)
        return torch.matmul(p, v).transpose(0, 1)


class FlexAttention:
    """flex_attention over the whole pool with a per-row block mask (compiled on CUDA, eager elsewhere)."""

    name = "flex attention"
    fixed_width = True  # the kernel loops over each row's own block count; W only sizes the index tensor

    def __init__(self, compiled: bool, kernel_options: dict | None = None, full_blocks: bool = False) -> None:
        """`kernel_options`: passed to flex_attention (Triton's `num_stages`, `num_warps`, `BLOCK_N`, `SPLIT_KV`;
        None: inductor's choice). `full_blocks`: a row's blocks before its last are given as full blocks, which
        the compiled kernel reads without evaluating the mask (the eager reference evaluates it everywhere)."""
        from torch.nn.attention.flex_attention import flex_attention

        self.kernel_options = dict(kernel_options) if kernel_options else None
        self.full_blocks = full_blocks
        self.flex = flex_attention
        if compiled:
            # dynamic=False: one kernel per batch bucket. Inductor lowers flex attention with a short query to its
            # decoding kernel only for a static batch; with a symbolic batch (what a second bucket gets under
            # dynamic=None) it takes the main kernel, which needs KV blocks of 128 and failed on our 64 (H200,
            # torch 2.11). Every bucket is a recompile, so dynamo's limit (8) is raised past the bucket count.
            import torch._dynamo

            cfg = torch._dynamo.config
            cfg.recompile_limit = max(cfg.recompile_limit, FLEX_RECOMPILE_LIMIT)
            self.flex = torch.compile(flex_attention, dynamic=False)

    def prepare(self, table: torch.Tensor, ctx: torch.Tensor, block_size: int, num_blocks: int, q_len: int
                ) -> TableStep:
        from torch.nn.attention.flex_attention import BlockMask

        b, w = table.shape
        nblk = torch.div(ctx + block_size - 1, block_size, rounding_mode="floor")  # (B,)
        col = torch.arange(w, device=table.device)
        logical = torch.where(col[None, :] < nblk[:, None], col[None, :], -1)  # (B, W): -1 on padding
        # physical block -> logical block of row b (-1: not the row's); the scratch block may repeat in a row's
        # padding, and amax keeps its one live entry (a padding row's block 0)
        p2l = torch.full((b, num_blocks), -1, dtype=torch.int32, device=table.device)
        p2l = p2l.scatter_reduce(1, table, logical.to(torch.int32), "amax")

        def mask_mod(bi, h, q_idx, kv_idx):
            lb = p2l[bi, kv_idx // block_size]
            return (lb >= 0) & (lb * block_size + kv_idx % block_size < ctx[bi])

        # the compiled kernel asks the mask's KV extent (index columns x block size) to cover the KV length, the
        # whole pool: the table's columns, then zeros that the per-row block counts never reach
        kv_indices = torch.zeros((b, 1, 1, num_blocks), dtype=torch.int32, device=table.device)
        full = None
        if self.full_blocks:  # blocks 0 .. nblk-2 hold positions < ctx only; the last one is masked
            last = (nblk - 1).clamp(min=0)
            kv_indices[:, 0, 0, 0] = table.gather(1, last[:, None])[:, 0]
            full_indices = torch.zeros_like(kv_indices)
            full_indices[:, 0, 0, :w] = table
            full = (last.to(torch.int32)[:, None, None], full_indices)
            partial = torch.ones((b, 1, 1), dtype=torch.int32, device=table.device)
        else:
            kv_indices[:, 0, 0, :w] = table
            partial = nblk.to(torch.int32)[:, None, None]
        mask = BlockMask.from_kv_blocks(partial, kv_indices, *(full or (None, None)),
                                        BLOCK_SIZE=(128, block_size), mask_mod=mask_mod,
                                        seq_lengths=(q_len, num_blocks * block_size), compute_q_blocks=False)
        return TableStep(table, ctx, mask)

    def attend(self, q: torch.Tensor, k_tokens: torch.Tensor, v_tokens: torch.Tensor, step: TableStep,
               scale: float) -> torch.Tensor:
        """q `(B, H_kv, G, D)`: the G query heads of a KV head are its G query positions -> `(B, H_kv, G, D)`."""
        return self.flex(q, k_tokens[None], v_tokens[None], block_mask=step.extra, scale=scale,
                         kernel_options=self.kernel_options)


def triton_interpreting() -> bool:
    """Whether Triton's interpreter is on (`TRITON_INTERPRET`, read by Triton when it is first imported)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_runs_on(device_type: str) -> bool:
    """Whether the triton backend can run on this device type: CUDA, or anything under Triton's interpreter."""
    return device_type == "cuda" or triton_interpreting()


def auto_splits(rows: int, kv_heads: int, width: int, sms: int) -> int:
    """Slices per row so that the rows x KV heads x slices programs number about twice the GPU's `sms`
    multiprocessors (none past the table's `width` blocks, at most `MAX_SPLITS`): 256 rows x 2 KV heads on an
    H200's 132 SMs take 1, 64 rows take 3, 16 rows 9."""
    return max(1, min(width, MAX_SPLITS, -(-2 * sms // (rows * kv_heads))))


class TritonAttention:
    """`triton_decode.paged_decode` (CUDA; on CPU only under Triton's interpreter)."""

    name = "triton paged decode"
    fixed_width = True  # each row's slices come from its own length; W only sizes the table

    def __init__(self, splits: int | None = None, num_warps: int = 4, num_stages: int = 2) -> None:
        """`splits`: slices per row (None: `auto_splits`); `num_warps`, `num_stages`: the slice kernel's launch
        settings (its loop over blocks is software-pipelined over `num_stages` stages)."""
        if splits is not None and splits < 1:
            raise ValueError(f"triton decode: splits={splits} must be >= 1")
        try:
            from ulorl.rollout.engines.torch import triton_decode
        except ImportError as e:
            raise ImportError("rollout.torch.decode_attention=triton needs the triton package (CUDA builds of torch "
                              "ship it)") from e
        self.kernel = triton_decode.paged_decode
        self.splits, self.num_warps, self.num_stages = splits, num_warps, num_stages
        self._sms: int | None = None  # the device's multiprocessors (1 off CUDA), read once

    def prepare(self, table: torch.Tensor, ctx: torch.Tensor, block_size: int, num_blocks: int, q_len: int
                ) -> TableStep:
        if block_size & (block_size - 1) or (table.device.type == "cuda" and block_size < 16):
            raise ValueError(f"triton decode: the KV block size {block_size} must be a power of two (>= 16 on CUDA, "
                             f"a tile of the kernel's products)")
        if self._sms is None:
            self._sms = torch.cuda.get_device_properties(table.device).multi_processor_count \
                if table.device.type == "cuda" else 1
        return TableStep(table, ctx, (block_size, self._sms))

    def attend(self, q: torch.Tensor, k_tokens: torch.Tensor, v_tokens: torch.Tensor, step: TableStep,
               scale: float) -> torch.Tensor:
        """q `(B, H_kv, G, D)` -> `(B, H_kv, G, D)`."""
        block_size, sms = step.extra
        b, h = q.shape[:2]
        splits = self.splits or auto_splits(b, h, step.table.shape[1], sms)
        return self.kernel(q, k_tokens, v_tokens, step.table, step.ctx, block_size, scale, splits,
                           self.num_warps, self.num_stages)


TABLE_BACKENDS = {  # TableBackend -> (compiled, options) -> backend
    TableBackend.FLEX: lambda compiled, options: FlexAttention(compiled, **options),
    TableBackend.TRITON: lambda compiled, options: TritonAttention(**options),
    TableBackend.GATHER: lambda compiled, options: GatherAttention(**options),
}


def table_backend(name: str, compiled: bool = False, options: dict | None = None):
    """The backend `name` (a `TableBackend` value); `compiled`: torch.compile where the backend has a kernel
    (flex); `options`: the backend's keyword arguments (`FlexAttention`'s `kernel_options`, `full_blocks`;
    `TritonAttention`'s `splits`, `num_warps`, `num_stages`)."""
    check_choice("rollout.torch.decode_attention", name, TableBackend)
    return TABLE_BACKENDS[TableBackend(name)](compiled, dict(options or {}))
