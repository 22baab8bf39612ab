"""Placement registry: `distributed.backend` -> where the engine and the learner run.

`TrainSession` asks its placement for the engine and the learner and closes it at
the end; the trainer loop does not know which placement it runs on. The driver
always keeps the model (for checkpoints and evaluation), the pools, the prompt
source, the rewards and the loop.

- `local`: the registry engine over the session's model (torch and HF share its weights
  with the learner) and a `LocalLearner` in this process; with `train.pipeline=overlap`
  a `ProcessLearner` (`ulorl.learners.process`): the learner in a child process on its own
  copy of the model, one torch thread there and one here on CPU.
- `ray`: `RayEngine` (`num_engines` engine actors) and `RayLearner` (`learner_procs`
  learner actors, a `ShardedLearner` group when > 1) on a Ray cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from ulorl.config import ConfigError, PipelineMode, RunConfig
from ulorl.config.distributed import BackendName
from ulorl.learners.base import Learner
from ulorl.rollout.engines.base import Engine, close_engine


class Placement(Protocol):
    def engine(self, model: torch.nn.Module, tokenizer, eos_ids: list[int], **engine_kw) -> Engine:
        """The rollout engine (`engine_kw` go to `build_engine`)."""
        ...

    def learner(self, model: torch.nn.Module, pad_id: int) -> Learner:
        """The learner, training `model` (after each update `model` holds the new weights)."""
        ...

    def close(self) -> None:
        """Release what the placement started (actors)."""
        ...


class LocalPlacement:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self._learner, self._threads, self._engine = None, None, None

    def engine(self, model, tokenizer, eos_ids, **engine_kw) -> Engine:
        from ulorl.rollout.engines.registry import build_engine

        self._engine = build_engine(self.cfg.rollout.engine, model, tokenizer, eos_ids, **engine_kw)
        return self._engine

    def learner(self, model, pad_id) -> Learner:
        t = self.cfg.train
        if t.pipeline == PipelineMode.SYNC:
            from ulorl.learners.local import LocalLearner

            return LocalLearner(model, t, self.cfg.algo, self.cfg.rollout.temperature, pad_id)
        from ulorl.learners.process import ProcessLearner

        if torch.device(t.device).type == "cpu":  # one core for the engine here, one for the learner process
            self._threads = torch.get_num_threads()
            torch.set_num_threads(1)
        self._learner = ProcessLearner(model, t, self.cfg.algo, self.cfg.rollout.temperature, pad_id,
                                       device=t.learner_device or t.device)
        return self._learner

    def close(self) -> None:
        if self._learner is not None:
            self._learner.close()
            self._learner = None
        if self._engine is not None:
            close_engine(self._engine)
            self._engine = None
        if self._threads is not None:
            torch.set_num_threads(self._threads)
            self._threads = None


class RayPlacement:
    def __init__(self, cfg: RunConfig) -> None:
        from ulorl.distributed.ray_cluster import connect

        d = cfg.distributed
        if torch.device(cfg.train.device).type == "cuda" and not (d.gpus_per_engine > 0 and d.gpus_per_learner > 0):
            raise ConfigError(f"train.device={cfg.train.device} with distributed.backend=ray: give the actors GPUs "
                              f"(distributed.gpus_per_engine={d.gpus_per_engine}, distributed.gpus_per_learner="
                              f"{d.gpus_per_learner}; e.g. 1 each)")
        self.cfg, self.ray = cfg, connect(d)
        self._parts: list = []

    def engine(self, model, tokenizer, eos_ids, **engine_kw) -> Engine:
        from ulorl.distributed.ray_engine import RayEngine

        self._parts.append(RayEngine(self.cfg.distributed, self.cfg.rollout.engine, model, tokenizer, eos_ids,
                                     device=self.cfg.train.device, engine_kw=engine_kw))
        return self._parts[-1]

    def learner(self, model, pad_id) -> Learner:
        from ulorl.distributed.ray_learner import RayLearner

        self._parts.append(RayLearner(self.cfg, model, pad_id))
        return self._parts[-1]

    def close(self) -> None:
        """Kill this run's actors (the Ray session stays up for the process: a later run reuses it)."""
        for part in self._parts:
            part.close()
        self._parts = []


PLACEMENTS: dict[BackendName, Callable[[RunConfig], Placement]] = {
    BackendName.LOCAL: LocalPlacement,
    BackendName.RAY: RayPlacement,
}


def build_placement(cfg: RunConfig) -> Placement:
    return PLACEMENTS[BackendName(cfg.distributed.backend)](cfg)
