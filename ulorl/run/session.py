"""The session of a run: the steps before its loop (`open_session`), and `TrainSession`, the state of a run.

`open_session`, in order:
1. the config is checked against this machine (`check_runnable`) and its data sources for existence
   (`check_sources`), the run folder made and locked
   (`RunLock`: one process per folder; the session releases it when it closes);
2. the resume decision (`checkpoint.decide_resume`): its notes are printed, its error raised; a fresh
   start moves an earlier run's outputs aside (`set_aside_earlier_run`);
3. the policy to start from (`prepare_model`): the checkpoint's model when resuming (the warm start is
   never redone), else `model.path` or the SFT warm start (`model.warm_start=sft`), made in the run folder,
   continued after an interruption and reused while made with the run's SFT settings; before an SFT the data is
   loaded (`check_data`), so that a bad row stops the run before the SFT's minutes, and the session takes it;
4. `TrainSession`: loads that policy, builds the parts of the run (by the plain functions at the end
   of this file, in the order the constructor calls them), restores the checkpoint. The seconds of the
   warm start, the prefilter and the rest of the start go into the history's phase times (`add_phase_time`).

The loop (`ulorl.run.loop`) reads and updates the session, so every piece that a checkpoint must hold
is in one place: model, optimizer (in the learner), prompt cursor, rollout rounds, both pools,
step/version counters, RNGs, logger and sample-log positions.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ulorl.config import EvalConfig, RunConfig, bound_by_machine, check_runnable, dump_yaml, to_dict
from ulorl.config.logging import default_table_every
from ulorl.data import PromptRecord, check_sources, load_prompts
from ulorl.distributed.placement import Placement, build_placement
from ulorl.durable import replace_path
from ulorl.evaluation.reference import referenced_rows
from ulorl.logging.base import json_text
from ulorl.models import eos_token_ids, load_tokenizer
from ulorl.models.loading import model_written, positions_short_of
from ulorl.models.lora import load_policy_model
from ulorl.reward import RewardManager
from ulorl.rollout.engines.base import Engine, SamplingParams
from ulorl.rollout.engines.registry import EngineName
from ulorl.rollout.pools import ExperiencePool, UnfinishedPool
from ulorl.rollout.prompt_source import PromptSource
from ulorl.rollout.segment import SegmentRollout
from ulorl.run.checkpoint import (CHECKPOINTS, CheckpointError, atomic_write_text, commit_resumed, decide_resume,
                                  make_run_dir, resume_command, save_checkpoint, save_fingerprint, set_rng_state,
                                  step_dir)
from ulorl.run.console import say, show_library_notes
from ulorl.run.lock import RunLock
from ulorl.run.numerics import apply_cpu_numerics
from ulorl.run.prefilter import FILE as PREFILTER_FILE
from ulorl.run.prefilter import apply_prefilter
from ulorl.run.samples_log import SampleLog
from ulorl.run.sft import SFTStopped, run_sft
from ulorl.run.sft_state import finished, settings_changes, sft_settings


def use_train_threads(cfg: RunConfig) -> None:
    """`train.threads` > 0: torch's thread count for this process (before any warm start, so `ulorl sft` and
    `ulorl train` run a config's SFT with one count); 0 leaves torch's own."""
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)


def open_session(cfg: RunConfig, run_dir: str | Path, resume: str | None = None) -> TrainSession:
    """The session of a run in `run_dir`, fresh or resumed as `resume` says (None, `auto`, `never`, a PATH).
    `train.cpu_numerics` is applied first (before any tensor operation), then `train.threads` > 0 sets torch's
    thread count for this process, bounded by the machine (the warm start included)."""
    apply_cpu_numerics(cfg.train.cpu_numerics)
    check_runnable(cfg)
    check_sources(cfg.data)  # a missing data file stops the run here, not after minutes of warm start
    show_library_notes()
    for line in (context_warning(cfg), pass_k_note(cfg)):
        if line:
            say(line)
    cfg, notes = bound_by_machine(cfg)
    for note in notes:
        say(note)
    use_train_threads(cfg)
    run_dir = make_run_dir(run_dir)
    lock = RunLock.acquire(run_dir)
    try:
        session = _open_locked(cfg, run_dir, resume)
    except BaseException:
        lock.release()
        raise
    session.run_lock = lock
    return session


def context_warning(cfg: RunConfig) -> str | None:
    """A line for the user when a prompt and its answer can reach past the positions the model was made for:
    transformers then goes on with RoPE past them, silently, and a real model's answers degrade there."""
    m = cfg.model
    need = cfg.data.max_prompt_len + cfg.rollout.max_response_len
    positions = positions_short_of(m.path, need, m.rope_scaling_factor, m.rope_original_max_len)
    if positions is None:
        return None
    stretched = " stretched by model.rope_scaling_factor" if m.rope_scaling_factor else ""
    return (f"warning: data.max_prompt_len + rollout.max_response_len = {need:,} positions, past the {positions:,} "
            f"of model.path={m.path} (max_position_embeddings{stretched}): positions beyond it are extrapolated; "
            "model.rope_scaling_factor stretches the model's RoPE with YaRN, or lower rollout.max_response_len")


