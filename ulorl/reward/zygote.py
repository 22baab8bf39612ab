"""The worker pool's helper processes: the zygote and the workers it forks (`pool.py` is the parent's side).

`BOOT` is the command line the parent runs (`python -c BOOT FD CONFIG`): it ignores SIGINT and SIGTERM, then
calls `zygote_main`, which warms the reward functions up once and forks a worker (`_worker_loop`) for each
request. The helpers here also keep the process tree clean: parent-death signals, the child subreaper, and the
killing of orphans and descendants (`pool.py`'s docstring, "No orphans").
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle
from typing import Any

# SIGINT/SIGTERM are ignored first thing (workers inherit it): only the trainer decides when to stop
BOOT = (
    "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "import json, sys; cfg = json.loads(sys.argv[2]); sys.path[:] = cfg['sys_path']; "
    "from ulorl.reward.zygote import zygote_main; zygote_main(int(sys.argv[1]), cfg)"
)


def resolve_function(ref: str):
    """Import ``"package.module:function"`` and return the callable."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"function reference must look like 'module:function', got {ref!r}")
    module = importlib.import_module(module_name)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref!r} is not callable")
    return obj


_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


def _prctl(option: int, arg: int) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0
    except Exception:  # non-Linux: closing the socket still stops idle workers
        return False


def _set_pdeathsig(expected_ppid: int, sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent thread ends (best effort)."""
    if not _prctl(_PR_SET_PDEATHSIG, int(sig)):
        return
    if os.getppid() != expected_ppid:  # the parent died before prctl
        os._exit(1)


def _children() -> dict[int, list[int]]:
    """Parent pid -> pids of its live (not zombie) children, from /proc."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields and fields[0] != b"Z":
            out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def _descendants(root: int) -> list[int]:
    tree, out, todo = _children(), [], [root]
    while todo:
        kids = tree.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _kill_orphans(workers: set[int]) -> None:
    """SIGKILL the zygote's children that it did not fork: orphans of dead workers, reparented to this subreaper."""
    for pid in _children().get(os.getpid(), []):
        if pid not in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _kill_descendants(limit_s: float = 10.0) -> None:
    """SIGKILL every descendant of this process, again until none is left (orphans of the killed ones come back
    to this subreaper as children); bounded by `limit_s`."""
    end = time.monotonic() + limit_s
    while True:
        pids = _descendants(os.getpid())
        if not pids or time.monotonic() > end:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)  # the kernel reaps them (SIGCHLD is ignored) and reparents their orphans to us


def _zygote_exit(signum=None, frame=None) -> None:
    _kill_descendants()
    os._exit(0)


def zygote_main(fd: int, cfg: dict) -> None:
    """Warm up once, then fork a worker for every ``"fork"`` request (plus an fd)."""
    conn = Connection(fd)
    try:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        signal.signal(signal.SIGUSR1, _zygote_exit)
        _set_pdeathsig(cfg["ppid"], signal.SIGUSR1)  # the trainer died: kill every descendant, then exit
        if cfg.get("memory_mb"):
            import resource

            limit = int(cfg["memory_mb"]) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        for ref, args in cfg.get("warmup", []):
            resolve_function(ref)(*args)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps our children
        conn.send(("ready", os.getpid()))
    except BaseException:
        conn.send(("init_error", traceback.format_exc(limit=5)))
        return
    zygote_pid = os.getpid()
    workers: set[int] = set()
    while True:
        try:
            msg = conn.recv()
            if msg != "fork":
                break
            child_fd = recv_handle(conn)
        except (EOFError, OSError):
            break
        _kill_orphans(workers)
        pid = os.fork()
        if pid == 0:  # the worker
            code = 0
            try:
                os.setpgid(0, 0)  # its own process group, killed with it (`_Worker.kill`)
                conn.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGUSR1, signal.SIG_DFL)
                _set_pdeathsig(zygote_pid)
                _worker_loop(Connection(child_fd))
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        try:
            os.setpgid(pid, pid)  # also here: the group exists before the trainer can kill it
        except OSError:
            pass  # the worker did it first, or is already gone
        workers = {w for w in workers if _alive(w)} | {pid}
        os.close(child_fd)
        conn.send(("forked", pid))
    _zygote_exit()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _worker_loop(conn: Connection) -> None:
    """Receive ``(task_id, fn_ref, items)``, stream ``(task_id, i, ok, value)`` per item."""
    conn.send(("ready", os.getpid()))
    cache: dict[str, Any] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        task_id, fn_ref, items = msg
        try:
            fn = cache.get(fn_ref) or cache.setdefault(fn_ref, resolve_function(fn_ref))
        except BaseException as e:
            err = f"cannot load {fn_ref!r}: {type(e).__name__}: {e}"
            for i in range(len(items)):
                conn.send((task_id, i, False, err))
            continue
        for i, args in enumerate(items):
            try:
                value = fn(*args)
                conn.send((task_id, i, True, value))
            except BaseException as e:  # noqa: BLE001 - user code may raise anything
                try:
                    conn.send((task_id, i, False, f"{type(e).__name__}: {str(e)[:300]}"))
                except (OSError, EOFError):
                    return
