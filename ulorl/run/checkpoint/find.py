"""Finding a checkpoint to resume from, verifying it against its manifest, and loading its data."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ulorl.run.checkpoint.atomic import sha256
from ulorl.run.checkpoint.state import POOL_KEYS, STATE_KEYS
from ulorl.run.checkpoint.store import (CHECKPOINTS, LATEST, MANIFEST, REQUIRED_FILES, STEP_DIR, CheckpointError,
                                       checkpoint_dirs, inside_folder, read_latest, step_of, within_folder)


def verify_checkpoint(path: str | Path) -> dict:
    """Check a checkpoint folder against its manifest; return the manifest or raise CheckpointError."""
    path = Path(path)
    mf = path / MANIFEST
    if not mf.exists():
        raise CheckpointError(not_a_checkpoint(path))
    try:
        manifest = json.loads(mf.read_bytes())
        files = manifest["files"]
        assert isinstance(files, dict)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, KeyError, TypeError, AssertionError) as e:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupted ({e!r})") from e
    missing = [f for f in REQUIRED_FILES if f not in files]
    if not any(f in files for f in ("model/model.safetensors", "model/model.safetensors.index.json",
                                    "model/adapter_model.safetensors")):
        missing.append("model/model.safetensors")
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete: its manifest lists no {', '.join(missing)}")
    for rel, meta in files.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise CheckpointError(f"checkpoint {path}: {MANIFEST} names {rel!r}, outside the checkpoint (corrupted)")
        f = path / rel
        if not within_folder(path, f):
            raise CheckpointError(f"checkpoint {path}: {rel} is a symlink (or lies under one) that leads out of the "
                                  "checkpoint; refusing to load it (copy the real files in)")
        if not f.is_file():
            raise CheckpointError(f"checkpoint {path} is missing {rel}")
        if not isinstance(meta, dict) or f.stat().st_size != meta.get("size") or sha256(f) != meta.get("sha256"):
            raise CheckpointError(f"checkpoint {path}: {rel} does not match its checksum (corrupted)")
    return manifest


def is_checkpoint_folder(path: Path) -> bool:
    """Whether `path` was, or is being, saved as a checkpoint: it has a manifest, or a step folder's name
    (`step_000012`, its moved-aside copy, or the `step_000012.tmp-PID` a save writes first)."""
    return (path / MANIFEST).exists() or step_of(path) is not None or ".tmp-" in path.name


def not_a_checkpoint(path: Path) -> str:
    """Why `path`, which holds no manifest, is not a checkpoint to resume from: a save that was interrupted (a
    step folder, or one being written), or something else that a user may take for one."""
    if not path.exists():  # a bare word is more likely a mistyped mode than a path
        modes = "" if len(path.parts) > 1 else " (resume takes auto, never or a checkpoint's path)"
        return f"checkpoint {path} does not exist{modes}"
    if not path.is_dir():
        return f"{path} is a file, not a checkpoint folder"
    if is_checkpoint_folder(path):
        return f"checkpoint {path} is incomplete: no {MANIFEST} (the save was interrupted)"
    if (path.parent / MANIFEST).is_file():
        return f"{path} is a part of checkpoint {path.parent}: resume from that folder (--resume {path.parent})"
    if (path / "config.json").is_file():
        return (f"{path} is a model folder (an export, or a model's own files), not a checkpoint: it has no "
                f"optimizer, pools or run state to resume; to start a new run from its weights, set "
                f"model.path={path}")
    if (path / CHECKPOINTS).is_dir():
        return f"{path} is a run folder whose {CHECKPOINTS}/ holds no committed checkpoint (no {LATEST} pointer)"
    return (f"{path} is not a checkpoint: it holds no {MANIFEST} (--resume PATH takes a checkpoint folder, "
            f"RUN/{CHECKPOINTS}/step_N, or a run folder)")


def find_resumable(root: str | Path) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from under `root` (see the module docstring), plus notes on what was skipped."""
    root = Path(root)
    notes: list[str] = []
    if not root.is_dir():
        return None, notes
    named, why = read_latest(root)
    limit = step_of(named) if named else None
    if why:
        notes.append(f"ignored the pointer: {why}")
    if named is not None:
        try:
            verify_checkpoint(named)
            return named, notes
        except CheckpointError as e:
            notes.append(f"skipped the checkpoint named by {root / LATEST}: {e}")
    for s, c in existing_checkpoints(root):
        if c == named:
            continue
        if limit is not None and s > limit:
            notes.append(f"skipped {c}: newer than the checkpoint named by {root / LATEST} (not committed, or "
                         "abandoned)")
            continue
        try:
            verify_checkpoint(c)
            return c, notes
        except CheckpointError as e:
            notes.append(f"skipped: {e}")
    return None, notes


def existing_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """Every checkpoint folder under `root` (committed names and moved-aside copies), newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = checkpoint_dirs(root) + [(step_of(p), p) for p in root.glob("step_*.old-*") if p.is_dir()]
    found = [(s, p) for s, p in found if inside_folder(root, p)]  # a symlink out of the folder is no checkpoint of ours
    return sorted(found, key=lambda sp: (sp[0], STEP_DIR.match(sp[1].name) is not None), reverse=True)


def resolve_resume_path(path: str | Path) -> Path:
    """`--resume PATH`: a checkpoint folder, or a run folder / checkpoints folder / its `latest` file (then the
    checkpoint `latest` names)."""
    path = Path(path)
    if path.is_file() and path.name == LATEST:  # the pointer itself: its folder's
        path = path.parent
    for root in (path / CHECKPOINTS, path):
        if (root / LATEST).is_file():
            named, why = read_latest(root)
            if named is None:
                raise CheckpointError(f"--resume {path}: {why}")
            return named
    return path


def _torch_load(path: Path):
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # pickle.UnpicklingError for anything but tensors and plain containers
        raise CheckpointError(f"refusing to load {path}: it is not plain tensor data ({e.__class__.__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''})") from e


def load_checkpoint(path: str | Path, *, verify: bool = True) -> dict:
    """Verify and load a checkpoint's data (the model folder is returned as a path). Never unpickles objects."""
    path = Path(path)
    if verify:
        verify_checkpoint(path)
    try:
        state = json.loads((path / "state.json").read_text())
        pools = json.loads((path / "pools.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"checkpoint {path}: unreadable JSON ({e})") from e
    return {
        "path": path,
        "model_dir": path / "model",
        "optimizer": _torch_load(path / "optimizer.pt"),
        "torch_rng": _torch_load(path / "rng.pt"),
        "state": state,
        "pools": pools,
    }


def check_run_state(ckpt: dict) -> None:
    """A loaded checkpoint (`load_checkpoint`) holds everything a run needs to continue, or CheckpointError."""
    for name, data, keys in (("state.json", ckpt["state"], STATE_KEYS), ("pools.json", ckpt["pools"], POOL_KEYS)):
        missing = [k for k in keys if k not in data] if isinstance(data, dict) else list(keys)
        if missing:
            raise CheckpointError(f"checkpoint {ckpt['path']}: {name} has no {', '.join(repr(k) for k in missing)} "
                                  "(not written by ulorl train, or edited); resume from another checkpoint")
