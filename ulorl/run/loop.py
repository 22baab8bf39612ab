"""The UloRL training loop (Algorithm 1 + DAPO recipe), readable in one screen.

step: `collect_batch` (rollout rounds until the experience pool holds `train.train_groups`
whole groups that passed dynamic sampling; leftovers wait, FIFO) -> one gradient update
(`Learner.update`, the overlong keep mask read from the trajectories) -> the engine sees
the new weights -> metrics. No algorithm lives here: the step rule is `ulorl.rollout.collect`,
the update is the `Learner`, the state is `TrainSession`, the scoring is `RewardScorer`, the
metrics and summary are `ulorl.run.report`; this module wires them.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable

from tqdm.auto import tqdm

from ulorl.config import PipelineMode, RunConfig
from ulorl.logging.base import json_text
from ulorl.rollout.collect import (BatchStalled, Collected, CollectSettings, DropReason, DroppedGroup, RoundLimits,
                                   collect_batch, fill_pool)
from ulorl.run.checkpoint import atomic_write_text, read_latest, resume_command
from ulorl.run.console import say
from ulorl.run.export import EXPORT_DIR, export_checkpoint
from ulorl.run.held_out import reference_eval
from ulorl.run.report import overlap_metrics, record_trained, step_metrics, summarize
from ulorl.run.scoring import RewardScorer
from ulorl.run.session import TrainSession, add_phase_time, open_session
from ulorl.run.signals import StopOnSignal
from ulorl.run.stall import stall_error


PER_PROBLEM_EVAL = ("eval_correct", "eval_reference", "eval_reference_logprob")  # history keys: problem -> result


def train(cfg: RunConfig, run_dir, resume: str | None = None) -> dict:
    started = time.perf_counter()
    session = open_session(cfg, run_dir, resume)
    stop, bar = StopOnSignal(), None
    try:
        finished = check_resumed(session)
        if "before" not in session.history["eval"] and session.eval_prompts:
            session.history["eval"]["before"] = evaluate_policy(session, "before")
        bar = tqdm(total=cfg.train.steps, initial=session.step, desc="ulorl train", disable=not cfg.logging.progress)
        while session.step < cfg.train.steps and not stop.requested:
            metrics = train_step(session)
            step = session.step
            if cfg.train.eval_every and step % cfg.train.eval_every == 0 and session.eval_prompts:
                ev = evaluate_policy(session, f"step{step}")
                metrics.update({f"eval/{k}": v for k, v in ev.items()})
                if step == cfg.train.steps:  # the final evaluation is this one: not sampled twice
                    session.history["eval"]["after"] = ev
                    for key in PER_PROBLEM_EVAL:
                        if f"step{step}" in session.history.get(key, {}):
                            session.history[key]["after"] = session.history[key][f"step{step}"]
            session.loggers.log(metrics, step)
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['critic/score/mean']:.2f}", ent=f"{metrics['actor/entropy']:.3f}",
                            unfinished=int(metrics["rollout/unfinished_pool"]),
                            exp=int(metrics["rollout/experience_pool"]))
            if stop.requested or (cfg.checkpoint.every and step % cfg.checkpoint.every == 0):
                save(session)
        bar.close()
        if stop.requested:
            say(f"stopped by signal at step {session.step}; checkpoint saved in {session.ckpt_root}")
            summary = {"stopped_at": session.step, "run_dir": str(session.run_dir)}
        else:
            if session.eval_prompts and "after" not in session.history["eval"]:
                session.history["eval"]["after"] = evaluate_policy(session, "after")
            final = save(session)
            summary = summarize(session, final, wall_s=time.perf_counter() - started)
            if cfg.checkpoint.export:  # a plain HF folder (LoRA merged) of the final checkpoint: RUN/export
                exported = session.run_dir / EXPORT_DIR
                summary["export_dir"] = str(exported if finished and exported.is_dir() else
                                            export_checkpoint(final, exported))
        atomic_write_text(session.run_dir / "summary.json", json_text(summary, indent=1))  # the folder is locked
        return summary
    except KeyboardInterrupt:  # a second signal: stop now, and say what is left
        last = read_latest(session.ckpt_root)[0]
        say(f"stopped at once by a second signal, {session.step} steps done; " +
            (f"the last committed checkpoint is {last}" if last else "no checkpoint was committed yet") +
            f"; resume with: {resume_command(session.run_dir)}")
        raise
    finally:
        if bar is not None:  # ends the bar's line, so an error printed after it starts a line of its own
            bar.close()
        stop.restore()
        session.close()


def check_resumed(session: TrainSession) -> bool:
    """Whether the resumed run had already done all of its work: every step, the final evaluation and the summary
    (written after the final checkpoint and its export); it says so. A finished run resumed with a higher
    `train.steps` forgets its final evaluation, which is taken again after the new last step, and says so."""
    h, steps = session.history, session.cfg.train.steps
    if session.step < steps:
        if "after" in h["eval"]:
            say(f"train.steps raised to {steps}: the final held-out evaluation (of step {session.step}) is taken "
                f"again after step {steps}")
            for key in ("eval", *PER_PROBLEM_EVAL):
                h.get(key, {}).pop("after", None)
        return False
    finished = ("after" in h["eval"] or not session.eval_prompts) and "steps" in read_summary(session.run_dir)
    if finished:
        say(f"this run already finished {session.step} steps (train.steps={steps}): nothing to train; its "
            f"summary follows (to train further, resume with a higher train.steps)")
    return finished


def read_summary(run_dir) -> dict:
    """The run's `summary.json`; {} when there is none or it cannot be read (a run stopped by a signal wrote
    `{"stopped_at": step}` there instead of a summary)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def train_step(session: TrainSession) -> dict:
    """One step of Algorithm 1: collect a batch of whole groups, one update, the engine sees the new weights.

    `train.pipeline=overlap`: while the learner process computes the update, the rounds that fill the next step's
    batch run here with the weights of the update before (so the next step's `collect_batch` finds its batch
    ready). The schedule depends on the step number only, never on which side finishes first."""
    started, cfg = time.time(), session.cfg
    limits = RoundLimits(cfg.train.max_rounds_per_step, cfg.train.max_stall_rounds or cfg.train.max_rounds_per_step)
    settings = CollectSettings(session.version, session.step,
                               RewardScorer(session.reward, session.tokenizer, cfg, step=session.step + 1),
                               dynamic_sampling=cfg.algo.dynamic_sampling, limits=limits)
    collected = run_rounds(session, collect_batch, settings)
    batch, counts = collected.batch, collected.counts
    keep = [t.loss_keep for t in batch]
    staleness = Counter(session.version - t.segments[0].version for t in batch)  # versions behind the update
    update_started = time.time()
    if cfg.train.pipeline == PipelineMode.OVERLAP:
        session.learner.submit(batch, session.version, keep)
        ahead = run_rounds(session, fill_pool, settings).counts
        wait_started = time.time()
        update = session.learner.result()
        update.update(overlap_metrics(ahead, update, wait_s=time.time() - wait_started,
                                      window_s=time.time() - update_started))
        counts = Counter({**(counts + ahead), "max_staleness": max(counts["max_staleness"], ahead["max_staleness"])})
    else:
        update = session.learner.update(batch, session.version, loss_keep=keep)
    update_s = time.time() - update_started
    skipped = bool(update["actor/skipped"])
    counters = session.counters
    if skipped:  # weights and optimizer untouched; the step still ends, its samples are logged as skipped
        counters["bad_steps"] += 1
        counters["skipped_steps"] = counters.get("skipped_steps", 0) + 1
        say(f"step {session.step + 1}: non-finite loss or gradient norm, update skipped "
            f"({counters['bad_steps']} in a row, limit train.max_bad_steps={cfg.train.max_bad_steps})")
    else:
        counters["bad_steps"] = 0
        session.version += 1
        session.engine.sync_weights(session.model.state_dict())
    session.step += 1
    counters["trained_samples"] += 0 if skipped else len(batch)
    session.samples.write(batch, session.step, "skipped" if skipped else "trained", "non_finite" if skipped else None)
    if not skipped:
        record_trained(session.history, batch, staleness)
    metrics = step_metrics(session, batch, update, counts, update_s, time.time() - started)
    add_phase_time(session.history, "rl_steps", metrics["timing_s/step"])
    if counters["bad_steps"] >= cfg.train.max_bad_steps:
        session.loggers.log(metrics, session.step)
        path = session.save()
        raise FloatingPointError(f"{counters['bad_steps']} consecutive non-finite updates (train.max_bad_steps): "
                                 f"stopping at step {session.step}. The weights and optimizer are those of the last "
                                 f"good update (step {session.step - counters['bad_steps']}); checkpoint: {path}")
    return metrics


