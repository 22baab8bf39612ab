"""Atomic checkpoints of everything a run needs to continue exactly.

Layout of one checkpoint `RUN/checkpoints/step_000012/`:
    model/            HF folder (safetensors) of the policy
    optimizer.pt      optimizer state (loaded with `weights_only=True`: no arbitrary unpickling)
    rng.pt            torch RNG state (tensor only)
    state.json        step, policy version, prompt cursor/epoch, rollout rounds, python/numpy RNG,
                      counters, logger state, the resolved config
    pools.json        unfinished pool and experience pool, every trajectory in full
    MANIFEST.json     size and sha256 of every file above; written last, inside the folder

Writing: everything goes to `step_000012.tmp-<pid>/`, each file is fsynced, the
folder is renamed into place, the parent is fsynced, then the `latest` pointer is
replaced atomically. A crash at any moment leaves the previous checkpoint intact;
a folder without a valid MANIFEST is never loaded. The last `keep` are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

MANIFEST = "MANIFEST.json"
LATEST = "latest"


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, partial or corrupted."""


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def rng_state() -> dict:
    """Python and numpy RNG states as JSON-able data (torch's goes to rng.pt)."""
    py = random.getstate()
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {"python": [py[0], list(py[1]), py[2]],
            "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]}


def set_rng_state(state: dict, torch_state: torch.Tensor | None) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if torch_state is not None:
        torch.set_rng_state(torch_state)


def save_checkpoint(root: str | Path, step: int, *, model, tokenizer, optimizer_state: dict, state: dict,
                    pools: dict, keep: int = 2) -> Path:
    """Write checkpoint `step` atomically under `root` and prune to the last `keep`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f"{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    torch.save(optimizer_state, tmp / "optimizer.pt")
    torch.save(torch.get_rng_state(), tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "rng": rng_state()}))
    (tmp / "pools.json").write_text(json.dumps(pools))
    files = sorted(p for p in tmp.rglob("*") if p.is_file())
    for p in files:
        _fsync_file(p)
    manifest = {str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": manifest}, indent=1))
    _fsync_file(tmp / MANIFEST)
    _fsync_dir(tmp)
    if final.exists():  # re-saving the same step (e.g. signal right after a periodic save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    pointer = root / f"{LATEST}.tmp-{os.getpid()}"
    pointer.write_text(final.name)
    _fsync_file(pointer)
    os.replace(pointer, root / LATEST)
    _fsync_dir(root)
    _prune(root, keep)
    return final


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.glob("step_*") if p.is_dir() and ".tmp-" not in p.name)
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob("*.tmp-*"):  # leftovers of crashed saves
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)


def verify_checkpoint(path: str | Path) -> dict:
    """Check a checkpoint folder against its manifest; return the manifest or raise CheckpointError."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    mf = path / MANIFEST
    if not mf.exists():
        raise CheckpointError(f"checkpoint {path} is incomplete: no {MANIFEST} (the save was interrupted)")
    try:
        manifest = json.loads(mf.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupted ({e})") from e
    for rel, meta in manifest["files"].items():
        f = path / rel
        if not f.exists():
            raise CheckpointError(f"checkpoint {path} is missing {rel}")
        if f.stat().st_size != meta["size"] or _sha256(f) != meta["sha256"]:
            raise CheckpointError(f"checkpoint {path}: {rel} does not match its checksum (corrupted)")
    return manifest


def find_resumable(root: str | Path) -> tuple[Path | None, list[str]]:
    """The newest valid checkpoint under `root` (trying `latest` first), plus notes on what was skipped."""
    root = Path(root)
    notes: list[str] = []
    candidates: list[Path] = []
    pointer = root / LATEST
    if pointer.exists():
        candidates.append(root / pointer.read_text().strip())
    candidates += sorted((p for p in root.glob("step_*") if p.is_dir() and ".tmp-" not in p.name), reverse=True)
    seen = set()
    for c in candidates:
        if c in seen:
            continue
        seen.add(c)
        try:
            verify_checkpoint(c)
            return c, notes
        except CheckpointError as e:
            notes.append(f"skipped: {e}")
    return None, notes


def load_checkpoint(path: str | Path) -> dict:
    """Verify and load a checkpoint's data (the model folder is returned as a path)."""
    path = Path(path)
    verify_checkpoint(path)
    return {
        "model_dir": path / "model",
        "optimizer": torch.load(path / "optimizer.pt", weights_only=True),
        "torch_rng": torch.load(path / "rng.pt", weights_only=True),
        "state": json.loads((path / "state.json").read_text()),
        "pools": json.loads((path / "pools.json").read_text()),
    }


# config keys whose change makes a resumed run a different experiment
INCOMPATIBLE_KEYS = ("model.path", "model.dtype", "rollout.num_segments", "rollout.max_response_len",
                     "rollout.group_size", "data.train", "data.seed", "data.train_size", "data.format",
                     "train.train_groups", "train.seed", "algo.is_mode")
# changes that cannot alter what is computed
HARMLESS_PREFIXES = ("logging.", "checkpoint.", "train.steps", "train.eval_every", "eval.", "sft.")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def compare_configs(saved: dict, current: dict) -> tuple[list[str], list[str], list[str]]:
    """(incompatible, harmless, other) changed keys, each as 'key: old -> new'."""
    a, b = _flatten(saved), _flatten(current)
    bad, ok, other = [], [], []
    for k in sorted(set(a) | set(b)):
        if a.get(k) == b.get(k):
            continue
        line = f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
        if k in INCOMPATIBLE_KEYS:
            bad.append(line)
        elif k.startswith(HARMLESS_PREFIXES):
            ok.append(line)
        else:
            other.append(line)
    return bad, ok, other
