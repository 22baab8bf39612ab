"""Figures of a long run (`configs/long.yaml`): what docs/long_run.md shows.

    python benchmarks/long_run_figures.py runs/long --out docs/figures/long

Reads the run folder (`metrics.jsonl`, `history.json`, `config.yaml`) and writes four PNGs and the numbers
behind them (`figures.json`):
- `response_length.png`: trained samples' response length per step (mean and max) and the truncated share;
- `entropy.png`: policy entropy per step and the DMMPT mask ratio;
- `accuracy_by_length.png`: held-out avg@k before and after RL by the reference answer's length in tokens
  (6n + 9 with EOS; the eval problems are rebuilt from the run's data config, so sizes match `eval_correct`
  problem by problem), with standard errors; `figures.json` adds the paired change, its SE and z per bucket
  and for all problems whose reference answer has >= 1,000 tokens (`exact_by_length`: the same buckets for the
  exact P(worked solution) of a run with `eval.reference`, over the problems it scores);
- `step_time.png`: seconds per step split into generation, reward and update.

`figures.json` also counts the trained samples (`samples.jsonl`) by number of segments, EOS against truncated,
the EOS answers of at least 1,024 and 2,048 tokens, and the EOS answers to long problems by their length
against the reference (`trained_long`: full, short = lines skipped, over) with their accuracy.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from matplotlib.figure import Figure

from benchlib import emit
from ulorl.evaluation.metrics import paired_difference

# reference answer length in tokens with EOS (6n + 9 for odometer), half-open [lo, hi)
TOKEN_BUCKETS = ((0, 256), (256, 1024), (1024, 2048), (2048, 4097))
LONG_TOKENS = 1000  # the "long answer": a reference answer of at least this many tokens


def answer_tokens(n: int) -> int:
    """Tokens of odometer's correct answer to an n-step problem, EOS included."""
    from ulorl.tasks.odometer import OdometerProblem

    return OdometerProblem(start=0, steps=n).num_tokens + 1


def split_sizes(run: Path, split: str, exact: bool = False) -> list[int]:
    """Problem size n of each problem of the run's `train` or `eval` split, by row (= prompt_id for train;
    evaluation order for eval, cut to the rows avg@k samples, or with `exact` to those the exact measure scores)."""
    from ulorl.config import load_run_config
    from ulorl.data.loaders import builtin_rows

    cfg = load_run_config(str(run / "config.yaml"), [])
    rows = builtin_rows(getattr(cfg.data, split), cfg.data, split)
    if split == "eval":
        rows = cfg.eval.referenced(rows) if exact else cfg.eval.sampled(rows)
    return [int(r["extra_info"]["size"]) for r in rows]


def trained_samples(run: Path):
    """The rows of `samples.jsonl` with status `trained` (none if the run logged no samples)."""
    path = run / "samples.jsonl"
    if not path.exists():
        return
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("status") == "trained":
                yield r


def trained_long_answers(run: Path, sizes: list[int]) -> dict:
    """Trained EOS answers to problems whose reference answer has >= LONG_TOKENS tokens, by their length
    against the reference: `full` (within 10%), `short` (under 90%: lines skipped; the counter jumped) and
    `over` (over 110%), each with its count and accuracy. A skip changes x_n unless the skipped units digits
    add up to a multiple of 11, so a short answer is a guess that the reward cannot always tell apart."""
    out: dict[str, dict[str, float]] = {}
    for r in trained_samples(run):
        ref = answer_tokens(sizes[int(r["prompt_id"])])
        if r["stop_reason"] != "eos" or ref < LONG_TOKENS:
            continue
        ratio = r["response_length"] / ref
        d = out.setdefault("short" if ratio < 0.9 else "over" if ratio > 1.1 else "full", {"answers": 0, "correct": 0})
        d["answers"] += 1
        d["correct"] += float(r["reward"]) > 0
    for d in out.values():
        d["accuracy"] = d["correct"] / d["answers"]
    return out


def accuracy_by_length(sizes: list[int], correct: dict[str, list[int]], k: int) -> list[dict]:
    """Per answer-length bucket (and for answers of >= LONG_TOKENS): problems, avg@k before/after with their
    SEs, and the paired change (`paired_difference`) with its SE, z (None where se = 0) and the problems that
    got better and worse."""
    out = []
    groups = [(f"{lo}-{hi - 1}", lambda t, lo=lo, hi=hi: lo <= t < hi) for lo, hi in TOKEN_BUCKETS]
    groups.append((f">={LONG_TOKENS}", lambda t: t >= LONG_TOKENS))
    for name, inside in groups:
        idx = [i for i, n in enumerate(sizes) if inside(answer_tokens(n))]
        if not idx:
            continue
        row = {"answer_tokens": name, "steps": f"{min(sizes[i] for i in idx)}-{max(sizes[i] for i in idx)}",
               "problems": len(idx)}
        for label in ("before", "after"):
            if label in correct:
                row[label], row[f"se_{label}"] = _mean_se([correct[label][i] / k for i in idx])
        if "before" in correct and "after" in correct:
            before, after = [correct["before"][i] for i in idx], [correct["after"][i] for i in idx]
            if len(idx) >= 2:
                d = paired_difference(before, after, k)
                row.update(change=d["delta"], se=d["se"], z=d["z"], better=d["better"], worse=d["worse"])
            else:  # one problem: a change, but no standard error
                row.update(change=(after[0] - before[0]) / k, se=None, z=None)
        out.append(row)
    return out


