"""The Python API: build a config in code, pass reward functions as objects, train, get the summary.

In the manner of TRL's `GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...)`:

    from ulorl.api import Trainer, make_config

    def correct(data_source, solution_str, ground_truth, extra_info=None):   # verl style, per sample
        return float(solution_str.strip().endswith(ground_truth))

    cfg = make_config("configs/demo.yaml", {"train.steps": 20, "rollout.num_segments": 4})
    summary = Trainer(cfg, reward_funcs=correct, train_dataset=rows, output_dir="runs/api").train()

Reward functions are Python callables of either style the CLI accepts: verl's
`fn(data_source, solution_str, ground_truth, extra_info)` called per sample, or TRL's
batch `fn(completions, **columns) -> list[float]` (detected from the signature, see
docs/rewards.md). Several functions are summed with `reward_weights`, each logged
under its own metric. Deviation from the CLI: a callable runs in this process
(no worker pool, so no per-item deadline; a name like `module:function` still runs
in the killable workers). Datasets may be paths (one or a list, mixed formats) or
rows (an iterable of dicts, e.g. a `datasets.Dataset`), written to the run folder
as JSONL so that the run can be resumed and audited like a CLI run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ulorl.config import RunConfig, build, check_runnable, load_run_config, to_dict
from ulorl.config.loader import ConfigError, deep_merge
from ulorl.config.reward import RewardFnConfig
from ulorl.durable import atomic_write_text
from ulorl.run.console import say

__all__ = ["RunConfig", "Trainer", "make_config"]

Dataset = str | Path | Sequence[str | Path] | Iterable[Mapping[str, Any]]


def make_config(preset: str | Path | None = None, overrides: Mapping[str, Any] | Sequence[str] | None = None,
                ) -> RunConfig:
    """A validated `RunConfig`: a YAML preset (optional) plus overrides.

    `overrides` is a mapping of dotted keys (`{"rollout.num_segments": 4}`), a nested mapping
    (`{"rollout": {"num_segments": 4}}`), or CLI-style strings (`["rollout.num_segments=4"]`).
    Unknown keys and bad values raise `ConfigError` as on the command line."""
    if preset is not None and not isinstance(preset, (str, Path)):
        raise ConfigError(f"make_config(preset=...) takes a YAML file's path or None, not {type(preset).__name__}")
    if isinstance(overrides, (list, tuple)) and not all(isinstance(o, str) for o in overrides):
        raise ConfigError(f"make_config(overrides=[...]) takes strings like 'train.steps=20', got {overrides!r}")
    if overrides is not None and not isinstance(overrides, (list, tuple, Mapping)):
        raise ConfigError(f"make_config(overrides=...) takes a mapping ({{'train.steps': 20}}) or a list of "
                          f"'key=value' strings, not {type(overrides).__name__} ({overrides!r})")
    if overrides is None or isinstance(overrides, (list, tuple)):
        return load_run_config(preset, list(overrides or []))
    nested: dict = {}
    for key, value in overrides.items():
        node = nested
        *parents, leaf = str(key).split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"make_config(overrides=...) sets {key!r} under a key that another entry sets "
                                  "to a value")
        node[leaf] = deep_merge(node[leaf], value) if isinstance(value, dict) and isinstance(
            node.get(leaf), dict) else value
    for key in overrides:  # `{"train.steps": 3, "train": {"steps": 4}}`: one key given twice, two values
        twice = [k for k in overrides if k != key and _sets(k, overrides[k], str(key))]
        if twice:
            raise ConfigError(f"make_config(overrides=...) sets {key!r} twice (also in {twice[0]!r}); give it once")
    base = to_dict(load_run_config(preset)) if preset is not None else {}
    return build(RunConfig, deep_merge(base, nested))


def _builtin_only(sources: list[str]) -> bool:
    return bool(sources) and all(s.startswith("builtin:") for s in sources)


def _sets(key: str, value: Any, dotted: str) -> bool:
    """Whether the override `key: value` (dotted or nested) sets the dotted key `dotted`."""
    if key == dotted:
        return True
    if not dotted.startswith(f"{key}.") or not isinstance(value, Mapping):
        return False
    head, _, rest = dotted[len(key) + 1:].partition(".")
    return head in value and (not rest or _sets(head, value[head], f"{head}.{rest}"))


class Trainer:
    """One UloRL training run configured in code.

    Args:
        config: a `RunConfig` (`make_config(...)`), a YAML preset's path (`"configs/demo.yaml"`), or a mapping of
            settings over the built-in defaults (`{"train": {"steps": 20}}` or `{"train.steps": 20}`); default: the
            built-in defaults.
        reward_funcs: a callable, a name (`rule`, `exact`, `module:function`, `path.py:function`), or a
            list of them; None keeps the config's reward.
        reward_weights: one weight per reward function (default 1 each).
        train_dataset / eval_dataset: a path, a list of paths, or rows (dicts with a prompt and an answer,
            in any layout the loaders accept; a `datasets.Dataset` or a pandas DataFrame gives its rows); None
            keeps the config's data. `eval_dataset=False`: no held-out evaluation.
        output_dir: the run folder (default `runs/api-<timestamp>`).
        resume: None (fresh run), "auto" (continue the run in `output_dir`), "never" (start over, an earlier run's
            files moved aside) or a checkpoint folder, as `ulorl train --resume`.
    """

    def __init__(self, config: RunConfig | Mapping[str, Any] | None = None, *, reward_funcs: Any = None,
                 reward_weights: Sequence[float] | None = None, train_dataset: Dataset | None = None,
                 eval_dataset: Dataset | bool | None = None, output_dir: str | Path | None = None,
                 resume: str | None = None) -> None:
        _check_types(config, output_dir, resume, reward_weights, eval_dataset)
        if reward_weights is not None and reward_funcs is None:
            raise ConfigError("Trainer(reward_weights=...) weighs reward_funcs: give those functions too (the "
                              "config's own weights are set in reward.fns)")
        self.run_dir = Path(output_dir) if output_dir else Path("runs") / f"api-{time.strftime('%Y%m%d-%H%M%S')}"
        if isinstance(config, Mapping):  # {"train": {"steps": 2}} or {"train.steps": 2} over the built-in defaults
            config = make_config(None, config)
        elif isinstance(config, (str, Path)):  # a preset, as `ulorl train --config`
            config = make_config(config)
        cfg = config if config is not None else RunConfig()
        if reward_funcs is not None:
            cfg = dataclasses.replace(cfg, reward=_with_rewards(cfg.reward, reward_funcs, reward_weights))
        data = {}
        if train_dataset is not None:
            data["train"] = self._source(train_dataset, "train")
        if eval_dataset is False:
            data["eval"] = None
        elif eval_dataset is not None:
            data["eval"] = self._source(eval_dataset, "eval")
        if data:
            try:
                cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **data))
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if train_dataset is not None and eval_dataset is None and _builtin_only(cfg.data.sources("eval")):
            say(f"note: Trainer(eval_dataset=...) not given: the held-out evaluation keeps data.eval="
                f"{cfg.data.eval}, a built-in task, not your train_dataset's; give your held-out rows as "
                f"eval_dataset, or eval_dataset=False")
        self.config = cfg
        self.resume = resume
        self.summary: dict | None = None

    def _source(self, dataset: Dataset, split: str) -> str | list[str]:
        """A path or list of paths as given; rows are written to `<run>/data/<split>.jsonl`, atomically. A file
        of that name that holds other rows (an earlier run's, perhaps still training or to be resumed; the user's
        own when `output_dir` is a project folder) is kept: these rows go to `<split>-<sha256 prefix>.jsonl`."""
        if isinstance(dataset, (str, Path)):
            return str(dataset)
        takes = f"Trainer({split}_dataset=...) takes a path, a list of paths, or rows (dicts)"
        if isinstance(dataset, (bytes, Mapping)) or not isinstance(dataset, Iterable):
            raise ConfigError(f"{takes}, not {type(dataset).__name__}")
        columns = getattr(dataset, "columns", None)  # a pandas DataFrame iterates over its column names
        items = dataset.to_dict("records") if columns is not None and hasattr(dataset, "to_dict") else list(dataset)
        if items and all(isinstance(x, (str, Path)) for x in items):
            return [str(x) for x in items]
        if not items:
            raise ConfigError(f"Trainer({split}_dataset=...) has no rows")
        bad = next((i for i, x in enumerate(items) if not isinstance(x, Mapping)), None)
        if bad is not None:
            raise ConfigError(f"{takes}; item {bad} is {type(items[bad]).__name__}")
        text = "".join(_json_row(row, i, split) + "\n" for i, row in enumerate(items))
        path = self.run_dir / "data" / f"{split}.jsonl"
        if not _holds(path, text):  # the same rows (a resume) leave the file untouched
            if path.exists():  # other rows: kept
                path = path.with_name(f"{split}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.jsonl")
            if not _holds(path, text):
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, text)
        return str(path)

    def train(self) -> dict:
        """Run training to `train.steps` (or until stopped); return the summary `ulorl train` prints.

        The summary (`steps`, `trained_samples`, `eval_before`, `eval_after`, `eval_paired`, `entropy`,
        `segments_hist`, `run_dir`) is also written to `<run>/summary.json`."""
        from ulorl.run.checkpoint import CheckpointError
        from ulorl.run.loop import train

        _not_in_spawn_bootstrap()
        check_runnable(self.config)
        try:
            self.summary = train(self.config, self.run_dir, resume=self.resume)
        except CheckpointError as e:  # its hint in this API's words, not the command line's
            raise CheckpointError(_api_words(str(e))) from None
        return self.summary


def _not_in_spawn_bootstrap() -> None:
    """Stop a child process that Python's `spawn` started and that is importing the user's script again (the
    learner of `train.pipeline=overlap`, the engine processes of `rollout.engine_procs`) when that script calls
    `train()` at its top level: one line on the child's stderr instead of multiprocessing's three tracebacks
    (`_inheriting` is the flag multiprocessing's own bootstrapping check reads)."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise SystemExit("ulorl: Trainer.train() ran while a child process imported this script again (Python's "
                         "spawn start method does that): put the training code under `if __name__ == "
                         "\"__main__\":`")


