"""One process per run folder: an OS lock on `RUN/.lock`, held for as long as the run's process lives.

`ulorl train` and `ulorl sft` take it before they read or move anything in the folder, so a second process
on a live run stops at once (`RunFolderBusy`, naming the folder and the holder's pid) instead of deciding
to start over and moving the live run's files aside. The lock is `fcntl.flock` on an open file: the
kernel drops it when the holder's process ends in any way, SIGKILL included, so a crashed run never
leaves a stale lock behind (the file itself stays; only the flock on it counts).

The descriptor is close-on-exec: processes the run starts with exec (reward workers, the spawned
learner) never hold it; a process the run forks without exec would share it until it exits.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ulorl.errors import UlorlError

LOCK_FILE = ".lock"


class RunFolderBusy(UlorlError):
    """Another live process holds the run folder."""


class RunLock:
    """The lock of one run folder, held from `acquire` until `release` (or the end of the process)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    @classmethod
    def acquire(cls, run_dir: str | Path) -> RunLock:
        """Take the lock of `run_dir` (an existing folder) or raise `RunFolderBusy` at once."""
        lock = cls(run_dir)
        fd = os.open(lock.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise RunFolderBusy(f"{Path(run_dir)} is in use by {who} (a run of ulorl holds {lock.path}); wait "
                                "for it to end, or choose another --output-dir") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        lock._fd = fd
        return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (idempotent); the pid is cleared first so a reader never names a finished process."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)  # closing the last descriptor of the open file releases the flock

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
