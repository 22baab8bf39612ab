"""Process helpers for tests: a forkserver for child processes, and watching processes die (Linux /proc)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

# What the tests' forkserver imports once, for every test that uses it: multiprocessing has one forkserver per
# process, and only the first test to start it in a worker sets its preload.
FORKSERVER_PRELOAD = ["tests.run.checkpoint.resume_helpers", "ulorl.cli", "ulorl.run.loop", "ulorl.run.session",
                      "ulorl.distributed.sharded_learner"]


def forkserver_context():
    """multiprocessing's forkserver context, preloaded with ulorl. Its children are forked from a clean interpreter
    that imported ulorl once. They start in well under a second, where a spawned one imports for seconds. They
    inherit none of the test process's threads or autograd state: torch refuses `backward` in a child forked
    after its parent started autograd's device threads, which some torch builds do for any earlier backward
    (torch 2.11's CUDA wheel after a backward under fake tensors, for one). `torch.multiprocessing.start_processes(
    ..., start_method="forkserver")` after this call uses the same server."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    return ctx


def running(pid: int) -> bool:
    """Neither gone nor a zombie that nobody has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
