"""Small-scale reproduction of the paper's Figures 2, 4/5, a tau/sigma sweep and the POIS bias study.

Every experiment is the demo (`configs/demo.yaml`: built-in tiny model and chain task, M = 4, POIS, DMMPTs,
300 RL steps) started from ONE shared SFT warm start, with the same seed, changed in exactly the settings its
name says. Runs are `ulorl train` processes (one torch thread each, `--jobs` at a time); a finished run is
not run again and an interrupted one resumes from its last checkpoint, so the script can be re-run at will.
Afterwards it draws the figures (`ulorl plot` panels per group, plus the POIS-bias-by-age figure and the
sweep table) into `docs/figures/repro/` and writes `docs/repro_results.json`.

    python benchmarks/repro.py                       # everything (about 11 runs; ~1 h on 2 cores, 2 jobs)
    python benchmarks/repro.py --groups entropy      # one group
    python benchmarks/repro.py --quick               # 30-step runs of one group (~6 min), to check the plumbing
    python benchmarks/repro.py --report-only         # figures and tables from finished runs

The last line printed is one JSON object: per run, held-out avg@8 before/after, the paired change and its
standard error, and the entropy at the start, middle and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from ulorl.evaluation.metrics import paired_difference
from ulorl.logging.base import json_text


@dataclass(frozen=True)
class Experiment:
    name: str
    overrides: tuple[str, ...]
    what: str
    groups: tuple[str, ...] = field(default=())
    steps: int | None = None  # None: --steps; the sweep runs half as long (compared at the same step)


# Runs of 150 steps are compared with the 300-step runs at step 150 (every run is evaluated every 50 steps).
SHORT = 150
EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("ent-none", ("algo.entropy_mask=none",), "all tokens trained (paper's baseline)", ("entropy",)),
    Experiment("ent-mpt", ("algo.entropy_mask=mpt",), "every MPT masked", ("entropy",)),
    Experiment("pois-m4", ("algo.entropy_mask=dmmpt",), "UloRL: POIS, M=4, DMMPTs tau 0.99 sigma 0.2 (the demo)",
               ("entropy", "is", "sweep")),
    # sigma for the tiny model: the no-mask baseline's mean entropy at mid-run (0.50; docs/reproduction.md)
    Experiment("ent-dmmpt-s0.5", ("algo.sigma=0.5",), "DMMPTs with sigma 0.5, chosen from the baseline",
               ("entropy", "sweep")),
    Experiment("tois-m1", ("rollout.num_segments=1", "algo.is_mode=tois"), "TOIS, M=1 (synchronous)", ("is",),
               SHORT),
    Experiment("sais-m4", ("algo.is_mode=sais",), "SAIS, M=4", ("is",), SHORT),
    Experiment("sais-m4-clip028", ("algo.is_mode=sais", "algo.eps_high=0.28"), "SAIS, M=4, clip-higher 0.28",
               ("is",), SHORT),
    Experiment("tau0.99-sigma0.35", ("algo.sigma=0.35",), "tau 0.99, sigma 0.35", ("sweep",), SHORT),
    Experiment("tau0.9-sigma0.2", ("algo.tau=0.9", "algo.sigma=0.2"), "tau 0.9, sigma 0.2", ("sweep",), SHORT),
    Experiment("tau0.9-sigma0.5", ("algo.tau=0.9", "algo.sigma=0.5"), "tau 0.9, sigma 0.5", ("sweep",), SHORT),
    Experiment("pois-m4-seed1", ("train.seed=1",), "the demo with seed 1", ("seeds",)),
)
GROUPS = ("entropy", "is", "sweep", "seeds")


def warm_start(out: Path, quick: bool) -> Path:
    """The shared SFT warm start (made once with the demo's SFT settings)."""
    model = out / "sft" / "model"
    if (model / "model.safetensors").exists():
        return model
    quick_sets = ["sft.until_p=null", "sft.max_steps=null", "sft.check_every=0", "sft.steps=20", "eval.k=2",
                  "eval.num_problems=20"]  # 20 fixed SFT steps: plumbing only
    cmd = [sys.executable, "-m", "ulorl.cli", "sft", "-c", "configs/demo.yaml", "-o", str(out / "sft"),
           "logging.progress=false"] + (quick_sets if quick else [])
    print(f"[repro] SFT warm start -> {model}", flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, env=_env(), stdout=subprocess.DEVNULL)
    return model


def _env() -> dict:
    return os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def command(exp: Experiment, model: Path, run_dir: Path, args) -> list[str]:
    steps = min(exp.steps or args.steps, args.steps)
    base = [f"model.path={model}", "model.warm_start=none", f"train.steps={steps}",
            f"train.eval_every={args.eval_every}", "logging.progress=false", "checkpoint.every=50"]
    if args.quick:
        base += ["eval.num_problems=40", "eval.k=4", "eval.pass_k=[1,4]"]
    resume = ["--resume", "auto"] if (run_dir / "checkpoints").exists() else []
    return [sys.executable, "-m", "ulorl.cli", "train", "-c", "configs/demo.yaml", "-o", str(run_dir), *resume,
            *base, *exp.overrides]


def run_all(exps: list[Experiment], model: Path, args) -> None:
    todo = [e for e in exps if not (args.out / e.name / "summary.json").exists()]
    running: list[tuple[Experiment, subprocess.Popen, float, object]] = []
    while todo or running:
        while todo and len(running) < args.jobs:
            e = todo.pop(0)
            run_dir = args.out / e.name
            run_dir.mkdir(parents=True, exist_ok=True)
            log = open(run_dir / "train.log", "a")
            print(f"[repro] start {e.name}: {' '.join(e.overrides)}", flush=True)
            running.append((e, subprocess.Popen(command(e, model, run_dir, args), cwd=ROOT, env=_env(), stdout=log,
                                                stderr=subprocess.STDOUT), time.time(), log))
        time.sleep(2)
        for item in list(running):
            e, proc, t0, log = item
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode}, see train.log)"
            print(f"[repro] {e.name} {status} in {(time.time() - t0) / 60:.1f} min", flush=True)


