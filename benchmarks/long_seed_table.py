"""The long run's seed table (issue 30, item 5) in one command: RL from each SFT seed's warm start with each
training seed, every kept checkpoint scored exactly against its warm start on the held-out set.

    python benchmarks/long_seed_table.py                                   # the config as written
    python benchmarks/long_seed_table.py --set train.lr=3e-5 --out docs/long_seed_table_lr3e-5.json
    python benchmarks/long_seed_table.py --warm-start xeon0=benchmarks/warm_starts/long_xeon_sft0 \
        --pairs xeon0/0,xeon0/1,0/0

For each SFT seed S of `--pairs` the warm start is made once (`ulorl sft --config C sft.seed=S data.eval=null`,
into RUNS/sft_S: the same weights, byte for byte, as the full command's warm start, checked for SFT seed 1 of
configs/long.yaml on an Intel Xeon) and scored once; for each pair S/T, `ulorl train --config C sft.seed=S
train.seed=T data.eval=null` runs RL from a copy of it with the `--set` overrides (into RUNS/<tag>/S_T; the tag
names the overrides), and each checkpoint of `--steps` is scored with `reference_likelihood.py`'s exact
measure: the change from the warm start over all problems and over those of >= `--min-tokens` reference tokens,
with its paired z, and where it sits by reference-answer length (`by_length`). A pair whose run has its
summary is not run again; an interrupted one resumes (`--resume auto`), so the script can be re-run at will.
`--warm-start LABEL=DIR` gives a warm start made elsewhere (another machine's, say) for pairs LABEL/T: RL on this
machine from the same weights separates the two machines' warm starts from their RL.
Runs go one at a time: on 2 cores two runs side by side would change each other's times, not their numbers.
The last line printed is one JSON object (also written to `--out`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from benchlib import emit, machine, quiet_torch
from reference_likelihood import by_length, paired, pin_numerics, score_model

ROOT = Path(__file__).resolve().parents[1]
ULORL = [sys.executable, "-m", "ulorl.cli"]


def _pairs(text: str, given: dict[str, Path]) -> list[tuple[str, int]]:
    """WARM/TRAIN_SEED items: WARM is an SFT seed (its warm start made here) or a `--warm-start` label."""
    out = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9.-]*)/(\d+)\s*", item)
        if not m or not (m[1].isdigit() or m[1] in given):
            raise SystemExit(f"--pairs: {item!r} is not SFT_SEED/TRAIN_SEED or LABEL/TRAIN_SEED with LABEL from "
                             f"--warm-start (e.g. 0/0,0/1,1/0; labels given: {sorted(given) or 'none'})")
        out.append((m[1], int(m[2])))
    return out


def _given(specs: list[str]) -> dict[str, Path]:
    """--warm-start LABEL=DIR: a model folder made elsewhere (another machine's warm start, say)."""
    out = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9.-]*", label):
            raise SystemExit(f"--warm-start {spec!r}: expected LABEL=DIR, LABEL starting with a letter")
        if not (Path(path) / "model.safetensors").exists():
            raise SystemExit(f"--warm-start {spec!r}: {path} has no model.safetensors (expected a model folder, "
                             "as RUN/warm_start/model)")
        out[label] = Path(path)
    return out


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tag(sets: list[str]) -> str:
    return "_".join(re.sub(r"[^A-Za-z0-9.=-]", "-", s) for s in sets) or "as_written"


def _run(cmd: list[str], log: Path) -> None:
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    with open(log, "a") as f:
        if subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"failed: {' '.join(cmd)} (its output: {log})")


# overrides that shape the warm start too: the SFT's own, and the process's threads and CPU numerics (`ulorl sft`
# applies both before it trains)
WARM_START_SETS = ("sft.", "train.threads=", "train.cpu_numerics=")


def warm_start(config: str, runs: Path, sft_seed: int, sets: list[str]) -> Path:
    """RUNS/sft_S[_<overrides>]/model, made once. Only the `WARM_START_SETS` overrides reach it (and name it): the
    others are RL's."""
    sft_sets = [s for s in sets if s.startswith(WARM_START_SETS)]
    out = runs / (f"sft_{sft_seed}" + (f"_{_tag(sft_sets)}" if sft_sets else ""))
    model = out / "model"
    if not (model / "model.safetensors").exists():
        _run([*ULORL, "sft", "--config", config, "-o", str(out), f"sft.seed={sft_seed}", "data.eval=null", *sft_sets],
             out.parent / f"{out.name}.log")
    return model


