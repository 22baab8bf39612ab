"""Placement of engines and learners beyond one process.

- `sharding.py`: whole groups -> data-parallel ranks.
- `sharded_learner.py`: `ShardedLearner`, data parallel over `torch.distributed`
  (gloo on CPU, FSDP2 on GPU) with the exact global token-mean.
- `ray_engine.py` / `ray_learner.py`: engine and learner actors and their driver-side
  stand-ins (`RayEngine` is an `Engine`, `RayLearner` a `Learner`).
- `placement.py`: the registry `distributed.backend` -> engine + learner for `TrainSession`.

Ray is optional (`pip install 'ulorl[ray]'`); nothing here imports it until a Ray
placement is built. The `distributed:` config section is `ulorl.config.distributed`.
"""

from ulorl.distributed.sharding import shard_groups

__all__ = ["shard_groups"]
