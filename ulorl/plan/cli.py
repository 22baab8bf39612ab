"""`ulorl plan`: predict the time per step of segment rollout for each M, and recommend one.

    ulorl plan --lengths-from runs/demo --calibrate
    ulorl plan --lengths lognormal:median=16384,sigma=0.82 --max-len 65536 --decode-batch 1024 \
        --train-groups 128 --paged --fit-table 1=1240,2=774 --pipeline both

Length distribution: `--lengths-from RUN_DIR` (its samples.jsonl, resampled by whole groups; settings default to
the run's config.yaml) or `--lengths SPEC` (see `ulorl.plan.lengths`). Cost model: `--cost FILE.json`,
`--calibrate` (measure this machine with the built-in model, ~20-30 s), or `--fit-table M=seconds,...` (fit the
`--fit-free` fields to measured step times, the others from `--cost` or zero; the fit is always on `sync`
steps, how the measured runs ran). `--pipeline sync | overlap | both`: how rollout and update share a step
(`train.pipeline`, `ulorl.config.PipelineMode`); `both` prints the two predictions side by side with the overlap bound.
`--memory` predicts memory instead (`ulorl.plan.memory_cli`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ulorl.config import PipelineMode
from ulorl.plan.cost import FEATURES, PADDED_ENGINES, CostError, CostModel
from ulorl.plan.lengths import LengthSpecError, lengths_from_run, parse_lengths
from ulorl.plan.memory_cli import add_memory_arguments, run_memory
from ulorl.plan.planner import (Workload, fit_to_table, format_compare, format_table, predict, recommend,
                                simulate_all)


class PlanError(ValueError):
    """Bad `ulorl plan` input; the message names the option or field."""


def add_plan_arguments(p: argparse.ArgumentParser, memory: bool = True) -> None:
    src = p.add_mutually_exclusive_group()  # one of them is required: `run_plan` says so in one line
    src.add_argument("--lengths-from", metavar="RUN_DIR", help="a run folder: response lengths from samples.jsonl")
    src.add_argument("--lengths", metavar="SPEC", help="lognormal:median=..,sigma=..[,max=..,rho=..] | "
                     "geometric:mean=..[,max=..] | pareto:alpha=..,min=..[,max=..] | "
                     "twopoint:short=..,long=..,p_long=.. | fixed:length=..")
    src.add_argument("--memory", action="store_true", help="the learner's and KV cache's memory instead of step "
                     "times (options below; ulorl.plan.memory)")
    p.add_argument("--max-len", type=int, default=None, help="global cap L (default: the run's, else required)")
    p.add_argument("--segments", default="1,2,4,8", help="M values to compare (default 1,2,4,8)")
    p.add_argument("--decode-batch", type=int, default=None, help="rows per rollout round (default: run's, else 64)")
    p.add_argument("--group-size", type=int, default=None, help="G (default: run's, else 8)")
    p.add_argument("--train-groups", type=int, default=None, help="groups per update (default: run's, else 8)")
    p.add_argument("--prompt-len", type=int, default=32, help="prompt tokens per sample (default 32)")
    p.add_argument("--drop-rate", type=float, default=None,
                   help="share of groups dropped by dynamic sampling (default: the run's, else 0)")
    cost = p.add_argument_group("cost model")
    cost.add_argument("--cost", metavar="FILE", help="cost model JSON (fields of ulorl.plan.cost.CostModel)")
    cost.add_argument("--calibrate", action="store_true", help="measure this machine with the built-in model")
    cost.add_argument("--fit-table", metavar="M=S,...", help="fit --fit-free fields to measured step seconds, "
                      "e.g. 1=1240,2=774")
    cost.add_argument("--fit-free", default="decode_fixed,update_fixed",
                      help=f"fields --fit-table fits (default decode_fixed,update_fixed; any of "
                      f"{', '.join(FEATURES.values())})")
    cost.add_argument("--paged", action="store_true",
                      help="unpadded prefill and contexts, as the torch and vLLM engines run (default: as the cost "
                      "model was measured; a cost file's `padded`)")
    cost.add_argument("--save-cost", metavar="FILE", help="write the cost model used")
    cost.add_argument("--pipeline", choices=[*(m.value for m in PipelineMode), "both"], default="sync",
                      help="sync: step = generation + update + sync; overlap: max(generation, update) + sync "
                      "(next batch generated during the update, one version staler); both: side by side "
                      "(default sync)")
    cost.add_argument("--sync-s", type=float, default=None, metavar="S",
                      help="seconds per weight sync learner -> engine (cost field sync_fixed; default: the cost "
                      "model's, 0 when weights are shared in memory)")
    sim = p.add_argument_group("simulation")
    sim.add_argument("--steps", type=int, default=30, help="simulated steps measured (default 30)")
    sim.add_argument("--warmup", type=int, default=8, help="simulated steps before measuring (default 8)")
    sim.add_argument("--resolution", type=int, default=256, help="simulation units per L (default 256)")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--tolerance", type=float, default=0.05,
                     help="recommend the smallest M within this fraction of the fastest (default 0.05)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    if memory:
        add_memory_arguments(p)


def _run_config(run_dir: Path) -> tuple[dict, dict]:
    """The `rollout` and `train` sections of a run folder's config.yaml (empty where it has none)."""
    cfg = run_dir / "config.yaml"
    if not cfg.exists():
        return {}, {}
    from ulorl.config.loader import read_yaml

    d = read_yaml(cfg) or {}  # one line naming the file when it does not parse
    if not isinstance(d, dict):
        raise PlanError(f"{cfg}: expected a run's config (a mapping of sections)")
    return d.get("rollout", {}) or {}, d.get("train", {}) or {}


