"""Writing checkpoints: the folder layout, the atomic save protocol (see the package docstring), the `latest`
pointer and pruning."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import torch

from ulorl.durable import atomic_write_text
from ulorl.errors import UlorlError
from ulorl.run.checkpoint.atomic import fsync_dir, fsync_file, sha256
from ulorl.run.checkpoint.state import rng_state, torch_rng_state

MANIFEST = "MANIFEST.json"
LATEST = "latest"
CHECKPOINTS = "checkpoints"  # the folder of a run's checkpoints, `RUN/checkpoints/`
FORMAT_VERSION = 1
# files a checkpoint must list in its manifest (the model weights are checked separately)
REQUIRED_FILES = ("optimizer.pt", "rng.pt", "state.json", "pools.json", "model/config.json")
CRASH_HOOK_ENV = "ULORL_TEST_CRASH_IN_SAVE"
# files: data written, no manifest | manifest: complete in the temp folder, not renamed |
# rename: in place, `latest` not updated | pointer: committed, not pruned
CRASH_PHASES = ("files", "manifest", "rename", "pointer")
STEP_DIR = re.compile(r"^step_(\d+)$")
ASIDE_DIR = re.compile(r"^step_(\d+)\.old-\d+$")  # previous copy of a step being re-saved


class CheckpointError(UlorlError, RuntimeError):
    """A checkpoint that is missing, partial, corrupted, unsafe or incompatible with this run."""


def _crash_hook(phase: str, step: int) -> None:
    spec = os.environ.get(CRASH_HOOK_ENV)
    if not spec:
        return
    want, _, at = spec.partition("@")
    if want == phase and (not at or int(at) == step):
        os._exit(137)


def step_dir(root: str | Path, step: int) -> Path:
    """The folder checkpoint `step` is committed under in `root`: `step_000012`."""
    return Path(root) / f"step_{step:06d}"


def step_of(path: str | Path) -> int | None:
    """Step number of a checkpoint folder name (`step_000012` or its moved-aside copy), else None."""
    m = STEP_DIR.match(Path(path).name) or ASIDE_DIR.match(Path(path).name)
    return int(m.group(1)) if m else None


def save_checkpoint(root: str | Path, step: int, *, model, tokenizer, optimizer_state: dict, state: dict,
                    pools: dict, keep: int = 2) -> Path:
    """Write checkpoint `step` atomically under `root`, commit it (`latest`), prune to the last `keep`.

    A failure while writing (a full disk) removes the partial folder at once and raises `CheckpointError`;
    the last committed checkpoint stays as it was."""
    root = Path(root)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    final = step_dir(root, step)
    tmp = root / f"{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        _write_folder(tmp, step, model=model, tokenizer=tokenizer, optimizer_state=optimizer_state, state=state,
                      pools=pools)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (OSError, *_WRITE_ERRORS)):
            raise CheckpointError(_failed_save(root, step, e)) from e
        raise
    _crash_hook("manifest", step)
    try:
        return _commit(root, final, tmp, step, keep)
    except OSError as e:  # the pointer could not be replaced: the step is complete but not committed
        raise CheckpointError(_failed_save(root, step, e)) from e


def _write_folder(tmp: Path, step: int, *, model, tokenizer, optimizer_state: dict, state: dict, pools: dict) -> None:
    """Steps 1-2 of the protocol: every file, then the manifest, into `tmp`; all fsynced."""
    from ulorl.models.lora import save_policy

    tmp.mkdir()
    save_policy(model, tmp / "model")  # save_pretrained, or the adapters only for a LoRA model
    tokenizer.save_pretrained(tmp / "model")
    torch.save(optimizer_state, tmp / "optimizer.pt")
    torch.save(torch_rng_state(), tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "rng": rng_state()}))
    (tmp / "pools.json").write_text(json.dumps(pools))
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    for p in files:
        fsync_file(p)
    _crash_hook("files", step)
    manifest = {str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": sha256(p)} for p in files}
    (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT_VERSION, "step": step, "files": manifest}, indent=1))
    fsync_file(tmp / MANIFEST)
    for d in sorted((p for p in tmp.rglob("*") if p.is_dir()), reverse=True):
        fsync_dir(d)
    fsync_dir(tmp)


def _commit(root: Path, final: Path, tmp: Path, step: int, keep: int) -> Path:
    """Steps 3-5 of the protocol: rename into place, point `latest` at it, prune."""
    aside = None
    if final.exists():  # re-saving a step (e.g. the final save after the evaluation at the end)
        aside = root / f"{final.name}.old-{os.getpid()}"
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(final, aside)  # a complete copy of the step exists at every moment
    os.replace(tmp, final)
    fsync_dir(root)
    _crash_hook("rename", step)
    set_latest(root, final)
    _crash_hook("pointer", step)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    _prune(root, keep, step)
    return final


def _write_errors() -> tuple[type[BaseException], ...]:
    """Errors of the libraries that write a checkpoint's files which are not OSErrors (safetensors reports a full
    disk as `SafetensorError: ... No space left on device`)."""
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - safetensors is a dependency
        return ()
    return (SafetensorError,)


_WRITE_ERRORS = _write_errors()
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _failed_save(root: Path, step: int, e: BaseException) -> str:
    last = read_latest(root)[0]
    kept = f"the last committed checkpoint ({last}) is intact" if last else "no checkpoint was committed yet"
    text = getattr(e, "strerror", None) or (str(e).splitlines()[0] if str(e) else type(e).__name__)
    full = getattr(e, "errno", None) in _NO_SPACE or "No space left" in str(e) or "StorageFull" in str(e)
    fix = "Free space" if full else f"Check that {root} can be written"
    return (f"saving checkpoint step {step} in {root} failed: {text}; the partial folder was removed "
            f"and {kept}. {fix}, then run again with --resume auto")


def set_latest(root: str | Path, checkpoint: str | Path) -> None:
    """Atomically make the `latest` pointer of `root` name `checkpoint` (a folder inside `root`)."""
    root = Path(root)
    atomic_write_text(root / LATEST, Path(checkpoint).name)
    fsync_dir(root)


def read_latest(root: str | Path) -> tuple[Path | None, str | None]:
    """(the checkpoint folder `latest` names, None) or (None, why it names none we may use).

    The pointer must hold one `step_NNNNNN` name of a folder directly inside `root`: binary bytes, a
    path (`../../other/checkpoints/step_000060`) or a symlink out of the folder are refused."""
    root = Path(root)
    pointer = root / LATEST
    if not pointer.is_file():
        return None, None
    raw = pointer.read_bytes()[:256]
    try:
        name = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        return None, f"{pointer} holds binary bytes, not a checkpoint name"
    target = root / name
    if not STEP_DIR.match(name) or not inside_folder(root, target):
        return None, f"{pointer} names {name!r}, which is not a checkpoint folder inside {root}"
    return target, None


def inside_folder(root: Path, path: Path) -> bool:
    """`path` resolves (symlinks followed) to an entry directly inside `root`."""
    try:
        return path.resolve().parent == root.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return False


def within_folder(folder: Path, path: Path) -> bool:
    """`path` resolves (symlinks followed) to a place inside `folder` (resolved too)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


def checkpoint_dirs(root: Path) -> list[tuple[int, Path]]:
    """Committed-name checkpoint folders `step_NNNNNN` under `root`, as (step, path), oldest first."""
    out = []
    for p in root.glob("step_*"):
        m = STEP_DIR.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def _prune(root: Path, keep: int, current: int) -> None:
    done = checkpoint_dirs(root)
    for s, p in done:
        if s > current:  # a timeline abandoned by resuming from an older checkpoint
            shutil.rmtree(p, ignore_errors=True)
    older = [p for s, p in done if s <= current]
    for p in older[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
    for stale in list(root.glob("*.tmp-*")) + list(root.glob("step_*.old-*")):  # interrupted saves
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def incomplete_saves(root: str | Path) -> list[Path]:
    """Leftover folders of interrupted saves under `root` (never loaded; removed by the next save)."""
    root = Path(root)
    return sorted(p for p in root.glob("*.tmp-*") if p.is_dir()) if root.is_dir() else []
