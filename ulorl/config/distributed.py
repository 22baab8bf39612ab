"""`distributed:` section of the run config: where engines and learners run.

`backend=local` (default) is the single-process run: the engine shares the learner's
model. `backend=ray` places `num_engines` rollout-engine actors and `learner_procs`
learner actors (a `torch.distributed` group when > 1) on a Ray cluster; the driver
keeps the pools and the trainer loop. Checked in `__post_init__`, so a bad value
fails before any work, naming the key.

A leaf of the config layer (see `ulorl/config/__init__.py`). `BackendName` keys the `PLACEMENTS`
registry of `placement.py` and `ShardingName` is resolved in `sharded_learner.py`; the enums
sit here, below those modules, because they build from this config (beside them, the config
would import the distributed runtime).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ulorl.config.loader import ConfigError, check_choice, check_field_types


class BackendName(str, Enum):
    LOCAL = "local"  # one process: engine and learner share the model
    RAY = "ray"  # engine actors + learner actors on a Ray cluster


class ShardingName(str, Enum):
    AUTO = "auto"  # fsdp2 when train.device is cuda, replicate otherwise
    REPLICATE = "replicate"  # every rank holds the whole model; gradients all-reduced (DDP-style)
    FSDP2 = "fsdp2"  # decoder layers sharded with torch.distributed.fsdp.fully_shard


@dataclass
class DistributedConfig:
    backend: str = "local"  # local | ray
    num_engines: int = 1  # ray: rollout-engine actors (each holds a copy of the policy)
    learner_procs: int = 1  # ray: learner actors = torch.distributed world size (data parallel)
    sharding: str = "auto"  # auto | replicate | fsdp2 (learner_procs > 1)
    ray_address: str | None = None  # null: start a local Ray cluster; "auto" or "host:6379": join one
    num_cpus: int | None = None  # local Ray cluster's CPU count (null: what the actors ask for)
    cpus_per_engine: float = 1.0  # Ray resources of each engine actor
    gpus_per_engine: float = 0.0
    cpus_per_learner: float = 1.0  # Ray resources of each learner actor
    gpus_per_learner: float = 0.0

    def __post_init__(self) -> None:
        check_field_types(self, "distributed.")
        check_choice("distributed.backend", self.backend, BackendName)
        check_choice("distributed.sharding", self.sharding, ShardingName)
        for key in ("num_engines", "learner_procs"):
            if getattr(self, key) < 1:
                raise ConfigError(f"distributed.{key}={getattr(self, key)} must be >= 1")
        for key in ("cpus_per_engine", "gpus_per_engine", "cpus_per_learner", "gpus_per_learner"):
            if getattr(self, key) < 0:
                raise ConfigError(f"distributed.{key}={getattr(self, key)} must be >= 0")
        if self.num_cpus is not None and self.num_cpus < 1:
            raise ConfigError(f"distributed.num_cpus={self.num_cpus} must be >= 1 (or null)")
        if self.backend == BackendName.LOCAL.value and (self.num_engines, self.learner_procs) != (1, 1):
            raise ConfigError(f"distributed.num_engines={self.num_engines} and distributed.learner_procs="
                              f"{self.learner_procs} need distributed.backend=ray (backend=local is one process)")
        if self.num_cpus is not None and self.ray_address is not None:
            raise ConfigError("distributed.num_cpus sizes a local Ray cluster; it cannot be set together with "
                              f"distributed.ray_address={self.ray_address!r} (the cluster's own resources apply)")
