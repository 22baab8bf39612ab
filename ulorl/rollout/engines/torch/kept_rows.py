"""K/V kept between `generate` calls for rows that the next call continues with the same weights.

Segment rollout decodes at most L/M tokens per round and continues the unfinished samples in the next round
from `prompt + response so far`. Within one training step the rounds share the policy's weights, so the K/V a
row had at the end of a round is still exact: a call made with `keep=True` keeps the blocks of the rows that
stop at `max_new_tokens` (not at EOS), and the next call whose prefix is such a row's `prefix + tokens` starts
that row decoding where it stopped instead of prefilling it again. vLLM's automatic prefix caching gives the
paper's setup the same saving; after a weight update the kept K/V would be stale, and it is dropped.

- A kept row is found by its context, the tokens whose K/V its blocks hold: `prefix + tokens` minus the last
  sampled token, which was never fed. A continuing call's prefix is that context plus the last token, and
  feeding that token is the row's first decode step.
- Kept rows are valid for one weights version: `weights_version` reads the parameters' version counters, which
  every in-place change (an optimizer step, `load_state_dict`) bumps. A call under other weights, or in another
  pool, releases them all; a call releases every kept row its prefixes do not continue.
- While a call runs, the rows it keeps hold their blocks; when the pool runs short they are released (newest
  first) before any running row is preempted, so keeping never costs a preemption.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ulorl.rollout.engines.torch.block_manager import BlockManager


def weights_version(model: torch.nn.Module) -> tuple[int, ...]:
    """A value that changes whenever a parameter of `model` is modified in place."""
    return tuple(p._version for p in model.parameters())


@dataclass
class KeptRow:
    """The blocks of a row whose K/V hold `len(context)` tokens (see `Sequence` for `shared` and `run`)."""

    context: tuple[int, ...]
    blocks: list[int]
    shared: int
    run: int


class KeptRows:
    """The rows one call kept for the next, and the weights version and block manager they belong to."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, ...], list[KeptRow]] = {}
        self.version: tuple[int, ...] | None = None
        self.manager: BlockManager | None = None

    def __len__(self) -> int:
        return sum(map(len, self.rows.values()))

    def add(self, row: KeptRow, version: tuple[int, ...], manager: BlockManager) -> None:
        if self.rows and (version != self.version or manager is not self.manager):
            raise ValueError("kept rows of another weights version or pool must be released first")
        self.version, self.manager = version, manager
        self.rows.setdefault(row.context, []).append(row)

    def take(self, context: tuple[int, ...]) -> KeptRow | None:
        """The kept row whose K/V hold exactly `context`, removed from the store (None: there is none)."""
        rows = self.rows.get(context)
        if not rows:
            return None
        row = rows.pop()
        if not rows:
            del self.rows[context]
        return row

    def valid_for(self, version: tuple[int, ...], manager: BlockManager) -> bool:
        return version == self.version and manager is self.manager

    def release_all(self) -> None:
        """Give every kept row's blocks back to its pool."""
        for rows in self.rows.values():
            for row in rows:
                self.manager.release(row.blocks, -1)
        self.rows = {}
