"""What a run's first screen says about its config: the settings that differ from the defaults, not all of them.

`ulorl train` and `ulorl sft` print where the config came from and one `key: value (default: ...)` line per changed
setting; every setting is in the run folder's config.yaml, and `ulorl config` (`--changed` for the short form)
prints them without running anything.
"""

from __future__ import annotations

import argparse

from ulorl.cli import _config_lines, main
from ulorl.config import changed_settings, load_run_config, to_dict
from ulorl.config.loader import flatten

OVERRIDES = ["train.steps=5", "model.lora.target_modules=[q_proj]", "rollout.group_size=8",
             "data.chat_template_kwargs={enable_thinking: false}", "model.warm_start=none", "data.eval=null"]
# rollout.group_size=8 is its default, so it is not listed; the rest are, in the config's own order
EXPECTED = ["model.warm_start: 'none' (default: 'sft')",
            "model.lora.target_modules: ['q_proj'] (default: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', "
            "'up_proj', 'down_proj'])",
            "data.eval: null (default: 'builtin:chain')",
            "data.chat_template_kwargs.enable_thinking: false (not set by default)",
            "train.steps: 5 (default: 30)"]


def test_changed_settings_lists_what_differs_from_the_defaults():
    assert changed_settings(load_run_config(None, OVERRIDES)) == EXPECTED
    assert changed_settings(load_run_config(None, ["rollout.group_size=8"])) == []  # a default given again


def test_config_changed_prints_only_those(capsys):
    assert main(["config", "--changed", *OVERRIDES]) == 0
    assert capsys.readouterr().out.splitlines() == changed_settings(load_run_config(None, OVERRIDES))
    assert main(["config", "--changed"]) == 0
    assert capsys.readouterr().out == "no settings differ from the defaults\n"  # as `ulorl train` says it
    assert main(["config", "-c", "configs/demo.yaml"]) == 0
    full = capsys.readouterr().out
    assert full.startswith("model:\n  path: builtin\n") and "\ncheckpoint:\n" in full  # every section, as YAML


def _args(config, overrides):
    return argparse.Namespace(config=config, overrides=overrides)


def test_the_first_lines_name_the_source_and_count_the_changes(tmp_path):
    lines = _config_lines(load_run_config(None, ["train.steps=5"]), _args(None, ["train.steps=5"]), tmp_path)
    assert lines == (f"[ulorl] config: the defaults + 1 override; 1 setting differs from the defaults "
                     f"(every setting: {tmp_path / 'config.yaml'}):\n  train.steps: 5 (default: 30)")
    demo = load_run_config("configs/demo.yaml", ["train.steps=30", "eval.k=4"])  # train.steps=30 is the default
    lines = _config_lines(demo, _args("configs/demo.yaml", ["train.steps=30", "eval.k=4"]), tmp_path).splitlines()
    n = len(changed_settings(demo))
    assert lines[0] == (f"[ulorl] config: configs/demo.yaml + 2 overrides; {n} settings differ from the defaults "
                        f"(every setting: {tmp_path / 'config.yaml'}):")
    assert "  eval.k: 4 (default: 32)" in lines and not any("train.steps" in line for line in lines)
    assert _config_lines(load_run_config(), _args(None, []), tmp_path) == (
        f"[ulorl] config: the defaults; no settings differ from the defaults "
        f"(every setting: {tmp_path / 'config.yaml'})")


def test_train_prints_the_changes_and_saves_every_setting(tmp_path, capsys):
    overrides = ["model.warm_start=none", "data.train_size=20", "data.eval=null", "rollout.max_response_len=8",
                 "rollout.group_size=2", "rollout.decode_batch=4", "train.train_groups=1", "train.steps=1",
                 "algo.dynamic_sampling=false", "logging.progress=false", "logging.loggers=[jsonl]"]
    run = tmp_path / "run"
    assert main(["train", "-o", str(run), *overrides]) == 0
    out = capsys.readouterr().out.splitlines()
    cfg = load_run_config(None, overrides)
    changed = changed_settings(cfg)
    assert out[0] == (f"[ulorl] config: the defaults + {len(overrides)} overrides; {len(changed)} settings differ "
                      f"from the defaults (every setting: {run / 'config.yaml'}):")
    assert out[1:1 + len(changed)] == [f"  {line}" for line in changed]
    assert not any(line.startswith("model:") for line in out)  # no YAML dump on the first screen
    saved = load_run_config(run / "config.yaml")  # ... it is in the run folder, whole
    assert flatten(to_dict(saved)) == flatten(to_dict(cfg))
