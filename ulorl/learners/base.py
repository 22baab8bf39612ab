"""The learner protocol: what the training loop, the session and checkpoints need from any learner.

A learner turns a batch of whole, scored groups into one gradient update of the
policy it was built on. `LocalLearner` (`ulorl.learners.local`) does it in this
process; `ShardedLearner` (`ulorl.distributed.sharded_learner`) on one rank of a
`torch.distributed` group; `RayLearner` (`ulorl.distributed.ray_learner`) in Ray
actors. A placement (`ulorl.distributed.placement`) builds one of them; the trainer
only calls what is below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ulorl.trajectory import Trajectory


@runtime_checkable
class Learner(Protocol):
    """One gradient update per call; after it, the model the learner was built on holds the new weights
    (the trainer syncs the engine from that model, checkpoints save it)."""

    def update(self, trajs: list[Trajectory], version: int,
               loss_keep: list[bool] | None = None) -> dict[str, float]:
        """One update on `trajs` (whole groups; `version` = updates done so far, for segment ages).

        `loss_keep[i]=False` drops sample i from the loss (the overlong policy's `Trajectory.loss_keep`).
        Returns verl-style metrics, at least `actor/entropy`, `actor/lr` (the learning rate of this update)
        and `actor/skipped` (1.0 when a non-finite loss or gradient norm left weights and optimizer as they
        were)."""
        ...

    def state_dict(self) -> dict:
        """`{"optimizer": ...}`: what a checkpoint needs to resume the update exactly."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""
        ...
