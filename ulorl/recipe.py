"""The steps of a run before its training loop, in order (`open_session`).

1. the config is checked against this machine (`check_runnable`), the run folder made and locked
   (`RunLock`: one process per folder; the session releases it when it closes);
2. the resume decision (`checkpoint.decide_resume`): its notes are printed, its error raised; a fresh
   start moves an earlier run's outputs aside (`set_aside_earlier_run`);
3. the policy to start from (`prepare_model`): the checkpoint's model when resuming (the warm start is
   never redone), else `model.path` or the SFT warm start (`model.warm_start=sft`), made once in the run
   folder and reused while complete;
4. the session (`TrainSession`): loads that policy, builds the parts of the run, restores the checkpoint.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import torch

from ulorl.checkpoint import decide_resume, make_run_dir
from ulorl.config import RunConfig, bound_by_machine, check_runnable, to_dict
from ulorl.run_lock import RunLock
from ulorl.session import TrainSession, say
from ulorl.sft import run_sft


def open_session(cfg: RunConfig, run_dir: str | Path, resume: str | None = None) -> TrainSession:
    """The session of a run in `run_dir`, fresh or resumed as `resume` says (None, `auto`, `never`, a PATH).
    `train.threads` > 0 sets torch's thread count for this process first (the warm start included)."""
    check_runnable(cfg)
    cfg, notes = bound_by_machine(cfg)
    for note in notes:
        say(note)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    run_dir = make_run_dir(run_dir)
    lock = RunLock.acquire(run_dir)
    try:
        session = _open_locked(cfg, run_dir, resume)
    except BaseException:
        lock.release()
        raise
    session.run_lock = lock
    return session


def _open_locked(cfg: RunConfig, run_dir: Path, resume: str | None) -> TrainSession:
    decision = decide_resume(run_dir, to_dict(cfg), resume)
    for note in decision.notes:
        say(note)
    if decision.error is not None:
        raise decision.error
    if decision.checkpoint is None:
        set_aside_earlier_run(run_dir)
        return TrainSession(cfg, run_dir, prepare_model(cfg, run_dir))
    return TrainSession(cfg, run_dir, str(decision.checkpoint["model_dir"]), decision.checkpoint)


def prepare_model(cfg: RunConfig, run_dir: Path) -> str:
    """Path of the policy a fresh run starts RL from: `model.path`, or the SFT warm start (made once, atomically)."""
    if cfg.model.warm_start == "none":
        return cfg.model.path
    done = run_dir / "warm_start" / "model"
    for stale in run_dir.glob("warm_start.tmp-*"):  # a warm start killed half-way: never used, redone
        say(f"removing {stale}: an interrupted SFT warm start")
        shutil.rmtree(stale, ignore_errors=True)
    if (done / "config.json").exists() and (done / "model.safetensors").exists():  # made by an atomic rename
        say(f"reusing the SFT warm start in {done}")
        return str(done)
    tmp = run_dir / f"warm_start.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    say(f"SFT warm start ({cfg.sft.steps} steps) -> {run_dir / 'warm_start'}")
    run_sft(cfg.model, cfg.sft, tmp, progress=cfg.logging.progress)
    shutil.rmtree(run_dir / "warm_start", ignore_errors=True)
    os.replace(tmp, run_dir / "warm_start")
    return str(done)


# what a run writes into its folder; a fresh start moves an earlier run's copies aside (never truncates them).
# warm_start/ stays: the SFT warm start is reused when its model is complete
RUN_OUTPUTS = ("checkpoints", "samples.jsonl", "metrics.jsonl", "metrics.jsonl.bak", "history.json",
               "summary.json", "config.yaml", "tensorboard", "export")


def set_aside_earlier_run(run_dir: Path) -> Path | None:
    """Move an earlier run's outputs into `run_dir/earlier-<time>/`; returns that folder (None: nothing there)."""
    present = [run_dir / n for n in RUN_OUTPUTS if (run_dir / n).exists()]
    if not present:
        return None
    aside = run_dir / f"earlier-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while aside.exists():
        aside, n = run_dir / f"earlier-{time.strftime('%Y%m%d-%H%M%S')}-{n}", n + 1
    aside.mkdir(mode=0o700)
    for p in present:
        os.replace(p, aside / p.name)
    say(f"starting over: the earlier run's {', '.join(p.name for p in present)} moved to {aside}")
    return aside
