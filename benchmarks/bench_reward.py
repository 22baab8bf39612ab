"""Verification throughput: RuleVerifier's worker pool vs math-verify inline.

A realistic reward batch: 1024 responses (one training step of the paper,
128 prompts x 8 samples), each a few KB of reasoning ending in
``\\boxed{...}``: integers (40%), fractions (20%), radicals, polynomials,
decimals, sets, intervals and multiples of pi, often written in another form
than the reference, and wrong 30% of the time.

Modes (each on the same fresh batch per repeat, so sympy caches do not carry
over between repeats):

- ``inline``: extraction, then ``math_verify.parse`` + ``verify`` in the main
  thread with math-verify's own signal timeouts (the usual single-process way).
- ``pool``: ``RuleVerifier.score`` with the fast path off (every item goes
  through math-verify in the worker processes).
- ``pool_fast``: ``RuleVerifier.score`` as the trainer runs it (fast path on).
- ``pool_clean`` / ``pool_patho`` (not with ``--quick``): a batch, then a
  batch of the same kind with 8 power towers (which hang math-verify) shuffled
  in, on a verifier with a 2 s deadline.

Usage: ``python benchmarks/bench_reward.py [--quick] [--items N] [--workers W]``.
The last line printed is a JSON object with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

from ulorl.reward import RuleVerifier
from ulorl.reward.extract import extract_boxed
from ulorl.run.numerics import cpu_name

FILLER = (
    "Let us consider the problem carefully. We expand the expression, collect like terms and "
    "check the boundary cases one by one. Substituting back confirms the intermediate result. "
)


# competition-style mix: mostly integers (AIME answers are integers), then fractions, ...
KIND_WEIGHTS = {"int": 40, "frac": 20, "dec": 5, "sqrt": 10, "poly": 10, "set": 5, "interval": 5, "pi": 5}


def _pair(rng: random.Random) -> tuple[str, str, bool]:
    """(gold, prediction, prediction_is_correct)."""
    kind = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
    a, b = rng.randint(1, 60), rng.randint(2, 40)
    if kind == "int":
        gold, same = str(a * b), [str(a * b), f"{a * b}.0", f"{a*b}"]
        wrong = str(a * b + rng.choice([-1, 1, 10]))
    elif kind == "frac":
        gold = f"\\frac{{{a}}}{{{b}}}"
        same = [gold, f"{a}/{b}", f"\\dfrac{{{a}}}{{{b}}}", f"\\frac{{{2 * a}}}{{{2 * b}}}"]
        wrong = f"\\frac{{{a + 1}}}{{{b}}}"
    elif kind == "dec":
        gold = f"\\frac{{{a}}}{{4}}"
        same = [f"{a / 4:g}", gold]
        wrong = f"{a / 4 + 0.5:g}"
    elif kind == "sqrt":
        gold = f"{a}\\sqrt{{3}}"
        same = [gold, f"\\sqrt{{{3 * a * a}}}", f"{a}\\cdot\\sqrt{{3}}"]
        wrong = f"{a}\\sqrt{{2}}"
    elif kind == "poly":
        gold = f"x^2+{2 * a}x+{a * a}"
        same = [gold, f"(x+{a})^2", f"{a * a}+{2 * a}x+x^2"]
        wrong = f"(x-{a})^2"
    elif kind == "set":
        gold = f"\\{{{a},{b}\\}}"
        same = [gold, f"\\{{{b},{a}\\}}"]
        wrong = f"\\{{{a},{b + 1}\\}}"
    elif kind == "interval":
        lo, hi = sorted((a, a + b))
        gold = f"({lo},{hi}]"
        same = [gold, f"({lo}, {hi}]"]
        wrong = f"[{lo},{hi}]"
    else:  # pi
        gold = f"\\frac{{{a}\\pi}}{{{b}}}"
        same = [gold, f"{a}\\pi/{b}", f"\\frac{{{a}}}{{{b}}}\\pi"]
        wrong = f"\\frac{{{a + 1}\\pi}}{{{b}}}"
    if rng.random() < 0.3:
        return gold, wrong, False
    return gold, rng.choice(same), True


def make_batch(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    responses, golds = [], []
    for _ in range(n):
        gold, pred, _ = _pair(rng)
        reasoning = FILLER * rng.randint(5, 30)
        responses.append(f"{reasoning}\nTherefore the answer is $\\boxed{{{pred}}}$.")
        golds.append(gold)
    return responses, golds


def score_inline(responses: list[str], golds: list[str]) -> list[float]:
    """The single-process baseline: math-verify in this thread, its own timeouts."""
    from math_verify import parse, verify

    from ulorl.reward.rule import parse_config

    cfg = parse_config()  # the verifier's parse settings (math-verify's unit stripping off), so verdicts compare
    out = []
    for resp, gold in zip(responses, golds):
        pred = extract_boxed(resp)
        if not pred:
            out.append(0.0)
            continue
        g = parse("\\boxed{" + gold + "}", cfg)
        p = parse("\\boxed{" + pred + "}", cfg)
        out.append(1.0 if (g and p and verify(g, p)) else 0.0)
    return out


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_pool(v: RuleVerifier, responses: list[str], golds: list[str]) -> tuple[list[float], float, float]:
    """Scores, wall seconds and CPU seconds (parent + workers) of one ``score`` call."""
    pids = v.worker_pids
    c0 = sum(proc_cpu_s(p) for p in pids) + time.process_time()
    t = time.perf_counter()
    got = v.score(responses, golds)
    wall = time.perf_counter() - t
    # a worker replaced during the call would be missing here; none is in this benchmark
    cpu = sum(proc_cpu_s(p) for p in pids) + time.process_time() - c0
    return got, wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one repeat, no pathological run (< 2 min)")
    ap.add_argument("--items", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    logging_quiet()

    res: dict[str, list[float]] = {"inline": [], "pool": [], "pool_fast": []}
    cpu_per_item: dict[str, list[float]] = {k: [] for k in res}
    disagreements = 0
    load_before = os.getloadavg()[0]
    score_inline(*make_batch(64, seed=1))  # warm up the inline path (imports, sympy)
    t0 = time.perf_counter()
    slow = RuleVerifier(timeout_s=10.0, num_workers=args.workers, fast_path=False)
    fast = RuleVerifier(timeout_s=10.0, num_workers=args.workers, fast_path=True)
    slow.wait_ready()
    fast.wait_ready()
    startup_s = time.perf_counter() - t0
    for rep in range(repeats):
        responses, golds = make_batch(args.items, seed=1000 + rep)
        t, c = time.perf_counter(), time.process_time()
        ref = score_inline(responses, golds)
        res["inline"].append(args.items / (time.perf_counter() - t))
        cpu_per_item["inline"].append((time.process_time() - c) / args.items)
        for name, v in (("pool", slow), ("pool_fast", fast)):
            got, wall, cpu = timed_pool(v, responses, golds)
            res[name].append(args.items / wall)
            cpu_per_item[name].append(cpu / args.items)
            disagreements += sum(a != b for a, b in zip(ref, got))
        print(
            f"repeat {rep}: " + ", ".join(f"{k} {v[-1]:.0f} items/s" for k, v in res.items()),
            f"(accuracy of the batch {sum(ref) / len(ref):.2f})",
            file=sys.stderr,
        )
    fast_share = fast.counters["reward/fast_path"] / max(1, fast.counters["reward/items"])
    slow.close()
    out = {
        "items": args.items,
        "workers": args.workers,
        "repeats": repeats,
        "nproc": os.cpu_count(),
        "cpu": cpu_name(),
        "startup_s": round(startup_s, 2),
        "inline_items_per_s": round(statistics.median(res["inline"]), 1),
        "pool_items_per_s": round(statistics.median(res["pool"]), 1),
        "pool_fast_items_per_s": round(statistics.median(res["pool_fast"]), 1),
        "speedup_pool_vs_inline": round(statistics.median(res["pool"]) / statistics.median(res["inline"]), 2),
        "speedup_pool_fast_vs_inline": round(
            statistics.median(res["pool_fast"]) / statistics.median(res["inline"]), 2
        ),
        "cpu_ms_per_item_inline": round(1000 * statistics.median(cpu_per_item["inline"]), 2),
        "cpu_ms_per_item_pool": round(1000 * statistics.median(cpu_per_item["pool"]), 2),
        "cpu_ms_per_item_pool_fast": round(1000 * statistics.median(cpu_per_item["pool_fast"]), 2),
        "fast_path_share": round(fast_share, 3),
        "disagreements_with_inline": disagreements,
    }
    if not args.quick:
        # the same kind of batch, then one with 8 hanging answers shuffled in
        clean = make_batch(args.items, seed=7)
        responses, golds = make_batch(args.items, seed=8)
        rng = random.Random(8)
        for _ in range(8):
            i = rng.randrange(len(responses))
            responses.insert(i, r"\boxed{5^{5^{5^{5^5}}}}")
            golds.insert(i, "5")
        with RuleVerifier(timeout_s=2.0, num_workers=args.workers) as v:
            v.wait_ready()
            t = time.perf_counter()
            v.score(*clean)
            out["pool_clean_s"] = round(time.perf_counter() - t, 2)
            v.metrics()
            t = time.perf_counter()
            v.score(responses, golds)
            out["pool_patho_s"] = round(time.perf_counter() - t, 2)
            m = v.metrics()
            out["pool_patho_timeouts"] = m["reward/timeouts"]
            out["pool_patho_restarts"] = m["reward/worker_restarts"]
    fast.close()
    out["load_avg_1m_before"] = round(load_before, 2)
    out["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


def logging_quiet() -> None:
    import logging

    logging.getLogger("math_verify").setLevel(logging.ERROR)


if __name__ == "__main__":
    main()
