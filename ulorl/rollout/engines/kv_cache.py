"""A KV cache of fixed slots, allocated up front and checked against a memory budget.

One slot holds the keys and values of one sequence. Per layer, keys and values are
`(S, H_kv, T, D)` tensors: S slots, H_kv key/value heads, capacity T tokens, head size
D. Nothing is concatenated or reallocated while decoding: a new token's K/V is written
in place at its position, and a finished sequence frees its slot.

Live sequences are kept in slots `[0, n_live)` (`move` fills a hole left by a finished
sequence with the last live one), so decode attention reads one contiguous block of
slots and, within each slot, only up to the longest live context.

The budget check happens before any allocation: a batch that cannot fit stops with an
error naming the settings, instead of the OS killing the run halfway through.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ulorl.errors import UlorlError

GIB = 1024**3


class KVCacheBudgetError(UlorlError, ValueError):
    """The KV cache a batch needs exceeds the configured budget (a one-line CLI error)."""


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


def cache_bytes(shape: KVShape, slots: int, capacity: int) -> int:
    """Bytes of a cache with `slots` x `capacity` tokens."""
    return slots * capacity * shape.bytes_per_token


def check_budget(shape: KVShape, slots: int, capacity: int, budget_gib: float) -> None:
    """Raise `KVCacheBudgetError` if `slots` x `capacity` tokens exceed `budget_gib`."""
    need = cache_bytes(shape, slots, capacity)
    if need > budget_gib * GIB:
        per_slot = capacity * shape.bytes_per_token / GIB
        fit = int(budget_gib * GIB // max(capacity * shape.bytes_per_token, 1))
        raise KVCacheBudgetError(
            f"the KV cache for {slots} sequences of up to {capacity} tokens (prefix + new tokens) needs "
            f"{need / GIB:.2f} GiB ({per_slot:.3f} GiB each), over the budget rollout.kv_cache_gib={budget_gib:g}; "
            f"raise rollout.kv_cache_gib if the memory is there, or lower rollout.max_batch to {max(fit, 1)} or less "
            f"(sequences beyond it wait for a free slot)" + ("" if fit else "; even one sequence does not fit"))


class SlotKVCache:
    """Keys/values for `slots` sequences of up to `capacity` tokens each, on one device."""

    def __init__(self, shape: KVShape, slots: int, capacity: int, device: torch.device, budget_gib: float) -> None:
        check_budget(shape, slots, capacity, budget_gib)
        self.shape, self.slots, self.capacity = shape, slots, capacity
        dims = (slots, shape.num_kv_heads, capacity, shape.head_dim)
        # zeros, not empty: masked positions get attention weight 0, and 0 x NaN from stale memory would be NaN
        self.k = [torch.zeros(dims, dtype=shape.dtype, device=device) for _ in range(shape.num_layers)]
        self.v = [torch.zeros(dims, dtype=shape.dtype, device=device) for _ in range(shape.num_layers)]

    def fits(self, slots: int, capacity: int, device: torch.device) -> bool:
        """Whether this cache can serve a call needing `slots` x `capacity` on `device`."""
        return self.slots >= slots and self.capacity >= capacity and self.k[0].device == device

    @property
    def nbytes(self) -> int:
        return cache_bytes(self.shape, self.slots, self.capacity)

    def move(self, src: list[int], dst: list[int], length: int) -> None:
        """Copy the first `length` positions of slots `src` into slots `dst` (all layers)."""
        if not src:
            return
        s = torch.tensor(src, device=self.k[0].device)
        d = torch.tensor(dst, device=self.k[0].device)
        for k, v in zip(self.k, self.v):
            k[d, :, :length] = k[s, :, :length]
            v[d, :, :length] = v[s, :, :length]