def _run_settings(run_dir: Path) -> dict:
    """rollout/train settings and the dynamic-sampling drop rate of a run folder (what exists of them)."""
    r, t = _run_config(run_dir)
    out = {k: v for k, v in {"max_len": r.get("max_response_len"), "decode_batch": r.get("decode_batch"),
                             "group_size": r.get("group_size"), "train_groups": t.get("train_groups")}.items()
           if v is not None}
    samples = run_dir / "samples.jsonl"
    if samples.exists():
        status: dict[str, str] = {}
        for line in samples.read_text().splitlines():
            rec = json.loads(line) if line.strip() else {}
            if rec.get("status") in ("trained", "dropped"):
                status[str(rec.get("group_id"))] = rec["status"]
        if status:
            out["drop_rate"] = sum(s == "dropped" for s in status.values()) / len(status)
    return out


def engine_mismatch(run_dir: str, cost: CostModel) -> str | None:
    """A note when the run folder `run_dir` ran an engine whose layout (padded or paged, `PADDED_ENGINES`) is not
    the one `cost` prices: the prediction would count prefill and context tokens that run never computed, or miss
    ones it did. None when they agree or the run's config names no engine."""
    engine = _run_config(Path(run_dir))[0].get("engine")
    if engine is None or (engine in PADDED_ENGINES) == cost.padded:
        return None
    layout = "padded (every row of a call padded to its longest prefix)" if cost.padded else "paged (no padding)"
    fix = ("--calibrate measures this machine's torch engine; --paged prices these costs without padding"
           if cost.padded else "a cost file measured on the HF engine prices its padding (and without --paged)")
    return (f"ulorl plan: note: the cost model prices a {layout} engine, but {run_dir} ran rollout.engine={engine}; "
            f"{fix}")


FIT_TOLERANCE = 0.1  # a fitted cost model that misses a measured step by more than this share gets a note


def fit_note(rows, table: dict[int, float]) -> str | None:
    """A note when the cost model fitted to `table` (M -> measured seconds) does not reproduce it: its fields cannot
    (the cost of a step is not a sum of the free fields' terms over these counts), and the plan is no better."""
    predicted = {r.M: r.step_s for r in rows if r.M in table}
    misses = {m: predicted[m] / s - 1 for m, s in table.items() if m in predicted}
    worst = max(misses, key=lambda m: abs(misses[m]), default=None)
    if worst is None or abs(misses[worst]) <= FIT_TOLERANCE:
        return None
    pairs = ", ".join(f"M={m}: {predicted[m]:.3g} s for {table[m]:.3g} s" for m in sorted(table))
    return (f"ulorl plan: note: the fitted cost model does not reproduce --fit-table ({pairs}; {misses[worst]:+.0%} "
            f"at M={worst}): the free fields (--fit-free) cannot, so these step times are not the table's; free "
            "other fields, or measure a cost file (--calibrate)")


