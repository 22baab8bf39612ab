"""Evaluation metrics: the unbiased pass@k estimator, avg@k and response-length statistics."""

from __future__ import annotations

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k).

    Computed in the numerically stable product form (Chen et al., 2021):
    C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), so no huge binomials appear.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def length_stats(lengths: list[int], prefix: str = "response_length") -> dict[str, float]:
    """mean, p50, p90 and max of response lengths in tokens (verl-style names)."""
    if not lengths:
        return {f"{prefix}/{s}": 0.0 for s in ("mean", "p50", "p90", "max")}
    a = np.asarray(lengths, dtype=np.float64)
    return {
        f"{prefix}/mean": float(a.mean()),
        f"{prefix}/p50": float(np.percentile(a, 50)),
        f"{prefix}/p90": float(np.percentile(a, 90)),
        f"{prefix}/max": float(a.max()),
    }


def paired_difference(before: list[int], after: list[int], k: int) -> dict[str, float]:
    """Paired comparison of two evaluations of the same problems with the same protocol.

    `before[i]`, `after[i]`: correct samples out of `k` on problem i. Per-problem accuracy
    differences d_i = (after_i - before_i) / k; returns their mean (= the change in avg@k), its
    standard error std(d, ddof=1) / sqrt(n), z = mean / se, and how many problems got better/worse.
    Pairing removes the problem-difficulty variance that two independent avg@k estimates carry.
    Where every problem changed by the same amount (se = 0, e.g. none changed), z is undefined: None (`null` in
    JSON, which has no NaN; `z_text` prints it).
    """
    if len(before) != len(after):
        raise ValueError(f"paired_difference: {len(before)} problems before but {len(after)} after")
    if len(before) < 2:
        raise ValueError("paired_difference needs at least 2 problems")
    d = (np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)) / k
    se = float(d.std(ddof=1) / np.sqrt(len(d)))
    mean = float(d.mean())
    return {"delta": mean, "se": se, "z": mean / se if se > 0 else None, "better": int((d > 0).sum()),
            "worse": int((d < 0).sum()), "same": int((d == 0).sum()), "num_problems": len(d)}


def z_text(z: float | None, digits: int = 1) -> str:
    """A `paired_difference` z for a report: "undefined" where it is None (se = 0)."""
    return "undefined" if z is None else f"{z:.{digits}f}"
