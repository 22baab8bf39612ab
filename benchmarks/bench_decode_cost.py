"""Cost of one HF decode iteration and one prefill on this CPU, with the built-in model: the planner's coefficients.

Decode: the real `HFEngine` generates n = 33 tokens for b prefixes of c/2..c tokens (left padding, as in a real
round) with an EOS id that cannot be sampled, so a call runs exactly n iterations at batch b, at b = 1..64 and
c = 32..256. Forward hooks split each call: the prefill forward (b x c padded tokens) is timed on its own, the rest
divided by n is one decode iteration (forward, sampling, bookkeeping). Update: `Learner.update` on
synthetic groups. Reward: the rule verifier. Fitted by least squares (absolute error: big calls dominate a step):

    iteration_s = decode_fixed + decode_row * b + decode_ctx * b * context
    prefill_s   = round_fixed + prefill_token * b * c + prefill_sq * b * c^2
    update_s    = update_fixed + update_token * trained tokens

Times are process CPU time with one torch thread (the machine is shared); `--clock wall` for wall time.

    python benchmarks/bench_decode_cost.py [--quick] [--out docs/bench_decode_cost.json] [--cost-out FILE]

The last line printed is one JSON object: the grid, the fitted `cost` (a `ulorl plan --cost` file) and fit errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from benchlib import emit, machine, quiet_torch  # noqa: E402  (benchmarks/ is on sys.path when run as a script)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller grid, one repeat fewer (< 2 minutes)")
    p.add_argument("--repeats", type=int, default=5, help="median of this many timings per point")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--out", default=None, help="also write the JSON result here")
    p.add_argument("--cost-out", default=None, help="write the fitted cost model (for `ulorl plan --cost`)")
    args = p.parse_args()
    quiet_torch()
    import tempfile

    from ulorl.models import build_tiny_model, load_model, load_tokenizer
    from ulorl.plan.calibrate import (Clock, fit_engine, fit_update, measure_engine, measure_reward,
                                      measure_update)

    clock = Clock(args.clock == "cpu")
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        build_tiny_model(d)
        tok, model = load_tokenizer(d), load_model(d)
    grid = dict(batches=(1, 4, 16, 64), contexts=(32, 128, 256)) if args.quick else {}
    repeats = max(1, args.repeats - 2) if args.quick else args.repeats
    eng = measure_engine(model, tok.pad_token_id, repeats=repeats, clock=clock, **grid)
    cost = fit_engine(eng)
    upd = measure_update(model, tok.pad_token_id, repeats=max(1, repeats - 1), clock=clock)
    cost = fit_update(upd, cost)
    cost.reward_sample = measure_reward(clock=clock)
    n = eng[0]["new_tokens"]
    for r in eng:
        r["iter_fit_s"] = cost.decode_fixed + cost.decode_row * r["batch"] + cost.decode_ctx * r["batch"] * (
            r["context"] + n / 2)
        r["prefill_fit_s"] = cost.round_fixed + cost.prefill_token * r["batch"] * r["context"] + \
            cost.prefill_sq * r["batch"] * r["context"] ** 2
    for r in upd:
        r["update_fit_s"] = cost.update_fixed + cost.update_token * r["tokens"]
    err = {k: float(np.median([abs(r[f"{k}_fit_s"] / r[f"{k}_s"] - 1) for r in rows]))
           for k, rows in (("iter", eng), ("prefill", eng), ("update", upd))}
    print(f"{'b':>3} {'ctx':>4} {'iteration ms':>12} {'fit':>6} {'prefill ms':>10} {'fit':>7}", file=sys.stderr)
    for r in eng:
        print(f"{r['batch']:>3} {r['context']:>4} {1e3 * r['iter_s']:>12.2f} {1e3 * r['iter_fit_s']:>6.2f} "
              f"{1e3 * r['prefill_s']:>10.1f} {1e3 * r['prefill_fit_s']:>7.1f}", file=sys.stderr)
    result = {"cost": cost.to_dict(), "median_rel_fit_error": err, "engine": eng, "update": upd,
              "clock": args.clock, "load_avg": [load0, os.getloadavg()[0]], "seconds": time.perf_counter() - t0,
              "machine": machine()}
    if args.cost_out:
        cost.save(args.cost_out)
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
