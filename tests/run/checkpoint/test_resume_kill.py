"""SIGKILL at random moments, then `--resume auto`, over and over: nothing lost, nothing trained twice.

Each trial starts `ulorl train --resume auto ...` in a fresh process and kills it with SIGKILL:
  timed       after a random delay (seeded) counted from the moment the run has loaded its data, so the
              kill lands in a rollout, an update or a checkpoint write; cut short as soon as samples.jsonl
              records the second step of this process, so the kill always comes while work remains;
  after_step  as soon as samples.jsonl records a chosen step: the update is done and logged, the
              checkpoint of that step is not (yet) committed;
  save:PHASE  inside `save_checkpoint` (test hook ULORL_TEST_CRASH_IN_SAVE=PHASE@STEP, `os._exit(137)`):
              files written without manifest / complete but not renamed / renamed but `latest` not
              updated / committed but not pruned.
Nothing depends on the machine's speed: every trial advances the run by at most 2 steps, so `N` leaves
work for every kill (checked before each trial), and each wait is for an event in the child's output.
After every kill the committed checkpoint (`latest`) verifies, is the newest the run could have
committed, and the next process says it resumes from exactly it. Finally the run completes and is
compared with an uninterrupted reference run: same trained samples (no duplicate, no loss), same
metrics, bit-identical weights.

Processes: forked from a multiprocessing *forkserver* that has imported ulorl once, and run
`ulorl.cli.main(argv)`, i.e. `python -m ulorl.cli train ...` without paying the import (~10 s on a
small machine) 13 times. SIGKILL hits the whole training process as it would in production.
"""

from __future__ import annotations

import json
from multiprocessing import forkserver
import os
import random
import re
import signal
import time
from pathlib import Path

from tests.procs import forkserver_context
from tests.run.checkpoint import resume_helpers as R
import torch

from ulorl.run.checkpoint import CRASH_HOOK_ENV, verify_checkpoint
from ulorl.run.loop import train

N = 24  # 12 trials advance the run by at most 2 steps each (see the module docstring)
TRIALS = ["timed", "save:files", "after_step", "timed", "save:manifest", "after_step", "timed", "save:rename",
          "timed", "save:pointer", "after_step", "timed"]
ENV = {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


class Child:
    def __init__(self, ctx, argv: list[str], log: Path, env: dict | None = None) -> None:
        self.log = log
        self.proc = ctx.Process(target=R.cli_child, args=(argv, {**ENV, **(env or {})}, str(log)))
        self.proc.start()

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, pattern: str, timeout: float = 300.0) -> bool:
        end = time.time() + timeout
        while time.time() < end:
            if re.search(pattern, self.text(), re.M) or not self.proc.is_alive():
                return bool(re.search(pattern, self.text(), re.M))
            time.sleep(0.01)
        raise TimeoutError(f"{pattern!r} not in {self.log}")

    def kill(self) -> None:
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(60)

    def join(self, timeout: float = 900.0) -> int:  # a guard against a hang, far above any run here
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            self.kill()
            raise TimeoutError(f"child still running after {timeout}s; log:\n{self.text()}")
        return self.proc.exitcode


def committed(run: Path) -> int | None:
    ckpt = R.latest(run)
    if ckpt is None:
        return None
    verify_checkpoint(ckpt)  # the committed checkpoint is always complete
    return int(ckpt.name.split("_")[1])


def last_logged_step(run: Path) -> int:
    steps = [0]
    for path, key in ((run / "metrics.jsonl", "step"), (run / "samples.jsonl", "step")):
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    steps.append(json.loads(line)[key])
                except ValueError:
                    pass  # a line torn by the kill
    return max(steps)


def samples_logged(run: Path, step: int) -> bool:
    path = run / "samples.jsonl"
    return path.exists() and f'"step": {step},' in path.read_text()


def wait_samples_step(child: Child, run: Path, step: int, timeout: float = 300.0) -> None:
    """Until samples.jsonl records `step` (the child's update of that step is done and logged)."""
    end = time.time() + timeout
    while child.proc.is_alive() and not samples_logged(run, step):
        if time.time() > end:
            raise TimeoutError(f"step {step} not logged in {run}; log:\n{child.text()}")
        time.sleep(0.002)


def sleep_unless_logged(child: Child, run: Path, delay: float, step: int) -> None:
    """Wait `delay` seconds, or less: until samples.jsonl records `step` (then work still remains)."""
    end = time.time() + delay
    while time.time() < end and child.proc.is_alive() and not samples_logged(run, step):
        time.sleep(0.002)


