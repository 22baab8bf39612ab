"""Atomic checkpoints of everything a run needs to continue exactly.

Layout of one checkpoint `RUN/checkpoints/step_000012/`:
    model/            HF folder (safetensors) of the policy, plus its tokenizer; with LoRA, a peft adapter
                      folder instead (adapters, base config, tokenizer: `ulorl.models.lora.save_policy`)
    optimizer.pt      optimizer state (loaded with `weights_only=True`: no arbitrary unpickling)
    rng.pt            torch RNG states, CPU and CUDA (tensors only, `weights_only=True`)
    state.json        step, policy version, prompt cursor/epoch, rollout rounds, python/numpy RNG,
                      counters, history, the resolved config
    pools.json        unfinished pool and experience pool, every trajectory in full
    MANIFEST.json     size and sha256 of every file above; written last, inside the folder

Writing protocol (`save_checkpoint`):
  1. everything goes to `step_000012.tmp-<pid>/`; every file and folder is fsynced;
  2. MANIFEST.json is written and fsynced (a folder without a valid manifest is never loaded);
  3. the folder is renamed to `step_000012/` and the parent folder fsynced (re-saving the same
     step moves the old folder aside first, so one complete copy always exists);
  4. the `latest` pointer file is replaced atomically (write `latest.tmp-<pid>`, fsync, rename):
     a checkpoint is *committed* once `latest` names it;
  5. pruning: the last `keep` committed checkpoints stay; folders with a higher step than the one
     just saved belong to an abandoned timeline (the run was resumed from an older checkpoint) and
     are deleted, as are leftovers of interrupted saves.
A crash at any moment leaves the previous committed checkpoint intact. A failed write (a full disk)
removes the partial folder at once and raises `CheckpointError`; nothing committed is touched.

Finding one (`find_resumable`): the checkpoint `latest` names, when it verifies; otherwise the
newest verifying checkpoint not newer than the one `latest` names (all of them when there is no
pointer). Every skipped folder is reported with the reason. The pointer must hold the name of a
`step_NNNNNN` folder directly inside the checkpoints folder; anything else (a path out of the run,
binary bytes) is ignored with a note.

Deciding (`decide_resume`, the one call a run makes before it is built): what `--resume` (none, `never`,
`auto`, a PATH) means for a run folder: the checkpoint to resume from, loaded and checked against the
run's config, or a fresh start; plus the notes to print, or the error to stop with. `--resume auto` never
starts over when checkpoints exist but none verifies: it stops with the list (`existing_checkpoints`,
the notes). Once the state is restored, `commit_resumed` points `latest` at the checkpoint resumed from.

Test hook: `ULORL_TEST_CRASH_IN_SAVE=<phase>[@<step>]` makes `save_checkpoint` exit the process
at once (`os._exit(137)`, like SIGKILL) at one of the phases in `CRASH_PHASES`, for the step given
(any step without `@`). Used by tests/resume/test_resume_kill.py; never set it otherwise.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ulorl.errors import UlorlError

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
_STEP_DIR = re.compile(r"^step_(\d+)$")
_ASIDE_DIR = re.compile(r"^step_(\d+)\.old-\d+$")  # previous copy of a step being re-saved


class CheckpointError(UlorlError, RuntimeError):
    """A checkpoint that is missing, partial, corrupted, unsafe or incompatible with this run."""


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


def _crash_hook(phase: str, step: int) -> None:
    spec = os.environ.get(CRASH_HOOK_ENV)
    if not spec:
        return
    want, _, at = spec.partition("@")
    if want == phase and (not at or int(at) == step):
        os._exit(137)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace `path` with `text` or leave it as it was: a full disk never leaves it empty or torn."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def make_run_dir(path: str | Path) -> Path:
    """Create a run folder private to its owner (0700: configs can name endpoints); an existing folder is kept.

    Raises OSError naming the path when it is a file, lies under a file, or cannot be written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a folder", str(path))
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "Permission denied (the run folder is not writable)", str(path))
    return path


def step_dir(root: str | Path, step: int) -> Path:
    """The folder checkpoint `step` is committed under in `root`: `step_000012`."""
    return Path(root) / f"step_{step:06d}"


