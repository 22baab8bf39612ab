"""Simulate segment rollout exactly, with response lengths drawn from a distribution instead of a model.

The simulation runs the real `SegmentRollout`, `UnfinishedPool`, `ExperiencePool` and
`PromptSource` and the trainer's step rule itself, `ulorl.rollout.collect.collect_batch`
(rollout rounds until `train_groups` whole groups are admitted, then one update on exactly
that many, leftovers wait FIFO). Only the engine and the scorer are fake: `DropScorer`
makes dynamic sampling drop a share `drop_rate` of the completed groups, and
`LengthEngine` gives every new sample a target length from the
distribution (drawn group by group, so within-group correlation is kept) and emits
that many tokens over as many rounds as it takes. Each engine call is reduced to the
counts the cost model prices (`ulorl.plan.cost.FEATURES`): decode iterations, live
rows summed over iterations, context tokens read, prefill tokens, ...

Long caps are simulated in units of `scale` tokens (L / scale <= `resolution`, and
divisible by M), so a 64k run costs the same to simulate as a 1k one; counts are
reported in real tokens. With L <= resolution the simulation is token-exact.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ulorl.plan.cost import CostModel
from ulorl.plan.lengths import LengthDistribution
from ulorl.rollout.engines.base import EngineStats, GenerationOutput, SamplingParams
from ulorl.rollout.collect import BatchStalled, CollectSettings, RoundLimits, collect_batch
from ulorl.rollout.pools import ExperiencePool, UnfinishedPool
from ulorl.rollout.prompt_source import PromptSource
from ulorl.rollout.segment import SegmentRollout

_PROMPT = 2  # simulated prompts are 2 tokens; the real prompt length enters the counts analytically
_MARK = 1_000_000  # first response token = _MARK + plan id: identifies a continued sample in O(1)
_FILL, _EOS = 7, 4


@dataclass
class _Record:  # stands in for a PromptRecord
    prompt_id: int
    prompt_tokens: list[int]
    ground_truth: str = "0"
    data_source: str = "plan"
    extra_info: dict = field(default_factory=dict)


def context_reads(prefix_lens: np.ndarray, new_tokens: np.ndarray) -> float:
    """K/V positions a paged engine's decode attention reads for rows continuing `prefix_lens` (shape (n,)) by
    `new_tokens` (shape (n,)) tokens: each row's first iteration reads its prefix, every later one one more,
    `new * prefix + new * (new - 1) / 2` summed over rows (the planner's `ctx_sum`)."""
    p, n = np.asarray(prefix_lens, dtype=np.float64), np.asarray(new_tokens, dtype=np.float64)
    return float((n * p + n * (n - 1) / 2).sum())


class LengthEngine:
    """Fake engine: each new prefix gets a target length (in units) from `draw()`; records counts per call."""

    def __init__(self, draw, scale: int, prompt_len: int, padded: bool) -> None:
        self.draw, self.scale, self.prompt_len, self.padded = draw, scale, prompt_len, padded
        self.stats = EngineStats()
        self._targets: list[int] = []  # plan id -> target units
        self._done: list[int] = []  # plan id -> units emitted
        self.counts: Counter = Counter()

    def generate(self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams,
                 seed: int | None = None) -> list[GenerationOutput]:
        outs, resp, new = [], [], []
        for p in prefixes:
            if len(p) > _PROMPT:
                plan = p[_PROMPT] - _MARK
            else:
                plan = len(self._targets)
                self._targets.append(self.draw())
                self._done.append(0)
            done, target = self._done[plan], self._targets[plan]
            n = min(max_new_tokens, target - done)
            eos = done + n == target
            toks = ([_MARK + plan] if done == 0 else [_FILL]) + [_FILL] * (n - 1)
            if eos:
                toks[-1] = _EOS
            self._done[plan] = done + n
            resp.append(len(p) - _PROMPT)
            new.append(n)
            outs.append(GenerationOutput(tokens=toks, logprobs=[0.0] * n, eos=eos, prefill_tokens=len(p)))
        self._count(np.array(resp, dtype=np.float64), np.array(new, dtype=np.float64))
        return outs

    def _count(self, resp: np.ndarray, n: np.ndarray) -> None:
        """Counts of one call in real tokens (units x scale; the prompt added back)."""
        s = self.scale
        p, n = self.prompt_len + s * resp, s * n
        P = p.max() if len(p) else 0.0
        ctx = P if self.padded else p  # context each row attends over at its first decode iteration
        self.counts.update(
            rounds=1, iterations=float(n.max(initial=0)), row_iters=float(n.sum()),
            ctx_sum=context_reads(np.broadcast_to(ctx, n.shape), n),
            prefill_tokens=float(len(p) * P if self.padded else p.sum()),
            prefill_sq=float(len(p) * P * P if self.padded else (p * p).sum()),
            slots=float(len(p) * n.max(initial=0)), decoded=float(n.sum()), reprefill=float(s * resp.sum()))

    def sync_weights(self, state_dict=None) -> None:
        pass


@dataclass
class SimResult:
    M: int
    counts: dict[str, float]  # mean per measured step (cost-model FEATURES + slots, decoded, reprefill)
    per_step: list[dict[str, float]] = field(repr=False, default_factory=list)
    mean_staleness: float = 0.0
    scale: int = 1

    @property
    def utilisation(self) -> float:
        return self.counts["decoded"] / max(self.counts["slots"], 1e-9)

    @property
    def reprefill_share(self) -> float:
        return self.counts["reprefill"] / max(self.counts["decoded"], 1e-9)

    def step_time(self, cost: CostModel) -> float:
        return cost.time(self.counts)


def choose_scale(L: int, M: int, resolution: int) -> int:
    """Smallest divisor s of L with L/s <= resolution and (L/s) divisible by M."""
    for s in range(max(1, -(-L // resolution)), L + 1):
        if L % s == 0 and (L // s) % M == 0:
            return s
    raise ValueError(f"num_segments={M} must divide max_response_len={L}" if L % M else
                     f"no simulation scale for L={L}, M={M}")


class DropScorer:
    """Simulated scorer: a group completed is dropped by dynamic sampling with probability `drop_rate`.

    It decides when a group's last member is scored, in the order the experience pool completes groups (one
    `rng` draw per completed group, none when `drop_rate` is 0): a dropped group gets rewards all 0, a kept one
    a 1 on its first member, so the real dynamic-sampling filter drops or keeps it."""

    def __init__(self, G: int, drop_rate: float, rng: np.random.Generator) -> None:
        self.G, self.drop_rate, self.rng = G, drop_rate, rng
        self._members: dict[str, list] = {}

    def score(self, finished: list) -> None:
        for t in finished:
            members = self._members.setdefault(t.group_id, [])
            members.append(t)
            if len(members) < self.G:
                continue
            del self._members[t.group_id]
            drop = bool(self.drop_rate and self.rng.random() < self.drop_rate)
            for k, m in enumerate(members):
                m.reward = 1.0 if k == 0 and not drop else 0.0


def simulate(dist: LengthDistribution, *, L: int, M: int, G: int, decode_batch: int, train_groups: int,
             steps: int = 30, warmup: int = 8, seed: int = 0, prompt_len: int = 32, drop_rate: float = 0.0,
             padded: bool = True, resolution: int = 256, max_rounds_per_step: int = 1000) -> SimResult:
    """Run `warmup + steps` trainer steps of segment rollout; return mean counts over the last `steps`.

    The settings are checked where they are defined (`Workload`, `SegmentRollout`, `choose_scale`)."""
    if drop_rate and G < 2:
        raise ValueError(f"drop_rate={drop_rate} needs group_size >= 2 (dynamic sampling drops every group of one)")
    scale = choose_scale(L, M, resolution)
    rng = np.random.default_rng(seed)
    buf: list[int] = []

    def draw() -> int:  # next target in units; groups of G drawn together, consecutive plans = one group
        if not buf:
            groups = dist.sample_groups(64, G, rng)
            buf.extend(int(-(-v // scale)) for v in groups.reshape(-1)[::-1])
        return buf.pop()

    engine = LengthEngine(draw, scale, prompt_len, padded)
    prompts = PromptSource([_Record(i, [3, 10 + i]) for i in range(64)], seed=seed)
    rollout = SegmentRollout(engine, prompts, SamplingParams(), group_size=G, decode_batch=decode_batch,
                             max_response_len=L // scale, num_segments=M, seed=seed)
    unfinished, experience, scorer = UnfinishedPool(), ExperiencePool(G), DropScorer(G, drop_rate, rng)
    limits = RoundLimits(max_rounds_per_step, max_rounds_per_step)

    per_step, staleness, version = [], [], 0
    for step in range(warmup + steps):
        engine.counts = Counter()
        settings = CollectSettings(version, step, scorer, dynamic_sampling=bool(drop_rate), limits=limits)
        try:
            got = collect_batch(rollout, unfinished, experience, train_groups, settings)
        except BatchStalled as e:
            raise RuntimeError(f"no full batch after {e.rounds} rounds (drop_rate={drop_rate} too high?)") from e
        batch = got.batch
        counts = dict(engine.counts, finished=float(got.counts["finished"]), updates=1.0, syncs=1.0,
                      trained_tokens=float(sum(prompt_len + scale * t.response_len for t in batch)))
        if step >= warmup:
            per_step.append(counts)
            staleness += [version - t.segments[0].version for t in batch]
        version += 1
    keys = sorted({k for c in per_step for k in c})
    mean = {k: statistics.fmean(c.get(k, 0.0) for c in per_step) for k in keys}
    return SimResult(M=M, counts=mean, per_step=per_step, mean_staleness=statistics.fmean(staleness), scale=scale)
