"""Issue 26's verdicts from a GPU check's JSON, as markdown: each target met, not met or not measured, and what
the decode figures say about why.

A lent GPU machine gives minutes; `gpu_check.sh` runs this at its end (into `$OUT/gpu_report.md`), so the reading
of a run is the same every time and does not wait for the loan to end. It reads `gpu_check.json` (or the
`gpu_paged_check.json` inside it, or a file of several runs such as `docs/gpu_check_h200_2026-12-04.json`) and
writes:

1. **The targets** (issue 26, one H200; the same figures from any GPU): decode of the Qwen2.5-0.5B shape at 256 rows
   at most 2x its bandwidth floor, at each context measured; segment rollout M = 4 at least 1.6x M = 1 (with what
   an engine at the floor would gain on the same rollouts); the Qwen3-1.7B batch of 128 rows at 16k in the pool
   that slots need for 25 rows, without preemption.
2. **The decode cost, fitted** to the decode table (64 and 256 rows, 2k/8k/32k contexts) with the planner's cost
   model (`ulorl.plan.cost.fit_linear`, relative errors): seconds per iteration, per live row and per context token
   read, next to the floor's (the weights' bytes, K/V bytes a token, over the measured bandwidth). The fit prices
   each M's segment rollout from its own counts (decode iterations, live rows, K/V positions read): the decode
   part of its seconds, what is left (prefill, the work between rounds), and the speedups those decode costs give.
   `fixed_ms_for_target`: the cost per iteration, above the fitted one, at which M = 4's decode would reach 1.6x
   with the fitted per-row and per-token costs (docs/scale.md: the ratio depends on that split).
3. The per-M table, the decode paths side by side, and one line each for the other parts (sampler, host step,
   norms, prefill, the engine check's log-probs, the learner's long samples and its packed row).

Missing parts (a run cut short, an older check) read "not measured"; nothing is guessed.

    python benchmarks/gpu_report.py runs/gpu_check-<time>/gpu_check.json [--out report.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ulorl.plan.cost import CostError, CostModel, fit_linear  # noqa: E402

DECODE_TARGET = 2.0  # a decode iteration's ms over its floor's at 256 rows, at most
SEGMENT_TARGET = 1.6  # M = 4's trained samples per second over M = 1's, at least
DECODE_FREE = ["decode_fixed", "decode_row", "decode_ctx"]  # the fitted cost fields


class ReportError(ValueError):
    """A JSON that is not a GPU check's (the message names the file and what was expected)."""


def load_runs(path: Path) -> dict[str, dict]:
    """The paged engine figures of each run in `path`: {name: gpu_paged_check's JSON}. `path` is a `gpu_check.json`
    (its `paged_engine`), a `gpu_paged_check.json`, a run folder holding one, or a file of runs (`run_1`, ...)."""
    if path.is_dir():
        path = path / "gpu_check.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file (expected gpu_check.json from benchmarks/gpu_check.sh)") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    if "bandwidth" in doc:
        return {path.stem: doc}
    if isinstance(doc.get("paged_engine"), dict):
        return {path.stem: {**doc["paged_engine"], "_summary": doc}}
    runs = {k: {**v["paged_engine"], "_summary": v} for k, v in doc.items()
            if isinstance(v, dict) and isinstance(v.get("paged_engine"), dict)}
    if not runs:
        raise ReportError(f"{path}: no 'paged_engine' figures (expected gpu_check.json from benchmarks/gpu_check.sh, "
                          f"a gpu_paged_check.json, or an object of such runs)")
    return runs


def decode_counts(r: dict, bpt: float) -> dict[str, float]:
    """The planner's counts of one decode-table row (one iteration of `rows` rows reading `kv_bytes_read`)."""
    return {"iterations": 1.0, "row_iters": float(r["rows"]), "ctx_sum": r["kv_bytes_read"] / bpt}


def segment_counts(r: dict) -> dict[str, float]:
    """The planner's decode counts of one segment-rollout run."""
    return {"iterations": float(r["decode_iterations"]), "row_iters": float(r["row_iterations"]),
            "ctx_sum": float(r["context_tokens"])}


def fit_decode(rows: list[dict], bpt: float) -> CostModel:
    """`decode_fixed`, `decode_row`, `decode_ctx` (seconds) fitted to the decode table's ms per iteration."""
    return fit_linear([decode_counts(r, bpt) for r in rows], [r["ms_per_iteration"] / 1000 for r in rows], DECODE_FREE,
                      CostModel(padded=False))


