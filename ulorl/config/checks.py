"""Validators shared by the config sections: each raises a `ConfigError` that names the key."""

from __future__ import annotations

import math

from ulorl.config.loader import ConfigError


def positive(key: str, value: float, allow_zero: bool = False) -> None:
    if not math.isfinite(value):  # NaN passes `value < 0`; the loader refuses both, this guards direct construction
        raise ConfigError(f"{key}={value} is not a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{key}={value} must be {'>= 0' if allow_zero else '> 0'}")


SEED_LIMIT = 2**32  # numpy's global seed must be below it (`np.random.seed`); torch's and random's take it too


def seed(key: str, value: int) -> None:
    """A seed every generator the run seeds accepts: an integer in [0, 2**32 - 1]."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < SEED_LIMIT:
        raise ConfigError(f"{key}={value!r} must be an integer in [0, {SEED_LIMIT - 1}] (2**32 - 1)")


def share(key: str, value: float, meaning: str = "") -> None:
    """A fraction in [0, 1] (NaN fails too); `meaning` is added to the message, e.g. " (a share of sft.num_examples)"."""
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key} must be in [0, 1]{meaning}, got {value}")


# peft's names of the Llama/Qwen linear layers: attention and MLP projections (not the LM head)
LORA_ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def device_name(key: str, name: str) -> None:
    """A device string torch can parse (`cpu`, `cuda`, `cuda:1`, `mps`, ...); whether it exists is checked
    by `check_runnable`, so a GPU preset still loads on a laptop."""
    import torch

    try:
        torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{key}={name!r} is not a device name; use cpu, cuda, cuda:N or mps") from None