def _parse_table(text: str) -> dict[int, float]:
    table = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        m, eq, sec = item.partition("=")
        try:
            table[int(m.strip().lstrip("Mm"))] = float(sec)
        except ValueError:
            raise PlanError(f"--fit-table: {item!r} is not M=seconds (e.g. 1=1240)") from None
        if not eq or table[int(m.strip().lstrip("Mm"))] <= 0:
            raise PlanError(f"--fit-table: {item!r} needs a positive number of seconds")
    if not table:
        raise PlanError("--fit-table is empty")
    return table


def build_workload(args) -> tuple[Workload, str]:
    defaults: dict = {"decode_batch": 64, "group_size": 8, "train_groups": 8, "drop_rate": 0.0}
    if args.lengths_from:
        dist = lengths_from_run(args.lengths_from)
        defaults.update(_run_settings(Path(args.lengths_from)))
        run_len = defaults.get("max_len")
        if run_len and args.max_len and args.max_len > run_len and dist.groups:
            cut = sum(n >= run_len for g in dist.groups for n in g) / sum(len(g) for g in dist.groups)
            if cut:
                print(f"ulorl plan: note: {args.lengths_from} ran with rollout.max_response_len={run_len}, and "
                      f"{cut:.0%} of its answers were cut there: planned for --max-len {args.max_len}, they still "
                      f"end at {run_len} (how long they would have run is unknown)", file=sys.stderr)
    else:
        dist = parse_lengths(args.lengths)
    vals = {k: getattr(args, k) if getattr(args, k) is not None else defaults.get(k)
            for k in ("max_len", "decode_batch", "group_size", "train_groups", "drop_rate")}
    if vals["max_len"] is None:
        raise PlanError("--max-len is required with --lengths (a run folder's config.yaml provides it)")
    for k in ("max_len", "decode_batch", "group_size", "train_groups"):
        if vals[k] < 1:
            raise PlanError(f"--{k.replace('_', '-')}={vals[k]} must be >= 1")
    if not 0 <= vals["drop_rate"] < 1:
        raise PlanError(f"--drop-rate={vals['drop_rate']} must be in [0, 1)")
    try:
        w = Workload(dist, vals["max_len"], vals["group_size"], vals["decode_batch"], vals["train_groups"],
                     args.prompt_len, vals["drop_rate"], args.steps, args.warmup, args.seed, args.resolution)
    except ValueError as e:
        raise PlanError(f"--{str(e).split('=')[0].replace('_', '-')}: {e}") from None
    return w, dist.describe()


def _given(args, add_options, skip: tuple[str, ...] = ()) -> list[str]:
    """The flags that `add_options` adds (but `skip`'s destinations) set to other than their defaults."""
    probe = argparse.ArgumentParser(add_help=False)
    add_options(probe)
    defaults = vars(probe.parse_args([]))
    return [a.option_strings[0] for a in probe._actions if a.dest in defaults and a.dest not in skip
            and getattr(args, a.dest, defaults[a.dest]) != defaults[a.dest]]


