"""What a valid config needs from this machine (`check_runnable`), and the caps this machine puts on a config
(`bound_by_machine`)."""

from __future__ import annotations

from ulorl.config.loader import ConfigError
from ulorl.config.run import RunConfig
from ulorl.rollout.engines.registry import EngineName

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

    check_engine_installed(cfg)
    r = cfg.reward
    if r.judge != "none" and r.judge_url and r.api_key_env and not os.environ.get(r.api_key_env):
        raise ConfigError(f"reward.api_key_env={r.api_key_env!r}: that environment variable is not set or empty; "
                          "export it before the run (the key is read from it, never from a config)")

    for key, name in (("train.device", cfg.train.device), ("train.learner_device", cfg.train.learner_device)):
        if name:
            check_device(key, name)


def check_device(key: str, name: str, usage: str | None = None) -> None:
    """ConfigError naming `key` when torch sees no device `name` here. `usage` is how the user names another
    (default `{key}=cpu`; a flag gives its own)."""
    import torch

    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise ConfigError(f"{key}={name!r} is not a device torch knows ({e}); use cpu, cuda or cuda:N") from None
    count = _DEVICE_COUNT.get(dev.type, lambda torch: 0)(torch)
    if count == 0 or (dev.index or 0) >= count:
        raise ConfigError(f"{key}={name!r}: no such device on this machine ({count} {dev.type} device(s) "
                          f"visible); use {usage or f'{key}=cpu'} or a visible one")


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
