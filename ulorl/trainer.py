"""The UloRL training loop (Algorithm 1 + DAPO recipe), readable in one screen.

step: `collect_batch` (rollout rounds until the experience pool holds `train.train_groups`
whole groups that passed dynamic sampling; leftovers wait, FIFO) -> one gradient update
(`Learner.update`, the overlong keep mask read from the trajectories) -> the engine sees
the new weights -> metrics. No algorithm lives here: the step rule is
`ulorl.rollout.collect`, the update is the `Learner`, the state is `TrainSession`; this
module wires them and scores samples with the session's reward manager.
"""

from __future__ import annotations

import json
import resource
import signal
import time
from collections import Counter
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ulorl.checkpoint import atomic_write_text, read_latest
from ulorl.config import PipelineMode, RunConfig
from ulorl.evaluation.metrics import length_stats, paired_difference
from ulorl.recipe import open_session
from ulorl.reward import RewardError, apply_overlong_policy
from ulorl.rollout.collect import DropReason, RoundLimits, Rounds, collect_batch, fill_pool
from ulorl.rollout.segment import SampleError
from ulorl.export import EXPORT_DIR, export_checkpoint
from ulorl.session import TrainSession, say
from ulorl.stall import StallError, StallWatch  # noqa: F401  (StallError: the CLI's one-line user error)
from ulorl.trajectory import Trajectory


def train(cfg: RunConfig, run_dir, resume: str | None = None) -> dict:
    s = open_session(cfg, run_dir, resume)
    stop = _StopOnSignal()
    try:
        if "before" not in s.history["eval"] and s.eval_prompts:
            s.history["eval"]["before"] = evaluate_policy(s, "before")
        bar = tqdm(total=cfg.train.steps, initial=s.step, desc="ulorl train", disable=not cfg.logging.progress)
        while s.step < cfg.train.steps and not stop.requested:
            m = train_step(s)
            if cfg.train.eval_every and s.step % cfg.train.eval_every == 0 and s.eval_prompts:
                ev = evaluate_policy(s, f"step{s.step}")
                m.update({f"eval/{k}": v for k, v in ev.items()})
                if s.step == cfg.train.steps:  # the final evaluation is this one: not sampled twice
                    s.history["eval"]["after"] = ev
                    s.history["eval_correct"]["after"] = s.history["eval_correct"][f"step{s.step}"]
            s.loggers.log(m, s.step)
            bar.update(1)
            bar.set_postfix(reward=f"{m['critic/score/mean']:.2f}", ent=f"{m['actor/entropy']:.3f}",
                            unfinished=int(m["rollout/unfinished_pool"]), exp=int(m["rollout/experience_pool"]))
            if stop.requested or (cfg.checkpoint.every and s.step % cfg.checkpoint.every == 0):
                s.save()
        bar.close()
        if stop.requested:
            say(f"stopped by signal at step {s.step}; checkpoint saved in {s.ckpt_root}")
            summary = {"stopped_at": s.step, "run_dir": str(s.run_dir)}
        else:
            if s.eval_prompts and "after" not in s.history["eval"]:
                s.history["eval"]["after"] = evaluate_policy(s, "after")
            final = s.save()
            summary = summarize(s, final)
            if cfg.checkpoint.export:  # a plain HF folder (LoRA merged) of the final checkpoint: RUN/export
                summary["export_dir"] = str(export_checkpoint(final, s.run_dir / EXPORT_DIR))
        atomic_write_text(s.run_dir / "summary.json", json.dumps(summary, indent=1))  # while the folder is locked
        return summary
    except KeyboardInterrupt:  # a second signal: stop now, and say what is left
        last = read_latest(s.ckpt_root)[0]
        say(f"stopped at once by a second signal, {s.step} steps done; " +
            (f"the last committed checkpoint is {last}" if last else "no checkpoint was committed yet") +
            f"; resume with --resume auto --output-dir {s.run_dir}")
        raise
    finally:
        stop.restore()
        s.close()


