"""Replace a text file whole or leave it as it was: the one durable write that every layer uses (reports, configs,
a saved cost model). A shared leaf: it imports nothing of ulorl. The checkpoint's own protocol (fsync of folders,
checksums, the `latest` pointer) is `ulorl.run.checkpoint`'s."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


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
