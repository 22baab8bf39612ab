"""`ulorl eval` / `ulorl clean` reward options: a preset's reward: section plus --reward overrides."""

import argparse

import pytest

from ulorl.config.loader import ConfigError
from ulorl.reward.cli_args import add_reward_arguments, load_reward_config, reward_config_from_args


def test_preset_section_and_overrides(tmp_path):
    preset = tmp_path / "run.yaml"
    preset.write_text("model: {path: builtin}\nreward:\n  fn: exact\n  max_error_frac: 0.25\n  extractors: {a: boxed}\n")
    cfg = load_reward_config(preset, ["max_error_frac=0.75", "reward.timeout_s=3"])
    assert (cfg.fn, cfg.max_error_frac, cfg.timeout_s, cfg.extractors) == ("exact", 0.75, 3.0, {"a": "boxed"})
    assert load_reward_config(None, []).fn == "rule"  # no preset: the defaults


def test_bad_keys_and_functions_fail_before_any_model(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key reward.judge_modle"):
        load_reward_config(None, ["judge_modle=x"])
    with pytest.raises(ConfigError, match=r"reward\.fn: cannot load.*no such file"):
        load_reward_config(None, [f"fn={tmp_path}/missing.py:score"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_reward_config(tmp_path / "nope.yaml")
    parser = add_reward_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--reward", "fn=exact", "judge=none"])
    assert reward_config_from_args(args).fn == "exact"


def test_eval_reports_a_bad_reward_function_as_a_one_line_error(tmp_path, capsys):
    from ulorl.cli import main

    code = main(["eval", "--model", "builtin", "--data", "builtin:chain", "-o", str(tmp_path),
                 "--reward", f"fn={tmp_path}/missing.py:score"])
    err = capsys.readouterr().err
    assert code == 2 and "ulorl eval: error: reward.fn: cannot load" in err and "Traceback" not in err


def test_clean_scores_model_samples_with_the_configured_reward(tmp_path):
    from ulorl.cleaning.clean import clean_rows
    from ulorl.config import RewardConfig

    rows = [{"prompt": "q1", "answer": "5"}, {"prompt": "q2", "answer": "7"}]

    def sampler(messages_list, k):  # always answers 5: right for q1 only
        return [["so \\boxed{5}"] * k for _ in messages_list]

    (tmp_path / "generous.py").write_text("def always(completions, **kw):\n    return [1.0] * len(completions)\n")
    # the default reward (rule): only q1 is "too easy" (all samples right)
    out, _ = clean_rows(rows, ["too_easy"], k=2, samplers=[sampler], reward=RewardConfig(fn="exact"))
    assert out == [rows[1]]
    # a user function that calls everything right: both problems are too easy and removed
    out, _ = clean_rows(rows, ["too_easy"], k=2, samplers=[sampler],
                        reward=RewardConfig(fn=f"{tmp_path}/generous.py:always"))
    assert out == []
