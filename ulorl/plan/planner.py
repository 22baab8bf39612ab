"""The planner: simulated counts x cost model -> predicted time per step for each M, and a recommendation.

The recommendation is the *smallest* M whose predicted step time is within
`tolerance` (default 5%) of the fastest: a larger M means staler segments (POIS
trains them with the current policy as pi_old), so it must pay for itself.

`predict(..., pipeline=)` combines the phases as `sync` (their sum) or `overlap` (max(generation, update) +
sync; see `ulorl.plan.cost`); the simulated counts are the same for both, since the lengths drawn do not depend
on the policy version. Each mode is recommended on its own rows; `compare` puts the two side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

from ulorl.config import PipelineMode
from ulorl.plan.cost import PIPELINES, CostModel, fit_linear, generation_s, overlap_bound, parse_pipeline
from ulorl.plan.lengths import LengthDistribution
from ulorl.plan.simulate import SimResult, simulate


@dataclass
class Workload:
    """What is simulated: the length distribution and the rollout/train batch settings."""

    lengths: LengthDistribution
    max_len: int  # L
    group_size: int = 8  # G
    decode_batch: int = 64
    train_groups: int = 8
    prompt_len: int = 32
    drop_rate: float = 0.0  # share of complete groups dropped by dynamic sampling
    steps: int = 30
    warmup: int = 8
    seed: int = 0
    resolution: int = 256  # at most this many simulation units per L (token-exact when L <= resolution)

    def __post_init__(self) -> None:
        for k in ("max_len", "group_size", "decode_batch", "train_groups", "steps", "resolution"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k}={getattr(self, k)} must be >= 1")
        if self.prompt_len < 1:
            raise ValueError(f"prompt_len={self.prompt_len} must be >= 1")
        if self.warmup < 0:
            raise ValueError(f"warmup={self.warmup} must be >= 0")
        if self.decode_batch < self.group_size:
            raise ValueError(f"decode_batch={self.decode_batch} must be >= group_size={self.group_size}")
        if not 0 <= self.drop_rate < 1:
            raise ValueError(f"drop_rate={self.drop_rate} must be in [0, 1)")
        if self.seed < 0:
            raise ValueError(f"seed={self.seed} must be >= 0")


@dataclass
class PlanRow:
    M: int
    step_s: float
    speedup: float
    utilisation: float
    reprefill_share: float
    staleness: float
    rounds: float  # per step
    iterations: float  # decode iterations per step
    phases: dict[str, float]  # predicted seconds per phase
    pipeline: str = "sync"  # how step_s combines the phases (train.pipeline, ulorl.config.PipelineMode)
    overlap_bound: float = 1.0  # (generation + update) / max(generation, update), whatever the pipeline

    def to_dict(self) -> dict:
        return {"M": self.M, "step_s": self.step_s, "speedup": self.speedup, "utilisation": self.utilisation,
                "reprefill_share": self.reprefill_share, "staleness": self.staleness, "rounds": self.rounds,
                "iterations": self.iterations, "phases": self.phases, "pipeline": self.pipeline,
                "overlap_bound": self.overlap_bound}


def simulate_all(w: Workload, segments: list[int], padded: bool) -> dict[int, SimResult]:
    bad = [m for m in segments if m < 1 or w.max_len % m]
    if bad:
        raise ValueError(f"segments {bad} must be >= 1 and divide max_len={w.max_len}")
    return {m: simulate(w.lengths, L=w.max_len, M=m, G=w.group_size, decode_batch=w.decode_batch,
                        train_groups=w.train_groups, steps=w.steps, warmup=w.warmup, seed=w.seed,
                        prompt_len=w.prompt_len, drop_rate=w.drop_rate, padded=padded, resolution=w.resolution)
            for m in segments}


def predict(sims: dict[int, SimResult], cost: CostModel,
            pipeline: PipelineMode | str = PipelineMode.SYNC) -> list[PlanRow]:
    """One row per M: seconds per step under `pipeline`, speedup over the smallest M under the same pipeline."""
    mode = parse_pipeline(pipeline)
    rule = PIPELINES[mode]
    base = cost.step_time(sims[min(sims)].counts, mode)
    rows = []
    for m, r in sorted(sims.items()):
        phases = cost.phases(r.counts)
        t = rule.step(phases)
        rows.append(PlanRow(M=m, step_s=t, speedup=base / t if t > 0 else float("nan"), utilisation=r.utilisation,
                            reprefill_share=r.reprefill_share, staleness=r.mean_staleness + rule.lag,
                            rounds=r.counts["rounds"], iterations=r.counts["iterations"], phases=phases,
                            pipeline=mode.value, overlap_bound=overlap_bound(phases)))
    return rows


def recommend(rows: list[PlanRow], tolerance: float = 0.05) -> int:
    best = min(r.step_s for r in rows)
    return min(r.M for r in rows if r.step_s <= best * (1 + tolerance))


def fit_to_table(sims: dict[int, SimResult], table: dict[int, float], free: list[str],
                 base: CostModel | None = None) -> CostModel:
    """Fit the `free` cost fields so that the simulated counts reproduce measured step times `table` (M -> s)."""
    missing = [m for m in table if m not in sims]
    if missing:
        raise ValueError(f"--fit-table names M={missing}, which is not among the simulated segments {sorted(sims)}")
    ms = sorted(table)
    return fit_linear([sims[m].counts for m in ms], [table[m] for m in ms], free, base=base)


def format_table(rows: list[PlanRow], rec: int | None = None) -> str:
    names = ["prefill", "decode", "reward", "update"] + (["sync"] if any(r.phases.get("sync") for r in rows) else [])
    head = (f"{'M':>3} {'step s':>10} {'speedup':>8} {'util':>6} {'re-prefill':>10} {'staleness':>9} "
            f"{'rounds':>7} {'iters':>9}   {' / '.join(names)} (s)")
    lines = [head]
    for r in rows:
        lines.append(f"{r.M:>3} {r.step_s:>10.4g} {r.speedup:>7.2f}x {r.utilisation:>6.2f} {r.reprefill_share:>10.2f} "
                     f"{r.staleness:>9.2f} {r.rounds:>7.2f} {r.iterations:>9.0f}   "
                     + " / ".join(f"{r.phases.get(n, 0.0):.3g}" for n in names)
                     + ("   <- recommended" if r.M == rec else ""))
    return "\n".join(lines)


def format_compare(sync: list[PlanRow], overlap: list[PlanRow], rec_sync: int, rec_overlap: int) -> str:
    """`sync` and `overlap` predictions side by side (rows of the same M in the same order)."""
    lines = [f"{'M':>3} {'sync s':>10} {'overlap s':>10} {'sync/overlap':>12} {'bound':>6} {'gen s':>10} "
             f"{'update s':>10} {'sync s':>8} {'staleness':>9}   recommended"]
    for s, o in zip(sync, overlap):
        rec = " / ".join(n for n, r in (("sync", rec_sync), ("overlap", rec_overlap)) if r == s.M)
        gain = s.step_s / o.step_s if o.step_s > 0 else 1.0
        lines.append(f"{s.M:>3} {s.step_s:>10.4g} {o.step_s:>10.4g} {gain:>11.2f}x "
                     f"{s.overlap_bound:>5.2f}x {generation_s(s.phases):>10.4g} {s.phases['update']:>10.4g} "
                     f"{s.phases.get('sync', 0.0):>8.3g} {s.staleness:>4.2f}/{o.staleness:<4.2f}   {rec}".rstrip())
    return "\n".join(lines)
