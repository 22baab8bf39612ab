"""What a run reports: the metrics of one step, the histograms kept in the history, and the run's summary.

`step_metrics` is what the loggers get every step (names and meanings: docs/metrics.md);
`record_trained` keeps what the summary needs in `history` (so it survives a resume);
`summarize` is the end-of-run `summary.json`, and `format_summary` its text at the end of `ulorl train`.
"""

from __future__ import annotations

import resource
from collections import Counter
from pathlib import Path

from ulorl.evaluation.metrics import length_stats, z_text
from ulorl.run.held_out import paired_by_length, solution_tokens
from ulorl.run.checkpoint import resume_command
from ulorl.run.console import say
from ulorl.run.numerics import numerics_line, numerics_report
from ulorl.run.session import TrainSession
from ulorl.trajectory import Trajectory

LONG_EOS_TOKENS = (1024, 2048)  # the summary counts trained EOS answers of at least these many tokens


def overlap_metrics(ahead: Counter, update: dict, wait_s: float, window_s: float) -> dict:
    """How well the update was hidden behind the next step's rounds (`train.pipeline=overlap`).

    `ahead`: what those rounds counted; `update`: the update's metrics (`timing_s/update_compute`, measured in the
    learner process); `wait_s`: the driver waited this long for the update after its rounds; `window_s`: submit
    to result. Efficiency = the time both ran at once / the shorter of the two (1: fully hidden)."""
    busy, compute = ahead["gen_s"] + ahead["reward_s"], update.get("timing_s/update_compute", 0.0)
    hidden = max(0.0, busy + compute - window_s)
    return {"pipeline/wait_for_update_s": wait_s, "pipeline/ahead_rounds": float(ahead["rounds"]),
            "pipeline/overlap_efficiency": min(1.0, hidden / max(min(busy, compute), 1e-9))}


def step_metrics(session: TrainSession, batch: list[Trajectory], update: dict, counts: Counter, update_s: float,
                 step_s: float) -> dict:
    """The loggers' metrics of one step: the update's, the batch's, the rounds' `counts`, timings, rewards."""
    lengths = [t.response_len for t in batch]
    count_into(session.history["segments_hist"], Counter(len(t.segments) for t in batch))
    session.history["entropy"].append(round(update["actor/entropy"], 5))
    if not update["actor/response_tokens"]:
        say(f"warning: step {session.step}: no response token was in the loss (every sample masked out, e.g. "
            f"reward.overlong={session.cfg.reward.overlong} on answers cut at rollout.max_response_len): its gradient "
            "is zero, and its entropy and grad norm are 0 by default, not measured")
    return {
        **update,
        "critic/score/mean": sum(t.reward for t in batch) / len(batch),
        "response_length/mean": sum(lengths) / len(lengths),
        "response_length/max": float(max(lengths)),
        "response_length/clip_ratio": sum(t.truncated for t in batch) / len(batch),
        "rollout/unfinished_pool": float(len(session.unfinished)),
        "rollout/experience_pool": float(session.experience.num_samples()),
        "rollout/new_prompts": float(counts["new_prompts"]),
        "rollout/rounds": float(counts["rounds"]),
        "rollout/segments_per_sample": sum(len(t.segments) for t in batch) / len(batch),
        "rollout/reprefill_tokens": float(counts["reprefill"]),
        "rollout/prefill_tokens": float(counts["prefill"]),
        "rollout/prefill_padded_tokens": float(counts["prefill_padded"]),
        "rollout/decoded_tokens": float(counts["decoded"]),
        "rollout/max_staleness": float(counts["max_staleness"]),
        "rollout/dropped_groups": float(counts["dropped_groups"]),
        "rollout/reward_failed_groups": float(counts["reward_failed_groups"]),
        "rollout/slot_utilisation": counts["decoded"] / max(counts["slots"], 1),
        **procs_idle_share(counts),
        "timing_s/gen": counts["gen_s"],
        "timing_s/reward": counts["reward_s"],
        "timing_s/update": update_s,
        "timing_s/step": step_s,
        "perf/throughput": counts["decoded"] / max(step_s, 1e-9),
        "train/step": float(session.step),
        "train/trained_samples": float(session.counters["trained_samples"]),
        **{k: float(v) for k, v in session.reward.metrics().items()},
    }


def procs_idle_share(counts: Counter) -> dict:
    """`rollout/procs_idle_share`: of the engine processes' seconds in this step's rollout calls, the share spent
    waiting for the slowest process (0: balanced; absent with one engine)."""
    busy, wait = counts["procs_busy_s"], counts["procs_wait_s"]
    return {"rollout/procs_idle_share": wait / (busy + wait)} if busy > 0 else {}