def run_plan(args) -> int:
    if getattr(args, "memory", False):
        if ignored := _given(args, lambda p: add_plan_arguments(p, memory=False), ("lengths_from", "lengths",
                                                                                   "memory", "json")):
            print(f"ulorl plan: note: ignored with --memory (they plan step times): {', '.join(ignored)}",
                  file=sys.stderr)
        return run_memory(args)
    if ignored := _given(args, add_memory_arguments):
        print(f"ulorl plan: note: ignored without --memory (they plan memory): {', '.join(ignored)}", file=sys.stderr)
    if not (args.lengths_from or args.lengths):
        print("ulorl plan: error: give where the answer lengths come from: --lengths-from RUN_DIR (a run's samples) "
              "or --lengths SPEC (a distribution); or --memory for memory instead of time. `ulorl plan --help` ends "
              "with examples", file=sys.stderr)
        return 2
    try:
        if not args.tolerance >= 0:  # NaN too
            raise PlanError(f"--tolerance={args.tolerance} must be a share >= 0 (0.05: within 5% of the fastest)")
        w, described = build_workload(args)
        try:
            segments = [int(x) for x in args.segments.split(",") if x.strip()]
        except ValueError:
            raise PlanError(f"--segments {args.segments!r}: expected integers like 1,2,4,8") from None
        bad = [m for m in segments if m < 1 or w.max_len % m]
        if not segments or bad:
            raise PlanError(f"--segments: {bad or 'none'} must be >= 1 and divide --max-len {w.max_len}")
        table = _parse_table(args.fit_table) if args.fit_table else None
        free = [f.strip() for f in args.fit_free.split(",") if f.strip()]
        if table:
            unknown = [f for f in free if f not in FEATURES.values()]
            if unknown or not free:
                raise PlanError(f"--fit-free: {unknown or 'none'} not fittable; choose from "
                                f"{', '.join(FEATURES.values())}")
            if set(table) - set(segments):
                raise PlanError(f"--fit-table: M={sorted(set(table) - set(segments))} not in --segments {segments}")
        if args.cost and args.calibrate:
            raise PlanError("--cost and --calibrate are two cost models: give one (--calibrate measures this machine)")
        cost = CostModel.load(args.cost) if args.cost else CostModel()
        if not (args.cost or args.calibrate or table):
            raise PlanError("give a cost model: --cost FILE, --calibrate or --fit-table M=seconds,...")
        if args.calibrate:
            from ulorl.plan.calibrate import calibrate_builtin

            print("calibrating on this machine with the built-in model ...", file=sys.stderr, flush=True)
            cost, _ = calibrate_builtin(quick=True)
        if args.paged:
            cost.padded = False
        if args.sync_s is not None:
            if not args.sync_s >= 0:
                raise PlanError(f"--sync-s={args.sync_s} must be a number of seconds >= 0")
            cost = CostModel.from_dict({**cost.to_dict(), "sync_fixed": args.sync_s})
        if args.lengths_from and (note := engine_mismatch(args.lengths_from, cost)):
            print(note, file=sys.stderr)
        sims = simulate_all(w, segments, cost.padded)
        if table:
            cost = fit_to_table(sims, table, free, cost)
    except (PlanError, CostError, LengthSpecError) as e:
        print(f"ulorl plan: error: {e}", file=sys.stderr)
        return 2
    if args.save_cost:
        cost.save(args.save_cost)
    modes = list(PipelineMode) if args.pipeline == "both" else [PipelineMode(args.pipeline)]
    by_mode = {m: predict(sims, cost, m) for m in modes}
    if table and (note := fit_note(by_mode.get(PipelineMode.SYNC) or predict(sims, cost, PipelineMode.SYNC), table)):
        print(note, file=sys.stderr)
    recs = {m: recommend(rows, args.tolerance) for m, rows in by_mode.items()}
    first = modes[0]
    if args.json:
        out = {"lengths": described, "workload": {k: v for k, v in vars(w).items() if k != "lengths"},
               "cost": cost.to_dict(), "pipeline": args.pipeline, "rows": [r.to_dict() for r in by_mode[first]],
               "recommended": recs[first]}
        if len(modes) > 1:
            out["by_pipeline"] = {m.value: {"rows": [r.to_dict() for r in by_mode[m]], "recommended": recs[m]}
                                  for m in modes}
        print(json.dumps(out))
        return 0
    print(f"lengths: {described}\nL={w.max_len}  G={w.group_size}  decode batch={w.decode_batch}  "
          f"train groups={w.train_groups}  prompt={w.prompt_len}  drop rate={w.drop_rate:.2f}  "
          f"engine={'padded (HF)' if cost.padded else 'paged'}  sync={cost.sync_fixed:.3g} s/update")
    within = f"smallest M within {args.tolerance:.0%} of the fastest predicted step"
    if len(modes) > 1:
        print("step s: sync = generation + update + sync; overlap = max(generation, update) + sync\n"
              "bound = (generation + update) / max(generation, update); staleness: sync/overlap")
        print(format_compare(by_mode[PipelineMode.SYNC], by_mode[PipelineMode.OVERLAP], recs[PipelineMode.SYNC],
                             recs[PipelineMode.OVERLAP]))
        print(f"recommended: sync M={recs[PipelineMode.SYNC]}, overlap M={recs[PipelineMode.OVERLAP]} ({within})")
        return 0
    rows = by_mode[first]
    if first is PipelineMode.OVERLAP:
        print("pipeline=overlap: step s = max(prefill + decode + reward, update) + sync")
    print(format_table(rows, recs[first]))
    print("overlap bound (generation + update) / max(generation, update): "
          + ", ".join(f"M={r.M} {r.overlap_bound:.2f}x" for r in rows))
    print(f"recommended: M={recs[first]} ({within})")
    return 0
