"""Replace a file or folder whole or leave it as it was: the durable writes that every layer uses (reports, configs,
a saved cost model through `atomic_write_text`; cleaned rows and exported models through `replacing`). A shared
leaf: it imports nothing of ulorl. The checkpoint's own protocol (fsync of folders, checksums, the `latest`
pointer) is `ulorl.run.checkpoint`'s."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace `path` with `text` or leave it as it was: a full disk never leaves it empty or torn. An `OSError`
    names `path`, not the temporary file beside it (`path` a folder, its parent missing or read-only, a full
    disk)."""
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def replacing(dest: str | Path, named: str | Path | None = None) -> Iterator[Path]:
    """A temporary path beside `dest` to write a file or a folder into. When the block ends normally it replaces
    `dest` whole (`replace_path`); when it raises, `dest` is left as it was. The temporary path never outlives the
    block, and an `OSError` names `named` (default `dest`), not the temporary path (`raise_naming`)."""
    dest = Path(dest)
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    _remove(tmp)  # a leftover of this pid's earlier attempt
    try:
        yield tmp
        replace_path(tmp, dest)
    except OSError as e:
        raise_naming(e, dest if named is None else named, tmp)
    finally:
        _remove(tmp)


def replace_path(tmp: Path, dest: Path) -> None:
    """Put the finished `tmp` (a file or a folder) in place of `dest`, which may not exist. A folder cannot replace a
    folder in one step: the old one moves aside, is put back if the rename fails, and is deleted once it succeeded."""
    if not (tmp.is_dir() and dest.is_dir()):
        os.replace(tmp, dest)
        return
    old = dest.with_name(f"{dest.name}.old-{os.getpid()}")
    os.replace(dest, old)
    try:
        os.replace(tmp, dest)
    except BaseException:
        os.replace(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _remove(path: Path) -> None:
    """Delete a file or folder if it is there; never raises (a cleanup is not the error to report)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):  # renamed into place, never written, or under a file
            path.unlink()


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