# the command line's words in a checkpoint error's hint -> `Trainer`'s arguments (longest first)
_API_WORDS = (("--resume auto", 'resume="auto"'), ("--resume never", 'resume="never"'), ("--output-dir", "output_dir"))


def _api_words(message: str) -> str:
    for flag, argument in _API_WORDS:
        message = message.replace(flag, argument)
    return message


def _holds(path: Path, text: str) -> bool:
    """Whether the file `path` exists and holds exactly `text` (a file that is not UTF-8 text does not)."""
    try:
        return path.exists() and path.read_text(encoding="utf-8") == text
    except UnicodeDecodeError:
        return False


def _json_row(row: Mapping, i: int, split: str) -> str:
    """Row `i` of a dataset given as rows, as one JSON line: numpy and torch values (a pandas row holds them) as
    their Python numbers or lists; any other value that JSON cannot hold is a `ConfigError` naming the row and
    field (it was written as its `str()`, e.g. "<object object at 0x...>", and trained on as the reference)."""
    def plain(value):
        if hasattr(value, "tolist"):
            return value.tolist()
        raise TypeError(type(value).__name__)

    try:
        return json.dumps(dict(row), ensure_ascii=False, default=plain)
    except (TypeError, ValueError) as e:
        field = next((k for k, v in row.items() if _unjsonable(v, plain)), "?")
        raise ConfigError(f"Trainer({split}_dataset=...) row {i}, field {field!r}: a value of type {e}; give "
                          f"numbers, strings, lists or dicts") from None


