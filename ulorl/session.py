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
from pathlib import Path

import numpy as np
import torch

from ulorl.audit import SampleLog
from ulorl.checkpoint import (CheckpointError, compare_configs, find_resumable, load_checkpoint, save_checkpoint,
                              set_rng_state)
from ulorl.config import RunConfig, dump_yaml, to_dict
from ulorl.data import load_prompts
from ulorl.learner import Learner
from ulorl.models import eos_token_ids, load_model, load_tokenizer
from ulorl.reward import RewardManager
from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.engines.registry import build_engine
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
    if (done / "config.json").exists() and (done / "model.safetensors").exists():
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

        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_root = self.run_dir / "checkpoints"
        ckpt = self._find_checkpoint(resume)
        seed_everything(cfg.train.seed)
        policy_path = str(ckpt["model_dir"]) if ckpt else warm_start(cfg, self.run_dir)
        self.start_policy = policy_path
        self.tokenizer = load_tokenizer(policy_path, cfg.model.trust_remote_code)
        self.model = load_model(policy_path, cfg.model.dtype, cfg.model.trust_remote_code, cfg.train.device)
        if cfg.model.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.eos_ids = eos_token_ids(self.model, self.tokenizer)
        self.train_prompts, report = load_prompts(cfg.data, self.tokenizer, "train")
        say(f"train data: {report.summary()}")
        self.eval_prompts = []
        if cfg.data.eval:
            self.eval_prompts, ereport = load_prompts(cfg.data, self.tokenizer, "eval")
            say(f"eval data: {ereport.summary()}")
        self.engine = build_engine(cfg.rollout.engine, self.model, self.tokenizer, self.eos_ids)
        r = cfg.rollout
        self.params = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k)
        self.prompts = PromptSource(self.train_prompts, seed=cfg.data.seed, shuffle=cfg.data.shuffle)
        self.rollout = SegmentRollout(self.engine, self.prompts, self.params, group_size=r.group_size,
                                      decode_batch=r.decode_batch, max_response_len=r.max_response_len,
                                      num_segments=r.num_segments, seed=cfg.train.seed)
        self.unfinished = UnfinishedPool()
        self.experience = ExperiencePool(r.group_size)
        self.learner = Learner(self.model, cfg.train, cfg.algo, r.temperature, self.tokenizer.pad_token_id)
        self.reward = RewardManager(cfg.reward)
        self.step, self.version, self.counters = 0, 0, {"trained_samples": 0, "dropped_groups": 0, "bad_steps": 0}
        self.history: dict = {"entropy": [], "eval": {}, "segments_hist": {}}
        if ckpt:
            self._restore(ckpt)
        resume_step = self.step if ckpt else None
        (self.run_dir / "config.yaml").write_text(dump_yaml(cfg))
        self.loggers = make_loggers(cfg.logging.loggers, self.run_dir, table_every=cfg.logging.table_every,
                                    project=cfg.logging.wandb_project, resume_step=resume_step, config=to_dict(cfg))
        self.samples = SampleLog(self.run_dir / "samples.jsonl", resume_step)

    # -- resume --------------------------------------------------------------------------------
    def _find_checkpoint(self, resume: str | None) -> dict | None:
        if resume is None:
            return None
        if resume == "auto":
            path, notes = find_resumable(self.ckpt_root)
            for n in notes:
                say(n)
            if path is None:
                say(f"--resume auto: no complete checkpoint in {self.ckpt_root}; starting from the beginning")
                return None
        else:
            path = Path(resume)
        ckpt = load_checkpoint(path)  # raises CheckpointError with a clear message
        bad, ok, other = compare_configs(ckpt["state"]["config"], to_dict(self.cfg))
        if bad:
            raise CheckpointError(f"refusing to resume from {path}: incompatible config changes:\n  " +
                                  "\n  ".join(bad))
        for line in ok:
            say(f"resume: harmless config change {line}")
        for line in other:
            say(f"resume: config change allowed, may alter results: {line}")
        say(f"resuming from {path}")
        return ckpt

    def _restore(self, ckpt: dict) -> None:
        s = ckpt["state"]
        self.step, self.version, self.counters, self.history = s["step"], s["version"], s["counters"], s["history"]
        self.prompts.load_state_dict(s["prompt_source"])
        self.rollout.load_state_dict(s["rollout"])
        self.unfinished = UnfinishedPool.from_dict(ckpt["pools"]["unfinished"])
        self.experience = ExperiencePool.from_dict(ckpt["pools"]["experience"])
        self.learner.load_state_dict({"optimizer": ckpt["optimizer"]})
        set_rng_state(s["rng"], ckpt["torch_rng"])

    def save(self) -> Path:
        state = {"step": self.step, "version": self.version, "counters": self.counters, "history": self.history,
                 "prompt_source": self.prompts.state_dict(), "rollout": self.rollout.state_dict(),
                 "config": to_dict(self.cfg)}
        pools = {"unfinished": self.unfinished.to_dict(), "experience": self.experience.to_dict()}
        return save_checkpoint(self.ckpt_root, self.step, model=self.model, tokenizer=self.tokenizer,
                               optimizer_state=self.learner.state_dict()["optimizer"], state=state, pools=pools,
                               keep=self.cfg.checkpoint.keep)

    def close(self) -> None:
        self.reward.close()
        self.loggers.close()
        self.samples.close()
        (self.run_dir / "history.json").write_text(json.dumps(self.history, indent=1))
