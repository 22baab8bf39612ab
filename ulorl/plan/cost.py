"""The planner's cost model: seconds per step as a linear function of counted work.

A training step is rollout rounds, scoring and one update. Every term below is a
count the simulation (`ulorl.plan.simulate`) produces exactly for a given length
distribution and M; the cost model gives each count a price:

    step_s = round_fixed     * rounds          (one engine call: set-up, prefill launch, routing)
           + prefill_token   * prefill_tokens  (tokens prefilled; padded to the call's longest prefix if `padded`)
           + prefill_sq      * prefill_sq      (sum of prefix_len**2: attention of the prefill)
           + decode_fixed    * iterations      (decode iterations: the longest row of each call)
           + decode_row      * row_iters       (live rows summed over iterations: per-row compute)
           + decode_ctx      * ctx_sum         (context tokens read, summed over live rows and iterations)
           + reward_sample   * finished        (samples scored)
           + update_fixed    * updates         (one per step)
           + update_token    * trained_tokens  (prompt + response tokens of the trained batch)
           + sync_fixed      * syncs           (weight syncs learner -> engine: one per update)

How the phases make a step depends on the pipeline (`PipelineMode`, registry `PIPELINES`):

    sync     step_s = generation + update + sync            (the sum above)
    overlap  step_s = max(generation, update) + sync        (the engine fills step k+1's batch with the
                                                             weights of update k-1 while update k runs)

with generation = prefill + decode + reward. In `overlap` every segment is one policy version older (staleness
+1, fixed by the step number), which POIS trains as it trains any stale segment. The most overlap can gain is
`overlap_bound` = (generation + update) / max(generation, update), reached when the sync is free.

`sync_fixed` defaults to 0: on CPU (and the colocated engines) the engine reads the learner's weights in memory,
and a fitted `update_fixed` already holds whatever sync a measured step had. Set it for separate engine and
learner devices, where the weights cross NCCL/IPC once per update (bytes of the weights / link bandwidth).
Deviation: both modes price each phase with the same coefficients, i.e. the engine and the learner keep the
devices they have in `sync` mode; if overlap splits one set of GPUs between them, fit or set each phase's
costs for its own share.

On a memory-bound GPU `decode_fixed` (reading the weights) and `decode_ctx`
(reading the KV cache) dominate and `decode_row` is ~0: an idle slot costs as much
as a busy one, which is the waste segment rollout removes. On a CPU with a tiny
model `decode_row` and the per-iteration Python overhead dominate.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from ulorl.config import PipelineMode
from ulorl.durable import atomic_write_text

# the engines (`rollout.engine` values) that pad a call's prefills and contexts to its longest prefix; the others
# (torch, vllm) are paged: what `CostModel.padded` says of the engine a cost model was measured on
PADDED_ENGINES = frozenset({"hf"})

# count name -> the CostModel field that prices it
FEATURES: dict[str, str] = {
    "rounds": "round_fixed",
    "prefill_tokens": "prefill_token",
    "prefill_sq": "prefill_sq",
    "iterations": "decode_fixed",
    "row_iters": "decode_row",
    "ctx_sum": "decode_ctx",
    "finished": "reward_sample",
    "updates": "update_fixed",
    "trained_tokens": "update_token",
    "syncs": "sync_fixed",
}
PHASES: dict[str, tuple[str, ...]] = {  # which counts make up which part of a step
    "prefill": ("rounds", "prefill_tokens", "prefill_sq"),
    "decode": ("iterations", "row_iters", "ctx_sum"),
    "reward": ("finished",),
    "update": ("updates", "trained_tokens"),
    "sync": ("syncs",),
}
GENERATION: tuple[str, ...] = ("prefill", "decode", "reward")  # the phases the engine side runs


class CostError(ValueError):
    """A cost model file or fit request that cannot be used; the message names the field."""


@dataclass
class CostModel:
    """Seconds per unit of each counted quantity (see the module docstring)."""

    round_fixed: float = 0.0  # s per rollout round (engine call set-up, routing, Python)
    prefill_token: float = 0.0  # s per prefilled token
    prefill_sq: float = 0.0  # s per squared prefix length (prefill attention)
    decode_fixed: float = 0.0  # s per decode iteration, whatever the batch
    decode_row: float = 0.0  # s per live row per iteration
    decode_ctx: float = 0.0  # s per context token per live row per iteration (attention / KV reads)
    reward_sample: float = 0.0  # s per scored sample
    update_fixed: float = 0.0  # s per update
    update_token: float = 0.0  # s per trained token
    sync_fixed: float = 0.0  # s per weight sync learner -> engine (0: weights shared or copied in memory, CPU)
    padded: bool = True  # contexts and prefills padded to the longest prefix of a call (HF engine); False: paged

    def __post_init__(self) -> None:
        for f in FEATURES.values():
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
                raise CostError(f"cost.{f}={v!r} must be a finite number >= 0")

    def time(self, counts: dict[str, float]) -> float:
        """Predicted seconds for `counts` (any subset of FEATURES)."""
        return sum(getattr(self, FEATURES[k]) * float(v) for k, v in counts.items() if k in FEATURES)

    def phases(self, counts: dict[str, float]) -> dict[str, float]:
        """Predicted seconds per phase (prefill, decode, reward, update, sync)."""
        return {p: self.time({k: counts.get(k, 0.0) for k in ks}) for p, ks in PHASES.items()}

    def step_time(self, counts: dict[str, float], pipeline: "PipelineMode | str" = "sync") -> float:
        """Predicted seconds per step for `counts` when rollout and update run as `pipeline`."""
        return PIPELINES[parse_pipeline(pipeline)].step(self.phases(counts))

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, d: dict) -> "CostModel":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise CostError(f"unknown cost field(s) {unknown}; valid: {sorted(known)}")
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        try:
            d = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise CostError(f"{path}: not JSON ({e})") from None
        if not isinstance(d, dict):
            raise CostError(f"{path}: expected a JSON object of cost fields")
        return cls.from_dict(d)


def generation_s(phases: dict[str, float]) -> float:
    """Seconds of the engine side of a step: prefill + decode + reward."""
    return sum(phases.get(p, 0.0) for p in GENERATION)


def overlap_bound(phases: dict[str, float]) -> float:
    """(generation + update) / max(generation, update): the most `overlap` can gain over `sync` (free sync)."""
    gen, upd = generation_s(phases), phases.get("update", 0.0)
    return (gen + upd) / max(gen, upd) if max(gen, upd) > 0 else 1.0


@dataclass(frozen=True)
class PipelineRule:
    step: Callable[[dict[str, float]], float]  # seconds per phase -> seconds per step
    lag: int  # policy versions added to every segment's staleness


PIPELINES: dict[PipelineMode, PipelineRule] = {
    PipelineMode.SYNC: PipelineRule(lambda p: sum(p.values()), lag=0),
    PipelineMode.OVERLAP: PipelineRule(lambda p: max(generation_s(p), p.get("update", 0.0)) + p.get("sync", 0.0),
                                       lag=1),
}


def parse_pipeline(value: "PipelineMode | str") -> PipelineMode:
    """`PipelineMode(value)`; an unknown name fails with the valid ones."""
    try:
        return PipelineMode(value)
    except ValueError:
        raise CostError(f"pipeline={value!r}: valid values are {', '.join(m.value for m in PipelineMode)}") from None


def fit_linear(rows: list[dict[str, float]], times: list[float], free: list[str],
               base: CostModel | None = None, relative: bool = True) -> CostModel:
    """Least-squares fit of the `free` cost fields to measured `times`; other fields stay as in `base`.

    Args:
        rows: one dict of counts (FEATURES keys) per measurement.
        times: measured seconds, one per row.
        free: CostModel field names to fit (non-negative: a coefficient that would come out negative is set to
            0 and the rest refitted).
        relative: minimise relative rather than absolute errors (each row weighted by 1 / time).
    """
    base = base or CostModel()
    by_field = {v: k for k, v in FEATURES.items()}
    bad = [f for f in free if f not in by_field]
    if bad:
        raise CostError(f"cannot fit {bad}: free fields must be among {sorted(by_field)}")
    if len(rows) != len(times) or not rows:
        raise CostError(f"need one time per row of counts, got {len(rows)} rows and {len(times)} times")
    if len(rows) < len(free):
        raise CostError(f"{len(free)} free field(s) {free} need at least as many measurements, got {len(rows)}")
    y = np.array(times, dtype=float)
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise CostError(f"measured times must be positive numbers, got {list(times)}")
    known = np.array([base.time({k: v for k, v in r.items() if FEATURES.get(k) not in free}) for r in rows])
    X = np.array([[float(r.get(by_field[f], 0.0)) for f in free] for r in rows])
    w = 1.0 / y if relative else np.ones_like(y)
    active, coef = list(range(len(free))), np.zeros(len(free))
    while active:  # non-negative least squares: drop the most negative coefficient and refit (small problems)
        sol, *_ = np.linalg.lstsq(X[:, active] * w[:, None], (y - known) * w, rcond=None)
        if np.all(sol >= 0):
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    d = base.to_dict()
    d.update({f: float(c) for f, c in zip(free, coef)})
    return CostModel(**d)
