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
        out = pool.map("ulorl_test_slow_item:item", [(sys.argv[1], i) for i in range(4)], chunk_size=1)
    print(json.dumps({"status": [o.status for o in out], "errors": [o.error for o in out], "seen": seen}))
""")
SLOW_ITEM = textwrap.dedent("""
    import os, time
    def item(folder, i):  # says it has started, then works until the test has sent both signals
        open(os.path.join(folder, f"started-{i}"), "w").close()
        while not os.path.exists(os.path.join(folder, "signals-sent")):
            time.sleep(0.01)
        return i
""")


def test_signals_to_the_process_group_do_not_reach_the_reward_workers(tmp_path):
    (tmp_path / "ulorl_test_slow_item.py").write_text(SLOW_ITEM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             env=env, start_new_session=True)  # its own process group, as a terminal's job is
    try:
        assert child.stdout.readline().strip() == "ready"
        while len(list(tmp_path.glob("started-*"))) < 2:  # both workers are inside an item (an event, not a delay)
            assert child.poll() is None, "the child ended early"
            time.sleep(0.01)
        os.killpg(child.pid, signal.SIGINT)  # what Ctrl-C does
        os.killpg(child.pid, signal.SIGTERM)  # what `kill -- -PGID` or a job scheduler does
        (tmp_path / "signals-sent").touch()
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