def record_trained(history: dict, batch: list[Trajectory], staleness: Counter) -> None:
    """What the summary reports about trained samples, kept in `history` (so it survives a resume): histograms
    of response length (exact lengths: at most L + 1 entries however long the run) and of staleness in
    versions, and the number truncated."""
    count_into(history.setdefault("trained_length_hist", {}), Counter(t.response_len for t in batch))
    history["trained_truncated"] = history.get("trained_truncated", 0) + sum(t.truncated for t in batch)
    # truncated samples by number of segments (the rest of segments_hist ended with EOS), and long EOS answers
    count_into(history.setdefault("segments_truncated_hist", {}), Counter(len(t.segments) for t in batch
                                                                          if t.truncated))
    count_into(history.setdefault("trained_eos_at_least", {}), Counter(
        n for t in batch if not t.truncated for n in LONG_EOS_TOKENS if t.response_len >= n))
    count_into(history.setdefault("staleness_hist", {}), staleness)


def count_into(hist: dict[str, int], counts: Counter) -> None:
    """Add `counts` to a histogram kept in the (JSON) history, whose keys are strings."""
    for k, v in counts.items():
        hist[str(k)] = hist.get(str(k), 0) + v


def by_number(hist: dict[str, int]) -> dict[str, int]:
    """A history histogram ordered by its numeric keys."""
    return dict(sorted(hist.items(), key=lambda kv: int(kv[0])))


# the phases of a run whose seconds the summary gives (`phase_s`, in this order), with their names in the console
PHASES = {"warm_start": "SFT warm start", "start": "start-up", "prefilter": "prefilter",
          "eval_before": "evaluation before", "rl_steps": "RL steps", "eval_steps": "evaluations during RL",
          "checkpoints": "checkpoints", "eval_after": "evaluation after"}


def summarize(session: TrainSession, checkpoint=None, wall_s: float | None = None) -> dict:
    """The run's summary (also `summary.json`): held-out before/after with the paired comparison, trained
    samples' lengths, segments and staleness, peak memory, the last checkpoint's size, and the time in each
    phase (`phase_s`, in `PHASES` order) beside this process's wall-clock time (`wall_s`)."""
    ev, correct, h = session.history["eval"], session.history.get("eval_correct", {}), session.history
    paired = paired_long = reference = None
    if "before" in correct and "after" in correct and len(correct["before"]) > 1:
        e = session.cfg.eval
        tokens = solution_tokens(session.tokenizer, e.sampled(session.eval_prompts))
        by_len = paired_by_length(correct["before"], correct["after"], tokens, e.long_tokens, e.k)
        paired, paired_long = by_len["all"], by_len.get("long")
        probs = h.get("eval_reference", {})
        if "before" in probs and "after" in probs:
            tokens = solution_tokens(session.tokenizer, e.referenced(session.eval_prompts))
            reference = {"before": ev["before"]["reference/p_correct"], "after": ev["after"]["reference/p_correct"],
                         **paired_by_length(probs["before"], probs["after"], tokens, e.long_tokens, 1)}
    out = {"run_dir": str(session.run_dir), "steps": session.step, "trained_samples": session.counters["trained_samples"],
           "dropped_groups": session.counters["dropped_groups"],
           "reward_failed_groups": session.counters.get("reward_failed_groups", 0), "eval_before": ev.get("before"),
           "eval_after": ev.get("after"), "eval_paired": paired, "eval_paired_long": paired_long,
           "eval_reference": reference, "entropy": h["entropy"],
           "segments_hist": by_number(h["segments_hist"])}
    if h.get("prefilter"):
        out["prefilter"] = h["prefilter"]
    if h.get("trained_length_hist"):
        lengths = [int(n) for n, c in h["trained_length_hist"].items() for _ in range(c)]
        stats = {k.split("/")[1]: v for k, v in length_stats(lengths).items()}  # mean, p50, p90, max
        out["trained_lengths"] = {**stats, "truncated_share": h["trained_truncated"] / len(lengths)}
    if h.get("staleness_hist"):
        out["staleness_hist"] = by_number(h["staleness_hist"])
    if "segments_truncated_hist" in h:
        trunc = h["segments_truncated_hist"]
        out["segments_eos_truncated"] = {k: {"eos": v - trunc.get(k, 0), "truncated": trunc.get(k, 0)}
                                         for k, v in out["segments_hist"].items()}
        eos = h.get("trained_eos_at_least", {})
        out["trained_eos_at_least"] = {str(n): eos.get(str(n), 0) for n in LONG_EOS_TOKENS}
    times = h.get("phase_s", {})
    out["phase_s"] = {p: round(times[p], 1) for p in PHASES if p in times}
    if wall_s is not None:
        out["wall_s"] = round(wall_s, 1)
    out["peak_rss_mib"] = peak_rss_mib(session)
    out["cpu_numerics"] = numerics_report(session.cfg.train.cpu_numerics)
    if checkpoint is not None:
        out["checkpoint_mib"] = sum(f.stat().st_size for f in Path(checkpoint).rglob("*") if f.is_file()) / 2**20
    return out


