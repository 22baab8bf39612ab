"""TrainSession: every live object of a run, how it is built, saved and restored.

The trainer loop (`ulorl.trainer`) only calls methods of this class, so the loop
stays readable and every piece of state that a checkpoint must hold is in one
place: model, optimizer, prompt cursor, rollout rounds, both pools, step/version
counters, RNGs, logger and audit-log positions.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from ulorl.samples_log import SampleLog
from ulorl.checkpoint import (LATEST, CheckpointError, atomic_write_text, check_run_state, compare_configs,
                              existing_checkpoints, find_resumable, incomplete_saves, load_checkpoint, make_run_dir,
                              resolve_resume_path, rng_state, save_checkpoint, set_latest, set_rng_state,
                              torch_rng_state)
from ulorl.config import RunConfig, check_runnable, dump_yaml, to_dict
from ulorl.data import load_prompts
from ulorl.distributed.placement import build_placement
from ulorl.models import eos_token_ids, load_model, load_tokenizer
from ulorl.reward import RewardManager
from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.pools import ExperiencePool, UnfinishedPool
from ulorl.rollout.prompt_source import PromptSource
from ulorl.rollout.segment import SegmentRollout
from ulorl.sft import run_sft


def say(msg: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(f"[ulorl] {msg}")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def warm_start(cfg: RunConfig, run_dir: Path) -> str:
    """Path of the policy to start RL from: `model.path`, or the SFT warm start (made once, atomically)."""
    if cfg.model.warm_start == "none":
        return cfg.model.path
    done = run_dir / "warm_start" / "model"
    for stale in run_dir.glob("warm_start.tmp-*"):  # a warm start killed half-way: never used, redone
        say(f"removing {stale}: an interrupted SFT warm start")
        shutil.rmtree(stale, ignore_errors=True)
    if (done / "config.json").exists() and (done / "model.safetensors").exists():  # made by an atomic rename
        say(f"reusing the SFT warm start in {done}")
        return str(done)
    tmp = run_dir / f"warm_start.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    say(f"SFT warm start ({cfg.sft.steps} steps) -> {run_dir / 'warm_start'}")
    run_sft(cfg.model, cfg.sft, tmp, progress=cfg.logging.progress)
    shutil.rmtree(run_dir / "warm_start", ignore_errors=True)
    os.replace(tmp, run_dir / "warm_start")
    return str(done)


class TrainSession:
    def __init__(self, cfg: RunConfig, run_dir: str | Path, resume: str | None = None) -> None:
        from ulorl.logging import make_loggers

        check_runnable(cfg)
        self.cfg, self.run_dir = cfg, make_run_dir(run_dir)
        self.ckpt_root = self.run_dir / "checkpoints"
        ckpt = self._find_checkpoint(resume)
        policy_path = str(ckpt["model_dir"]) if ckpt else warm_start(cfg, self.run_dir)
        self.start_policy = policy_path
        self.tokenizer = load_tokenizer(policy_path, cfg.model.trust_remote_code)
        self.model = load_model(policy_path, cfg.model.dtype, cfg.model.trust_remote_code, cfg.train.device,
                                cfg.model.rope_scaling_factor, cfg.model.rope_original_max_len)
        if cfg.model.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.eos_ids = eos_token_ids(self.model, self.tokenizer)
        seed_everything(cfg.train.seed)  # after the warm start and model creation, which seed torch themselves
        self.train_prompts, report = load_prompts(cfg.data, self.tokenizer, "train")
        say(f"train data: {report.summary()}")
        self.eval_prompts = []
        if cfg.data.eval:
            self.eval_prompts, ereport = load_prompts(cfg.data, self.tokenizer, "eval")
            say(f"eval data: {ereport.summary()}")
        self.placement = build_placement(cfg)  # distributed.backend: local (this process) | ray (actors)
        self.engine = self.placement.engine(self.model, self.tokenizer, self.eos_ids, model_path=policy_path,
                                            vllm=cfg.rollout.vllm, model_cfg=cfg.model, seed=cfg.train.seed,
                                            max_batch=cfg.rollout.max_batch, kv_cache_gib=cfg.rollout.kv_cache_gib)
        r = cfg.rollout
        self.params = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k)
        if hasattr(self.engine, "reserve"):  # torch engine: its KV cache is allocated (and budget-checked) now
            longest = max((len(p.prompt_tokens) for p in self.train_prompts), default=0)
            self.engine.reserve(r.decode_batch, longest + r.max_response_len)
        self.prompts = PromptSource(self.train_prompts, seed=cfg.data.seed, shuffle=cfg.data.shuffle)
        self.rollout = SegmentRollout(self.engine, self.prompts, self.params, group_size=r.group_size,
                                      decode_batch=r.decode_batch, max_response_len=r.max_response_len,
                                      num_segments=r.num_segments, seed=cfg.train.seed)
        self.unfinished = UnfinishedPool()
        self.experience = ExperiencePool(r.group_size)
        self.learner = self.placement.learner(self.model, self.tokenizer.pad_token_id)
        self.reward = RewardManager(cfg.reward)
        self.step, self.version, self.counters = 0, 0, {"trained_samples": 0, "dropped_groups": 0, "bad_steps": 0}
        self.history: dict = {"entropy": [], "eval": {}, "segments_hist": {}}
        self._saved: tuple | None = None  # (step, state, rng) of the last save, to skip identical re-saves
        if ckpt:
            try:
                self._restore(ckpt)
            except BaseException:
                self.reward.close()
                self.placement.close()
                raise
            self._commit_resumed(ckpt["path"])
        resume_step = self.step if ckpt else None
        atomic_write_text(self.run_dir / "config.yaml", dump_yaml(cfg))
        self.loggers = make_loggers(cfg.logging.loggers, self.run_dir, table_every=cfg.logging.table_every,
                                    project=cfg.logging.wandb_project, resume_step=resume_step, config=to_dict(cfg))
        self.samples = SampleLog(self.run_dir / "samples.jsonl", resume_step, text_chars=cfg.logging.sample_text_chars,
                                 decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True))

    # -- resume --------------------------------------------------------------------------------
    def _find_checkpoint(self, resume: str | None) -> dict | None:
        """The checkpoint to resume from (verified, config-checked), or None for a fresh start."""
        if resume is None:
            if existing_checkpoints(self.ckpt_root) or (self.ckpt_root / LATEST).exists():
                raise CheckpointError(f"{self.ckpt_root} already holds checkpoints of an earlier run: pass "
                                      "--resume auto to continue it, --resume never to start over (its files are "
                                      "moved aside), or choose another --output-dir")
            set_aside_earlier_run(self.run_dir)
            return None
        if resume == "never":
            set_aside_earlier_run(self.run_dir)
            return None
        if resume == "auto":
            path, notes = find_resumable(self.ckpt_root)
            for n in notes:
                say(f"--resume auto: {n}")
            if path is None:
                self._refuse_to_start_over(notes)
                left = incomplete_saves(self.ckpt_root)
                why = f" (ignoring {len(left)} interrupted save(s): {', '.join(p.name for p in left)})" if left else ""
                say(f"--resume auto: no complete checkpoint in {self.ckpt_root}{why}; starting from the beginning")
                set_aside_earlier_run(self.run_dir)
                return None
            ckpt = load_checkpoint(path, verify=False)  # find_resumable has just verified it
        else:
            path = resolve_resume_path(resume)
            try:
                ckpt = load_checkpoint(path)
            except CheckpointError as e:
                raise CheckpointError(f"{e}\n(--resume auto falls back to the newest valid checkpoint)") from e
        check_run_state(ckpt)
        bad, ok, other = compare_configs(ckpt["state"]["config"], to_dict(self.cfg))
        if bad:
            raise CheckpointError(f"refusing to resume from {path}: incompatible config changes (they would make "
                                  "the saved state meaningless or the run a different experiment):\n  " +
                                  "\n  ".join(bad) + "\nundo them, or start a new run in another --output-dir")
        for line in ok:
            say(f"resume: harmless config change {line}")
        for line in other:
            say(f"resume: config change allowed, may alter results: {line}")
        say(f"resuming from {path} (step {ckpt['state']['step']})")
        return ckpt

    def _refuse_to_start_over(self, notes: list[str]) -> None:
        """`--resume auto` with checkpoints of which none verifies: stop; a fresh start would bury the run."""
        found = existing_checkpoints(self.ckpt_root)
        if not found and not (self.ckpt_root / LATEST).exists():
            return  # nothing was ever committed (killed during the first save): starting over loses nothing
        listed = "\n  ".join([p.name for _, p in found] or ["(none; only the pointer)"])
        raise CheckpointError(
            f"--resume auto: {self.ckpt_root} holds checkpoints but none verifies; nothing was changed.\n"
            f"checkpoints:\n  {listed}\nwhat failed:\n  " + "\n  ".join(notes or ["(no details)"]) +
            "\nrestore a good copy, resume from one with --resume PATH, or start over with --resume never "
            "(the earlier run's files are moved aside) or another --output-dir")

    def _restore(self, ckpt: dict) -> None:
        s = ckpt["state"]
        self.step, self.version, self.counters, self.history = s["step"], s["version"], s["counters"], s["history"]
        try:
            self.prompts.load_state_dict(s["prompt_source"])
        except ValueError as e:
            raise CheckpointError(f"refusing to resume from {ckpt['path']}: {e}") from e
        self.rollout.load_state_dict(s["rollout"])
        self.unfinished = UnfinishedPool.from_dict(ckpt["pools"]["unfinished"])
        self.experience = ExperiencePool.from_dict(ckpt["pools"]["experience"])
        self.learner.load_state_dict({"optimizer": ckpt["optimizer"]})
        set_rng_state(s["rng"], ckpt["torch_rng"])

    def _commit_resumed(self, path: Path) -> None:
        """Point `latest` at the checkpoint resumed from (a fallback or an explicit older one).

        The logs are cut back to its step, so newer checkpoints are an abandoned timeline: a crash before
        the next save must resume from here again, and the next save deletes them."""
        path = Path(path)
        pointer = self.ckpt_root / LATEST
        if path.parent.resolve() != self.ckpt_root.resolve():
            return
        if not pointer.exists() or pointer.read_text().strip() != path.name:
            set_latest(self.ckpt_root, path)

    def save(self) -> Path:
        """Checkpoint the state at this step boundary (skipped when identical to the last save of this step)."""
        state = {"step": self.step, "version": self.version, "counters": self.counters, "history": self.history,
                 "prompt_source": self.prompts.state_dict(), "rollout": self.rollout.state_dict(),
                 "config": to_dict(self.cfg)}
        # pools only change inside a step, so (step, state, RNG) identifies what a save of this step would hold
        torch_rng = torch_rng_state()
        snapshot = (self.step, json.dumps(state), json.dumps(rng_state()),
                    [t.numpy().tobytes() for t in [torch_rng["cpu"], *torch_rng.get("cuda", [])]])
        final = self.ckpt_root / f"step_{self.step:06d}"
        if self._saved == snapshot and final.is_dir():
            return final
        self.samples.sync()  # the logs of the steps this checkpoint covers are durable before it is committed
        metrics = self.run_dir / "metrics.jsonl"
        if metrics.exists():
            with open(metrics, "rb") as f:
                os.fsync(f.fileno())
        pools = {"unfinished": self.unfinished.to_dict(), "experience": self.experience.to_dict()}
        path = save_checkpoint(self.ckpt_root, self.step, model=self.model, tokenizer=self.tokenizer,
                               optimizer_state=self.learner.state_dict()["optimizer"], state=state, pools=pools,
                               keep=self.cfg.checkpoint.keep)
        self._saved = snapshot
        return path

    def close(self) -> None:
        self.reward.close()
        self.placement.close()
        self.loggers.close()
        self.samples.close()
        write_history(self.run_dir, self.history)


def write_history(run_dir: Path, history: dict) -> None:
    """`history.json`, a convenience copy (checkpoints hold the history): replaced whole or left as it was
    (a full disk once left it at 0 bytes), and a failure only warns: it must not mask the run's own error."""
    try:
        atomic_write_text(run_dir / "history.json", json.dumps(history, indent=1))
    except OSError as e:
        say(f"could not write {run_dir / 'history.json'}: {e.strerror or e} (the previous copy is kept)")


# what a run writes into its folder; a fresh start moves an earlier run's copies aside (never truncates them).
# warm_start/ stays: the SFT warm start is reused when its model is complete
RUN_OUTPUTS = ("checkpoints", "samples.jsonl", "metrics.jsonl", "metrics.jsonl.bak", "history.json",
               "summary.json", "config.yaml", "tensorboard")


def set_aside_earlier_run(run_dir: Path) -> Path | None:
    """Move an earlier run's outputs into `run_dir/earlier-<time>/`; returns that folder (None: nothing there)."""
    present = [run_dir / n for n in RUN_OUTPUTS if (run_dir / n).exists()]
    if not present:
        return None
    aside = run_dir / f"earlier-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while aside.exists():
        aside, n = run_dir / f"earlier-{time.strftime('%Y%m%d-%H%M%S')}-{n}", n + 1
    aside.mkdir(mode=0o700)
    for p in present:
        os.replace(p, aside / p.name)
    say(f"starting over: the earlier run's {', '.join(p.name for p in present)} moved to {aside}")
    return aside