def pass_k_note(cfg: RunConfig) -> str | None:
    """A line when `eval.pass_k`, set by the user, names values above `eval.k`: they are not reported (pass@k' needs
    k' samples a problem; `ulorl eval` refuses them as flags). The default list is trimmed to `eval.k` silently."""
    e = cfg.eval
    above = sorted({int(x) for x in e.pass_k if int(x) > e.k})
    if not above or cfg.data.eval is None or list(e.pass_k) == EvalConfig().pass_k:
        return None
    return (f"note: eval.pass_k {', '.join(map(str, above))} above eval.k={e.k} are not reported (pass@k needs k "
            f"samples a problem); raise eval.k to {max(above)} to report them")


def _open_locked(cfg: RunConfig, run_dir: Path, resume: str | None) -> TrainSession:
    decision = decide_resume(run_dir, to_dict(cfg), resume)
    for note in decision.notes:
        say(note)
    if decision.error is not None:
        raise decision.error
    if decision.checkpoint is not None:
        started = time.perf_counter()
        session = TrainSession(cfg, run_dir, str(decision.checkpoint["model_dir"]), decision.checkpoint)
        add_phase_time(session.history, "start", time.perf_counter() - started)
        return session
    set_aside_earlier_run(run_dir)
    # every setting, before the warm start: the start line names this file, and an interrupted SFT leaves it
    atomic_write_text(run_dir / "config.yaml", dump_yaml(cfg))
    start = prepare_model(cfg, run_dir)
    started = time.perf_counter()
    session = TrainSession(cfg, run_dir, start.path, data=start.data)
    prefilter = session.history["prefilter"]  # decided in the constructor ({}: data.prefilter off)
    prefilter_s = prefilter.get("seconds", 0.0)
    if start.sft_s is not None:
        add_phase_time(session.history, "warm_start", start.sft_s)
    if prefilter:
        add_phase_time(session.history, "prefilter", prefilter_s)
    add_phase_time(session.history, "start", max(0.0, time.perf_counter() - started - prefilter_s))
    return session


def add_phase_time(history: dict, phase: str, seconds: float) -> None:
    """Add `seconds` to the run's time in `phase` (`history["phase_s"]`, kept in checkpoints: a resumed run adds its
    own start and the work it does to what its checkpoint holds; work lost after the last checkpoint is not
    counted, and its redoing is)."""
    times = history.setdefault("phase_s", {})
    times[phase] = times.get(phase, 0.0) + seconds


@dataclass
class LoadedData:
    """The prompts of each split (`load_data`) and the report lines their loading would have printed."""

    splits: dict[str, list[PromptRecord]]
    lines: list[str]


@dataclass
class StartingPolicy:
    """What a fresh run starts RL from (`prepare_model`)."""

    path: str  # `model.path`, or the SFT warm start's model folder
    sft_s: float | None = None  # seconds of the SFT this start trained (None: none trained)
    data: LoadedData | None = None  # loaded before that SFT, to check it: the session takes it as it is