def fixed_for_target(t1: float, i1: float, s1: float, t4: float, i4: float, s4: float,
                     target: float = SEGMENT_TARGET) -> float | None:
    """The cost per iteration f (seconds) to add to both runs' decode seconds t1, t4 (i1, i4 iterations; s1, s4
    samples) for (s4 / (t4 + i4 f)) / (s1 / (t1 + i1 f)) = target: f = (target t4 - r t1) / (r i1 - target i4),
    r = s4 / s1. 0 when already met; None when no f reaches it: as f grows the ratio tends to (s4 / i4) / (s1 / i1),
    the samples per iteration, and that is below the target."""
    r = s4 / s1
    if r * t1 >= target * t4:
        return 0.0
    den = r * i1 - target * i4
    return None if den <= 0 else (target * t4 - r * t1) / den


def verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("**met**" if ok else "**not met**")


def _x(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}x"


def targets(p: dict) -> list[tuple[str, str, bool | None]]:
    """(target, what was measured, met) for issue 26's three GPU targets."""
    out = []
    big = [r for r in p.get("decode", []) if r.get("rows") == 256 and "over_floor" in r]
    skipped = [s for s in p.get("skipped", []) if s.startswith("decode 256 x")]
    not_run = [s[len("decode 256 x "):].split(": ", 1) for s in skipped]  # context, why
    what = "; ".join([f"{r['context'] // 1024}k: {r['ms_per_iteration']:.2f} ms, floor {r['floor_ms']:.2f} ms "
                      f"({r['over_floor']:.2f}x)" for r in big] + [f"{c} not run ({why})" for c, why in not_run])
    out.append((f"decode at 256 rows <= {DECODE_TARGET:g}x the bandwidth floor (0.5B shape)", what or "-",
                all(r["over_floor"] <= DECODE_TARGET for r in big) if big else None))
    seg = p.get("segment_rollout", {})
    sp = seg.get("speedup_M4")
    out.append((f"segment rollout: M = 4 >= {SEGMENT_TARGET:g}x M = 1 (32 groups x 8, L = 16k)",
                "-" if sp is None else f"{sp:.2f}x (an engine at the floor: {_x(seg.get('floor_speedup_M4'))})",
                None if sp is None else sp >= SEGMENT_TARGET))
    s, slots = p.get("slots_vs_paged"), "128 rows of the 1.7B shape at 16k in the pool of 25 slots"
    if not s:
        out.append((slots, "-", None))
    elif "error" in s:
        out.append((slots, f"error: {s['error'][:200]}", False))
    else:
        out.append((f"{s['rows']} rows of the 1.7B shape at {s['cap']:,} tokens in the pool of "
                    f"{s['slot_rows_of_pool']} slots",
                    f"peak {s['peak_kv_gib']:.2f} of {s['pool_gib']:.2f} GiB, {s['live_tokens_at_peak']:,} tokens "
                    f"alive then, {s['preemptions']} preemptions ({s['slots_needed_gib']:.1f} GiB in slots)",
                    s["preemptions"] == 0 and s["peak_kv_gib"] <= s["pool_gib"]))
    return out


def decode_fit(p: dict) -> dict | None:
    """The fitted decode cost, its floor, and what it prices each M's segment rollout at (None: too few figures, or
    a check from before it recorded the model's bytes)."""
    rows = [r for r in p.get("decode", []) if "ms_per_iteration" in r]
    bw = p.get("bandwidth", {}).get("bytes_per_s")
    if "bytes" not in p or not bw or len(rows) < len(DECODE_FREE):
        return None
    wb, bpt = float(p["bytes"]["weights"]), float(p["bytes"]["kv_per_token"])
    try:
        cost = fit_decode(rows, bpt)
    except CostError:
        return None
    out = {"cost": {k: getattr(cost, k) for k in DECODE_FREE},
           "floor": {"decode_fixed": wb / bw, "decode_row": 0.0, "decode_ctx": bpt / bw},
           "residuals": [{"rows": r["rows"], "context": r["context"], "ms": r["ms_per_iteration"],
                          "fitted_ms": 1000 * cost.time(decode_counts(r, bpt))} for r in rows],
           "segments": {}}
    for key in ("segment_rollout", "segment_rollout_64_rows"):
        runs = {m: r for m, r in p.get(key, {}).items() if m.isdigit() and "seconds" in r}
        fit = {}
        for m, r in runs.items():
            decode_s = cost.time(segment_counts(r))
            fit[m] = {"decode_s": decode_s, "rest_s": r["seconds"] - decode_s, "seconds": r["seconds"]}
        if "1" in runs:
            one = fit["1"]
            for m, r in runs.items():
                if m != "1":
                    fit[m]["decode_speedup"] = (r["samples"] / fit[m]["decode_s"]) / (runs["1"]["samples"] /
                                                                                    one["decode_s"])
            if "4" in runs:
                (i1, s1), (i4, s4) = ((runs[m]["decode_iterations"], runs[m]["samples"]) for m in ("1", "4"))
                f = fixed_for_target(one["decode_s"], i1, s1, fit["4"]["decode_s"], i4, s4)
                fit["fixed_ms_for_target"] = None if f is None else 1000 * f
                fit["iteration_bound"] = (s4 / i4) / (s1 / i1)  # the ratio as the cost per iteration grows
        out["segments"][key] = fit
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def path_name(d: dict) -> str:
    """A `decode_paths` entry's name; checks before 2026-12-06 recorded none, so it is made from the attention and
    whether its steps replayed CUDA graphs, as the check names them now ("flex+graphs", "split_k")."""
    if "path" in d:
        return d["path"]
    return d.get("decode_attention", "?") + ("+graphs" if d.get("graphs") == "cuda" else "")


