"""`RunConfig`: every section composed, the checks that span sections, and `load_run_config`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ulorl.config.algo import AlgoConfig
from ulorl.config.checkpoint import CheckpointConfig
from ulorl.config.data import DataConfig
from ulorl.config.distributed import DistributedConfig
from ulorl.config.evaluation import EvalConfig
from ulorl.config.loader import ConfigError, check_field_types, load_config
from ulorl.config.logging import LoggingConfig
from ulorl.config.model import ModelConfig
from ulorl.config.reward import RewardConfig
from ulorl.config.rollout import RolloutConfig
from ulorl.config.sft import SFTConfig
from ulorl.config.train import PipelineMode, TrainConfig


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
        check_field_types(self, "")
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
        procs = self.rollout.torch.procs
        if procs > 1 and (self.rollout.engine != "torch" or self.distributed.backend != "local"
                          or not self.train.device.startswith("cpu") or self.model.lora.rank):
            raise ConfigError(f"rollout.torch.procs={procs} splits each rollout call between CPU processes: it needs "
                              f"rollout.engine=torch, distributed.backend=local, train.device=cpu and no LoRA (got "
                              f"{self.rollout.engine}, {self.distributed.backend}, {self.train.device}, "
                              f"model.lora.rank={self.model.lora.rank}; the processes are not wired for adapters)")
        if self.train.pipeline == PipelineMode.OVERLAP:
            if self.algo.is_mode == "tois":
                raise ConfigError("algo.is_mode=tois is true on-policy training; train.pipeline=overlap trains on "
                                  "samples one version old: use train.pipeline=sync, or is_mode=pois / sais")
            if self.distributed.backend != "local":
                raise ConfigError(f"train.pipeline=overlap runs the learner in a local child process; "
                                  f"distributed.backend={self.distributed.backend} is not supported with it yet "
                                  "(use distributed.backend=local)")


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


def load_run_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """YAML preset + dotted overrides -> validated `RunConfig`."""
    return load_config(RunConfig, path, overrides)
