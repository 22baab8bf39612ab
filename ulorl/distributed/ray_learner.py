"""The learner as Ray actors, and `RayLearner`, the driver-side stand-in the trainer calls.

`learner_procs` actors each hold a copy of the policy; with more than one they form a
`torch.distributed` group (rank 0's node and a free port as rendezvous; gloo on CPU,
NCCL on CUDA) and train a `ShardedLearner`, otherwise a `LocalLearner`. Every actor
receives the whole batch (one `ray.put`), shards it by whole groups itself, and all
take the identical optimizer step.

Weights: after each update the driver's model receives the learner's weights (rank 0's
full state dict), so checkpoints, evaluation and the trainer's
`engine.sync_weights(model.state_dict())` see the trained policy exactly as in a local
run; the weights travel learner -> driver -> engines. A direct learner -> engine
broadcast (NCCL, as verl does) would skip the driver; not done here. The optimizer
state stays in the actors; `state_dict()` fetches it from rank 0 for checkpoints and
`load_state_dict` sends it to every actor on resume. The metrics, `actor/lr` included,
are rank 0's.
"""

from __future__ import annotations

import torch

from ulorl.config import RunConfig
from ulorl.distributed.ray_cluster import actor_threads, cpu_model, require_ray
from ulorl.trajectory import Trajectory


class LearnerWorker:
    """Body of a learner actor (one data-parallel rank)."""

    def __init__(self, model: torch.nn.Module, cfg: RunConfig, pad_id: int, rank: int) -> None:
        actor_threads(cfg.distributed.cpus_per_learner)
        self.cfg, self.model, self.pad_id, self.rank = cfg, model.to(cfg.train.device), pad_id, rank
        self.learner = None

    def rendezvous(self) -> tuple[str, int]:
        """This node's address and a free port (asked of rank 0)."""
        import ray

        from ulorl.distributed.sharded_learner import free_port

        return ray.util.get_node_ip_address(), free_port()

    def setup(self, addr: str | None, port: int | None) -> None:
        from ulorl.learners.local import LocalLearner

        c, world = self.cfg, self.cfg.distributed.learner_procs
        if world == 1:
            self.learner = LocalLearner(self.model, c.train, c.algo, c.rollout.temperature, self.pad_id)
            return
        from ulorl.distributed.sharded_learner import ShardedLearner, init_process_group

        init_process_group(self.rank, world, addr, port, c.train.device)
        self.learner = ShardedLearner(self.model, c.train, c.algo, c.rollout.temperature, self.pad_id,
                                      sharding=c.distributed.sharding)

    def update(self, trajs: list[Trajectory], version: int, loss_keep: list[bool] | None) -> dict[str, float]:
        return self.learner.update(trajs, version, loss_keep=loss_keep)

    def weights(self) -> dict[str, torch.Tensor] | None:
        """Rank 0: the full state dict on CPU; other ranks: None (they take part in fsdp2's gather)."""
        if getattr(self.learner, "lockstep", False):
            sd = self.learner.model_state_dict()  # a collective: every rank calls it
        elif self.rank == 0:
            sd = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        else:
            return None
        return sd if self.rank == 0 else None

    def state_dict(self) -> dict | None:
        sd = self.learner.state_dict()  # a collective under fsdp2
        return sd if self.rank == 0 else None

    def load_state_dict(self, state: dict) -> None:
        self.learner.load_state_dict(state)


class RayLearner:
    """The `Learner` protocol (`ulorl.learners.base`), computed by learner actors."""

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, pad_id: int) -> None:
        self.ray, self.model, d = require_ray(), model, cfg.distributed
        remote = self.ray.remote(LearnerWorker).options(num_cpus=d.cpus_per_learner, num_gpus=d.gpus_per_learner)
        model_ref = self.ray.put(cpu_model(model))
        self.actors = [remote.remote(model_ref, cfg, pad_id, rank) for rank in range(d.learner_procs)]
        addr, port = self.ray.get(self.actors[0].rendezvous.remote()) if d.learner_procs > 1 else (None, None)
        self.ray.get([a.setup.remote(addr, port) for a in self.actors])

    def update(self, trajs: list[Trajectory], version: int, loss_keep: list[bool] | None = None) -> dict[str, float]:
        """One update on every rank; the driver's model then holds the new weights."""
        ref = self.ray.put(trajs)
        metrics = self.ray.get([a.update.remote(ref, version, loss_keep) for a in self.actors])[0]
        if not metrics["actor/skipped"]:
            state = self.ray.get([a.weights.remote() for a in self.actors])[0]
            self.model.load_state_dict(state)
        return metrics

    def state_dict(self) -> dict:
        return self.ray.get([a.state_dict.remote() for a in self.actors])[0]

    def load_state_dict(self, state: dict) -> None:
        ref = self.ray.put(state)
        self.ray.get([a.load_state_dict.remote(ref) for a in self.actors])

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