def block_size_used(p: dict) -> str:
    """The KV block size the check ran on after the side-by-side; checks before 2026-12-06 recorded it only per
    path, so it is the first measured path's of the attention used."""
    if "block_size_used" in p:
        return str(p["block_size_used"])
    used = p.get("decode_attention_used")
    return next((str(d["block_size"]) for d in p.get("decode_paths", [])
                 if d.get("decode_attention") == used and "block_size" in d and "ms_per_iteration" in d), "-")


def report(name: str, p: dict) -> str:
    """One run's markdown."""
    bw = p.get("bandwidth", {}).get("bytes_per_s")
    lines = [f"## {name}: {p.get('device', '?')}, torch {p.get('torch', '?')}"
             + (" (a dry run: tiny shapes)" if p.get("quick") else ""), "",
             f"Bandwidth {bw / 1e12:.2f} TB/s; decode path {p.get('decode_attention_used', '-')} (blocks of "
             f"{block_size_used(p)}); {p.get('elapsed_s', 0):.0f} s." if bw else "No bandwidth figure.", ""]
    lines += ["### Issue 26's targets", ""]
    lines += _table(["target", "measured", "verdict"], [[t, m, verdict(ok)] for t, m, ok in targets(p)])
    if p.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(p["skipped"])]
    if p.get("part_running"):
        cut = p["part_running"]
        lines += ["", f"Ended during `{cut['name']}`, started {cut['at_s']:.0f} s into the check (the timeout): "
                  "its figures and those of every part after it are missing."]
    if p.get("part_s"):
        lines += ["", "Seconds per part: " + ", ".join(f"{k} {v:.1f}" for k, v in p["part_s"].items()) + "."]

    fit = decode_fit(p)
    lines += ["", "### Decode cost fitted to the decode table", ""]
    if fit is None:
        lines += ["Not fitted: the decode table has fewer than 3 rows, or the run recorded no bandwidth or model "
                  "bytes."]
    else:
        c, f = fit["cost"], fit["floor"]
        lines += [f"Per iteration {1000 * c['decode_fixed']:.3f} ms (the weights' floor {1000 * f['decode_fixed']:.3f} "
                  f"ms), per live row {1e6 * c['decode_row']:.2f} us, per K/V position read "
                  f"{1e9 * c['decode_ctx']:.3f} ns ({c['decode_ctx'] / f['decode_ctx']:.2f}x the floor's "
                  f"{1e9 * f['decode_ctx']:.3f} ns).", ""]
        lines += _table(["rows", "context", "ms measured", "ms fitted"],
                        [[str(r["rows"]), str(r["context"]), f"{r['ms']:.3f}", f"{r['fitted_ms']:.3f}"]
                         for r in fit["residuals"]])
    for key in ("segment_rollout", "segment_rollout_64_rows"):
        seg = p.get(key, {})
        ms = sorted((m for m in seg if m.isdigit()), key=int)
        if not ms:
            continue
        sf = (fit or {}).get("segments", {}).get(key, {})
        lines += ["", f"### `{key}`", ""]
        path = p.get("segment_path")  # checks before 2026-12-07 ran them on the decode table's path
        if path and path.get("attention") != p.get("decode_attention_used"):
            lines += [f"Decode path {path['attention']} (blocks of {path['block_size']}), not the decode table's "
                      f"{p.get('decode_attention_used', '-')}: the fitted decode prices these rollouts with the "
                      "other path's cost.", ""]
        rows = []
        for m in ms:
            r = seg[m]
            if "error" in r:
                rows.append([m, f"error: {r['error'][:120]}"] + ["-"] * 8)
                continue
            g = sf.get(m, {})
            rows.append([m, f"{r['samples_per_s']:.3f}", _x(seg.get(f"speedup_M{m}")),
                         _x(seg.get(f"floor_speedup_M{m}")), _x(g.get("decode_speedup")),
                         f"{r['over_floor']:.2f}x" if "over_floor" in r else "-",
                         f"{r['seconds']:.1f}", "-" if not g else f"{g['decode_s']:.1f} / {g['rest_s']:.1f}",
                         f"{r['decode_iterations']:,}" if "decode_iterations" in r else "-",
                         str(r.get("preemptions", "-"))])
        lines += _table(["M", "samples/s", "speedup", "at the floor", "by the fitted decode", "over floor", "s",
                         "fitted decode s / rest s", "decode iterations", "preemptions"], rows)
        if "fixed_ms_for_target" in sf:
            f, bound = sf["fixed_ms_for_target"], sf["iteration_bound"]
            reach = ("does not reach it at any cost per iteration" if f is None else
                     "reaches it with the fitted cost per iteration" if f == 0 else
                     f"would reach it if each iteration cost {f:.3f} ms more")
            lines += ["", f"Target {SEGMENT_TARGET:g}x: M = 4's decode, priced with the fitted per-row and per-token "
                      f"costs, {reach}; as the cost per iteration grows, the ratio tends to {bound:.2f}x (samples per "
                      f"decode iteration)."]

    paths = p.get("decode_paths", [])
    if paths:
        lines += ["", "### Decode paths side by side", ""]
        lines += _table(["path", "ms per iteration", "over floor"],
                        [[path_name(d),
                          f"{d['ms_per_iteration']:.2f}" if "ms_per_iteration" in d else
                          f"error: {str(d.get('error', d.get('skipped', '?')))[:100]}",
                          f"{d['over_floor']:.2f}x" if "over_floor" in d else "-"] for d in paths])
    lines += ["", "### Other parts", ""] + [f"- {line}" for line in other_parts(p)]
    return "\n".join(lines) + "\n"