def trained_by_segments(run: Path) -> dict:
    """Trained samples (`samples.jsonl`, status `trained`) by number of segments, EOS vs truncated, and the
    EOS answers of >= 1,024 / >= 2,048 tokens."""
    by_seg: dict[int, dict[str, int]] = {}
    eos_1024 = eos_2048 = 0
    if not (run / "samples.jsonl").exists():
        return {}
    for r in trained_samples(run):
        d = by_seg.setdefault(int(r["num_segments"]), {"eos": 0, "truncated": 0})
        eos = r["stop_reason"] == "eos"
        d["eos" if eos else "truncated"] += 1
        eos_1024 += eos and r["response_length"] >= 1024
        eos_2048 += eos and r["response_length"] >= 2048
    return {"by_segments": {str(k): by_seg[k] for k in sorted(by_seg)}, "eos_ge_1024": eos_1024,
            "eos_ge_2048": eos_2048}


def _mean_se(xs: list[float]) -> tuple[float, float]:
    """Mean and its standard error (0 for one value)."""
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / max(len(xs) - 1, 1)
    return mean, math.sqrt(var / len(xs))


def twin_axes(steps: list[int], left: list[tuple[list[float], str]], left_label: str,
              right: tuple[list[float], str], right_label: str, title: str, path: Path, log: bool = False) -> None:
    """Series per step on the left axis, one more (dotted, grey) on a right axis, one legend inside."""
    fig = Figure(figsize=(6.5, 3.6))
    ax = fig.add_subplot()
    for values, label in left:
        ax.plot(steps, values, label=label)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(left_label)
    ax2 = ax.twinx()
    ax2.plot(steps, right[0], color="grey", linestyle=":", label=right[1])
    ax2.set_ylabel(right_label)
    ax.set_title(title)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=8, framealpha=0.8)
    _save(fig, path)


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path)
    p.add_argument("--out", type=Path, default=Path("docs/figures/long"))
    args = p.parse_args()
    from ulorl.logging.jsonl import read_metrics

    rows = read_metrics(args.run / "metrics.jsonl")
    history = json.loads((args.run / "history.json").read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    steps = [r["step"] for r in rows]

    def col(name: str) -> list[float]:
        return [r.get(name) if r.get(name) is not None else float("nan") for r in rows]

    twin_axes(steps, [(col("response_length/mean"), "mean"), (col("response_length/max"), "max")],
              "trained response length (tokens)", (col("response_length/clip_ratio"), "truncated share"),
              "truncated share", "Trained samples' response length", args.out / "response_length.png", log=True)
    twin_axes(steps, [(col("actor/entropy"), "entropy")], "mean token entropy (nats)",
              (col("actor/dmmpt_mask_ratio"), "DMMPT mask ratio"), "share of tokens masked",
              "Policy entropy and DMMPT masking", args.out / "entropy.png")

    fig = Figure(figsize=(6.5, 3.6))
    ax = fig.add_subplot()
    gen, rew, upd = col("timing_s/gen"), col("timing_s/reward"), col("timing_s/update")
    ax.bar(steps, gen, label="generation")
    ax.bar(steps, rew, bottom=gen, label="reward")
    ax.bar(steps, upd, bottom=[g + r for g, r in zip(gen, rew)], label="update")
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.set_title("Time per step")
    ax.legend(fontsize=8)
    _save(fig, args.out / "step_time.png")

    cfg_k = history.get("eval", {}).get("before", {}).get("k", 1)
    by_len = accuracy_by_length(split_sizes(args.run, "eval"), history.get("eval_correct", {}), int(cfg_k))
    fig = Figure(figsize=(6.5, 3.6))
    ax = fig.add_subplot()
    x = list(range(len(by_len)))
    for off, label in ((-0.2, "before"), (0.2, "after")):
        if all(label in b for b in by_len):
            ax.bar([i + off for i in x], [b[label] for b in by_len], width=0.4, label=f"{label} RL",
                   yerr=[b[f"se_{label}"] for b in by_len], capsize=2)
    ax.set_xticks(x, [f"{b['answer_tokens']}\n({b['problems']})" for b in by_len], fontsize=8)
    ax.set_xlabel("reference answer tokens (held-out problems)")
    ax.set_ylabel(f"avg@{cfg_k}")
    ax.set_title("Held-out accuracy by problem length")
    ax.legend(fontsize=8)
    _save(fig, args.out / "accuracy_by_length.png")

    exact = history.get("eval_reference", {})  # eval.reference: P(worked solution), possibly on more problems
    exact_by_len = accuracy_by_length(split_sizes(args.run, "eval", exact=True), exact, 1) if exact else None
    tot = {k: sum(v for v in col(k) if v == v) for k in ("timing_s/gen", "timing_s/reward", "timing_s/update",
                                                          "timing_s/step")}
    return emit({"run": str(args.run), "steps": len(steps), "accuracy_by_length": by_len,
                 "exact_by_length": exact_by_len, "time_totals_s": tot,
                 "trained": trained_by_segments(args.run),
                 "trained_long": trained_long_answers(args.run, split_sizes(args.run, "train")),
                 "eval": history.get("eval")}, args.out / "figures.json")


if __name__ == "__main__":
    raise SystemExit(main())
