"""Issue 25, case 1: two runs on one `-o` folder. The second stops at once, naming the folder and the holder.

Before, a second `ulorl train --resume auto` on a live run's folder found no complete checkpoint yet,
"started from the beginning" and moved the live run's files into `earlier-<time>/`. The holder here is a
child process that takes the lock exactly as `ulorl train` does and then waits on its stdin, so the test
controls when it ends (no timing): the lock holds while it lives and is gone once it is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from ulorl.cli import main as cli
from ulorl.run.lock import LOCK_FILE, RunFolderBusy, RunLock

QUICK = ["model.warm_start=none", "data.eval=null", "logging.progress=false", "logging.loggers=[jsonl]"]
HOLDER = textwrap.dedent("""
    import sys
    from ulorl.run.lock import RunLock
    lock = RunLock.acquire(sys.argv[1])
    print("locked", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)
""")


@pytest.fixture
def holder(tmp_path):
    """A live process holding the lock of `tmp_path / "run"` (its files: a run's outputs)."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("metrics.jsonl", "samples.jsonl", "config.yaml"):
        (run / name).write_text("live\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout.readline().strip() == "locked"
    yield run, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_second_train_on_a_live_folder_stops_at_once_and_moves_nothing(holder, capsys):
    run, proc = holder
    rc = cli(["train", "-o", str(run), "--resume", "auto", *QUICK, "train.steps=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert str(run) in err[0] and f"process {proc.pid}" in err[0] and "another --output-dir" in err[0]
    # the live run's files are where they were: nothing was set aside, nothing truncated
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE, "config.yaml", "metrics.jsonl", "samples.jsonl"]
    assert all((run / n).read_text() == "live\n" for n in ("metrics.jsonl", "samples.jsonl", "config.yaml"))


def test_sft_on_a_live_folder_stops_too(holder, capsys):
    run, proc = holder
    assert cli(["sft", "-o", str(run), "sft.steps=1"]) == 2
    assert f"process {proc.pid}" in capsys.readouterr().err


def test_the_lock_dies_with_its_process(holder):
    run, proc = holder
    with pytest.raises(RunFolderBusy):
        RunLock.acquire(run)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with RunLock.acquire(run) as lock:  # no stale lock after SIGKILL: the kernel dropped the flock
        assert lock.held and (run / LOCK_FILE).read_text().strip() == str(os.getpid())
        with pytest.raises(RunFolderBusy, match=f"process {os.getpid()}"):  # a second open file in one process
            RunLock.acquire(run)
    assert (run / LOCK_FILE).read_text() == ""  # released: no pid left to name


def test_a_finished_run_releases_its_folder(tmp_path, tiny_model_dir):
    from ulorl.config import load_run_config
    from ulorl.run.loop import train

    cfg = load_run_config(None, [*QUICK, f"model.path={tiny_model_dir}", "rollout.max_response_len=8",
                                 "rollout.num_segments=2", "rollout.group_size=2", "rollout.decode_batch=4",
                                 "train.train_groups=1", "algo.dynamic_sampling=false", "reward.fn=exact",
                                 "train.steps=1", "checkpoint.every=0"])
    train(cfg, tmp_path / "run")
    RunLock.acquire(tmp_path / "run").release()  # free again once train() returned
