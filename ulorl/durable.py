"""Replace a text file whole or leave it as it was: the one durable write that every layer uses (reports, configs,
a saved cost model). A shared leaf: it imports nothing of ulorl. The checkpoint's own protocol (fsync of folders,
checksums, the `latest` pointer) is `ulorl.run.checkpoint`'s."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import NoReturn


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace `path` with `text` or leave it as it was: a full disk never leaves it empty or torn. An `OSError`
    names `path`, not the temporary file beside it (`path` a folder, its parent missing or read-only, a full
    disk)."""
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
        if isinstance(e, OSError):
            raise_naming(e, path, tmp)
        raise


def raise_naming(e: OSError, path: str | Path, tmp: str | Path) -> NoReturn:
    """Raise `e`, a failed write of `path` through the temporary file or folder `tmp`, as naming `path`: where it
    names `tmp` (or a file inside the folder `tmp`: the same file inside `path`), or nothing (a write past a full
    disk names no file). An error about another file is raised as it is."""
    name, tmp = e.filename, str(tmp)
    if name is None or name == tmp:
        name = str(path)
    elif isinstance(name, str) and name.startswith(tmp + os.sep):
        name = os.path.join(str(path), name[len(tmp) + 1:])
    else:
        raise e
    try:
        named = type(e)(e.errno, e.strerror or str(e), name)
    except TypeError:  # a subclass with its own constructor
        named = OSError(e.errno, e.strerror or str(e), name)
    raise named from e