def prepare_model(cfg: RunConfig, run_dir: Path) -> StartingPolicy:
    """The policy a fresh run starts RL from: `model.path`, or the SFT warm start; when this call trains the SFT,
    its seconds and the data loaded before it (a bad row stops the run before the SFT's minutes).

    The warm start is made in `RUN/warm_start.partial/` and renamed to `RUN/warm_start/` when its model is written.
    A complete warm start is reused when it was made with this run's SFT settings (`sft_settings`), else moved aside
    into `RUN/earlier-<time>/` and made again; an interrupted one continues from its last saved state under the
    same settings (`ulorl.run.sft_state`), else is moved aside and started over."""
    if cfg.model.warm_start == "none":
        return StartingPolicy(cfg.model.path)
    done, partial = run_dir / WARM_START, run_dir / f"{WARM_START}.partial"
    settings = sft_settings(cfg.model, cfg.sft, cfg.eval.sampling())
    if model_written(done / "model"):
        changes = settings_changes(done, settings)
        if not changes:
            unrecorded = " (its settings are not recorded: it is taken as it is)" if changes is None else ""
            say(f"reusing the SFT warm start in {done / 'model'}{unrecorded}")
            return StartingPolicy(str(done / "model"))
        say(f"the SFT warm start in {done} was made with other settings ({'; '.join(changes)}): it is made again")
        set_aside_earlier_run(run_dir, (WARM_START,))
    if partial.exists() and settings_changes(partial, settings):
        say(f"the interrupted SFT warm start in {partial} has other settings: it is started over")
        set_aside_earlier_run(run_dir, (partial.name,))
    started, data = time.perf_counter(), None
    if not finished(partial):  # else written, not yet renamed
        # the data the RL will load and what its engine checks at start, before the minutes of SFT
        data = check_data(cfg)
        check_engine_fits(cfg, data.splits["train"])
        say(f"SFT warm start ({cfg.sft.length_text}) -> {done}")
        try:
            run_sft(cfg.model, cfg.sft, partial, progress=cfg.logging.progress, check_params=cfg.eval.sampling())
        except SFTStopped:
            say(f"the same command continues it: {resume_command(run_dir)}")
            raise
    replace_path(partial, done)
    return StartingPolicy(str(done / "model"), time.perf_counter() - started, data)


# what a run writes into its folder; a fresh start moves an earlier run's copies aside (never truncates them).
# warm_start/ stays: `prepare_model` decides whether it is reused
WARM_START = "warm_start"
RUN_OUTPUTS = ("checkpoints", "samples.jsonl", "metrics.jsonl", "metrics.jsonl.bak", "history.json",
               "summary.json", "config.yaml", "tensorboard", "export", PREFILTER_FILE)


