"""Durable writes for checkpoints: fsync, checksums, the private run folder (replacing a text file whole is
`ulorl.durable`'s, a leaf every layer may use)."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path


def fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_run_dir(path: str | Path) -> Path:
    """Create a run folder private to its owner (0700: configs can name endpoints); an existing folder is kept.

    Raises OSError naming the path when it is a file, lies under a file, or cannot be written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))  # the CLI adds what it means
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    return path