def train_step(s: TrainSession) -> dict:
    """One step of Algorithm 1: collect a batch of whole groups, one update, the engine sees the new weights.

    `train.pipeline=overlap`: while the learner process computes the update, the rounds that fill the next step's
    batch run here with the weights of the update before (so the next step's `collect_batch` finds its batch
    ready). The schedule depends on the step number only, never on which side finishes first."""
    t0, tc = time.time(), s.cfg.train
    watch = StallWatch(s.step + 1, lambda ids: s.tokenizer.decode(ids, skip_special_tokens=True), say)
    rounds = Rounds(s.version, s.step, score=lambda finished: score(s, finished),
                    dynamic_sampling=s.cfg.algo.dynamic_sampling, watch=watch,
                    on_drop=lambda group, why: dropped(s, group, why),
                    limits=RoundLimits(tc.max_rounds_per_step, tc.max_stall_rounds or tc.max_rounds_per_step),
                    stalled=lambda n, why: watch.fail(s.run_dir, n, why, s.cfg.algo.dynamic_sampling))
    got = collect_batch(s.rollout, s.unfinished, s.experience, tc.train_groups, rounds)
    batch, acc = got.batch, got.counts
    keep = [t.loss_keep for t in batch]
    staleness = Counter(s.version - t.segments[0].version for t in batch)  # versions behind the updated policy
    tu = time.time()
    if tc.pipeline == PipelineMode.OVERLAP:
        s.learner.submit(batch, s.version, keep)
        ahead = fill_pool(s.rollout, s.unfinished, s.experience, tc.train_groups, rounds)
        tw = time.time()
        m = s.learner.result()
        m.update(overlap_metrics(ahead, m, wait_s=time.time() - tw, window_s=time.time() - tu))
        acc = Counter({**(acc + ahead), "max_staleness": max(acc["max_staleness"], ahead["max_staleness"])})
    else:
        m = s.learner.update(batch, s.version, loss_keep=keep)
    update_s = time.time() - tu
    skipped = bool(m["actor/skipped"])
    if skipped:  # weights and optimizer untouched; the step still ends, its samples are logged as skipped
        s.counters["bad_steps"] += 1
        s.counters["skipped_steps"] = s.counters.get("skipped_steps", 0) + 1
        say(f"step {s.step + 1}: non-finite loss or gradient norm, update skipped "
            f"({s.counters['bad_steps']} in a row, limit train.max_bad_steps={s.cfg.train.max_bad_steps})")
    else:
        s.counters["bad_steps"] = 0
        s.version += 1
        s.engine.sync_weights(s.model.state_dict())
    s.step += 1
    s.counters["trained_samples"] += 0 if skipped else len(batch)
    s.samples.write(batch, s.step, "skipped" if skipped else "trained", "non_finite" if skipped else None)
    if not skipped:
        record_trained(s.history, batch, staleness)
    metrics = step_metrics(s, batch, m, acc, update_s, time.time() - t0)
    if s.counters["bad_steps"] >= s.cfg.train.max_bad_steps:
        s.loggers.log(metrics, s.step)
        path = s.save()
        raise FloatingPointError(f"{s.counters['bad_steps']} consecutive non-finite updates (train.max_bad_steps): "
                                 f"stopping at step {s.step}. The weights and optimizer are those of the last good "
                                 f"update (step {s.step - s.counters['bad_steps']}); checkpoint: {path}")
    return metrics


def score(s: TrainSession, finished: list[Trajectory]) -> None:
    """Rewards for finished samples (rule/judge in worker processes), then the overlong policy: it sets each
    sample's reward and, once, its `loss_keep`."""
    texts = s.tokenizer.batch_decode([t.response_tokens for t in finished], skip_special_tokens=True)
    prompts = s.tokenizer.batch_decode([t.prompt_tokens for t in finished], skip_special_tokens=True)
    try:
        scored = s.reward.score_detailed(texts, [t.ground_truth for t in finished], [t.data_source for t in finished],
                                         extra_infos=[t.extra_info for t in finished], prompts=prompts)
    except RewardError:  # a reward function's own fault: its message names the function, sample and fix
        raise
    except Exception as e:
        raise SampleError(f"step {s.step + 1}: reward scoring", finished, e) from e
    rewards, keep = apply_overlong_policy(
        s.cfg.reward.overlong, torch.tensor(scored.rewards, dtype=torch.float32),
        torch.tensor([t.response_len for t in finished]), torch.tensor([t.truncated for t in finished]),
        s.cfg.rollout.max_response_len, s.cfg.reward.overlong_buffer)
    for t, r, k, why in zip(finished, rewards.tolist(), keep.tolist(), scored.uncomputed):
        t.reward, t.loss_keep, t.reward_failure = float(r), bool(k), why