def set_aside_earlier_run(run_dir: Path, outputs: tuple[str, ...] = RUN_OUTPUTS, what: str = "run") -> Path | None:
    """Move an earlier `what`'s `outputs` (a training run's by default) into `run_dir/earlier-<time>/`; returns that
    folder (None: nothing there). A config.yaml alone is no result (a start stopped before any, e.g. during its
    warm start): it stays, for the new start to replace."""
    present = [run_dir / n for n in outputs if (run_dir / n).exists()]
    if not present or [p.name for p in present] == ["config.yaml"]:
        return None
    aside = run_dir / f"earlier-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while aside.exists():
        aside, n = run_dir / f"earlier-{time.strftime('%Y%m%d-%H%M%S')}-{n}", n + 1
    aside.mkdir(mode=0o700)
    for p in present:
        os.replace(p, aside / p.name)
    say(f"starting over: the earlier {what}'s {', '.join(p.name for p in present)} moved to {aside}")
    return aside


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class TrainSession:
    """The run in `run_dir`, starting from the model folder `policy`; `checkpoint` (`load_checkpoint`'s dict,
    see `open_session`): the state to continue from, None for a fresh start."""

    def __init__(self, cfg: RunConfig, run_dir: str | Path, policy: str, checkpoint: dict | None = None,
                 data: LoadedData | None = None) -> None:
        from ulorl.logging import make_loggers

        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.ckpt_root = self.run_dir / CHECKPOINTS
        self.tokenizer, self.model = load_policy(cfg, policy)
        seed_everything(cfg.train.seed)  # after the warm start and model creation, which seed torch themselves
        if data is None:  # else loaded before the SFT, with the tokenizer that the SFT kept
            data = check_data(cfg, tokenizer=self.tokenizer)
        for line in data.lines:
            say(line)
        train_prompts, self.eval_prompts = data.splits["train"], data.splits["eval"]
        # data.prefilter: judged by the starting policy at a fresh start, read back from the run folder on resume
        train_prompts, prefilter = apply_prefilter(cfg, self.run_dir, self.model, self.tokenizer, train_prompts,
                                                   fresh=not checkpoint)
        self.placement = build_placement(cfg)  # distributed.backend: local (this process) | ray (actors)
        self.engine = start_engine(cfg, self.placement, self.model, self.tokenizer, policy, train_prompts)
        self.prompts = PromptSource(train_prompts, seed=cfg.data.seed, shuffle=cfg.data.shuffle)
        self.rollout = build_rollout(cfg, self.engine, self.prompts)
        self.unfinished, self.experience = UnfinishedPool(), ExperiencePool(cfg.rollout.group_size)
        self.learner = self.placement.learner(self.model, self.tokenizer.pad_token_id)
        self.reward = RewardManager(cfg.reward)
        self.step, self.version, self.counters = 0, 0, {"trained_samples": 0, "dropped_groups": 0, "bad_steps": 0}
        self.history: dict = {"entropy": [], "eval": {}, "segments_hist": {}, "prefilter": prefilter}
        self._saved: tuple | None = None  # `save_fingerprint` of the last save, to skip identical re-saves
        self.run_lock: RunLock | None = None  # the run folder's lock (`open_session`), released by close
        if checkpoint:
            try:
                self._restore(checkpoint)
            except BaseException:
                self.reward.close()
                self.placement.close()
                raise
            commit_resumed(self.ckpt_root, checkpoint["path"])
            if Path(checkpoint["path"]).resolve() == step_dir(self.ckpt_root, self.step).resolve():
                self._saved = save_fingerprint(self.step, self._state())  # a save before any change is skipped
        resume_step = self.step if checkpoint else None
        atomic_write_text(self.run_dir / "config.yaml", dump_yaml(cfg))
        table_every = cfg.logging.table_every or default_table_every(cfg.train.steps)
        self.loggers = make_loggers(cfg.logging.loggers, self.run_dir, table_every=table_every,
                                    project=cfg.logging.wandb_project, resume_step=resume_step, config=to_dict(cfg))
        self.samples = SampleLog(self.run_dir / "samples.jsonl", resume_step, text_chars=cfg.logging.sample_text_chars,
                                 decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True))

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

    def _state(self) -> dict:
        """The run's state at this step boundary, as `state.json` holds it (the RNG states are added there)."""
        return {"step": self.step, "version": self.version, "counters": self.counters, "history": self.history,
                "prompt_source": self.prompts.state_dict(), "rollout": self.rollout.state_dict(),
                "config": to_dict(self.cfg)}

    def save(self) -> Path:
        """Checkpoint the state at this step boundary (skipped when identical to the last save of this step, or to
        the checkpoint this session resumed from)."""
        state = self._state()
        fingerprint = save_fingerprint(self.step, state)
        final = step_dir(self.ckpt_root, self.step)
        if self._saved == fingerprint and final.is_dir():
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
        self._saved = fingerprint
        return path

    def close(self) -> None:
        try:
            self.reward.close()
            self.placement.close()
            self.loggers.close()
            self.samples.close()
            write_history(self.run_dir, self.history)
        finally:
            if self.run_lock is not None:
                self.run_lock.release()


def write_history(run_dir: Path, history: dict) -> None:
    """`history.json`, a convenience copy (checkpoints hold the history): replaced whole or left as it was
    (a full disk once left it at 0 bytes), and a failure only warns: it must not mask the run's own error."""
    try:
        atomic_write_text(run_dir / "history.json", json_text(history, indent=1))
    except OSError as e:
        say(f"could not write {run_dir / 'history.json'}: {e.strerror or e} (the previous copy is kept)")


# -- the parts of a session, in the order they are built ------------------------------------------------
def load_policy(cfg: RunConfig, policy: str):
    """(tokenizer, model) of the model folder `policy`, on `train.device`; with `model.lora.rank > 0` (or a LoRA
    checkpoint's folder) the model carries peft adapters and only they are trainable (`ulorl.models.lora`)."""
    m = cfg.model
    tokenizer = load_tokenizer(policy, m.trust_remote_code)
    model = load_policy_model(m, policy, cfg.train.device, seed=cfg.train.seed)
    if m.gradient_checkpointing:
        from ulorl.learners.checkpointing import enable_gradient_checkpointing

        enable_gradient_checkpointing(model)
    if m.activation_offload:
        from ulorl.learners.offload import enable_activation_offload

        enable_activation_offload(model)
    return tokenizer, model