def test_sigkill_at_random_moments_then_resume_loses_and_repeats_nothing(eos_model, tmp_path):
    _kill_and_resume(eos_model, tmp_path, TRIALS, f"train.steps={N}", "train.lr=1e-5")


def test_sigkill_in_overlap_mode_loses_and_repeats_nothing(eos_model, tmp_path):
    # the learner runs in its own process and the next step's rounds during the update; a kill lands in either
    _kill_and_resume(eos_model, tmp_path, ["timed", "after_step", "save:rename", "timed"], "train.steps=8",
                     "train.lr=1e-5", "train.pipeline=overlap")


def _kill_and_resume(eos_model, tmp_path: Path, trials: list[str], *extra: str) -> None:
    ctx = forkserver_context()
    forkserver.ensure_running()  # imports ulorl in the background while the reference runs here
    n = int(next(e for e in extra if e.startswith("train.steps=")).split("=")[1])
    ref = tmp_path / "reference"
    t0 = time.time()
    assert torch.get_num_threads() == 1  # as in the children (conftest): same reduction order, same bits
    assert train(R.config(eos_model, *extra), ref)["steps"] == n
    print(f"\nreference run: {time.time() - t0:.1f}s")

    run = tmp_path / "run"
    resume_argv = ["train", "--output-dir", str(run), "--resume", "auto", *R.overrides(eos_model, *extra)]
    rng = random.Random(20240607)
    report = []
    for i, trial in enumerate(trials):
        before = committed(run)
        assert (before or 0) + 2 < n, f"trial {i}: step {before} leaves too little work for a kill; raise N"
        env = {}
        if trial.startswith("save:"):
            target = (before or 0) + 1
            env[CRASH_HOOK_ENV] = f"{trial[5:]}@{target}"
        t0 = time.time()
        child = Child(ctx, resume_argv, tmp_path / f"trial{i}.log", env)
        expect = "no complete checkpoint" if before is None else f"resuming from .*step_{before:06d} "
        # the whole line (up to its newline): the log is read while the child writes it, so a line may be half there
        assert child.wait_for(r"(resuming from|no complete checkpoint)[^\n]*\n"), child.text()
        assert re.search(expect, child.text()), f"trial {i}: expected {expect!r}\n{child.text()}"
        if trial == "timed":  # counted from the end of model loading: lands in a rollout, update or save
            child.wait_for(r"train data:")
            sleep_unless_logged(child, run, rng.uniform(0.0, 0.8), (before or 0) + 2)
            child.kill()
        elif trial == "after_step":
            wait_samples_step(child, run, (before or 0) + rng.randint(1, 2))
            child.kill()
        else:
            assert child.join() == 137, child.text()
        assert child.proc.exitcode in (-signal.SIGKILL, 137), f"trial {i} ended by itself:\n{child.text()}"
        now, logged = committed(run), last_logged_step(run)
        leftovers = sorted(p.name for p in (run / "checkpoints").glob("*.*-*"))
        report.append((trial, before, now, logged, leftovers, round(time.time() - t0, 1)))
        # the committed checkpoint is the newest one the run could have committed when it died
        if trial in ("save:files", "save:manifest", "save:rename"):
            assert now == before and logged == target, report[-1]
        elif trial == "save:pointer":
            assert now == target == logged, report[-1]
        else:
            assert (now or 0) in (logged, logged - 1) and (now or 0) >= (before or 0), report[-1]
    print("\n".join(f"{t:14s} committed {b} -> {n}, logged up to {lg}, leftovers {lo} ({s}s)"
                    for t, b, n, lg, lo, s in report))

    last = committed(run)
    t0 = time.time()
    final = Child(ctx, resume_argv, tmp_path / "final.log")
    assert final.join() == 0, final.text()
    print(f"final run from step {last}: {time.time() - t0:.1f}s")
    assert re.search(f"resuming from .*step_{last:06d} ", final.text()), final.text()

    # the interrupted run and the reference trained the same samples, once each, at the same steps
    trained = R.samples(run)
    ids = [r["sample_id"] for r in trained]
    assert len(ids) == len(set(ids)), "a sample was trained twice"
    assert set(ids) == {r["sample_id"] for r in R.samples(ref)}, "samples lost or added"
    assert trained == R.samples(ref)
    assert R.metrics(run) == R.metrics(ref)
    R.assert_same_weights(R.weights(R.latest(run)), R.weights(R.latest(ref)))
    assert R.pools(R.latest(run)) == R.pools(R.latest(ref))
    assert not list((run / "checkpoints").glob("*.*-*")), "leftovers of interrupted saves were not cleaned"
