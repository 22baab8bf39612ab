"""Run configuration: one small dataclass per component, composed into `RunConfig`.

Load with `load_run_config(path, overrides)`; every field is validated at start so a
bad value fails before any work is done, naming the key and the allowed values.
Components owned by sub-packages (data, reward, evaluation, distributed) define their own
dataclasses there, in their `config.py`, and are composed here.

Layer rule (checked by tests/test_layers.py): the config modules (this one, `config_loader`,
`config_hints` and every sub-package's `config.py`) are leaves. They import only
`ulorl.errors`, each other, and modules that are themselves leaves: the registries whose
str Enums name the valid choices (`algo` functions, `rollout.engines.registry`, `reward.registry`,
`reward.overlong`, `reward.judge`, `reward.extract`, `tasks`, ...), each holding no import of a
higher layer. No config module imports the trainer, session, learner, checkpointing, CLI,
engine implementations, the distributed runtime, reward workers, evaluation or data loaders:
those build components from a config, never the reverse. Every "choose one of" check goes
through `config_loader.check_choice`, and every error is a `ConfigError`.

Each str Enum of choices sits beside its registry (`EntropyMaskMode` + `ENTROPY_MASKS` in
`algo/entropy_mask.py`, `EngineName` + `ENGINES` in `rollout/engines/registry.py`, ...), except
where the registry's module itself builds from a config (`distributed.backend`, `data.format`):
then the enum sits in the config module, below both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from ulorl.algo.entropy_mask import EntropyMaskMode
from ulorl.algo.importance import ISMode
from ulorl.algo.loss import AggMode
from ulorl.config_loader import ConfigError, build, check_choice, dump_yaml, load_config, to_dict
from ulorl.data.config import DataConfig
from ulorl.distributed.config import DistributedConfig
from ulorl.evaluation.config import EvalConfig
from ulorl.reward.config import RewardConfig
from ulorl.rollout.engines.base import check_sampling
from ulorl.rollout.engines.registry import EngineName
from ulorl.tasks import BuiltinTask

__all__ = ["AlgoConfig", "CheckpointConfig", "ConfigError", "DistributedConfig", "LoggingConfig", "LoraConfig", "ModelConfig",
           "PipelineMode", "RolloutConfig", "RunConfig", "SFTConfig", "TrainConfig", "VLLMConfig", "load_run_config",
           "dump_yaml", "to_dict", "build", "check_runnable", "worst_case_groups"]


def _positive(key: str, value: float, allow_zero: bool = False) -> None:
    if not math.isfinite(value):  # NaN passes `value < 0`; the loader refuses both, this guards direct construction
        raise ConfigError(f"{key}={value} is not a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{key}={value} must be {'>= 0' if allow_zero else '> 0'}")


# peft's names of the Llama/Qwen linear layers: attention and MLP projections (not the LM head)
LORA_ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class LoraConfig:
    """`model.lora`: low-rank adapters through peft (`ulorl.models.lora`); rank 0 trains every weight."""

    rank: int = 0  # r; 0: full fine-tuning (no adapters)
    alpha: float = 32.0  # scaling alpha / rank, as peft's lora_alpha
    dropout: float = 0.0  # on the adapter's input while training; > 0 makes the learner's log-probs differ from the engine's
    target_modules: list[str] = field(default_factory=lambda: list(LORA_ALL_LINEAR))  # module names peft wraps

    def __post_init__(self) -> None:
        _positive("model.lora.rank", self.rank, allow_zero=True)
        _positive("model.lora.alpha", self.alpha)
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"model.lora.dropout={self.dropout} must be in [0, 1)")
        if not self.target_modules or not all(isinstance(m, str) and m for m in self.target_modules):
            raise ConfigError(f"model.lora.target_modules={self.target_modules!r} must be a non-empty list of module "
                              f"names, e.g. {LORA_ALL_LINEAR}")


@dataclass
class ModelConfig:
    path: str = "builtin"  # 'builtin' (tiny Qwen3 made in code) or a local HF model folder
    dtype: str = "float32"  # float32 | bfloat16 | float16
    trust_remote_code: bool = False  # never on unless asked
    warm_start: str = "sft"  # sft: run `ulorl sft` before RL (built-in task); none: start RL from `path`
    gradient_checkpointing: bool = False  # keep each decoder layer's input, recompute the rest in backward
    # the learner's saved activations go to CPU memory during forward and come back in backward
    # (torch.autograd.graph.save_on_cpu); with gradient_checkpointing, that is the layer inputs it keeps
    activation_offload: bool = False
    rope_scaling_factor: float | None = None  # YaRN factor (paper's 140k run: 1.5)
    rope_original_max_len: int | None = None  # YaRN original context (paper: ~93k)
    lora: LoraConfig = field(default_factory=LoraConfig)  # rank > 0: train adapters only (RL; the SFT warm start is full)

    def __post_init__(self) -> None:
        check_choice("model.dtype", self.dtype, ["float32", "bfloat16", "float16"])
        check_choice("model.warm_start", self.warm_start, ["sft", "none"])
        if self.rope_scaling_factor is not None and self.rope_scaling_factor <= 1.0:
            raise ConfigError(f"model.rope_scaling_factor={self.rope_scaling_factor} must be > 1 (or null)")


@dataclass
class VLLMConfig:
    """`rollout.vllm`: options of the vLLM engine (used when rollout.engine=vllm)."""

    gpu_memory_utilization: float = 0.5  # share of GPU memory for vLLM (weights + KV cache); the learner needs the rest
    tensor_parallel_size: int = 1  # GPUs per engine
    max_model_len: int | None = None  # prompt + response context; None: the model's (x YaRN factor when set)
    dtype: str = "auto"  # auto (config dtype; float32 checkpoints run in bfloat16) | bfloat16 | float16 | float32
    enable_sleep_mode: bool = False  # free vLLM's GPU memory while the learner updates (learner on the same GPU)
    enable_prefix_caching: bool = True  # reuse KV of shared prefixes (reset after every weight sync)
    enforce_eager: bool = False  # no CUDA graphs: faster start, slower decode
    max_num_seqs: int | None = None  # requests decoded at once; None: vLLM's default
    seeded: bool = True  # per-request seeds (reproducible; vLLM samples seeded rows one by one)

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"rollout.vllm.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        _positive("rollout.vllm.tensor_parallel_size", self.tensor_parallel_size)
        for k in ("max_model_len", "max_num_seqs"):
            if getattr(self, k) is not None:
                _positive(f"rollout.vllm.{k}", getattr(self, k))
        check_choice("rollout.vllm.dtype", self.dtype, ["auto", "bfloat16", "float16", "float32"])


@dataclass
class RolloutConfig:
    engine: str = "torch"  # EngineName: torch (default: CPU and CUDA) | hf (any transformers LM, slower) | vllm (GPU)
    max_response_len: int = 160  # global cap L on response tokens
    num_segments: int = 4  # M; each rollout round decodes at most L / M tokens
    group_size: int = 8  # G samples per prompt
    decode_batch: int = 64  # target samples per round: unfinished + new prompts x G
    temperature: float = 0.85
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    max_batch: int = 256  # engine slots: sequences decoded at once (torch, hf); the rest wait for a free slot
    kv_cache_gib: float = 4.0  # torch engine: KV block pool size (one sequence of prefix + L must fit; rows beyond wait)
    dtype: str = "auto"  # torch engine weights and KV: auto (the model's) | float32 | bfloat16; log-probs stay float32
    vllm: VLLMConfig = field(default_factory=VLLMConfig)  # rollout.engine=vllm only

    def __post_init__(self) -> None:
        check_choice("rollout.engine", self.engine, EngineName)
        if not (math.isfinite(self.kv_cache_gib) and self.kv_cache_gib > 0):
            raise ConfigError(f"rollout.kv_cache_gib={self.kv_cache_gib} must be a positive number of GiB")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"rollout.dtype={self.dtype!r} must be one of auto, float32, bfloat16, float16")
        for k in ("max_response_len", "num_segments", "group_size", "decode_batch", "max_batch"):
            _positive(f"rollout.{k}", getattr(self, k))
        if self.max_response_len % self.num_segments:
            divisors = [m for m in range(1, min(self.max_response_len, 64) + 1) if self.max_response_len % m == 0]
            raise ConfigError(
                f"rollout.num_segments={self.num_segments} must divide rollout.max_response_len="
                f"{self.max_response_len}; allowed values: {divisors}"
            )
        if self.decode_batch < self.group_size:
            raise ConfigError(f"rollout.decode_batch={self.decode_batch} must be >= rollout.group_size={self.group_size}")
        check_sampling(self.temperature, self.top_p, self.top_k, "rollout.")

    @property
    def segment_len(self) -> int:
        return self.max_response_len // self.num_segments


@dataclass
class AlgoConfig:
    is_mode: str = "pois"  # tois | sais | pois | pois_tis | mask_stale
    entropy_mask: str = "dmmpt"  # none | mpt | dmmpt (EntropyMaskMode)
    tau: float = 0.99  # MPT probability threshold, in (0, 1)
    sigma: float = 0.2  # target entropy for DMMPTs, > 0
    eps_low: float = 0.2
    eps_high: float = 0.2  # clip-higher: 0.28
    loss_agg: str = "token-mean"
    dynamic_sampling: bool = True  # drop groups whose rewards are all equal
    norm_adv_by_std: bool = True
    tis_cap: float = 2.0  # pois_tis: truncation C of the stale-token weight
    max_stale: int = 1  # mask_stale: tokens older than this many versions give no gradient

    def __post_init__(self) -> None:
        check_choice("algo.is_mode", self.is_mode, ISMode)
        check_choice("algo.entropy_mask", self.entropy_mask, EntropyMaskMode)
        check_choice("algo.loss_agg", self.loss_agg, AggMode)
        if not 0 < self.tau < 1:
            raise ConfigError(f"algo.tau={self.tau} must be in (0, 1)")
        _positive("algo.sigma", self.sigma)
        if not 0 <= self.eps_low < 1:
            raise ConfigError(f"algo.eps_low={self.eps_low} must be in [0, 1)")
        _positive("algo.eps_high", self.eps_high, allow_zero=True)
        if self.tis_cap < 1:
            raise ConfigError(f"algo.tis_cap={self.tis_cap} must be >= 1")
        _positive("algo.max_stale", self.max_stale, allow_zero=True)


class PipelineMode(str, Enum):
    """`train.pipeline`: when the engine may run ahead of the learner (read by the trainer and the placement)."""

    SYNC = "sync"  # rollout, then the update, then the next rollout (the paper's loop)
    OVERLAP = "overlap"  # the next step's rounds run during the update, with weights one version old


@dataclass
class TrainConfig:
    steps: int = 30  # policy updates (one gradient update per step, as in the paper)
    train_groups: int = 8  # whole groups per update (fixed batch: leftovers wait)
    lr: float = 1e-6  # AdamW, constant (paper)
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    micro_batch_tokens: int = 512  # tokens per micro-batch; a longer sample gets one of its own (never split)
    # packed: samples concatenated into rows, each attending only within itself (0% padding); padded: length-sorted,
    # right-padded rows (2048 padded 19%: benchmarks.md). Same gradient to 1e-5; ulorl/learners/micro_batch.py
    packing: bool = True
    # Ulysses sequence parallelism: each sample's tokens split over this many ranks of a ShardedLearner group
    # (all-to-all around attention; one sample per micro-batch); the heads and KV heads must divide by it. 1: off
    sequence_parallel: int = 1
    logit_chunk: int = 1024  # positions per chunk of the log-prob/entropy pass
    max_rounds_per_step: int = 64  # rollout rounds without a full batch before giving up
    # rounds in a row that complete groups but admit none (dynamic sampling) before the run stops with a stall
    # report (stall_report.json); null: train.max_rounds_per_step
    max_stall_rounds: int | None = None
    max_bad_steps: int = 5  # consecutive non-finite updates that stop the run
    eval_every: int = 0  # evaluate on the held-out split every N steps (0: only before/after)
    seed: int = 0
    device: str = "cpu"
    # compute dtype of the learner's forward (none | bfloat16 | float16); weights, gradients and AdamW state
    # stay in model.dtype: model.dtype=float32 + autocast=bfloat16 is mixed precision with fp32 master weights
    autocast: str = "none"
    # sync | overlap: in overlap the learner runs in its own process and the next step's rollout rounds run while
    # it computes the update, with the weights of the update before (staleness exactly one version)
    pipeline: str = "sync"
    # overlap only: the learner process's device ("": train.device, i.e. colocated with the engine; on GPUs
    # e.g. cuda:1 puts the learner on its own device, docs/scale.md)
    learner_device: str = ""
    # torch threads of the run's process (0: torch's default, one per core). A tiny model's engine is faster
    # with 1 on CPU (its per-row ops are too small to split): configs/long.yaml sets it, docs/long_run.md
    threads: int = 0

    def __post_init__(self) -> None:
        check_choice("train.pipeline", self.pipeline, PipelineMode)
        if self.learner_device:
            _device_name("train.learner_device", self.learner_device)
        for k in ("steps", "train_groups", "lr", "micro_batch_tokens", "logit_chunk", "max_rounds_per_step",
                  "max_bad_steps", "sequence_parallel"):
            _positive(f"train.{k}", getattr(self, k))
        check_choice("train.autocast", self.autocast, ["none", "bfloat16", "float16"])
        _positive("train.grad_clip", self.grad_clip, allow_zero=True)
        _positive("train.eval_every", self.eval_every, allow_zero=True)
        _positive("train.threads", self.threads, allow_zero=True)
        if self.max_stall_rounds is not None:
            _positive("train.max_stall_rounds", self.max_stall_rounds)
        _positive("train.weight_decay", self.weight_decay, allow_zero=True)
        _device_name("train.device", self.device)


@dataclass
class SFTConfig:
    steps: int = 300
    batch_size: int = 32  # sequences per batch (the cap per batch when bucketed)
    bucketed: bool = False  # length-bucketed batches under batch_tokens (faster, learns less reliably)
    batch_tokens: int = 1536  # padded tokens per bucketed batch
    lr: float = 3e-3
    warmup_steps: int = 30
    num_examples: int = 6000
    max_size: int = 64  # only problems with at most this many steps (train on short ones, RL learns long ones)
    seed: int = 0
    task: str = "builtin:chain"  # the built-in task whose worked solutions are trained on (ulorl.tasks)
    alpha: float | None = None  # size-law exponent of the SFT problems; None: the task's own
    max_response_tokens: int | None = None  # cut longer solutions there, without EOS (cheap long-problem steps)

    def __post_init__(self) -> None:
        for k in ("steps", "batch_size", "batch_tokens", "lr", "num_examples", "max_size"):
            _positive(f"sft.{k}", getattr(self, k))
        _positive("sft.warmup_steps", self.warmup_steps, allow_zero=True)
        check_choice("sft.task", self.task, BuiltinTask)
        for k in ("alpha", "max_response_tokens"):
            if getattr(self, k) is not None:
                _positive(f"sft.{k}", getattr(self, k))


@dataclass
class LoggingConfig:
    loggers: list[str] = field(default_factory=lambda: ["console", "jsonl"])  # + tensorboard, wandb
    progress: bool = True  # tqdm progress bars
    table_every: int = 10  # print a metrics table every N steps (console logger)
    wandb_project: str = "ulorl"
    # decoded response text per line of samples.jsonl (its start and end kept); 0: no text, null: all of it
    sample_text_chars: int | None = 2000

    def __post_init__(self) -> None:
        from ulorl.logging import LoggerName

        for name in self.loggers:
            check_choice("logging.loggers", name, LoggerName)
        if self.sample_text_chars is not None:
            _positive("logging.sample_text_chars", self.sample_text_chars, allow_zero=True)


@dataclass
class CheckpointConfig:
    every: int = 10  # save every N steps (0: only at the end and on SIGTERM/SIGINT)
    keep: int = 2  # keep the last K complete checkpoints
    export: bool = True  # at the end of a run, the last checkpoint as a plain HF folder in RUN/export (ulorl.export)

    def __post_init__(self) -> None:
        _positive("checkpoint.every", self.every, allow_zero=True)
        _positive("checkpoint.keep", self.keep)


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)  # local | ray placement

    def __post_init__(self) -> None:
        if self.algo.dynamic_sampling and self.rollout.group_size < 2:
            raise ConfigError(
                f"rollout.group_size={self.rollout.group_size} with algo.dynamic_sampling=true: a group of one "
                "sample always has equal rewards, so every group would be dropped; use rollout.group_size>=2 "
                "or algo.dynamic_sampling=false")
        _check_supply(self.rollout, self.train)
        if self.algo.is_mode == "tois" and self.rollout.num_segments != 1:
            raise ConfigError(
                f"algo.is_mode=tois is true on-policy training and needs rollout.num_segments=1 "
                f"(got {self.rollout.num_segments}); use pois or sais with segments"
            )
        sp, procs = self.train.sequence_parallel, self.distributed.learner_procs
        if sp > 1 and procs % sp:
            raise ConfigError(f"train.sequence_parallel={sp} splits each sample over that many learner ranks: it must "
                              f"divide distributed.learner_procs={procs} (distributed.backend=ray)")
        if self.train.learner_device and self.train.pipeline != PipelineMode.OVERLAP:
            raise ConfigError(f"train.learner_device={self.train.learner_device} places the learner process of "
                              "train.pipeline=overlap; with train.pipeline=sync the learner runs on train.device")
        if self.model.lora.rank and (self.rollout.engine == "vllm" or self.distributed.backend != "local"
                                     or self.train.pipeline == PipelineMode.OVERLAP):
            raise ConfigError(f"model.lora.rank={self.model.lora.rank}: LoRA runs with rollout.engine=torch or hf, "
                              "train.pipeline=sync and distributed.backend=local (the adapters live in the one "
                              "in-process model; vLLM, Ray actors and the learner process are not wired for them yet)")
        if self.train.pipeline == PipelineMode.OVERLAP:
            if self.algo.is_mode == "tois":
                raise ConfigError("algo.is_mode=tois is true on-policy training; train.pipeline=overlap trains on "
                                  "samples one version old: use train.pipeline=sync, or is_mode=pois / sais")
            if self.distributed.backend != "local":
                raise ConfigError(f"train.pipeline=overlap runs the learner in a local child process; "
                                  f"distributed.backend={self.distributed.backend} is not supported with it yet "
                                  "(use distributed.backend=local)")


def _device_name(key: str, name: str) -> None:
    """A device string torch can parse (`cpu`, `cuda`, `cuda:1`, `mps`, ...); whether it exists is checked
    by `check_runnable`, so a GPU preset still loads on a laptop."""
    import torch

    try:
        torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{key}={name!r} is not a device name; use cpu, cuda, cuda:N or mps") from None


def worst_case_groups(rollout: RolloutConfig, rounds: int) -> int:
    """Whole groups that `rounds` rollout rounds complete when every answer runs to the global cap.

    Then every sample needs `num_segments` rounds, and a batch drawn into an empty decode batch
    (`(decode_batch - unfinished) // group_size` new prompts, at least one: `SegmentRollout.num_new_prompts`)
    blocks new draws until it finishes: `rounds // num_segments` waves of `max(1, decode_batch // group_size)`
    groups. Groups dropped by dynamic sampling are not counted: with it, fewer pass."""
    return (rounds // rollout.num_segments) * max(1, rollout.decode_batch // rollout.group_size)


def _check_supply(rollout: RolloutConfig, train: TrainConfig) -> None:
    """`train.train_groups` whole groups must fit in what `train.max_rounds_per_step` rounds can supply."""
    rounds, supply = train.max_rounds_per_step, worst_case_groups(rollout, train.max_rounds_per_step)
    if supply >= train.train_groups:
        return
    waves = rounds // rollout.num_segments
    hint = (f"rollout.decode_batch>={-(-train.train_groups // waves) * rollout.group_size}, " if waves else "")
    raise ConfigError(
        f"train.train_groups={train.train_groups} cannot be filled: train.max_rounds_per_step={rounds} rounds of "
        f"rollout.decode_batch={rollout.decode_batch} with rollout.group_size={rollout.group_size} complete at "
        f"most {supply} groups when answers run all rollout.num_segments={rollout.num_segments} segments; use "
        f"{hint}fewer train.train_groups, or more train.max_rounds_per_step")


# device type -> number of such devices visible here
_DEVICE_COUNT = {
    "cpu": lambda torch: 1,
    "cuda": lambda torch: torch.cuda.device_count() if torch.cuda.is_available() else 0,
    "mps": lambda torch: int(torch.backends.mps.is_available()),
    "xpu": lambda torch: torch.xpu.device_count() if hasattr(torch, "xpu") and torch.xpu.is_available() else 0,
}


def check_runnable(cfg: RunConfig) -> None:
    """What a valid config still needs from this machine, checked before any work (no warm start first):
    the device exists, the engine's package is installed, and the judge's API key variable is set."""
    import os

    import torch

    check_engine_installed(cfg)
    r = cfg.reward
    if r.judge != "none" and r.judge_url and r.api_key_env and not os.environ.get(r.api_key_env):
        raise ConfigError(f"reward.api_key_env={r.api_key_env!r}: that environment variable is not set or empty; "
                          "export it before the run (the key is read from it, never from a config)")

    for key, name in (("train.device", cfg.train.device), ("train.learner_device", cfg.train.learner_device)):
        if not name:
            continue
        dev = torch.device(name)
        count = _DEVICE_COUNT.get(dev.type, lambda torch: 0)(torch)
        if count == 0 or (dev.index or 0) >= count:
            raise ConfigError(f"{key}={name!r}: no such device on this machine ({count} {dev.type} device(s) "
                              f"visible); use {key}=cpu or a visible one")


WORKERS_PER_CPU = 4  # reward workers beyond this many per usable CPU only queue for the CPU


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. under `taskset` or a container's cpuset)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def bound_by_machine(cfg: RunConfig) -> tuple[RunConfig, list[str]]:
    """`cfg` with the settings that size processes and threads capped by this machine's CPUs, and a note for
    each cap: `train.threads` at the usable CPUs, `reward.num_workers` at `WORKERS_PER_CPU` per CPU. A config
    written for a bigger machine still runs here, and a typo (`reward.num_workers=100000`) cannot fork
    hundreds of processes."""
    import dataclasses

    cpus, notes = usable_cpus(), []
    train, reward = cfg.train, cfg.reward
    if train.threads > cpus:
        notes.append(f"train.threads={train.threads} is more than the {cpus} CPU(s) this process may use; "
                     f"using {cpus}")
        train = dataclasses.replace(train, threads=cpus)
    if reward.num_workers > WORKERS_PER_CPU * cpus:
        cap = WORKERS_PER_CPU * cpus
        notes.append(f"reward.num_workers={reward.num_workers} is more than {WORKERS_PER_CPU} per CPU ({cpus} "
                     f"usable); using {cap}")
        reward = dataclasses.replace(reward, num_workers=cap)
    return dataclasses.replace(cfg, train=train, reward=reward), notes


def check_engine_installed(cfg: RunConfig) -> None:
    """An engine that needs an optional package fails here, before any work, with the install hint."""
    import importlib.util
    import sys

    if cfg.rollout.engine == EngineName.VLLM.value and "vllm" not in sys.modules and \
            importlib.util.find_spec("vllm") is None:
        raise ConfigError("rollout.engine=vllm needs the vllm package, which is not installed here: pip install "
                          "'ulorl[vllm]' (a GPU machine with CUDA), or use rollout.engine=torch")


def load_run_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """YAML preset + dotted overrides -> validated `RunConfig`."""
    return load_config(RunConfig, path, overrides)
