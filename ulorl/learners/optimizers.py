"""The learner's optimizer, by name (`train.optimizer`): AdamW (the paper's) or plain SGD.

AdamW divides each weight's gradient by the root of its own running second moment, so in its first steps every
weight moves by about the learning rate whatever the size of its gradient (step one is exactly `lr * sign(g)`).
When a batch's signal is a few low-probability tokens among ~10^5 near-certain ones, that moves weights whose
gradient is only noise as far as the few that carry the signal. SGD moves each weight in proportion to its
gradient; `train.adam_eps` is the continuum between the two (eps far above a weight's gradient scale makes AdamW
SGD with rate lr/eps for that weight). docs/long_run.md measures both on the long task.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ulorl.config import OptimizerName, TrainConfig


def _adamw(params: list[torch.nn.Parameter], train: TrainConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=train.lr, weight_decay=train.weight_decay, eps=train.adam_eps)


def _sgd(params: list[torch.nn.Parameter], train: TrainConfig) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=train.lr, momentum=train.momentum, weight_decay=train.weight_decay)


OPTIMIZERS: dict[OptimizerName, Callable[[list[torch.nn.Parameter], TrainConfig], torch.optim.Optimizer]] = {
    OptimizerName.ADAMW: _adamw,
    OptimizerName.SGD: _sgd,
}


def make_optimizer(params: list[torch.nn.Parameter], train: TrainConfig) -> torch.optim.Optimizer:
    """`train.optimizer` over `params`, with `train.lr` / `weight_decay` (and `adam_eps` or `momentum`)."""
    return OPTIMIZERS[OptimizerName(train.optimizer)](params, train)


def load_keeping_settings(optimizer: torch.optim.Optimizer, load: Callable[[], None]) -> None:
    """Run `load`, which restores `optimizer`'s saved state, then put back the settings each parameter group was
    built with (this run's `train.lr`, `weight_decay`, `adam_eps`, `momentum`): a checkpoint brings its moments,
    not its hyperparameters. torch's `load_state_dict` restores the saved groups' settings too, so a resumed run
    whose config changed the learning rate trained on with the old one."""
    settings = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    load()
    for group, kept in zip(optimizer.param_groups, settings, strict=True):
        group.update(kept)