def step_of(path: str | Path) -> int | None:
    """Step number of a checkpoint folder name (`step_000012` or its moved-aside copy), else None."""
    m = _STEP_DIR.match(Path(path).name) or _ASIDE_DIR.match(Path(path).name)
    return int(m.group(1)) if m else None


# -- RNG -----------------------------------------------------------------------------------------
def rng_state() -> dict:
    """Python and numpy RNG states as JSON-able data (torch's go to rng.pt)."""
    py = random.getstate()
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {"python": [py[0], list(py[1]), py[2]],
            "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]}


def torch_rng_state() -> dict:
    """CPU and (when present) CUDA generator states; tensors only, so `weights_only` loading works."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, torch_state: dict | torch.Tensor | None) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if torch_state is None:
        return
    if isinstance(torch_state, torch.Tensor):  # format of early checkpoints: the CPU state only
        torch_state = {"cpu": torch_state}
    torch.set_rng_state(torch_state["cpu"])
    if torch_state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(torch_state["cuda"])


# -- saving --------------------------------------------------------------------------------------
def save_fingerprint(step: int, state: dict) -> tuple:
    """What a save at the boundary of `step` holds that can differ from the last save of that step.

    The weights, optimizer and pools only change inside a step, so (step, `state`, every RNG) identifies
    the checkpoint; a save whose fingerprint equals the last one's, while that folder exists, is skipped
    (e.g. the final save after an end-of-run evaluation that drew no random numbers)."""
    torch_rng = torch_rng_state()
    return (step, json.dumps(state), json.dumps(rng_state()),
            [t.numpy().tobytes() for t in [torch_rng["cpu"], *torch_rng.get("cuda", [])]])


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
        _fsync_file(p)
    _crash_hook("files", step)
    manifest = {str(p.relative_to(tmp)): {"size": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    (tmp / MANIFEST).write_text(json.dumps({"format": FORMAT_VERSION, "step": step, "files": manifest}, indent=1))
    _fsync_file(tmp / MANIFEST)
    for d in sorted((p for p in tmp.rglob("*") if p.is_dir()), reverse=True):
        _fsync_dir(d)
    _fsync_dir(tmp)


def _commit(root: Path, final: Path, tmp: Path, step: int, keep: int) -> Path:
    """Steps 3-5 of the protocol: rename into place, point `latest` at it, prune."""
    aside = None
    if final.exists():  # re-saving a step (e.g. the final save after the evaluation at the end)
        aside = root / f"{final.name}.old-{os.getpid()}"
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(final, aside)  # a complete copy of the step exists at every moment
    os.replace(tmp, final)
    _fsync_dir(root)
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
    _fsync_dir(root)


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
    if not _STEP_DIR.match(name) or not _inside(root, target):
        return None, f"{pointer} names {name!r}, which is not a checkpoint folder inside {root}"
    return target, None


def _inside(root: Path, path: Path) -> bool:
    """`path` resolves (symlinks followed) to an entry directly inside `root`."""
    try:
        return path.resolve().parent == root.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return False


def _within(folder: Path, path: Path) -> bool:
    """`path` resolves (symlinks followed) to a place inside `folder` (resolved too)."""
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


def _checkpoint_dirs(root: Path) -> list[tuple[int, Path]]:
    """Committed-name checkpoint folders `step_NNNNNN` under `root`, as (step, path), oldest first."""
    out = []
    for p in root.glob("step_*"):
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out)


def _prune(root: Path, keep: int, current: int) -> None:
    done = _checkpoint_dirs(root)
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


# -- verifying and loading -----------------------------------------------------------------------
def verify_checkpoint(path: str | Path) -> dict:
    """Check a checkpoint folder against its manifest; return the manifest or raise CheckpointError."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist")
    mf = path / MANIFEST
    if not mf.exists():
        raise CheckpointError(f"checkpoint {path} is incomplete: no {MANIFEST} (the save was interrupted)")
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
        if not _within(path, f):
            raise CheckpointError(f"checkpoint {path}: {rel} is a symlink (or lies under one) that leads out of the "
                                  "checkpoint; refusing to load it (copy the real files in)")
        if not f.is_file():
            raise CheckpointError(f"checkpoint {path} is missing {rel}")
        if not isinstance(meta, dict) or f.stat().st_size != meta.get("size") or _sha256(f) != meta.get("sha256"):
            raise CheckpointError(f"checkpoint {path}: {rel} does not match its checksum (corrupted)")
    return manifest


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
    found = _checkpoint_dirs(root) + [(step_of(p), p) for p in root.glob("step_*.old-*") if p.is_dir()]
    found = [(s, p) for s, p in found if _inside(root, p)]  # a symlink out of the folder is no checkpoint of ours
    return sorted(found, key=lambda sp: (sp[0], _STEP_DIR.match(sp[1].name) is not None), reverse=True)


