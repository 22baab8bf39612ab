"""Durable writes: fsync, replace-or-keep text files, checksums, the private run folder."""

from __future__ import annotations

import contextlib
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


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace `path` with `text` or leave it as it was: a full disk never leaves it empty or torn. An `OSError`
    names `path`, not the temporary file beside it (`path` a folder, its parent missing or read-only)."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):  # never written (its folder missing or a file), or gone
            tmp.unlink()
        if isinstance(e, OSError) and e.filename == str(tmp):
            raise type(e)(e.errno, e.strerror, str(path)) from e
        raise


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
