"""The planner (`ulorl plan`) against measurements: CPU runs of bench_segments, and the paper's Table 1.

1. Calibration on this CPU. Lengths: the whole groups trained in the measured window of the M=1 passes of a
   bench_segments result (stored in its JSON). Counts: the planner's simulation (real SegmentRollout and pools,
   fake engine). Costs, two ways:
   A  engine coefficients from bench_decode_cost (micro-benchmark), update and reward per token/sample from the
      M=1 runs only: M=2, 4, 8 are out-of-sample predictions;
   B  every coefficient fitted to the measured per-pass phase times (prefill forwards; decode forwards + rest of
      rollout; update + other; reward), each phase on its own counts, leaving out the runs of the M predicted.
   Reported per M: measured and predicted CPU seconds per step, relative error, and simulated vs measured counts.
2. The paper (Qwen3-30B-A3B, 64k, Table 1: M=1 1240 s, M=2 774 s, M=4 601 s). A GPU decode iteration is
   memory-bound: its cost does not depend on the batch (`decode_fixed`) plus a KV-read term in context
   (`decode_ctx`); update time is one constant per step. The paper gives no length distribution beyond
   "80% of answers <= half the cap" (its 128k remark); we assume a lognormal with median L/4 and
   P(len <= L/2) = 0.8 (sigma 0.82), answers past 64k truncated, 128 prompts x G=8 = 1024 rows per round and per
   update, a paged engine. Fit (decode_fixed, update_fixed) to M=1 and M=2, predict M=4 and M=8; then the same
   with other assumptions (KV-read share, re-prefill cost, length distributions). Each row also has the
   `train.pipeline=overlap` prediction (max(generation, update), weight sync free) and the overlap bound.

    python benchmarks/bench_plan.py --segments-json docs/bench_segments.json --cost-json docs/bench_decode_cost.json \
        [--figure docs/figures/bench_segments.png] [--quick]

The last line printed is one JSON object (`calibration`, `paper`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from benchlib import emit  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

PAPER = {1: 1240.0, 2: 774.0, 4: 601.0}
COUNT_KEYS = ("rounds", "iterations", "row_iters", "prefill_tokens", "ctx_sum")


def pooled_lengths(per_m1: dict, after_step: int):
    """Lengths of the whole groups trained in the measured window of the M=1 passes (stored by bench_segments)."""
    from ulorl.plan import LengthDistribution

    groups = [g for p in per_m1["passes"] for g in p["groups"]]
    return LengthDistribution("empirical", groups=groups, source=f"{len(per_m1['passes'])} M=1 pass(es), "
                              f"steps > {after_step}")


def calibration(seg: dict, engine_cost: dict, args) -> dict:
    from ulorl.plan import CostModel, Workload, simulate_all

    per = {int(m): v for m, v in seg["per_M"].items()}
    ms, st = sorted(per), seg["settings"]
    m1 = per[1]
    w = Workload(pooled_lengths(m1, st["warmup"]), st["max_len"], st["group_size"], st["decode_batch"], st["groups"],
                 prompt_len=args.prompt_len, steps=args.sim_steps, warmup=args.sim_warmup, seed=args.seed)
    padded = st.get("engine", "hf") == "hf"  # the torch engine prefills packed: unpadded counts
    sims = simulate_all(w, ms, padded=padded)
    # A: micro-benchmark engine costs; update (+ other) and reward from the M=1 runs only
    a = CostModel.from_dict({**engine_cost, "padded": padded})
    a.update_fixed = m1["other_cpu"]
    a.update_token = m1["update_cpu"] / m1["trained_tokens"]
    a.reward_sample = m1["reward_cpu"] / m1["finished"]
    # B: each phase fitted on its own measured counts over all passes; errors are leave-one-M-out (fitted
    # without the runs of the M predicted)
    b = fit_phases([p for m in ms for p in per[m]["passes"]], padded)
    b_loo = {m: fit_phases([p for k in ms if k != m for p in per[k]["passes"]], padded) for m in ms}
    # the cost models on the *measured* counts: isolates cost-model error from simulation error
    on_measured = {m: {"A": a.time(per[m]) / per[m]["step_cpu"] - 1, "B": b.time(per[m]) / per[m]["step_cpu"] - 1}
                   for m in ms}
    rows = []
    for m in ms:
        meas = per[m]["step_cpu"]
        ta, tb = a.time(sims[m].counts), b_loo[m].time(sims[m].counts)
        rows.append({"M": m, "measured_s": meas, "pred_A_s": ta, "err_A": ta / meas - 1, "pred_B_s": tb,
                     "err_B": tb / meas - 1, "measured_speedup": per[1]["step_cpu"] / meas,
                     "pred_A_speedup": a.time(sims[1].counts) / ta,
                     "pred_B_speedup": b.time(sims[1].counts) / b.time(sims[m].counts),
                     "sim": {**{k: sims[m].counts[k] for k in COUNT_KEYS}, "util": sims[m].utilisation,
                             "reprefill_share": sims[m].reprefill_share, "staleness": sims[m].mean_staleness},
                     "measured": {**{k: per[m][k] for k in COUNT_KEYS}, "util": per[m]["slot_utilisation"],
                                  "reprefill_share": per[m]["reprefill_share"],
                                  "staleness": per[m]["mean_staleness"]},
                     "phases_A": a.phases(sims[m].counts),
                     "paged_B_s": _paged(b, w, m, args)})
    return {"rows": rows, "cost_A": a.to_dict(), "cost_B": b.to_dict(), "lengths": w.lengths.describe(),
            "err_on_measured_counts": on_measured}


def fit_phases(passes: list[dict], padded: bool = True):
    """Cost model B: each phase's measured CPU time fitted on that phase's measured counts."""
    from ulorl.plan import FEATURES, CostModel, fit_linear

    b = CostModel(padded=padded)
    for fields, target in ((["round_fixed", "prefill_token", "prefill_sq"], lambda p: p["prefill_fwd_cpu"]),
                           (["decode_fixed", "decode_row", "decode_ctx"],
                            lambda p: p["decode_fwd_cpu"] + p["gen_rest_cpu"]),
                           (["update_fixed", "update_token"], lambda p: p["update_cpu"] + p["other_cpu"]),
                           (["reward_sample"], lambda p: p["reward_cpu"])):
        keys = [k for k, f in FEATURES.items() if f in fields]
        b = fit_linear([{k: p[k] for k in keys} for p in passes], [max(target(p), 1e-9) for p in passes], fields,
                       base=b)
    return b


def levers(cal: dict, seg: dict, args) -> list[dict]:
    """Planner what-ifs on this CPU (cost model B): decode batch, an unpadded engine, a free update."""
    from ulorl.plan import CostModel, Workload, predict, simulate_all

    per1, st = seg["per_M"]["1"], seg["settings"]
    dist = pooled_lengths(per1, st["warmup"])
    out = []
    for db in (64, 128, 256):
        w = Workload(dist, st["max_len"], st["group_size"], db, st["groups"], prompt_len=args.prompt_len,
                     steps=args.sim_steps, warmup=args.sim_warmup, seed=args.seed)
        for padded in (True, False):
            sims = simulate_all(w, [1, 2, 4, 8], padded=padded)
            for no_update in (False, True):
                c = CostModel.from_dict({**cal["cost_B"], "padded": padded})
                if no_update:
                    c.update_fixed = c.update_token = 0.0
                rows = predict(sims, c)
                out.append({"decode_batch": db, "engine": "padded (HF)" if padded else "unpadded",
                            "update": "free" if no_update else "measured",
                            "step_s": {r.M: r.step_s for r in rows}, "speedup": {r.M: r.speedup for r in rows}})
                print(f"lever: decode batch {db}, {out[-1]['engine']}, update {out[-1]['update']}: " + ", ".join(
                    f"M{r.M} {r.step_s:.3f}s {r.speedup:.2f}x" for r in rows), file=sys.stderr, flush=True)
    return out


def _paged(cost, w, m: int, args) -> float:
    """What-if: the same costs with an unpadded (varlen/paged) engine."""
    from ulorl.plan import simulate_all

    c = copy.deepcopy(cost)
    c.padded = False
    return c.time(simulate_all(w, [m], padded=False)[m].counts)


def paper(args) -> dict:
    from ulorl.plan import Workload, parse_lengths, predict, simulate_all

    L = 65536
    dists = {"lognormal median L/4, P(<=L/2)=0.8 (main)": "lognormal:median=16384,sigma=0.8237",
             "lognormal median L/8, P(<=L/2)=0.8": "lognormal:median=8192,sigma=1.6472",
             "lognormal median 3L/8, P(<=L/2)=0.8": "lognormal:median=24576,sigma=0.3418",
             "main, within-group correlation rho=0.5": "lognormal:median=16384,sigma=0.8237,rho=0.5"}
    out = []
    for name, spec in dists.items():
        w = Workload(parse_lengths(spec), L, 8, 1024, 128, prompt_len=256, steps=args.paper_steps,
                     warmup=args.paper_warmup, seed=args.seed)
        sims = simulate_all(w, [1, 2, 4, 8], padded=False)
        variants = {"decode const + update const": (0.0, 0.0)}
        if name.endswith("(main)"):
            variants.update({"KV reads 25% of M=1 decode": (0.25, 0.0), "KV reads 50% of M=1 decode": (0.5, 0.0),
                             "re-prefill at 10x decode throughput": (0.0, 10.0),
                             "re-prefill at 3x decode throughput": (0.0, 3.0)})
        for vname, (kv_share, prefill_x) in variants.items():
            cost = _fit_paper(sims, kv_share, prefill_x, 1024)
            rows = predict(sims, cost)
            t = {r.M: r.step_s for r in rows}
            over = {r.M: r.step_s for r in predict(sims, cost, "overlap")}  # weight sync free (sync_fixed 0)
            out.append({"lengths": name, "cost": vname, "pred_s": t, "speedup": {m: t[1] / t[m] for m in t},
                        "pred_overlap_s": over, "overlap_bound": {r.M: r.overlap_bound for r in rows},
                        "err_M4": t[4] / PAPER[4] - 1,
                        "fits_M1_M2": abs(t[1] / PAPER[1] - 1) < 0.005 and abs(t[2] / PAPER[2] - 1) < 0.005,
                        "decode_s_per_iteration": cost.decode_fixed,
                        "update_s": cost.update_fixed, "util": {r.M: r.utilisation for r in rows},
                        "reprefill_share": {r.M: r.reprefill_share for r in rows},
                        "staleness": {r.M: r.staleness for r in rows}, "cost_model": cost.to_dict()})
            print(f"paper [{name} | {vname}]: M4 {t[4]:.0f} s (paper 601), M8 {t[8]:.0f} s", file=sys.stderr,
                  flush=True)
    return {"rows": out, "table": PAPER}


def _fit_paper(sims, kv_share: float, prefill_x: float, rows: int):
    """Fit decode_fixed and update_fixed to M=1, M=2 with decode_ctx and prefill_token tied to decode_fixed.

    kv_share: share of the M=1 decode time spent reading the KV cache (sets decode_ctx / decode_fixed).
    prefill_x: prefill throughput as a multiple of full-batch decode throughput (rows / decode_fixed tokens/s);
        0: re-prefill free.
    """
    from ulorl.plan import CostModel, fit_linear

    c1 = sims[1].counts
    rho = kv_share / (1 - kv_share) * c1["iterations"] / c1["ctx_sum"] if kv_share else 0.0
    pre = 1.0 / (rows * prefill_x) if prefill_x else 0.0
    tied = [{"iterations": s.counts["iterations"] + rho * s.counts["ctx_sum"] + pre * s.counts["prefill_tokens"],
             "updates": 1.0} for s in (sims[1], sims[2])]
    fit = fit_linear(tied, [PAPER[1], PAPER[2]], ["decode_fixed", "update_fixed"], relative=False)
    return CostModel(decode_fixed=fit.decode_fixed, decode_ctx=rho * fit.decode_fixed,
                     prefill_token=pre * fit.decode_fixed, update_fixed=fit.update_fixed, padded=False)


def figure(cal: dict, seg: dict, pap: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = cal["rows"]
    ms = [r["M"] for r in rows]
    per = {int(m): v for m, v in seg["per_M"].items()}
    main = next(r for r in pap["rows"] if r["lengths"].endswith("(main)") and r["cost"].startswith("decode const"))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    ax1.axhline(seg["ideal_speedup"], ls="--", c="grey", label=f"ideal bound (1 / utilisation at M=1) "
                f"{seg['ideal_speedup']:.2f}")
    ax1.axhline(seg["amdahl_bound"], ls=":", c="grey", label=f"bound if rollout were free {seg['amdahl_bound']:.2f}")
    pair = [[per[1]["passes"][i]["step_cpu"] / p["step_cpu"] for i, p in enumerate(per[m]["passes"])] for m in ms]
    meas = [r["measured_speedup"] for r in rows]
    ax1.errorbar(ms, meas, yerr=[[y - min(p) for y, p in zip(meas, pair)], [max(p) - y for y, p in zip(meas, pair)]],
                 fmt="o-", c="C0", capsize=3, label="measured, CPU (HF engine; bars: range of paired passes)")
    ax1.plot(ms, [r["pred_A_speedup"] for r in rows], "x--", c="C0", label="planner, CPU (micro-benchmark costs)")
    ax1.plot(ms, [r["pred_B_speedup"] for r in rows], "+--", c="C1", label="planner, CPU (costs fitted on runs)")
    base = rows[0]["paged_B_s"]
    ax1.plot(ms, [base / r["paged_B_s"] for r in rows], "s:", c="C2", label="planner, CPU, unpadded engine (what-if)")
    ax1.axhline(1 / main["util"][1], ls="--", c="C3", lw=0.8,
                label=f"ideal bound, paper workload (assumed lengths) {1 / main['util'][1]:.2f}")
    ax1.plot([1, 2, 4], [1, PAPER[1] / PAPER[2], PAPER[1] / PAPER[4]], "D-", c="C3", label="paper Table 1 (GPU, 64k)")
    ax1.plot([1, 2, 4, 8], [main["speedup"][m] for m in (1, 2, 4, 8)], "d--", c="C3",
             label="planner fitted to paper M=1,2")
    ax1.set_xscale("log", base=2)
    ax1.set_xticks(ms, [str(m) for m in ms])
    ax1.set_xlabel("segments M")
    ax1.set_ylabel("speedup over M=1 (time per step)")
    ax1.legend(fontsize=7)
    ax1.set_title("segment-rollout speedup")
    ax2.plot(ms, [per[m]["slot_utilisation"] for m in ms], "o-", c="C0", label="decode-slot utilisation (measured)")
    ax2.plot(ms, [r["sim"]["util"] for r in rows], "x--", c="C0", label="utilisation (planner)")
    ax2.plot(ms, [per[m]["reprefill_share"] for m in ms], "o-", c="C1", label="re-prefill / decoded tokens")
    ax2.plot(ms, [per[m]["prefill_tokens"] / per[m]["decoded"] for m in ms], "^-", c="C4",
             label="padded prefill / decoded tokens (HF)")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(ms, [str(m) for m in ms])
    ax2.set_xlabel("segments M")
    ax2.legend(fontsize=7)
    ax2.set_title("CPU runs: utilisation and prefill work")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--segments-json", default="docs/bench_segments.json", help="bench_segments.py --out")
    p.add_argument("--cost-json", default="docs/bench_decode_cost.json", help="bench_decode_cost.py --out")
    p.add_argument("--prompt-len", type=int, default=10, help="prompt tokens (built-in chain task: 10)")
    p.add_argument("--sim-steps", type=int, default=200)
    p.add_argument("--sim-warmup", type=int, default=10)
    p.add_argument("--paper-steps", type=int, default=30)
    p.add_argument("--paper-warmup", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--figure", default=None, help="write the speedup/utilisation figure here")
    p.add_argument("--quick", action="store_true", help="shorter simulations (< 2 minutes)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.quick:
        args.sim_steps, args.sim_warmup, args.paper_steps, args.paper_warmup = 60, 6, 8, 4
    seg = json.loads(Path(args.segments_json).read_text())
    cost = json.loads(Path(args.cost_json).read_text())["cost"]
    cal = calibration(seg, cost, args)
    for r in cal["rows"]:
        print(f"M={r['M']}: measured {r['measured_s']:.3f} s CPU/step, planner A {r['pred_A_s']:.3f} "
              f"({100 * r['err_A']:+.1f}%), B {r['pred_B_s']:.3f} ({100 * r['err_B']:+.1f}%)", file=sys.stderr)
    lev = levers(cal, seg, args)
    pap = paper(args)
    if args.figure:
        figure(cal, seg, pap, args.figure)
    result = {"calibration": cal, "levers": lev, "paper": pap,
              "max_abs_err_A": max(abs(r["err_A"]) for r in cal["rows"]),
              "max_abs_err_B": max(abs(r["err_B"]) for r in cal["rows"]),
              "paper_main_M4_s": pap["rows"][0]["pred_s"][4],
              "paper_main_M8_s": pap["rows"][0]["pred_s"][8]}
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