def dropped(s: TrainSession, group: list[Trajectory], reason: str) -> None:
    """A group dropped (dynamic sampling, or a member without a computed reward): logged in samples.jsonl, counted."""
    s.samples.write(group, s.step + 1, "dropped", reason)
    key = "reward_failed_groups" if reason == DropReason.REWARD_FAILED.value else "dropped_groups"
    s.counters[key] = s.counters.get(key, 0) + 1


def overlap_metrics(ahead: Counter, m: dict, wait_s: float, window_s: float) -> dict:
    """How well the update was hidden behind the next step's rounds (`train.pipeline=overlap`).

    `ahead`: what those rounds counted; `m`: the update's metrics (`timing_s/update_compute`, measured in the
    learner process); `wait_s`: the driver waited this long for the update after its rounds; `window_s`: submit
    to result. Efficiency = the time both ran at once / the shorter of the two (1: fully hidden)."""
    busy, compute = ahead["gen_s"] + ahead["reward_s"], m.get("timing_s/update_compute", 0.0)
    hidden = max(0.0, busy + compute - window_s)
    return {"pipeline/wait_for_update_s": wait_s, "pipeline/ahead_rounds": float(ahead["rounds"]),
            "pipeline/overlap_efficiency": min(1.0, hidden / max(min(busy, compute), 1e-9))}


def step_metrics(s: TrainSession, batch: list[Trajectory], m: dict, acc: Counter, update_s: float,
                 step_s: float) -> dict:
    lengths = [t.response_len for t in batch]
    count_into(s.history["segments_hist"], Counter(len(t.segments) for t in batch))
    s.history["entropy"].append(round(m["actor/entropy"], 5))
    return {
        **m,
        "critic/score/mean": sum(t.reward for t in batch) / len(batch),
        "response_length/mean": sum(lengths) / len(lengths),
        "response_length/max": float(max(lengths)),
        "response_length/clip_ratio": sum(t.truncated for t in batch) / len(batch),
        "rollout/unfinished_pool": float(len(s.unfinished)),
        "rollout/experience_pool": float(s.experience.num_samples()),
        "rollout/new_prompts": float(acc["new_prompts"]),
        "rollout/rounds": float(acc["rounds"]),
        "rollout/segments_per_sample": sum(len(t.segments) for t in batch) / len(batch),
        "rollout/reprefill_tokens": float(acc["reprefill"]),
        "rollout/prefill_tokens": float(acc["prefill"]),
        "rollout/prefill_padded_tokens": float(acc["prefill_padded"]),
        "rollout/decoded_tokens": float(acc["decoded"]),
        "rollout/max_staleness": float(acc["max_staleness"]),
        "rollout/dropped_groups": float(acc["dropped_groups"]),
        "rollout/reward_failed_groups": float(acc["reward_failed_groups"]),
        "rollout/slot_utilisation": acc["decoded"] / max(acc["slots"], 1),
        "timing_s/gen": acc["gen_s"],
        "timing_s/reward": acc["reward_s"],
        "timing_s/update": update_s,
        "timing_s/step": step_s,
        "perf/throughput": acc["decoded"] / max(step_s, 1e-9),
        "train/step": float(s.step),
        "train/trained_samples": float(s.counters["trained_samples"]),
        **{k: float(v) for k, v in s.reward.metrics().items()},
    }


