"""Forced EOS from a drawn length schedule, for engine benchmarks: row i of a call ends after `lengths[i]` tokens.

Random or untrained weights decide nothing about lengths; a benchmark of a long-tailed workload needs the
tail it describes. `ForcedEOS.install(engine, lengths, eos)` makes the torch engine's scheduler replace a
row's token by `eos` once it has sampled `lengths[row]` tokens (the row then finishes as on a real EOS; its
log-prob is the sampled token's, which timing does not read). `HazardEOS.install(engine, mean, eos)` ends
every token with probability 1 / mean instead (geometric lengths), which needs no row identity and so holds
across the calls of segment rollout, where a sample's row index changes from call to call; its draws follow the
row's random stream, so a call split between engine processes stops the rows where one engine would.
"""

from __future__ import annotations

import random

from ulorl.rollout.engines.torch.sampler import row_uniforms
from ulorl.rollout.engines.torch.scheduler import Scheduler

HAZARD_SALT = 0x5BD1E995  # HazardEOS's stop draws: the stream (seed ^ HAZARD_SALT, row, tokens so far)


def draw_lengths(n: int, mean: float, cap: int, seed: int = 0) -> list[int]:
    """`n` lengths with the long tail of reasoning answers: exponential with `mean` (before the cap), in [1, cap]."""
    rng = random.Random(seed)
    return [max(1, min(cap, int(rng.expovariate(1 / mean)))) for _ in range(n)]


class ForcedEOS(Scheduler):
    """A scheduler whose row i finishes after `lengths[i]` new tokens of the call (counting earlier segments via
    `offsets[i]`, the tokens the row already had)."""

    lengths: list[int] = []
    offsets: list[int] = []
    eos_id: int = 0

    def _sample(self, logits) -> None:
        super()._sample(logits)
        for s in self.running:
            if len(s.tokens) + (self.offsets[s.index] if self.offsets else 0) >= self.lengths[s.index]:
                s.tokens[-1], s.eos = self.eos_id, True

    @classmethod
    def install(cls, engine, lengths: list[int], eos_id: int, offsets: list[int] | None = None) -> None:
        sub = type("ForcedEOSRun", (cls,), {"lengths": list(lengths), "offsets": list(offsets or []),
                                            "eos_id": eos_id})
        engine.scheduler_cls = sub


class HazardEOS(Scheduler):
    """A scheduler in which every sampled token is turned into EOS with probability `1 / mean` (from the row's own
    stream: seeded runs reproduce)."""

    mean: float = 1.0
    eos_id: int = 0

    def _sample(self, logits) -> None:
        super()._sample(logits)
        stop = (row_uniforms(self.seed ^ HAZARD_SALT, [s.stream for s in self.running],
                             [len(s.tokens) for s in self.running]) < 1 / self.mean).tolist()
        for s, hit in zip(self.running, stop):
            if hit:
                s.tokens[-1], s.eos = self.eos_id, True

    @classmethod
    def install(cls, engine, mean: float, eos_id: int) -> None:
        engine.scheduler_cls = type("HazardEOSRun", (cls,), {"mean": float(mean), "eos_id": eos_id})

