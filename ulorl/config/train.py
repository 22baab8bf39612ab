"""`train:` the update (optimizer, micro-batches, packing, sequence parallelism), the step limits and the pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ulorl.config.checks import device_name, positive, seed
from ulorl.config.loader import ConfigError, check_choice, check_field_types


class PipelineMode(str, Enum):
    """`train.pipeline`: when the engine may run ahead of the learner (read by the trainer and the placement)."""

    SYNC = "sync"  # rollout, then the update, then the next rollout (the paper's loop)
    OVERLAP = "overlap"  # the next step's rounds run during the update, with weights one version old


# train.cpu_numerics -> the environment it sets before any tensor operation (ulorl.run.numerics applies it): each
# variable is read by torch or MKL at its first use in a process, and spawned children inherit it
CPU_NUMERICS: dict[str, dict[str, str]] = {
    "native": {},  # the CPU's own fastest kernels
    # torch's AVX2 kernels, and MKL's COMPATIBLE branch (documented as reproducible on Intel and AMD CPUs)
    "portable": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
}


class OptimizerName(str, Enum):
    """`train.optimizer` (built by `ulorl.learners.optimizers`)."""

    ADAMW = "adamw"  # the paper's
    SGD = "sgd"


@dataclass
class TrainConfig:
    steps: int = 30  # policy updates (one gradient update per step, as in the paper)
    train_groups: int = 8  # whole groups per update (fixed batch: leftovers wait)
    lr: float = 1e-6  # constant (paper)
    # adamw (the paper's) | sgd: SGD moves each weight in proportion to its gradient, AdamW by about lr whatever
    # the gradient (ulorl/learners/optimizers.py, docs/long_run.md)
    optimizer: str = "adamw"
    adam_eps: float = 1e-8  # adamw only: far above a weight's gradient scale, AdamW acts as SGD at lr/eps
    momentum: float = 0.0  # sgd only
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
    # native | portable: portable pins torch's CPU kernels to AVX2 and MKL to its reproducible COMPATIBLE branch,
    # so that the run's floats do not follow MKL's dispatch or thread split; they still follow torch's thread count
    # (set train.threads) and, measured, the CPU vendor (an Intel Xeon and an AMD EPYC Zen 4 differ); the demo took
    # 1.6x its native time on an Intel Xeon (ulorl/run/numerics.py, docs/reproduction.md)
    cpu_numerics: str = "native"

    def __post_init__(self) -> None:
        check_field_types(self, "train.")
        check_choice("train.pipeline", self.pipeline, PipelineMode)
        check_choice("train.cpu_numerics", self.cpu_numerics, CPU_NUMERICS)
        check_choice("train.optimizer", self.optimizer, OptimizerName)
        if self.learner_device:
            device_name("train.learner_device", self.learner_device)
        for k in ("steps", "train_groups", "lr", "micro_batch_tokens", "logit_chunk", "max_rounds_per_step",
                  "max_bad_steps", "sequence_parallel"):
            positive(f"train.{k}", getattr(self, k))
        check_choice("train.autocast", self.autocast, ["none", "bfloat16", "float16"])
        positive("train.grad_clip", self.grad_clip, allow_zero=True)
        positive("train.eval_every", self.eval_every, allow_zero=True)
        positive("train.threads", self.threads, allow_zero=True)
        if self.max_stall_rounds is not None:
            positive("train.max_stall_rounds", self.max_stall_rounds)
        positive("train.weight_decay", self.weight_decay, allow_zero=True)
        positive("train.adam_eps", self.adam_eps)
        positive("train.momentum", self.momentum, allow_zero=True)
        seed("train.seed", self.seed)
        if self.momentum >= 1:
            raise ConfigError(f"train.momentum={self.momentum} must be in [0, 1)")
        device_name("train.device", self.device)
