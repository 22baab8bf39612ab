"""Issue 15, item 3: a reward that was not computed is never a 0 that gets trained.

Ctrl-C (SIGINT) or SIGTERM sent to the trainer's process group used to reach the reward workers: the
items they were scoring came back as errors, scored 0 and were trained. The workers now ignore both
(only the trainer decides), and a worker that dies mid-item from outside gets the item run again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from ulorl.reward.pool import ERROR, OK, WorkerPool

CHILD = textwrap.dedent("""
    import json, signal, sys
    from ulorl.reward.pool import WorkerPool
    seen = []
    for s in (signal.SIGINT, signal.SIGTERM):  # the trainer's own handler: a flag, the step goes on
        signal.signal(s, lambda signum, frame: seen.append(signum))
    with WorkerPool(num_workers=2, timeout_s=60) as pool:
        pool.wait_ready()
        print("ready", flush=True)
        out = pool.map("time:sleep", [(2.0,)] * 4, chunk_size=1)
    print(json.dumps({"status": [o.status for o in out], "errors": [o.error for o in out], "seen": seen}))
""")


def test_signals_to_the_process_group_do_not_reach_the_reward_workers():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)  # its own process group, as a terminal's job is
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.7)  # the four 2 s items are running in the workers
        os.killpg(child.pid, signal.SIGINT)  # what Ctrl-C does
        time.sleep(0.2)
        os.killpg(child.pid, signal.SIGTERM)  # what `kill -- -PGID` or a job scheduler does
        out, _ = child.communicate(timeout=900)
    finally:
        if child.poll() is None:
            child.kill()
    res = json.loads(out.strip().splitlines()[-1])
    assert res["seen"] == [signal.SIGINT, signal.SIGTERM]  # the trainer got both...
    assert res["status"] == [OK] * 4, res["errors"]  # ...and every reward was computed


CRASHER = textwrap.dedent("""
    import os
    from pathlib import Path

    def once(marker):  # dies the first time (like a worker hit by the OOM killer), then works
        if not Path(marker).exists():
            Path(marker).touch()
            os._exit(9)
        return 1.0

    def always():
        os._exit(9)
""")


def test_a_worker_death_runs_the_item_again_and_only_a_second_death_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "ulorl_test_crasher.py").write_text(CRASHER)
    monkeypatch.syspath_prepend(str(tmp_path))
    with WorkerPool(num_workers=1, timeout_s=30) as pool:
        (once,) = pool.map("ulorl_test_crasher:once", [(str(tmp_path / "died"),)])
        assert (once.status, once.value) == (OK, 1.0)  # was ERROR "worker died": a 0 that got trained
        (always,) = pool.map("ulorl_test_crasher:always", [()])
        assert always.status == ERROR and "died 2 times" in always.error
        assert pool.restarts == 3