def resolve_resume_path(path: str | Path) -> Path:
    """`--resume PATH`: a checkpoint folder, or a run folder / checkpoints folder (then its `latest`)."""
    path = Path(path)
    for root in (path / CHECKPOINTS, path):
        if (root / LATEST).is_file():
            named, why = read_latest(root)
            if named is None:
                raise CheckpointError(f"--resume {path}: {why}")
            return named
    return path


# what state.json must hold for a run to continue (written by TrainSession.save and save_checkpoint)
STATE_KEYS = ("step", "version", "counters", "history", "prompt_source", "rollout", "config", "rng")
POOL_KEYS = ("unfinished", "experience")


def check_run_state(ckpt: dict) -> None:
    """A loaded checkpoint (`load_checkpoint`) holds everything a run needs to continue, or CheckpointError."""
    for name, data, keys in (("state.json", ckpt["state"], STATE_KEYS), ("pools.json", ckpt["pools"], POOL_KEYS)):
        missing = [k for k in keys if k not in data] if isinstance(data, dict) else list(keys)
        if missing:
            raise CheckpointError(f"checkpoint {ckpt['path']}: {name} has no {', '.join(repr(k) for k in missing)} "
                                  "(not written by ulorl train, or edited); resume from another checkpoint")


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


# -- config changes between the checkpoint and the resumed run ----------------------------------
# keys whose change makes a resumed run a different experiment, or makes the saved state meaningless
INCOMPATIBLE_KEYS = ("model.path", "model.dtype", "rollout.num_segments", "rollout.max_response_len",
                     "rollout.group_size", "data.train", "data.seed", "data.train_size", "data.format",
                     "data.shuffle", "data.prompt_key", "data.answer_key", "data.max_prompt_len",
                     "train.train_groups", "train.seed", "algo.is_mode", "model.lora.rank", "model.lora.alpha",
                     "model.lora.target_modules")
# changes that cannot alter what is trained (the weights come from the checkpoint, so the warm start's
# settings no longer matter); evaluation settings are *not* here: they would change the before/after report
HARMLESS_KEYS = ("train.steps", "train.eval_every", "train.max_bad_steps", "train.max_rounds_per_step",
                 "model.warm_start", "reward.num_workers")
HARMLESS_PREFIXES = ("logging.", "checkpoint.", "sft.")


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
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
        elif k in HARMLESS_KEYS or k.startswith(HARMLESS_PREFIXES):
            ok.append(line)
        else:
            other.append(line)
    return bad, ok, other


# -- the resume decision ---------------------------------------------------------------------------
@dataclass
class ResumeDecision:
    """What a run does with its checkpoints (`decide_resume`).

    The caller prints `notes` in order, then raises `error` when there is one: the notes found before it
    explain it. Otherwise it resumes from `checkpoint`, or starts from the beginning when that is None
    (an earlier run's outputs are moved aside, never truncated)."""

    checkpoint: dict | None = None  # `load_checkpoint`'s dict: verified, a run's state, a compatible config
    notes: list[str] = field(default_factory=list)  # lines for the user, in the order they were found
    error: Exception | None = None  # neither resuming nor starting over is safe: stop with this