def other_parts(p: dict) -> list[str]:
    """One line per other figure of the run (those present)."""
    out = []
    if p.get("sampler"):
        out.append("sampler: " + ", ".join(f"{s['setting']} {s['ms']:.3f} ms" + (
            f" (fused {s['fused_ms']:.3f} ms)" if "fused_ms" in s else "") + f" at {s['rows']} rows"
            for s in p["sampler"]))
    if p.get("host_step"):
        out.append("host per decode step: " + ", ".join(f"{h['rows']} rows {h['ms_per_step']:.3f} ms"
                                                        for h in p["host_step"]))
    if p.get("norm"):
        n = p["norm"]
        out.append(f"a step's {n['norms_per_step']} norms: module {n['module_ms']:.3f} ms, engine {n['engine_ms']:.3f} "
                   f"ms, outputs within {n['max_diff_bf16_steps']:g} bf16 steps")
    if p.get("prefill"):
        out.append(f"prefill (auto: {p['prefill']['auto']}): " + "; ".join(
            f"{c['case']} ({c['tokens']:,} tokens) sdpa {c['sdpa_ms']:.2f} ms" +
            (f", varlen {c['varlen_ms']:.2f} ms" if "varlen_ms" in c else "") for c in p["prefill"]["cases"]))
    summary = p.get("_summary", {})
    corr = summary.get("engine_check", {}).get("correctness")
    if corr:
        out.append(f"engine check: float32 log-probs within {corr['max_abs_diff']:.2e} of the learner's "
                   f"(tolerance {corr['tolerance']:g}: {'ok' if corr['ok'] else 'FAILED'})")
    packed = summary.get("learner_long", {}).get("packed")
    if packed and "kernels" in packed:
        times = [f"{k} {v['update_s']:.2f} s per update (grad norm {v['grad_norm']:.4g})"
                 for k, v in packed["kernels"].items()]
        out.append(f"learner, a packed row of {packed['samples']} x {packed['length']:,} tokens: {', '.join(times)}; "
                   f"chosen: {packed['chosen']}")
    elif packed:
        out.append(f"learner, a packed row: {packed.get('error', '-')}")
    for r in summary.get("learner_long", {}).get("rows", []):
        got = r.get("measured_increment_gib")
        out.append(f"learner, one {r['length']:,}-token sample: predicted {r['predicted_increment_gib']:.2f} GiB, "
                   f"measured {'-' if got is None else f'{got:.2f}'} GiB" + (f" ({r['skipped']})" if "skipped" in r
                                                                             else ""))
    return out or ["none"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="gpu_check.json (or its run folder), gpu_paged_check.json, or a file of runs")
    ap.add_argument("--out", default=None, help="write the markdown here too")
    args = ap.parse_args(argv)
    try:
        runs = load_runs(Path(args.path))
    except ReportError as e:
        print(f"gpu_report: {e}", file=sys.stderr)
        return 2
    text = "\n".join(report(name, p) for name, p in runs.items())
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
