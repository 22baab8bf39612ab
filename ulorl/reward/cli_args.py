"""The reward options shared by `ulorl eval` and `ulorl clean`: the same `reward:` section as `ulorl train`.

`--config run.yaml` takes the `reward:` section of a training preset, and
`--reward key=value ...` overrides its keys (`fn=my_rewards.py:score`,
`judge=rule_then_judge judge_url=http://127.0.0.1:8000`; a `reward.` prefix
is accepted too). Values are parsed as YAML, keys and values are checked like
training's, and a user function is imported and its signature checked before
any model is loaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ulorl.config.reward import RewardConfig

__all__ = ["add_reward_arguments", "load_reward_config", "reward_config_from_args"]


def add_reward_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`--config` and `--reward` (see the module docstring)."""
    parser.add_argument("--config", "-c", default=None,
                        help="a training YAML preset: its reward: section scores the samples (function, judge, ...)")
    parser.add_argument("--reward", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="reward overrides, e.g. --reward fn=my_rewards.py:score judge=rule_then_judge")
    return parser


def load_reward_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RewardConfig:
    """`RewardConfig` from a preset's `reward:` section plus `key=value` overrides (raises `ConfigError`)."""
    from ulorl.config.loader import ConfigError, build, deep_merge, parse_overrides, read_yaml

    data: dict = {}
    if path is not None:
        loaded = read_yaml(Path(path)) or {}
        if not isinstance(loaded, dict) or not isinstance(loaded.get("reward", {}), dict):
            raise ConfigError(f"config file {path}: expected a mapping with a 'reward:' mapping")
        data = loaded.get("reward") or {}
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"--reward {item!r}: expected KEY=VALUE, a reward setting (e.g. fn=exact, "
                              f"judge=rule_then_judge)")
    prefixed = [o if o.startswith("reward.") else f"reward.{o}" for o in overrides or []]
    extra = parse_overrides(prefixed).get("reward", {})
    return build(RewardConfig, deep_merge(data, extra), "reward.")


def reward_config_from_args(args: argparse.Namespace) -> RewardConfig:
    """The `RewardConfig` described by `--config` / `--reward`."""
    return load_reward_config(getattr(args, "config", None), list(getattr(args, "reward", []) or []))
