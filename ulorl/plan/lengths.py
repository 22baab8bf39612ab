"""Response-length distributions for the planner: parametric, or read from a run folder.

A distribution draws *groups* (G answers to one prompt), because lengths within a
group are correlated (same problem) and a group is trainable only when its longest
member is done. Parametric forms draw members independently unless `rho` > 0
(lognormal: share of the log-variance common to the group). A run folder is
resampled by whole groups, which keeps the correlation it had.

Spec strings (`--lengths`):
    lognormal:median=16000,sigma=0.82[,max=N][,rho=0.3]
    geometric:mean=2048[,max=N]        (every token ends the answer with probability 1 / mean: the forced-EOS
                                        hazard of benchmarks/forced_eos.py and the GPU check's workload)
    pareto:alpha=1.1,min=20[,max=N]
    twopoint:short=20,long=100,p_long=0.25
    fixed:length=40
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import numpy as np

FINISHED_STATUSES = ("trained", "dropped", "skipped")


class LengthSpecError(ValueError):
    """A length specification or run folder that cannot be used; the message names the field."""


def _fixed(p: dict[str, float], n: int, G: int, rng: np.random.Generator) -> np.ndarray:
    return np.full((n, G), p["length"])


def _twopoint(p: dict[str, float], n: int, G: int, rng: np.random.Generator) -> np.ndarray:
    return np.where(rng.random((n, G)) < p["p_long"], p["long"], p["short"])


def _pareto(p: dict[str, float], n: int, G: int, rng: np.random.Generator) -> np.ndarray:
    return p["min"] * (1.0 - rng.random((n, G))) ** (-1.0 / p["alpha"])


def _geometric(p: dict[str, float], n: int, G: int, rng: np.random.Generator) -> np.ndarray:
    return rng.geometric(1.0 / p["mean"], (n, G)).astype(np.float64)


def _lognormal(p: dict[str, float], n: int, G: int, rng: np.random.Generator) -> np.ndarray:
    rho = p.get("rho", 0.0)
    z = math.sqrt(rho) * rng.standard_normal((n, 1)) + math.sqrt(1 - rho) * rng.standard_normal((n, G))
    return p["median"] * np.exp(p["sigma"] * z)


@dataclass(frozen=True)
class ParametricKind:
    """A `--lengths` kind: its fields and how it draws `(n, G)` real lengths (before `max` and rounding)."""

    required: tuple[str, ...]
    optional: tuple[str, ...]
    draw: Callable[[dict[str, float], int, int, np.random.Generator], np.ndarray]


PARAMETRIC: dict[str, ParametricKind] = {
    "lognormal": ParametricKind(("median", "sigma"), ("max", "rho"), _lognormal),
    "geometric": ParametricKind(("mean",), ("max",), _geometric),
    "pareto": ParametricKind(("alpha", "min"), ("max",), _pareto),
    "twopoint": ParametricKind(("short", "long", "p_long"), (), _twopoint),
    "fixed": ParametricKind(("length",), (), _fixed),
}


@dataclass
class LengthDistribution:
    kind: str  # one of PARAMETRIC, or "empirical"
    params: dict[str, float] = field(default_factory=dict)
    groups: list[list[int]] | None = None  # empirical: observed groups of lengths
    source: str = ""  # where it came from, for reports

    def sample_groups(self, n: int, G: int, rng: np.random.Generator) -> np.ndarray:
        """`(n, G)` int lengths >= 1."""
        if self.kind == "empirical":
            x = self._resample_groups(n, G, rng)
        elif self.kind in PARAMETRIC:
            x = PARAMETRIC[self.kind].draw(self.params, n, G, rng)
        else:
            raise LengthSpecError(f"unknown length distribution {self.kind!r}")
        if "max" in self.params:
            x = np.minimum(x, self.params["max"])
        return np.maximum(np.rint(x), 1).astype(np.int64)

    def _resample_groups(self, n: int, G: int, rng: np.random.Generator) -> np.ndarray:
        """Whole observed groups of size G; a run with another group size: members drawn independently from all
        its lengths."""
        same = [g for g in self.groups if len(g) == G]
        if same:
            return np.array([same[i] for i in rng.integers(0, len(same), n)])
        flat = np.array([v for g in self.groups for v in g])
        return flat[rng.integers(0, len(flat), (n, G))]

    def describe(self) -> str:
        if self.kind == "empirical":
            flat = [v for g in self.groups for v in g]
            return (f"empirical ({len(self.groups)} groups from {self.source}; mean {np.mean(flat):.1f}, "
                    f"p50 {np.median(flat):.0f}, max {max(flat)})")
        return f"{self.kind}(" + ", ".join(f"{k}={v:g}" for k, v in self.params.items()) + ")" + (
            f" from {self.source}" if self.source else "")


def parse_lengths(spec: str) -> LengthDistribution:
    """`kind:key=value,...` (see the module docstring) -> LengthDistribution."""
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in PARAMETRIC:
        raise LengthSpecError(f"--lengths {spec!r}: unknown kind {kind!r}; choose one of {sorted(PARAMETRIC)}")
    fields = PARAMETRIC[kind].required + PARAMETRIC[kind].optional
    params: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, val = item.partition("=")
        if not eq:
            raise LengthSpecError(f"--lengths {spec!r}: {item!r} is not key=value")
        if key not in fields:
            raise LengthSpecError(f"--lengths {kind}: unknown field {key!r}; valid: {list(fields)}")
        try:
            params[key] = float(val)
        except ValueError:
            raise LengthSpecError(f"--lengths {kind}: field {key}={val!r} is not a number") from None
    missing = [k for k in PARAMETRIC[kind].required if k not in params]
    if missing:
        raise LengthSpecError(f"--lengths {kind}: missing field(s) {missing}")
    _check(kind, params)
    return LengthDistribution(kind, params)


def _check(kind: str, p: dict[str, float]) -> None:
    positive = {"median", "sigma", "alpha", "min", "max", "short", "long", "length"}
    for k, v in p.items():
        if k in positive and not v > 0:
            raise LengthSpecError(f"--lengths {kind}: field {k}={v:g} must be > 0")
    if "mean" in p and not p["mean"] >= 1:
        raise LengthSpecError(f"--lengths {kind}: field mean={p['mean']:g} must be >= 1 (tokens)")
    for k in ("p_long", "rho"):
        if k in p and not 0 <= p[k] <= 1:
            raise LengthSpecError(f"--lengths {kind}: field {k}={p[k]:g} must be in [0, 1]")


def lengths_from_run(run_dir: str | Path) -> LengthDistribution:
    """Finished groups' response lengths from `samples.jsonl`; without it, a lognormal matched to metrics.jsonl."""
    run = Path(run_dir)
    if not run.is_dir():
        what = "a file, not a run folder" if run.exists() else "no such folder"
        raise LengthSpecError(f"--lengths-from {run}: {what} (give the folder of a `ulorl train` run)")
    samples = run / "samples.jsonl"
    if not samples.exists() and (run / "model" / "config.json").is_file() and (run / "sft_report.json").is_file():
        raise LengthSpecError(f"--lengths-from {run}: a `ulorl sft` run, which samples no answers to plan from; "
                              "give the folder of a `ulorl train` run, or --lengths SPEC")
    if samples.exists():
        groups: dict[str, list[int]] = {}
        for i, line in enumerate(samples.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if rec.get("status") in FINISHED_STATUSES:
                    groups.setdefault(str(rec["group_id"]), []).append(int(rec["response_length"]))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise LengthSpecError(f"{samples}:{i}: unreadable record (needs group_id, response_length, "
                                      f"status): {e}") from None
        if groups:
            return LengthDistribution("empirical", groups=list(groups.values()), source=str(samples))
    metrics = run / "metrics.jsonl"
    if metrics.exists():
        return _lognormal_from_metrics(metrics)
    raise LengthSpecError(f"--lengths-from {run}: no finished samples in samples.jsonl and no metrics.jsonl")


def _lognormal_from_metrics(path: Path) -> LengthDistribution:
    """Lognormal whose mean is the runs' mean length and whose expected batch maximum is the logged maximum."""
    means, maxes, sizes = [], [], []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        rec = json.loads(line) if line.strip() else {}
        if "response_length/mean" in rec and "response_length/max" in rec:
            means.append(float(rec["response_length/mean"]))
            maxes.append(float(rec["response_length/max"]))
            sizes.append(float(rec.get("actor/response_tokens", 0)) / max(means[-1], 1e-9))
    if not means:
        raise LengthSpecError(f"{path}: no step with response_length/mean and response_length/max")
    mean, mx = float(np.mean(means)), float(np.mean(maxes))
    n = max(float(np.mean(sizes)) if any(sizes) else 64.0, 2.0)
    # max of n draws ~ the (1 - 1/n) quantile: ln(max/mean) = sigma * z - sigma^2 / 2
    z = NormalDist().inv_cdf(1 - 1 / n)
    r = math.log(max(mx / mean, 1.0 + 1e-6))
    disc = z * z - 2 * r
    sigma = z - math.sqrt(disc) if disc > 0 else z
    median = mean * math.exp(-sigma * sigma / 2)
    return LengthDistribution("lognormal", {"median": median, "sigma": sigma}, source=f"{path} (mean and max)")

