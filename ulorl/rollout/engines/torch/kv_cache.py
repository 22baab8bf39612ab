"""The paged KV cache: one pool of fixed-size blocks per layer, bounded by `rollout.kv_cache_gib`.

Per layer, keys and values are `(H_kv, num_blocks + 1, block_size, D)` tensors (key/value heads, blocks, tokens
of a block, head size), views of one allocation; `k_tokens[layer]` is the same memory as
`(H_kv, (num_blocks + 1) x block_size, D)`, so the tokens of consecutive blocks are one strided view (a row
whose blocks are consecutive attends over a view, no copy). The last block (`scratch`) is outside the budget's
blocks and never handed out: a fixed-shape decode (`graph_decoder.py`) writes its padding rows there. Which
block belongs to which sequence is the block manager's business (`block_manager.py`); this file holds the
memory and its budget.

The pool is sized by the budget, not by the batch: `num_blocks = kv_cache_gib / bytes of a block`. On CPU it
is anonymous memory (`mmap`), which the OS commits page by page when first written, so the process's
resident memory follows the blocks in use (the block manager hands out the lowest free block first), not
the budget; never-written memory reads as zeros, so masked positions hold finite values. On an accelerator
the pool is allocated whole, as vLLM does (its addresses then stay fixed, which CUDA graphs need).

A budget too small for one sequence of the longest length a call asks for stops with an error naming the
settings before any work, instead of the OS killing the run halfway through.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import torch

from ulorl.errors import UlorlError

GIB = 1024**3


class KVCacheBudgetError(UlorlError, ValueError):
    """The KV cache a call needs exceeds the configured budget (a one-line CLI error)."""


@dataclass(frozen=True)
class KVShape:
    """Per-token KV geometry of a model."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        """Keys + values of one token over all layers."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * itemsize


def kv_shape_of(config, dtype: torch.dtype) -> KVShape:
    """The KV geometry of a transformers model config (`num_hidden_layers`, `num_key_value_heads`, `head_dim`, or
    `hidden_size / num_attention_heads` where the config has none), stored in `dtype`: what `ModelRunner.kv_shape`
    reads off the loaded model, known before any weight is loaded."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return KVShape(config.num_hidden_layers, kv_heads, head_dim, dtype)


def pool_blocks(shape: KVShape, block_size: int, budget_gib: float) -> int:
    """How many blocks of `block_size` tokens the budget holds."""
    return int(budget_gib * GIB // (block_size * shape.bytes_per_token))


def check_budget(shape: KVShape, block_size: int, tokens: int, budget_gib: float) -> None:
    """Raise `KVCacheBudgetError` if one sequence of `tokens` tokens (prefix + new tokens) does not fit the pool."""
    need = -(-tokens // block_size)
    have = pool_blocks(shape, block_size, budget_gib)
    if need > have:
        needed = need * block_size * shape.bytes_per_token
        raise KVCacheBudgetError(
            f"one sequence of {tokens:,} tokens (prefix + new tokens) needs {_size(needed)} of KV cache, over the "
            f"budget rollout.kv_cache_gib={budget_gib:g} ({_size(budget_gib * GIB)}); raise rollout.kv_cache_gib if "
            f"the memory is there, or lower rollout.max_response_len (sequences beyond what fits at once wait, or are "
            f"preempted and resumed)")


def _size(nbytes: float) -> str:
    """`nbytes` for a message: GiB from 1 GiB on (two decimals), MiB below (three significant digits)."""
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB else f"{nbytes / 2**20:.3g} MiB"


MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux's value; not exported by every Python


def physical_memory_bytes() -> int:
    """The machine's RAM (a CPU pool larger than this could never be committed)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def _zeroed(numel: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, object]:
    """A zero tensor of `numel` elements; on CPU, anonymous memory committed only where it is written (mapped
    without swap reservation, so a budget larger than what is free does not fail up front)."""
    if device.type != "cpu":
        return torch.zeros(numel, dtype=dtype, device=device), None
    itemsize = torch.empty((), dtype=dtype).element_size()
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (MAP_NORESERVE if os.name == "posix" else 0)
    buf = mmap.mmap(-1, max(numel * itemsize, 1), flags=flags)
    return torch.frombuffer(buf, dtype=dtype, count=numel), buf


class PagedKVCache:
    """Keys/values of `num_blocks` blocks of `block_size` tokens, per layer, on one device."""

    def __init__(self, shape: KVShape, block_size: int, num_blocks: int, device: torch.device) -> None:
        if num_blocks < 1:
            raise KVCacheBudgetError(f"the KV cache budget holds no block of {block_size} tokens; raise "
                                     f"rollout.kv_cache_gib")
        self.shape, self.block_size, self.num_blocks = shape, block_size, num_blocks
        self.scratch = num_blocks  # one block past the pool, never handed out: padding rows of a fixed-shape decode
        total = num_blocks + 1
        per = total * shape.num_kv_heads * block_size * shape.head_dim
        flat, self._mmap = _zeroed(2 * shape.num_layers * per, shape.dtype, torch.device(device))
        dims = (shape.num_kv_heads, total, block_size, shape.head_dim)
        pools = flat.view(shape.num_layers, 2, *dims)
        self.k = [pools[i, 0] for i in range(shape.num_layers)]  # (H_kv, num_blocks + 1, block_size, D)
        self.v = [pools[i, 1] for i in range(shape.num_layers)]
        tok = (shape.num_kv_heads, total * block_size, shape.head_dim)
        self.k_tokens = [k.view(tok) for k in self.k]  # (H_kv, (num_blocks + 1) x block_size, D)
        self.v_tokens = [v.view(tok) for v in self.v]

    @property
    def device(self) -> torch.device:
        return self.k[0].device

    @property
    def block_bytes(self) -> int:
        """Bytes of one block over all layers, keys and values."""
        return self.block_size * self.shape.bytes_per_token

    @property
    def nbytes(self) -> int:
        """The pool's size (its budget; on CPU, not what is committed)."""
        return self.num_blocks * self.block_bytes

    def fits(self, shape: KVShape, block_size: int, device: torch.device) -> bool:
        return self.shape == shape and self.block_size == block_size and self.device == torch.device(device)

    def write(self, layer: int, block: torch.Tensor, offset: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store token i's keys/values `k[i], v[i]` `(N, H_kv, D)` at `(block[i], offset[i])` `(N,)` of `layer`."""
        self.write_slots(layer, block * self.block_size + offset, k, v)

    def write_slots(self, layer: int, slot: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store `k[i], v[i]` `(N, H_kv, D)` at token slot `slot[i]` `(N,)` (block x block_size + offset)."""
        self.k_tokens[layer][:, slot] = k.transpose(0, 1)
        self.v_tokens[layer][:, slot] = v.transpose(0, 1)

    def copy_blocks(self, src: list[int], dst: list[int]) -> None:
        """Copy blocks `src` into blocks `dst`, every layer (a shared prompt's last, partial block, per sample)."""
        if not src:
            return
        s = torch.tensor(src, device=self.device)
        d = torch.tensor(dst, device=self.device)
        for k, v in zip(self.k, self.v):
            k[:, d] = k[:, s]
            v[:, d] = v[:, s]