def load_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def summarize_run(exp: Experiment, run_dir: Path) -> dict | None:
    if not (run_dir / "summary.json").exists():
        return None
    s = json.loads((run_dir / "summary.json").read_text())
    ms = load_metrics(run_dir)
    ent = [m["actor/entropy"] for m in ms]
    tenth = max(len(ent) // 10, 1)
    evals = [(m["step"], m["eval/avg@k"]) for m in ms if "eval/avg@k" in m]
    p = s.get("eval_paired") or {}
    hist = json.loads((run_dir / "history.json").read_text())
    correct, k = hist.get("eval_correct", {}), s["eval_before"]["k"]
    paired_by_step = {lab: paired_difference(correct["before"], c, int(k)) for lab, c in correct.items()
                      if lab.startswith("step")}
    return {
        "name": exp.name, "what": exp.what, "overrides": list(exp.overrides), "steps": s["steps"],
        "avg_before": s["eval_before"]["avg@k"], "avg_after": s["eval_after"]["avg@k"],
        "pass_k_before": {k: v for k, v in s["eval_before"].items() if k.startswith("pass@")},
        "pass_k_after": {k: v for k, v in s["eval_after"].items() if k.startswith("pass@")},
        "delta": p.get("delta"), "se": p.get("se"), "z": p.get("z"),
        # entropy: mean over the first, middle and last 10% of steps
        "entropy_start": statistics.mean(ent[:tenth]), "entropy_mid": statistics.mean(
            ent[len(ent) // 2 - tenth // 2: len(ent) // 2 - tenth // 2 + tenth]), "entropy_end": statistics.mean(
            ent[-tenth:]),
        "entropy_max": max(ent), "length_end": statistics.mean(m["response_length/mean"] for m in ms[-tenth:]),
        "mask_ratio_mean": statistics.mean(m["actor/dmmpt_mask_ratio"] for m in ms),
        "clipfrac_mean": statistics.mean(m["actor/pg_clipfrac"] for m in ms),
        "eval_curve": evals, "paired_by_step": paired_by_step,
        "minutes": sum(m["timing_s/step"] for m in ms) / 60,
    }


def pois_bias_figure(run_dirs: dict[str, Path], path: Path) -> dict:
    """Mean |log pi_theta - log pi_behaviour| by segment age, averaged over windows of training."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * len(run_dirs), 4))
    out = {}
    axes = fig.subplots(1, len(run_dirs), squeeze=False)[0]
    for ax, (name, run_dir) in zip(axes, run_dirs.items()):
        ms = load_metrics(run_dir)
        ages = sorted({int(k.rsplit("age", 1)[1]) for m in ms for k in m if k.startswith("pois/abs_log_ratio_age")})
        window = max(len(ms) // 6, 1)
        out[name] = {}
        for a in ages:
            key = f"pois/abs_log_ratio_age{a}"
            xs, ys = [], []
            for lo in range(0, len(ms), window):
                vals = [m[key] for m in ms[lo: lo + window] if m.get(key) is not None]
                if vals:
                    xs.append(ms[min(lo + window, len(ms)) - 1]["step"])
                    ys.append(statistics.mean(vals))
            ax.plot(xs, ys, marker="o", label=f"age {a}")
            vals = [m[key] for m in ms if m.get(key) is not None]
            out[name][str(a)] = {"mean": statistics.mean(vals), "steps_seen": len(vals)}
        ax.set_title(f"{name}: drift of stale segments")
        ax.set_xlabel("training step")
        ax.set_ylabel(r"mean $|\log\pi_\theta - \log\pi_{\mathrm{behaviour}}|$ per token")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(title="segment age (versions)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return out


def report(exps: list[Experiment], args) -> dict:
    figs = args.out / "figures" if args.quick else ROOT / "docs" / "figures" / "repro"  # quick: leave docs alone
    figs.mkdir(parents=True, exist_ok=True)
    rows = {e.name: summarize_run(e, args.out / e.name) for e in exps}
    for g in GROUPS:
        members = [e for e in exps if g in e.groups and rows.get(e.name)]
        if len(members) < 2:
            continue
        cmd = [sys.executable, "-m", "ulorl.cli", "plot", *[str(args.out / e.name) for e in members], "--out",
               str(figs / g), "--names", ",".join(e.name for e in members), "--smooth", "0.95"]
        subprocess.run(cmd, cwd=ROOT, check=True, env=_env(), stdout=subprocess.DEVNULL)
    bias_runs = {n: args.out / n for n in ("pois-m4", "sais-m4") if rows.get(n)}
    bias = pois_bias_figure(bias_runs, figs / "pois_bias_by_age.png") if bias_runs else {}
    result = {"runs": {k: v for k, v in rows.items() if v}, "pois_bias": bias,
              "settings": {"steps": args.steps, "eval_every": args.eval_every, "quick": args.quick}}
    if not args.quick:  # merged into the results of earlier reports, so a subset does not drop the others
        path = ROOT / "docs" / "repro_results.json"
        old = json.loads(path.read_text()) if path.exists() else {"runs": {}, "pois_bias": {}}
        merged = {**result, "runs": {**old["runs"], **result["runs"]}, "pois_bias": {**old["pois_bias"], **bias}}
        path.write_text(json_text(merged, indent=1))
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated subset of {', '.join(GROUPS)}")
    p.add_argument("--only", default=None, help="comma-separated experiment names (overrides --groups)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (one torch thread each)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "repro")
    p.add_argument("--quick", action="store_true", help="30-step runs of the entropy group, small evaluation")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.steps, args.eval_every, args.groups = 30, 15, "entropy"
        args.out = args.out.parent / (args.out.name + "-quick")
    wanted = set(args.only.split(",")) if args.only else None
    groups = set(args.groups.split(","))
    exps = [e for e in EXPERIMENTS if (e.name in wanted if wanted else groups & set(e.groups))]
    if not exps:
        p.error("no experiment selected")
    if not args.report_only:
        run_all(exps, warm_start(args.out, args.quick), args)
    result = report(exps, args)
    print(json.dumps({n: {k: r[k] for k in ("avg_before", "avg_after", "delta", "se", "entropy_start",
                                            "entropy_mid", "entropy_end")} for n, r in result["runs"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