def run_rounds(session: TrainSession, rule: Callable[..., Collected], settings: CollectSettings) -> Collected:
    """`rule` (`collect_batch` or `fill_pool`) over the session's rollout and pools. The groups it dropped go to
    samples.jsonl; a step that stalls ends with a `StallError` and `stall_report.json`."""
    try:
        collected = rule(session.rollout, session.unfinished, session.experience, session.cfg.train.train_groups,
                         settings)
    except BatchStalled as e:
        log_dropped(session, e.dropped)
        raise stall_error(e, session.run_dir, lambda ids: session.tokenizer.decode(ids, skip_special_tokens=True),
                          session.cfg.algo.dynamic_sampling) from e
    log_dropped(session, collected.dropped)
    return collected


def log_dropped(session: TrainSession, dropped: list[DroppedGroup]) -> None:
    """Dropped groups (dynamic sampling, or a member without a computed reward): logged in samples.jsonl, counted."""
    for d in dropped:
        session.samples.write(d.group, session.step + 1, "dropped", d.reason.value)
        key = "reward_failed_groups" if d.reason is DropReason.REWARD_FAILED else "dropped_groups"
        session.counters[key] = session.counters.get(key, 0) + 1


def evaluate_policy(session: TrainSession, label: str) -> dict:
    """Held-out accuracy with the configured evaluation protocol (same seed every time).

    The per-problem correct counts are kept in `history["eval_correct"][label]` for paired comparisons; with
    `eval.reference`, the exact P(worked solution) of each problem too (`ulorl.run.held_out`)."""
    from ulorl.evaluation import evaluate, reward_failure_note

    started = time.perf_counter()
    res = evaluate(session.engine, session.tokenizer, session.eval_prompts, session.cfg.eval,
                   session.reward.score_detailed, name=f"held-out {label}", progress=session.cfg.logging.progress)
    if note := reward_failure_note(res):
        say(note)
    session.history.setdefault("eval_correct", {})[label] = [p["correct"] for p in res.per_problem]
    summary = dict(res.summary)
    if session.cfg.eval.reference:
        summary.update(reference_eval(session, label))
    add_phase_time(session.history, f"eval_{label}" if label in ("before", "after") else "eval_steps",
                   time.perf_counter() - started)
    return summary


def save(session: TrainSession):
    """`session.save()`, its time counted in the run's phase times."""
    started = time.perf_counter()
    path = session.save()
    add_phase_time(session.history, "checkpoints", time.perf_counter() - started)
    return path
