"""Fixed-size KV blocks from one pool: allocation, reference counts, and who owns each block.

A sequence's K/V lives in blocks of `block_size` tokens; its block table (`Sequence.blocks`) lists them in
order, so token position p sits in block `blocks[p // block_size]` at offset `p % block_size`. The pool has
`num_blocks` blocks (the `rollout.kv_cache_gib` budget divided by a block's bytes).

- Blocks are handed out from the bottom of the pool (the lowest free block first), so the blocks in use stay
  packed there: on CPU the pool's memory is committed by the OS only where it is written (`kv_cache.py`),
  so the process's memory follows the live blocks, and the decode attention's batched call reads the pool
  only up to `high_water`. A caller may ask for blocks from the top instead (`allocate(..., top=True)`): the
  scheduler does so for a long context prefilled alone, whose consecutive blocks it reads as one view, out
  of the batched call's range.
- A block may be held by several sequences (the G samples of a group share their prompt's full blocks);
  it is free again when its last holder releases it. Shared blocks are full, hence read-only: a sequence
  writes only into blocks it holds alone.
- `owner[b]` is the one sequence holding block b, -1 when b is free or shared (the decode attention's plan,
  `attention.py`, reads it as a tensor, so it is kept on the cache's device and updated per event).
"""

from __future__ import annotations

import heapq

import torch

FREE = -1


class BlockManager:
    """Allocation and reference counts over `num_blocks` blocks of `block_size` tokens."""

    def __init__(self, num_blocks: int, block_size: int, device: torch.device | str = "cpu") -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks={num_blocks} and block_size={block_size} must be >= 1")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.refs = [0] * num_blocks
        self.owner = torch.full((num_blocks,), FREE, dtype=torch.long, device=device)
        self._reset_free()
        self.high_water = 0  # 1 + the highest block handed out from the bottom and still held

    def _reset_free(self) -> None:
        """Heaps of the free blocks, lowest first and highest first; an entry whose block was taken through the other
        heap is skipped when popped (`refs` says)."""
        self._low = [b for b in range(self.num_blocks) if self.refs[b] == 0]  # sorted: a valid heap
        self._high = [-b for b in reversed(self._low)]
        self._num_free = len(self._low)

    @property
    def num_free(self) -> int:
        return self._num_free

    @property
    def num_used(self) -> int:
        return self.num_blocks - self._num_free

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold `tokens` tokens."""
        return -(-tokens // self.block_size)

    def _pop(self, top: bool) -> int:
        heap = self._high if top else self._low
        while True:
            b = -heapq.heappop(heap) if top else heapq.heappop(heap)
            if self.refs[b] == 0:
                return b

    def allocate(self, n: int, uid: int, top: bool = False) -> list[int]:
        """`n` free blocks for sequence `uid`, ascending, the lowest free ones (or with `top`, the highest); raises
        `MemoryError` when fewer are free (callers check first)."""
        if n > self._num_free:
            raise MemoryError(f"{n} blocks asked, {self._num_free} free")
        got = []
        for _ in range(n):
            b = self._pop(top)
            self.refs[b] = 1  # taken: its entry in the other heap is now stale
            got.append(b)
        self._num_free -= n
        got.sort()
        if got:
            self.owner[got] = uid
            if not top:
                self.high_water = max(self.high_water, got[-1] + 1)
        return got

    def reown(self, blocks: list[int], uid: int) -> None:
        """`blocks`, held by one sequence alone, now belong to sequence `uid` (a kept row in a new call)."""
        if blocks:
            self.owner[blocks] = uid

    def share(self, blocks: list[int]) -> None:
        """One more holder for each of `blocks` (full blocks only: nobody writes into a shared block)."""
        for b in blocks:
            self.refs[b] += 1
        if blocks:
            self.owner[blocks] = FREE

    def release(self, blocks: list[int], uid: int) -> None:
        """Sequence `uid` no longer holds `blocks`; a block left with one holder stays marked shared (its remaining
        holder reads it through the shared path)."""
        freed = []
        for b in blocks:
            if self.refs[b] < 1:
                raise RuntimeError(f"block {b} released by sequence {uid} but held by none")
            self.refs[b] -= 1
            if self.refs[b] == 0:
                heapq.heappush(self._low, b)
                heapq.heappush(self._high, -b)
                freed.append(b)
        self._num_free += len(freed)
        if freed:
            self.owner[freed] = FREE
        while self.high_water and self.refs[self.high_water - 1] == 0:
            self.high_water -= 1

    def compact(self) -> dict[int, int]:
        """Move every block in use in `[target, high_water)` into a free block below `target`, where `target` is the
        number of blocks in use below `high_water`; returns the moves {old block: new block} (the caller copies
        the K/V and remaps block tables). Afterwards the blocks in use below the high-water mark are exactly
        `[0, target)`; blocks above it (taken from the top) stay where they are."""
        target = sum(1 for b in range(self.high_water) if self.refs[b] > 0)
        movers = [b for b in range(target, self.high_water) if self.refs[b] > 0]
        holes = [b for b in range(target) if self.refs[b] == 0]
        moves = dict(zip(movers, holes))
        if moves:
            src, dst = list(moves), list(moves.values())
            for s, d in moves.items():
                self.refs[d], self.refs[s] = self.refs[s], 0
            self.owner[dst] = self.owner[src]
            self.owner[src] = FREE
            for b in src:  # free now; the holes' heap entries are stale (taken) and skipped when popped
                heapq.heappush(self._low, b)
                heapq.heappush(self._high, -b)
        self.high_water = target
        return moves
