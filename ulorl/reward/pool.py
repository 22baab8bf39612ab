"""A pool of killable worker processes with a hard per-item deadline.

Why not ``concurrent.futures.ProcessPoolExecutor`` or ``multiprocessing.Pool``:
neither can kill one stuck task (a sympy evaluation of ``5^{5^{5^{5^5}}}``
that never returns, a user reward stuck in C code) and go on; the executor
breaks as a whole, ``Pool`` leaks the slot. Math-verify's own timeouts use
``signal.alarm``, which only works in the main thread and cannot interrupt C
code. So the parent enforces the deadline and kills.

Design:

- **Zygote.** One helper interpreter is started with ``subprocess.Popen``
  (fork + exec: safe from any thread and with CUDA initialised; unlike
  multiprocessing's spawn/forkserver it never re-runs the trainer's
  ``__main__``). It imports and warms up math-verify (or the user reward
  module), then does nothing but ``fork()`` workers on request. A worker is
  therefore ready in milliseconds with warm imports and caches, so replacing
  a killed worker costs almost nothing, and N workers cost one boot.
- **Channels.** Parent and worker talk over a socket pair wrapped in a
  ``multiprocessing.connection.Connection`` (pickled messages); the worker's
  end is handed to the zygote with ``SCM_RIGHTS`` before the fork.
- **Chunks in, results streamed out.** One message carries many items; the
  worker streams back one small message per item (one-way, no round trip).
  Item ``k`` of a chunk started no earlier than the arrival of result
  ``k - 1``, so the parent knows which item runs and for how long. When it
  runs past ``timeout_s`` the worker is killed (SIGKILL), item ``k`` alone is
  marked as timed out, the rest of the chunk goes back to the front of the
  queue and a fresh worker takes the slot. Deadlines are measured from the
  parent's receipt of the previous result, never earlier than the true start,
  so an item is never killed before it has had ``timeout_s``.
- **Deaths.** A worker that dies (segfault, ``os._exit`` in user code, out of
  memory, a signal from outside) closes its socket; its current item is run
  again on a fresh worker, and counts as an error only when it kills a second
  worker (then the item itself is the cause). A dead zygote is restarted.
- **Signals.** The zygote runs in its own session and ignores SIGINT and
  SIGTERM, and so do the workers it forks: Ctrl-C in a terminal or a signal to
  the trainer's process group never kills an item mid-way (that scored 0 and
  was trained). The trainer decides: it finishes the step or stops, and a
  step whose rewards were not all computed is never checkpointed.
- **No orphans.** The zygote is started from one long-lived thread per pool
  and asks Linux to signal it when that thread ends (``PR_SET_PDEATHSIG``:
  at ``close()`` or when the trainer dies); workers ask for SIGKILL relative
  to the zygote. Each worker leads its own process group, and a worker is
  killed with its group. Processes a reward function starts that leave the
  group (``setsid``, double forks) cannot hide either: the zygote is a child
  subreaper (``PR_SET_CHILD_SUBREAPER``), so every orphaned descendant becomes
  its child; it kills such orphans before each new worker, and kills all its
  descendants before it exits (at ``close()``, on EOF from the trainer, or on
  the parent-death signal). No process of a run outlives it, and none holds
  the run's stdout open after it (``ulorl train | tee log`` ends).

This file is the parent's side; what runs in the zygote and its workers is in
``zygote.py``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from multiprocessing.reduction import send_handle
from typing import Any

from ulorl.reward.zygote import BOOT

__all__ = ["Outcome", "WorkerPool"]

log = logging.getLogger(__name__)

OK, TIMEOUT, ERROR = "ok", "timeout", "error"
_MAX_START_FAILURES = 3
_MAX_DEATHS_PER_ITEM = 2  # the first death may come from outside (OOM killer, a stray signal): run it again
_FORK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Outcome:
    """Result of one item: ``status`` is ``"ok"``, ``"timeout"`` or ``"error"``."""

    status: str
    value: Any = None
    error: str | None = None


class _Worker:
    """Parent-side handle of one forked worker (a grandchild: killed by pid, reaped by the zygote)."""

    def __init__(self, conn: Connection, pid: int):
        self.conn = conn
        self.pid = pid
        self.ready = False
        self.dead = False  # its socket reached EOF
        self.task_id: int | None = None
        self.chunk: list[int] = []
        self.done = 0  # results received for the current chunk
        self.last_progress = 0.0

    @property
    def busy(self) -> bool:
        return self.task_id is not None

    def kill(self) -> None:
        if not self.dead:  # after EOF the pid may already belong to someone else
            try:
                os.killpg(self.pid, signal.SIGKILL)  # the worker and what it started in its group
            except ProcessLookupError:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.dead = True
        try:
            self.conn.close()
        except OSError:
            pass


class _Zygote:
    """Parent-side handle of the warmed-up process that forks workers."""

    def __init__(self, cfg: dict, startup_timeout_s: float):
        parent_sock, child_sock = socket.socketpair()
        try:
            child_fd = child_sock.fileno()
            self.proc = subprocess.Popen(
                [sys.executable, "-c", BOOT, str(child_fd), json.dumps(cfg)],
                pass_fds=(child_fd,),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C and `kill -- -PGID` reach the trainer only (see "Signals")
            )
        finally:
            child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.startup_timeout_s = startup_timeout_s
        self.started_at = time.monotonic()
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self) -> None:
        """Block until the zygote has warmed up; ``RuntimeError`` if it fails to.

        A "ready" already sent is read before the deadline is looked at: the first fork may come long
        after start-up (the numeric fast path can settle every item of a run's first minutes)."""
        while not self.ready:
            left = self.started_at + self.startup_timeout_s - time.monotonic()
            if self.conn.poll(0 if left <= 0 else min(left, 1.0)):
                try:
                    msg = self.conn.recv()
                except (EOFError, OSError):
                    raise RuntimeError(
                        f"reward worker zygote died while starting (exit code {self.proc.wait()})"
                    ) from None
                if msg[0] == "init_error":
                    raise RuntimeError(f"reward worker zygote failed to start:\n{msg[1]}")
                self.ready = msg[0] == "ready"
            elif self.proc.poll() is not None:
                raise RuntimeError(f"reward worker zygote exited with code {self.proc.returncode}")
            elif left <= 0:
                raise RuntimeError(f"reward worker zygote not ready after {self.startup_timeout_s}s "
                                   "(reward.startup_timeout_s)")

    def fork(self) -> _Worker:
        """A new worker forked from the zygote (milliseconds once the zygote is ready)."""
        self.wait_ready()
        parent_sock, child_sock = socket.socketpair()
        try:
            self.conn.send("fork")
            send_handle(self.conn, child_sock.fileno(), self.proc.pid)
        except BaseException:
            parent_sock.close()
            raise
        finally:
            child_sock.close()
        if not self.conn.poll(_FORK_TIMEOUT_S):
            parent_sock.close()
            raise OSError("reward worker zygote did not answer a fork request")
        kind, pid = self.conn.recv()
        if kind != "forked":
            parent_sock.close()
            raise OSError(f"unexpected zygote message {kind!r}")
        return _Worker(Connection(parent_sock.detach()), pid)

    def close(self) -> None:
        try:
            self.conn.send(None)
            self.proc.wait(timeout=15.0)  # it kills its descendants first (`zygote._kill_descendants`, at most 10 s)
        except Exception:  # noqa: BLE001 - already gone or stuck: kill below
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        try:
            self.conn.close()
        except OSError:
            pass


def _shutdown(state: dict[str, Any], spawner: ThreadPoolExecutor) -> None:
    for w in state["workers"]:
        try:
            w.conn.send(None)
        except (OSError, EOFError, ValueError):
            pass
        w.kill()
    state["workers"].clear()
    boot: Future = state["boot"]
    if boot.done() and boot.exception() is None:
        boot.result().close()
    else:  # still booting: the zygote dies with the spawner thread (PR_SET_PDEATHSIG)
        boot.add_done_callback(lambda f: f.exception() is None and f.result().close())
    spawner.shutdown(wait=False)


class WorkerPool:
    """Killable process pool running ``fn(*args)`` items with a hard per-item deadline.

    Args:
        num_workers: number of worker processes (>= 1).
        timeout_s: hard deadline per item, in seconds (> 0).
        warmup: ``("module:function", args)`` calls made once, in the zygote,
            before any worker exists (imports, caches); their time is on no deadline.
        memory_mb: optional address-space limit per worker (``RLIMIT_AS``).
        startup_timeout_s: how long the zygote may take to boot and warm up.

    The zygote boots in the background at construction; the first ``map`` (or
    ``wait_ready``) waits for it. ``map`` may be called from any thread; calls
    are serialised by a lock.
    """

    def __init__(
        self,
        num_workers: int = 2,
        timeout_s: float = 5.0,
        *,
        warmup: Sequence[tuple[str, tuple]] = (),
        memory_mb: int | None = None,
        startup_timeout_s: float = 120.0,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = startup_timeout_s
        self._cfg = {
            "sys_path": list(sys.path),
            "memory_mb": memory_mb,
            "warmup": [[ref, list(args)] for ref, args in warmup],
            "ppid": os.getpid(),
        }
        self._lock = threading.Lock()
        self._task_seq = 0
        self._start_failures = 0
        self._closed = False
        self.restarts = 0
        # the zygote is started from this one thread (see PR_SET_PDEATHSIG above)
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="ulorl-reward-spawner")
        self._state: dict[str, Any] = {"workers": [], "boot": self._spawner.submit(self._new_zygote)}
        self._finalizer = weakref.finalize(self, _shutdown, self._state, self._spawner)

    # -- lifecycle -----------------------------------------------------------------
    def _new_zygote(self) -> _Zygote:
        return _Zygote(self._cfg, self.startup_timeout_s)

    @property
    def _workers(self) -> list[_Worker]:
        return self._state["workers"]

    def _zygote(self) -> _Zygote:
        """The zygote, restarted if it died; raises after repeated failures."""
        z: _Zygote = self._state["boot"].result()
        if not z.alive():
            z.close()
            self._start_failures += 1
            if self._start_failures >= _MAX_START_FAILURES:
                raise RuntimeError(f"reward worker zygote died {self._start_failures} times")
            log.warning("reward worker zygote died; restarting it")
            self._state["boot"] = self._spawner.submit(self._new_zygote)
            z = self._state["boot"].result()
        return z

    def _fork(self) -> _Worker:
        while True:
            z = self._zygote()
            try:
                w = z.fork()
            except (OSError, EOFError) as e:  # the zygote broke under us: kill it, restart, retry
                log.warning("reward worker zygote failed to fork (%s)", e)
                if z.alive():
                    z.proc.kill()
                    z.proc.wait(timeout=5)
                continue
            self._start_failures = 0
            return w

    def _replace(self, w: _Worker | None) -> None:
        """Kill ``w`` (if given) and fill its slot with a freshly forked worker."""
        if w is not None:
            w.kill()
        new = self._fork()
        if w is None:
            self._workers.append(new)
        else:
            self._workers[self._workers.index(w)] = new
            self.restarts += 1

    def _ensure_workers(self) -> None:
        while len(self._workers) < self.num_workers:
            self._replace(None)

    def wait_ready(self) -> None:
        """Block until the zygote is warm and all workers are forked."""
        with self._lock:
            self._ensure_workers()

    @property
    def pids(self) -> list[int]:
        """Process ids of the current workers (for monitoring)."""
        return [w.pid for w in self._workers]

    def close(self) -> None:
        """Stop all workers and the zygote (idempotent)."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- work ----------------------------------------------------------------------
    def map(
        self, fn_ref: str, items: Sequence[tuple], chunk_size: int | None = None
    ) -> list[Outcome]:
        """Run ``fn(*args)`` for each ``args`` in ``items``; never raises for item failures.

        ``chunk_size`` defaults to about four chunks per worker (at most 32 items).
        """
        n = len(items)
        if n == 0:
            return []
        if chunk_size is None:
            chunk_size = max(1, min(32, math.ceil(n / (4 * self.num_workers))))
        with self._lock:
            if self._closed:
                raise RuntimeError("WorkerPool is closed")
            self._ensure_workers()
            return self._run(fn_ref, items, chunk_size)

    def _run(self, fn_ref: str, items: Sequence[tuple], chunk_size: int) -> list[Outcome]:
        for w in list(self._workers):
            try:  # notice idle workers that died since the last call (e.g. with the zygote)
                while not w.busy and w.conn.poll():
                    if w.conn.recv()[0] == "ready":
                        w.ready = True
            except (EOFError, OSError):
                w.dead = True
            if w.busy or w.dead:  # busy: left by an interrupted call, its results are stale
                self._replace(w)
        results: list[Outcome | None] = [None] * len(items)
        pending: deque[list[int]] = deque(
            list(range(i, min(i + chunk_size, len(items)))) for i in range(0, len(items), chunk_size)
        )
        remaining = len(items)
        deaths: dict[int, int] = {}  # item -> workers that died while running it

        def fail_current(w: _Worker, outcome: Outcome) -> None:
            nonlocal remaining
            results[w.chunk[w.done]] = outcome
            remaining -= 1
            rest = w.chunk[w.done + 1 :]
            if rest:
                pending.appendleft(rest)
            w.task_id = None

        def died(w: _Worker) -> None:
            """The worker died mid-item: run the item again, unless it has now killed two workers."""
            item = w.chunk[w.done]
            deaths[item] = deaths.get(item, 0) + 1
            if deaths[item] >= _MAX_DEATHS_PER_ITEM:
                fail_current(w, Outcome(ERROR, error=f"worker died {deaths[item]} times on this item"))
            else:
                pending.appendleft(w.chunk[w.done :])
                w.task_id = None

        while remaining > 0:
            # 1. dispatch chunks to idle workers (a just-forked worker reads its chunk
            #    as soon as it runs; forking takes milliseconds)
            for w in list(self._workers):
                if not w.busy and pending:
                    chunk = pending.popleft()
                    self._task_seq += 1
                    try:
                        w.conn.send((self._task_seq, fn_ref, [items[i] for i in chunk]))
                    except (OSError, EOFError, ValueError):
                        pending.appendleft(chunk)
                        self._replace(w)
                        continue
                    w.task_id, w.chunk, w.done = self._task_seq, chunk, 0
                    w.last_progress = time.monotonic()
            # 2. wait for results, deaths or the nearest deadline
            busy = [w.last_progress for w in self._workers if w.busy]
            deadline = (min(busy) + self.timeout_s) if busy else (time.monotonic() + 1.0)
            mp_wait([w.conn for w in self._workers], timeout=max(0.0, deadline - time.monotonic()))
            # 3. drain every worker's socket, then handle deaths and missed deadlines
            for w in list(self._workers):
                try:
                    while w.conn.poll():
                        msg = w.conn.recv()
                        if msg[0] == "ready":
                            w.ready = True
                        elif w.busy and msg[0] == w.task_id:
                            _, i, ok, value = msg
                            results[w.chunk[i]] = (
                                Outcome(OK, value) if ok else Outcome(ERROR, error=str(value))
                            )
                            remaining -= 1
                            w.done = i + 1
                            w.last_progress = time.monotonic()
                            if w.done == len(w.chunk):
                                w.task_id = None
                except (EOFError, OSError):
                    w.dead = True
                if w.dead:
                    if w.busy:
                        died(w)
                    self._replace(w)
                elif w.busy and time.monotonic() - w.last_progress > self.timeout_s:
                    fail_current(w, Outcome(TIMEOUT, error=f"no result within {self.timeout_s}s"))
                    self._replace(w)
        return results  # type: ignore[return-value]