def peak_rss_mib(session: TrainSession) -> dict:
    """Peak resident memory of this process and, with `train.pipeline=overlap`, of the learner process (MiB)."""
    out = {"driver": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # KiB on Linux
    pid = getattr(session.learner, "pid", None)
    if pid:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    out["learner"] = int(line.split()[1]) / 1024
        except OSError:
            pass
    return out


def format_summary(s: dict) -> str:
    """`summarize`'s dict (or a stopped run's `{"stopped_at", "run_dir"}`) as the text `ulorl train` ends with."""
    if "stopped_at" in s:
        return f"stopped at step {s['stopped_at']}; resume with: {resume_command(s['run_dir'])}"
    lines = ["", "=== ulorl train: summary ===", f"steps: {s['steps']}   trained samples: {s['trained_samples']}   "
             f"dropped groups (dynamic sampling): {s['dropped_groups']}" +
             (f"   groups dropped for a failed reward: {s['reward_failed_groups']}" if s.get("reward_failed_groups")
              else "")]
    pf = s.get("prefilter")
    if pf:
        lines.append(f"prefilter before RL (data.prefilter): of {pf['problems']} distinct problems, "
                     f"{pf['dropped_easy']} too easy and {pf['dropped_hard']} too hard dropped; RL drew from "
                     f"{pf['kept_rows']} of {pf['rows']} training rows")
    b, a = s.get("eval_before") or {}, s.get("eval_after") or {}
    for key in [k for k in b if k.startswith(("avg@", "pass@"))] + ["response_length/mean", "truncation_rate"]:
        if key in b and key in a:
            lines.append(f"held-out {key:<22} before {b[key]:.4f}   after {a[key]:.4f}   ({a[key] - b[key]:+.4f})")
    p, pl = s.get("eval_paired"), s.get("eval_paired_long")
    if p:
        lines.append(f"paired over {p['num_problems']} problems: avg@k change {_paired(p)}")
    if pl:
        lines.append(f"  the {pl['num_problems']} of >= {pl['min_tokens']:,} solution tokens: avg@k change "
                     f"{_paired(pl)}")
    r = s.get("eval_reference")
    if r:
        lines.append(f"held-out P(worked solution), exact, {r['all']['num_problems']} problems: before "
                     f"{r['before']:.4f}   after {r['after']:.4f}; change {_paired(r['all'])}")
        if r.get("long"):
            lines.append(f"  the {r['long']['num_problems']} of >= {r['long']['min_tokens']:,} solution tokens: "
                         f"change {_paired(r['long'])}")
    ent = s["entropy"]
    if ent:
        idx = sorted({0, len(ent) // 4, len(ent) // 2, 3 * len(ent) // 4, len(ent) - 1})
        lines.append("entropy by step: " + "  ".join(f"{i + 1}:{ent[i]:.3f}" for i in idx))
    total = sum(s["segments_hist"].values()) or 1
    lines.append("trained samples by number of segments: " + "  ".join(
        f"{k}: {v} ({100 * v / total:.0f}%)" for k, v in s["segments_hist"].items()))
    if s.get("segments_eos_truncated"):
        lines.append("  of which EOS / truncated: " + "  ".join(
            f"{k}: {v['eos']}/{v['truncated']}" for k, v in s["segments_eos_truncated"].items()))
        lines.append("  EOS answers of " + ", ".join(f">= {int(n):,} tokens: {c}"
                                                     for n, c in s.get("trained_eos_at_least", {}).items()))
    t = s.get("trained_lengths")
    if t:
        lines.append(f"trained response length: mean {t['mean']:.0f}  p50 {t['p50']:.0f}  p90 {t['p90']:.0f}  "
                     f"max {t['max']:.0f}  truncated {100 * t['truncated_share']:.1f}%")
    if s.get("staleness_hist"):
        lines.append("trained samples by staleness (versions behind the updated policy): " + "  ".join(
            f"{k}: {v}" for k, v in s["staleness_hist"].items()))
    if s.get("phase_s"):
        lines.append("time: " + ", ".join(f"{PHASES.get(k, k)} {_clock(v)}" for k, v in s["phase_s"].items()) +
                     (f"; this process {_clock(s['wall_s'])}" if "wall_s" in s else ""))
    mem = s.get("peak_rss_mib") or {}
    if mem:
        extra = f"   checkpoint {s['checkpoint_mib']:.1f} MiB" if "checkpoint_mib" in s else ""
        lines.append("peak RSS: " + ", ".join(f"{k} {v:.0f} MiB" for k, v in mem.items()) + extra)
    if s.get("cpu_numerics"):
        lines.append(numerics_line(s["cpu_numerics"]))
    lines.append(f"run folder: {s['run_dir']}  (metrics.jsonl, samples.jsonl, checkpoints/, config.yaml)")
    return "\n".join(lines)


def _clock(seconds: float) -> str:
    """`75.4` -> `1:15`."""
    m, sec = divmod(round(seconds), 60)
    return f"{m}:{sec:02d}"


def _paired(p: dict) -> str:
    """A `paired_difference` result in points: change, standard error, z, problems better / worse."""
    return (f"{100 * p['delta']:+.1f} points, standard error {100 * p['se']:.1f}, z = {z_text(p['z'])}; "
            f"{p['better']} problems better, {p['worse']} worse")
