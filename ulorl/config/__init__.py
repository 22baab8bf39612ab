"""Run configuration: one small dataclass per section, one module per section, composed into `RunConfig`.

Load with `load_run_config(path, overrides)`; every field is validated at start so a bad value fails
before any work is done, naming the key and the allowed values.

    loader.py       YAML + dotted overrides -> dataclasses (`load_config`, `build`, `ConfigError`)
    hints.py        the "did you mean" line of an unknown key
    checks.py       validators shared by the sections
    model.py  data.py  rollout.py  algo.py  reward.py  train.py  sft.py  evaluation.py
    logging.py  checkpoint.py  distributed.py          one section each (`model:`, `data:`, ...)
    run.py          `RunConfig` (the sections composed, cross-section checks), `load_run_config`
    machine.py      what a valid config needs from this machine, and the caps it gets here

Layer rule (checked by tests/test_layers.py): this package is a leaf. Its modules import only
`ulorl.errors`, each other, and modules that are themselves leaves: the registries whose str Enums
name the valid choices (`algo` functions, `rollout.engines.registry`, `reward.registry`,
`reward.overlong`, `reward.judge`, `reward.extract`, `tasks`, the logger names), each holding no
import of a higher layer. No config module imports the run, a learner, checkpointing, the CLI,
engine implementations, the distributed runtime, reward workers, evaluation or data loaders: those
build components from a config, never the reverse. Every "choose one of" check goes through
`loader.check_choice`, and every error is a `ConfigError`.

Each str Enum of choices sits beside its registry (`EntropyMaskMode` + `ENTROPY_MASKS` in
`algo/entropy_mask.py`, `EngineName` + `ENGINES` in `rollout/engines/registry.py`, ...), except
where the registry's module itself builds from a config (`distributed.backend`, `data.format`):
then the enum sits in the config module, below both.
"""

from ulorl.config.loader import ConfigError, build, changed_settings, check_choice, dump_yaml, load_config, to_dict
from ulorl.config.algo import AlgoConfig
from ulorl.config.checkpoint import CheckpointConfig
from ulorl.config.data import BUILTIN_CHAIN, BadRowPolicy, DataConfig, DataFormat
from ulorl.config.distributed import BackendName, DistributedConfig, ShardingName
from ulorl.config.evaluation import EvalConfig
from ulorl.config.logging import LoggingConfig
from ulorl.config.model import LORA_ALL_LINEAR, LoraConfig, ModelConfig
from ulorl.config.reward import RewardConfig, RewardFnConfig
from ulorl.config.rollout import RolloutConfig, VLLMConfig
from ulorl.config.sft import SFTConfig
from ulorl.config.train import OptimizerName, PipelineMode, TrainConfig
from ulorl.config.run import RunConfig, load_run_config, worst_case_groups
from ulorl.config.machine import (WORKERS_PER_CPU, bound_by_machine, check_packages_installed, check_runnable,
                                  usable_cpus)

__all__ = ["BUILTIN_CHAIN", "LORA_ALL_LINEAR", "WORKERS_PER_CPU", "AlgoConfig", "BackendName", "BadRowPolicy",
           "CheckpointConfig", "ConfigError", "DataConfig", "DataFormat", "DistributedConfig", "EvalConfig",
           "LoggingConfig", "LoraConfig", "ModelConfig", "OptimizerName", "PipelineMode", "RewardConfig",
           "RewardFnConfig", "RolloutConfig", "RunConfig", "SFTConfig", "ShardingName", "TrainConfig", "VLLMConfig",
           "bound_by_machine", "build", "changed_settings", "check_choice", "check_packages_installed",
           "check_runnable", "dump_yaml", "load_config", "load_run_config", "to_dict", "usable_cpus",
           "worst_case_groups"]