def decide_resume(run_dir: str | Path, config: dict, resume: str | None) -> ResumeDecision:
    """What `--resume` means for the run folder `run_dir`, for a run whose resolved config is `config` (`to_dict`).

    - None: a fresh start; refused when `RUN/checkpoints` already holds checkpoints (the user chooses).
    - `never`: a fresh start over whatever is there.
    - `auto`: the checkpoint `find_resumable` picks; when none verifies, refused if checkpoints exist (a fresh
      start would bury the run), else a fresh start.
    - a PATH (`resolve_resume_path`): that checkpoint, never replaced by another one.
    A checkpoint to resume from must hold a run's state (`check_run_state`) and a config without
    incompatible changes (`compare_configs`); harmless and other changes are named in the notes."""
    d = ResumeDecision()
    try:
        d.checkpoint = _choose_checkpoint(Path(run_dir) / CHECKPOINTS, config, resume, d.notes)
    except Exception as e:
        d.error = e
    return d


def _choose_checkpoint(root: Path, config: dict, resume: str | None, notes: list[str]) -> dict | None:
    if resume is None:
        if existing_checkpoints(root) or (root / LATEST).exists():
            raise CheckpointError(f"{root} already holds checkpoints of an earlier run: pass "
                                  "--resume auto to continue it, --resume never to start over (its files are "
                                  "moved aside), or choose another --output-dir")
        return None
    if resume == "never":
        return None
    if resume == "auto":
        path, skipped = find_resumable(root)
        notes += [f"--resume auto: {n}" for n in skipped]
        if path is None:
            _refuse_to_start_over(root, skipped)
            left = incomplete_saves(root)
            why = f" (ignoring {len(left)} interrupted save(s): {', '.join(p.name for p in left)})" if left else ""
            notes.append(f"--resume auto: no complete checkpoint in {root}{why}; starting from the beginning")
            return None
        ckpt = load_checkpoint(path, verify=False)  # find_resumable has just verified it
    else:
        path = resolve_resume_path(resume)
        try:
            ckpt = load_checkpoint(path)
        except CheckpointError as e:
            raise CheckpointError(f"{e}\n(--resume auto falls back to the newest valid checkpoint)") from e
    check_run_state(ckpt)
    bad, ok, other = compare_configs(ckpt["state"]["config"], config)
    if bad:
        raise CheckpointError(f"refusing to resume from {path}: incompatible config changes (they would make "
                              "the saved state meaningless or the run a different experiment):\n  " +
                              "\n  ".join(bad) + "\nundo them, or start a new run in another --output-dir")
    notes += [f"resume: harmless config change {line}" for line in ok]
    notes += [f"resume: config change allowed, may alter results: {line}" for line in other]
    notes.append(f"resuming from {path} (step {ckpt['state']['step']})")
    return ckpt


def _refuse_to_start_over(root: Path, skipped: list[str]) -> None:
    """`--resume auto` with checkpoints of which none verifies: stop; a fresh start would bury the run."""
    found = existing_checkpoints(root)
    if not found and not (root / LATEST).exists():
        return  # nothing was ever committed (killed during the first save): starting over loses nothing
    listed = "\n  ".join([p.name for _, p in found] or ["(none; only the pointer)"])
    raise CheckpointError(
        f"--resume auto: {root} holds checkpoints but none verifies; nothing was changed.\n"
        f"checkpoints:\n  {listed}\nwhat failed:\n  " + "\n  ".join(skipped or ["(no details)"]) +
        "\nrestore a good copy, resume from one with --resume PATH, or start over with --resume never "
        "(the earlier run's files are moved aside) or another --output-dir")


def commit_resumed(root: str | Path, path: str | Path) -> None:
    """Point `latest` of `root` at `path`, the checkpoint a run has just resumed from (a fallback or an explicit
    older one), when it is one of `root`'s.

    The logs are cut back to its step, so newer checkpoints are an abandoned timeline: a crash before
    the next save must resume from here again, and the next save deletes them."""
    root, path = Path(root), Path(path)
    if path.parent.resolve() != root.resolve():
        return
    named, _ = read_latest(root)  # None too when the pointer holds binary bytes or a path: then it is rewritten
    if named is None or named.name != path.name:
        set_latest(root, path)
