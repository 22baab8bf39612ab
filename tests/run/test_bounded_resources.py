"""Issue 25, case 3: resources bounded by the machine, and no process of a run outlives it.

- `train.threads=1000000` crashed torch (a RuntimeError, then a segfault) and `reward.num_workers=100000`
  forked hundreds of processes; both are now capped by the CPUs this process may use, with a note.
- A reward that forks a child which calls `setsid` (leaving the worker's process group and session) left
  grandchildren alive after `ulorl train` exited, holding its stdout: `ulorl train | tee log` waited until
  they were killed by hand. Here `ulorl train` runs with its stdout a pipe, as under `tee`; reading the pipe
  to its end returns only once every process holding it is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ulorl.config import WORKERS_PER_CPU, bound_by_machine, load_run_config

from tests.procs import running

ESCAPING_REWARD = textwrap.dedent("""
    import os, time
    def score(data_source, solution_str, ground_truth, extra_info=None):
        pid = os.fork()
        if pid == 0:  # a child that leaves the worker's process group and session, then daemonises
            os.setsid()
            if os.fork() == 0:
                with open(os.path.join(os.environ["ULORL_TEST_PID_DIR"], str(os.getpid())), "w"):
                    pass
                time.sleep(1000)  # holds the inherited stdout all the while
            os._exit(0)
        os.waitpid(pid, 0)
        if os.fork() == 0:  # and one that stays in the worker's group, sleeping too
            with open(os.path.join(os.environ["ULORL_TEST_PID_DIR"], str(os.getpid())), "w"):
                pass
            time.sleep(1000)
        return float(len(solution_str) % 2)
""")


def test_threads_and_reward_workers_are_capped_by_the_cpus(monkeypatch):
    import ulorl.config as config

    monkeypatch.setattr(config, "usable_cpus", lambda: 2)
    cfg = load_run_config(None, ["train.threads=1000000", "reward.num_workers=100000"])
    bounded, notes = bound_by_machine(cfg)
    assert bounded.train.threads == 2 and bounded.reward.num_workers == 2 * WORKERS_PER_CPU == 8
    assert notes == ["train.threads=1000000 is more than the 2 CPU(s) this process may use; using 2",
                     "reward.num_workers=100000 is more than 4 per CPU (2 usable); using 8"]
    within, notes = bound_by_machine(load_run_config(None, ["train.threads=2", "reward.num_workers=8"]))
    assert (within.train.threads, within.reward.num_workers, notes) == (2, 8, [])


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="Linux: process subreapers and /proc")
def test_no_reward_process_outlives_train_under_a_pipe(tmp_path, tiny_model_dir):
    (tmp_path / "escaping_reward.py").write_text(ESCAPING_REWARD)
    pids = tmp_path / "pids"
    pids.mkdir()
    argv = [sys.executable, "-m", "ulorl.cli", "train", "-o", str(tmp_path / "run"), "model.warm_start=none",
            f"model.path={tiny_model_dir}", "data.eval=null", "data.train_size=20", "logging.progress=false",
            "logging.loggers=[jsonl]", "rollout.max_response_len=8", "rollout.num_segments=2",
            "rollout.group_size=2", "rollout.decode_batch=4", "train.train_groups=1", "train.steps=2",
            "algo.dynamic_sampling=false", "checkpoint.every=0", f"reward.fn={tmp_path / 'escaping_reward.py'}:score",
            "reward.num_workers=100000", "train.threads=1000000"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "ULORL_TEST_PID_DIR": str(pids)}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        out, _ = proc.communicate(timeout=900)  # EOF: every holder of the pipe is gone (not a speed bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        left = [int(p.name) for p in pids.iterdir() if running(int(p.name))]
        for pid in left:
            os.kill(pid, 9)
        raise AssertionError(f"the pipe stayed open after ulorl train: processes {left} still hold it")
    assert proc.returncode == 0, out
    started = [int(p.name) for p in pids.iterdir()]
    assert len(started) >= 4, out  # the reward ran (2 steps x 2 samples, 2 processes each)
    assert [pid for pid in started if running(pid)] == []
    assert "train.threads=1000000 is more than the" in out and "reward.num_workers=100000 is more than" in out