def _unjsonable(value, plain) -> bool:
    try:
        json.dumps(value, default=plain)
        return False
    except (TypeError, ValueError):
        return True


def _check_types(config: Any, output_dir: Any, resume: Any, reward_weights: Any, eval_dataset: Any) -> None:
    """`ConfigError` naming the argument whose type or value `Trainer` cannot use."""
    if config is not None and not isinstance(config, (RunConfig, Mapping, str, Path)):
        raise ConfigError(f"Trainer(config=...) takes a RunConfig (make_config(...)), a preset's path or a mapping "
                          f"of settings, not {type(config).__name__}")
    if output_dir is not None and not isinstance(output_dir, (str, Path)):
        raise ConfigError(f"Trainer(output_dir=...) takes a path, not {type(output_dir).__name__}")
    if resume is not None and not isinstance(resume, (str, Path)):
        raise ConfigError(f"Trainer(resume=...) takes 'auto', 'never' or a checkpoint path, not "
                          f"{type(resume).__name__}")
    if output_dir is not None and Path(output_dir).exists() and not Path(output_dir).is_dir():
        raise ConfigError(f"Trainer(output_dir={str(output_dir)!r}) is a file, not a run folder")
    if eval_dataset is True:
        raise ConfigError("Trainer(eval_dataset=True) names no data: give a path, paths or rows; None keeps the "
                          "config's data.eval, False evaluates nothing")
    if reward_weights is not None and (not isinstance(reward_weights, Iterable) or isinstance(
            reward_weights, (str, bytes)) or not all(isinstance(w, (int, float)) and not isinstance(w, bool)
                                                      for w in reward_weights)):
        raise ConfigError(f"Trainer(reward_weights=...) takes a list of numbers, got {reward_weights!r}")


def _with_rewards(reward, funcs: Any, weights: Sequence[float] | None):
    """`reward` with `fns` set to the given functions (a single one: weight 1)."""
    funcs = list(funcs) if isinstance(funcs, (list, tuple)) else [funcs]
    weights = list(weights) if weights is not None else [1.0] * len(funcs)
    if len(weights) != len(funcs):
        raise ConfigError(f"reward_weights has {len(weights)} values for {len(funcs)} reward functions")
    if not funcs:
        raise ConfigError("reward_funcs is empty: give at least one reward function")
    try:
        fns = [f if isinstance(f, RewardFnConfig) else RewardFnConfig(fn=f, weight=float(w))
               for f, w in zip(funcs, weights)]
        names = [f.name for f in fns]
        for i, f in enumerate(fns):  # two lambdas share a name: number them so each metric is its own
            if names.count(f.name) > 1:
                f.name = f"{f.name}_{i}"
        return dataclasses.replace(reward, fn="rule", fns=fns)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"reward_funcs: {e}") from None
