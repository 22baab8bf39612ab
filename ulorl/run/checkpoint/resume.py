"""The resume decision: what `--resume` means for a run folder, and the config changes a resume allows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ulorl.config.loader import flatten, yaml_scalar
from ulorl.run.checkpoint.find import (check_run_state, existing_checkpoints, find_resumable, is_checkpoint_folder,
                                      load_checkpoint, resolve_resume_path)
from ulorl.run.checkpoint.store import CHECKPOINTS, LATEST, CheckpointError, incomplete_saves, read_latest, set_latest


# -- config changes between the checkpoint and the resumed run ----------------------------------
# keys whose change makes a resumed run a different experiment, or makes the saved state meaningless
# (train.optimizer: the saved state is another optimizer's; a changed lr, weight decay, eps or momentum
# applies, `optimizers.load_keeping_settings`)
INCOMPATIBLE_KEYS = ("model.path", "model.dtype", "rollout.num_segments", "rollout.max_response_len",
                     "rollout.group_size", "data.train", "data.seed", "data.train_size", "data.format",
                     "data.shuffle", "data.prompt_key", "data.answer_key", "data.max_prompt_len",
                     "train.train_groups", "train.seed", "train.optimizer", "algo.is_mode", "model.lora.rank",
                     "model.lora.alpha", "model.lora.target_modules")
# changes that cannot alter what is trained (the weights come from the checkpoint, so the warm start's
# settings no longer matter); evaluation settings are *not* here: they would change the before/after report
HARMLESS_KEYS = ("train.steps", "train.eval_every", "train.max_bad_steps", "train.max_rounds_per_step",
                 "model.warm_start", "reward.num_workers")
HARMLESS_PREFIXES = ("logging.", "checkpoint.", "sft.")


def compare_configs(saved: dict, current: dict) -> tuple[list[str], list[str], list[str]]:
    """(incompatible, harmless, other) changed keys, each as 'key: old -> new'."""
    a, b = flatten(saved), flatten(current)
    bad, ok, other = [], [], []
    for k in sorted(set(a) | set(b)):
        if a.get(k) == b.get(k):
            continue
        line = f"{k}: {yaml_scalar(a.get(k))} -> {yaml_scalar(b.get(k))}"
        if k in INCOMPATIBLE_KEYS:
            bad.append(line)
        elif k in HARMLESS_KEYS or k.startswith(HARMLESS_PREFIXES):
            ok.append(line)
        else:
            other.append(line)
    return bad, ok, other


def resume_command(run_dir) -> str:
    """The command that resumes the run in `run_dir` as it was configured: its own config.yaml (every setting,
    the command line's overrides included), so a run started with overrides resumes without repeating them."""
    return f"ulorl train --config {Path(run_dir) / 'config.yaml'} --resume auto --output-dir {run_dir}"


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
            if not is_checkpoint_folder(path):  # the error says what it is instead
                raise
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