def evaluate_policy(s: TrainSession, label: str) -> dict:
    """Held-out accuracy with the configured evaluation protocol (same seed every time).

    The per-problem correct counts are kept in `history["eval_correct"][label]` for paired comparisons."""
    from ulorl.evaluation import evaluate

    res = evaluate(s.engine, s.tokenizer, s.eval_prompts, s.cfg.eval,
                   lambda rs, gts, dss: s.reward.score(rs, gts, dss))
    s.history.setdefault("eval_correct", {})[label] = [p["correct"] for p in res.per_problem]
    return dict(res.summary)


def record_trained(history: dict, batch: list[Trajectory], staleness: Counter) -> None:
    """What the summary reports about trained samples, kept in `history` (so it survives a resume): histograms
    of response length (exact lengths: at most L + 1 entries however long the run) and of staleness in
    versions, and the number truncated."""
    count_into(history.setdefault("trained_length_hist", {}), Counter(t.response_len for t in batch))
    history["trained_truncated"] = history.get("trained_truncated", 0) + sum(t.truncated for t in batch)
    count_into(history.setdefault("staleness_hist", {}), staleness)


def count_into(hist: dict[str, int], counts: Counter) -> None:
    """Add `counts` to a histogram kept in the (JSON) history, whose keys are strings."""
    for k, v in counts.items():
        hist[str(k)] = hist.get(str(k), 0) + v


def by_number(hist: dict[str, int]) -> dict[str, int]:
    """A history histogram ordered by its numeric keys."""
    return dict(sorted(hist.items(), key=lambda kv: int(kv[0])))


def summarize(s: TrainSession, checkpoint=None) -> dict:
    """The run's summary (also `summary.json`): held-out before/after with the paired comparison, trained
    samples' lengths, segments and staleness, peak memory and the last checkpoint's size."""
    ev, correct, h = s.history["eval"], s.history.get("eval_correct", {}), s.history
    paired = None
    if "before" in correct and "after" in correct and len(correct["before"]) > 1:
        paired = paired_difference(correct["before"], correct["after"], s.cfg.eval.k)
    out = {"run_dir": str(s.run_dir), "steps": s.step, "trained_samples": s.counters["trained_samples"],
           "dropped_groups": s.counters["dropped_groups"],
           "reward_failed_groups": s.counters.get("reward_failed_groups", 0), "eval_before": ev.get("before"),
           "eval_after": ev.get("after"), "eval_paired": paired, "entropy": h["entropy"],
           "segments_hist": by_number(h["segments_hist"])}
    if h.get("trained_length_hist"):
        lengths = [int(n) for n, c in h["trained_length_hist"].items() for _ in range(c)]
        stats = {k.split("/")[1]: v for k, v in length_stats(lengths).items()}  # mean, p50, p90, max
        out["trained_lengths"] = {**stats, "truncated_share": h["trained_truncated"] / len(lengths)}
    if h.get("staleness_hist"):
        out["staleness_hist"] = by_number(h["staleness_hist"])
    out["peak_rss_mib"] = peak_rss_mib(s)
    if checkpoint is not None:
        out["checkpoint_mib"] = sum(f.stat().st_size for f in Path(checkpoint).rglob("*") if f.is_file()) / 2**20
    return out


def peak_rss_mib(s: TrainSession) -> dict:
    """Peak resident memory of this process and, with `train.pipeline=overlap`, of the learner process (MiB)."""
    out = {"driver": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}  # KiB on Linux
    pid = getattr(s.learner, "pid", None)
    if pid:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    out["learner"] = int(line.split()[1]) / 1024
        except OSError:
            pass
    return out


class _StopOnSignal:
    """SIGTERM/SIGINT set a flag; the loop checkpoints at the step boundary and exits."""

    def __init__(self) -> None:
        self.requested = False
        self._old = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread
                pass

    def _handle(self, signum, frame) -> None:
        if self.requested:  # second signal: stop now
            raise KeyboardInterrupt
        self.requested = True
        say(f"signal {signum}: finishing the current step, then checkpointing")

    def restore(self) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)