def load_data(cfg: RunConfig, tokenizer, splits: tuple[str, ...] = ("train", "eval"),
              show=say) -> dict[str, list[PromptRecord]]:
    """The prompts of each of `splits` (an empty list for eval when `data.eval` is null); each split's report goes to
    `show`. With `eval.reference`, every eval row the exact measure scores is checked to carry its worked solution;
    every row holds the `extra_info` keys a batch reward function requires (`RewardConfig.check_rows`)."""
    loaded = {}
    for split in splits:
        loaded[split] = []
        if not cfg.data.sources(split):
            continue
        loaded[split], report = load_prompts(cfg.data, tokenizer, split)
        show(f"{split} data: {report.summary()}")
        cfg.reward.check_rows(loaded[split], f"data.{split}")
        if split == "eval" and cfg.eval.reference:
            referenced_rows(cfg.eval, loaded[split], f"data.eval={cfg.data.eval}", "eval.reference=true")
    return loaded


def check_data(cfg: RunConfig, splits: tuple[str, ...] = ("train", "eval"), tokenizer=None) -> LoadedData:
    """Load `splits` as the run will (`load_data`; `tokenizer` default: `model.path`'s, which an SFT keeps), their
    report lines kept for the caller to print. An SFT is preceded by this, and its run takes the result: a bad row
    (`data.on_bad_row=error`), a prompt the chat template refuses, a split that `data.max_prompt_len` leaves empty or
    an eval row without its worked solution then stops the run at once, not after the minutes of the SFT.
    `check_sources` only knows that the files are there and readable by name."""
    lines: list[str] = []
    tokenizer = tokenizer or load_tokenizer(cfg.model.path, cfg.model.trust_remote_code)
    return LoadedData(load_data(cfg, tokenizer, splits, show=lines.append), lines)


def check_engine_fits(cfg: RunConfig, train_prompts: list[PromptRecord]) -> None:
    """The torch engine's start-up checks, made from `model.path`'s config before an SFT (which keeps the model's
    architecture): its model type (`check_supported_config`), its attention paths on this device
    (`check_attention_paths`: `rollout.torch.decode_attention=triton` or `prefill_attention=varlen` off CUDA) and
    its KV budget (`check_budget`: one sequence of the longest prompt + L must fit `rollout.kv_cache_gib`). The
    engine makes them again when the RL starts (`start_engine`); made only there, they stopped the run after the
    SFT's minutes."""
    r = cfg.rollout
    if r.engine != EngineName.TORCH.value:
        return
    from transformers import AutoConfig

    from ulorl.models.loading import resolve_model_path
    from ulorl.models.lora import adapter_base
    from ulorl.rollout.engines.torch.engine import block_size_for, check_attention_paths
    from ulorl.rollout.engines.torch.kv_cache import check_budget, kv_shape_of
    from ulorl.rollout.engines.torch.runner import check_supported_config

    folder = resolve_model_path(cfg.model.path)
    config = AutoConfig.from_pretrained(adapter_base(folder) or folder, local_files_only=True,
                                        trust_remote_code=cfg.model.trust_remote_code)
    check_supported_config(config)
    dtype = getattr(torch, cfg.model.dtype if r.dtype == "auto" else r.dtype)  # the engine's: the model's or its own
    shape, device = kv_shape_of(config, dtype), torch.device(cfg.train.device)
    check_attention_paths(r.torch.decode_attention, r.torch.prefill_attention, device, dtype, shape.head_dim)
    longest = max((len(p.prompt_tokens) for p in train_prompts), default=0)
    check_budget(shape, block_size_for(device.type, r.torch.block_size), longest + r.max_response_len, r.kv_cache_gib)


def start_engine(cfg: RunConfig, placement: Placement, model, tokenizer, policy: str,
                 train_prompts: list[PromptRecord]) -> Engine:
    """The rollout engine over `model` (or the folder `policy`, for vLLM), its KV cache reserved when it has one."""
    r = cfg.rollout
    engine = placement.engine(model, tokenizer, eos_token_ids(model, tokenizer), model_path=policy, vllm=r.vllm,
                              model_cfg=cfg.model, seed=cfg.train.seed, max_batch=r.max_batch,
                              kv_cache_gib=r.kv_cache_gib, dtype=r.dtype, torch=r.torch)
    if hasattr(engine, "reserve"):  # torch engine: its KV cache is allocated (and budget-checked) now
        longest = max((len(p.prompt_tokens) for p in train_prompts), default=0)
        engine.reserve(r.decode_batch, longest + r.max_response_len)
    return engine


def build_rollout(cfg: RunConfig, engine: Engine, prompts: PromptSource) -> SegmentRollout:
    r = cfg.rollout
    return SegmentRollout(engine, prompts, SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k),
                          group_size=r.group_size, decode_batch=r.decode_batch, max_response_len=r.max_response_len,
                          num_segments=r.num_segments, seed=cfg.train.seed)