def rl_run(config: str, run: Path, model: Path, warm: str, train_seed: int, sets: list[str], every: int) -> None:
    if (run / "summary.json").exists():
        return
    if not (run / "warm_start" / "model" / "model.safetensors").exists():  # a copy, renamed into place whole
        tmp = run / "warm_start.copying"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(model, tmp / "model")
        shutil.rmtree(run / "warm_start", ignore_errors=True)
        os.replace(tmp, run / "warm_start")
    seed = [f"sft.seed={warm}"] if warm.isdigit() else []  # a given warm start: no SFT, so no SFT seed
    _run([*ULORL, "train", "--config", config, "-o", str(run), "--resume", "auto", *seed, f"train.seed={train_seed}",
          "data.eval=null", f"checkpoint.every={every}", "checkpoint.keep=100", *sets], run.parent / f"{run.name}.log")


def _change(cmp: dict) -> dict:
    return {k: {"delta": v["delta"], "se": v["se"], "z": v["z"], "better": v["better"], "worse": v["worse"]}
            for k, v in cmp.items() if v}


def main() -> int:
    from ulorl.evaluation.metrics import z_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/long.yaml")
    ap.add_argument("--pairs", default="0/0,0/1,0/2,1/0,2/0",
                    help="SFT_SEED/TRAIN_SEED or LABEL/TRAIN_SEED (a --warm-start), comma-separated")
    ap.add_argument("--warm-start", action="append", default=[], metavar="LABEL=DIR",
                    help="RL from this model folder (e.g. another machine's warm start) for pairs LABEL/T; repeat")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run (repeat); sft.*, train.threads and train.cpu_numerics "
                         "ones reach the warm starts too")
    ap.add_argument("--steps", default="4,8", help="the RL steps whose checkpoints are scored")
    ap.add_argument("--runs", default="runs/seed_table", help="where the warm starts and runs go")
    ap.add_argument("--min-tokens", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2, help="torch threads for the scoring")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    given = _given(args.warm_start)
    pairs = _pairs(args.pairs, given)
    steps = [int(s) for s in args.steps.split(",")]
    every = steps[0]
    for s in steps:
        if s % every:
            ap.error(f"--steps {args.steps}: each must be a multiple of the first (checkpoint.every={every})")
    numerics = pin_numerics(args.config, args.set)  # the scoring computes as the runs' own evaluations do
    quiet_torch(args.threads)
    load0 = os.getloadavg()
    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    tag = _tag(args.set)
    table, scored = {}, {}  # scored: each warm start's scores, shared by its pairs
    for warm, train_seed in pairs:
        model = given.get(warm) or warm_start(args.config, runs, int(warm), args.set)
        run = runs / tag / f"{warm}_{train_seed}"
        rl_run(args.config, run, model, warm, train_seed, args.set, every)
        if model not in scored:
            scored[model] = score_model(args.config, str(model), args.min_tokens, args.set)
        before = scored[model]
        row = {"run": str(run), "warm_start": {"path": str(model), "sha256": _sha256(model / "model.safetensors"),
                                               "all": before["all"], "long": before["long"]}, "steps": {}}
        for step in steps:
            ckpt = run / "checkpoints" / f"step_{step:06d}" / "model"
            if not ckpt.exists():
                raise SystemExit(f"{ckpt} is missing: does the run have {step} steps (train.steps)?")
            after = score_model(args.config, str(ckpt), args.min_tokens, args.set)
            row["steps"][str(step)] = {**_change(paired(before, after, args.min_tokens)),
                                       "by_length": by_length(before, after)}
        summary = json.loads((run / "summary.json").read_text())
        row["trained_eos_at_least"] = summary.get("trained_eos_at_least")
        row["prefilter"] = summary.get("prefilter")
        with open(run / "metrics.jsonl") as f:  # RL's own clock: the steps, not the warm start or the scoring
            row["rl_seconds"] = round(sum(json.loads(line).get("timing_s/step", 0.0) for line in f), 1)
        table[f"{warm}/{train_seed}"] = row
        last = row["steps"][str(steps[-1])]
        print(f"{warm}/{train_seed} step {steps[-1]}: " + "; ".join(
            f"{k} {last[k]['delta'] * 100:+.1f} points (z {z_text(last[k]['z'])})"
            for k in ("all", "long") if k in last), flush=True)
    return emit({"config": args.config, "sets": args.set, "min_tokens": args.min_tokens, "pairs": table,
                 "cpu_numerics": numerics, "machine": machine(load0)}, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
