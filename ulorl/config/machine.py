"""What a valid config needs from this machine (`check_runnable`), and the caps this machine puts on a config
(`bound_by_machine`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ulorl.config.distributed import BackendName
from ulorl.config.loader import ConfigError
from ulorl.config.reward import RewardConfig
from ulorl.config.run import RunConfig
from ulorl.rollout.engines.registry import EngineName

# device type -> number of such devices visible here
_DEVICE_COUNT = {
    "cpu": lambda torch: 1,
    "cuda": lambda torch: torch.cuda.device_count() if torch.cuda.is_available() else 0,
    "mps": lambda torch: int(torch.backends.mps.is_available()),
    "xpu": lambda torch: torch.xpu.device_count() if hasattr(torch, "xpu") and torch.xpu.is_available() else 0,
}


def check_runnable(cfg: RunConfig, sft: bool = False) -> None:
    """What a valid config still needs from this machine, checked before any work (no warm start first):
    the device exists, the optional packages its settings need are installed (`check_packages_installed`; `sft`:
    only those `ulorl sft` uses), the judge's API key variable is set and its local model loads as a chat model
    (`check_judge_runnable`)."""
    check_packages_installed(cfg, sft)
    check_judge_runnable(cfg.reward)

    for key, name in (("train.device", cfg.train.device), ("train.learner_device", cfg.train.learner_device)):
        if name:
            check_device(key, name)


def check_judge_runnable(r: RewardConfig) -> None:
    """The judge's API key variable is set (`reward.judge_url`) or its local model loads as a chat model
    (`reward.judge_model_path`, `check_judge_model`); nothing without a judge."""
    import os

    if r.judge != "none" and r.judge_url and r.api_key_env and not os.environ.get(r.api_key_env):
        raise ConfigError(f"reward.api_key_env={r.api_key_env!r}: that environment variable is not set or empty; "
                          "export it before the run (the key is read from it, never from a config)")
    if r.judge != "none" and r.judge_model_path:
        check_judge_model(r.judge_model_path, r.judge_trust_remote_code)


def check_judge_model(path: str, trust_remote_code: bool = False) -> None:
    """ConfigError naming `reward.judge_model_path` when `path` is not a local model folder whose config and
    tokenizer load, the tokenizer with a chat template (the judge is asked as a chat). Its weights load when the run
    builds its rewards, after the SFT warm start; this checks the rest, in about a second."""
    import os

    key = f"reward.judge_model_path={path!r}"
    if not os.path.isdir(path):
        raise ConfigError(f"{key}: no such folder; give a local Hugging Face chat model's folder, or serve the judge "
                          "and give reward.judge_url")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(f"{key}: no config.json, so not a Hugging Face model folder")
    from transformers import AutoConfig, AutoTokenizer

    try:
        AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - whatever transformers raises for a folder it cannot read
        raise ConfigError(f"{key}: its config or tokenizer does not load ({type(e).__name__}: "
                          f"{' '.join(str(e).split())})") from None
    if len(tokenizer) < 2:  # transformers makes an empty one of the config's type for a folder without its files
        raise ConfigError(f"{key}: its tokenizer is empty (are its files, e.g. tokenizer.json, in the folder?)")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ConfigError(f"{key}: its tokenizer has no chat template, and the judge is asked as a chat; use a chat "
                          "(instruct) model")


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


@dataclass(frozen=True)
class OptionalPackage:
    """A package that a setting needs and that ulorl does not install by default (one of pyproject's extras)."""

    module: str  # its import name
    install: str  # the command that installs it
    needed_by: Callable[[RunConfig], str | None]  # the setting of a config that needs it, or None
    instead: str  # how to run without it
    sft: bool = False  # `ulorl sft` uses it too (its held-out evaluation builds the engine)


def _logger(name: str) -> Callable[[RunConfig], str | None]:
    return lambda c: f"logging.loggers={c.logging.loggers}" if name in c.logging.loggers else None


OPTIONAL_PACKAGES = (
    OptionalPackage("vllm", "pip install 'ulorl[vllm]'",
                    lambda c: "rollout.engine=vllm" if c.rollout.engine == EngineName.VLLM.value else None,
                    "(a GPU machine with CUDA), or use rollout.engine=torch", sft=True),
    OptionalPackage("ray", "pip install 'ulorl[ray]'",
                    lambda c: "distributed.backend=ray" if c.distributed.backend == BackendName.RAY.value else None,
                    "or use distributed.backend=local"),
    OptionalPackage("peft", "pip install 'peft>=0.18'",
                    lambda c: f"model.lora.rank={c.model.lora.rank}" if c.model.lora.rank else None,
                    "or use model.lora.rank=0 (every weight trained)"),
    OptionalPackage("tensorboard", "pip install 'ulorl[tensorboard]'", _logger("tensorboard"),
                    "or drop 'tensorboard' from logging.loggers"),
    OptionalPackage("wandb", "pip install 'ulorl[wandb]'", _logger("wandb"), "or drop 'wandb' from logging.loggers"),
)


def check_packages_installed(cfg: RunConfig, sft: bool = False) -> None:
    """A setting whose optional package is not installed fails here, before any work (the SFT warm start included),
    with the install hint; `OPTIONAL_PACKAGES` lists them. `sft`: only the packages `ulorl sft` uses (a train
    preset given to `ulorl sft` may name a logger that the SFT does not use)."""
    import importlib.util
    import sys

    for package in [p for p in OPTIONAL_PACKAGES if p.sft or not sft]:
        setting = package.needed_by(cfg)
        if setting and package.module not in sys.modules and importlib.util.find_spec(package.module) is None:
            raise ConfigError(f"{setting} needs the {package.module} package, which is not installed here: "
                              f"{package.install} {package.instead}")
