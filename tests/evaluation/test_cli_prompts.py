"""`ulorl eval` takes the prompt options of training: a system prompt and chat-template arguments."""

from __future__ import annotations

import argparse

import pytest

from ulorl.config.loader import ConfigError
from ulorl.evaluation.cli import _prompt_options, add_eval_arguments


def _args(*argv: str) -> argparse.Namespace:
    return add_eval_arguments(argparse.ArgumentParser()).parse_args(list(argv))


def test_prompt_options_come_from_the_preset_and_flags_win(tmp_path):
    preset = tmp_path / "run.yaml"
    preset.write_text("data:\n  system_prompt: Be brief.\n  chat_template_kwargs: {enable_thinking: false}\n")
    assert _prompt_options(_args("--config", str(preset))) == {
        "system_prompt": "Be brief.", "chat_template_kwargs": {"enable_thinking": False}}
    got = _prompt_options(_args("--config", str(preset), "--system-prompt", "Think.",
                                "--chat-template-kwargs", '{"enable_thinking": true}'))
    assert got == {"system_prompt": "Think.", "chat_template_kwargs": {"enable_thinking": True}}
    assert _prompt_options(_args()) == {"system_prompt": None, "chat_template_kwargs": {}}


@pytest.mark.parametrize("bad", ["{enable_thinking: false", "[1, 2]"])
def test_bad_chat_template_kwargs_are_a_config_error(bad):
    with pytest.raises(ConfigError, match="--chat-template-kwargs"):
        _prompt_options(_args("--chat-template-kwargs", bad))


def test_the_system_prompt_reaches_the_rendered_prompt(tmp_path):
    from ulorl.config.data import DataConfig
    from ulorl.data.loaders import load_source
    from ulorl.models import load_tokenizer

    tok = load_tokenizer("builtin")
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "chain start 1 steps 2", "answer": "4"}\n')
    opts = _prompt_options(_args("--system-prompt", "zz top"))
    (rec,), _ = load_source(str(data), tok, DataConfig(format="jsonl", **opts), split="eval")
    (plain,), _ = load_source(str(data), tok, DataConfig(format="jsonl"), split="eval")
    assert "zz top" in rec.prompt_text and "zz top" not in plain.prompt_text


def test_the_protocol_and_model_come_from_the_preset_and_flags_win(tmp_path):
    from ulorl.evaluation.cli import eval_config, model_path

    preset = tmp_path / "run.yaml"
    preset.write_text("model:\n  path: /models/m\neval:\n  k: 3\n  temperature: 0.7\n  top_k: 20\n"
                      "  max_new_tokens: 128\n  pass_k: [1, 3]\n")
    cfg = eval_config(_args("--config", str(preset)))
    assert (cfg.k, cfg.temperature, cfg.top_k, cfg.max_new_tokens, cfg.pass_k) == (3, 0.7, 20, 128, [1, 3])
    assert cfg.top_p == 0.95 and cfg.seed == 0  # not in the preset: the paper's protocol
    cfg = eval_config(_args("--config", str(preset), "--k", "2", "--temperature", "0.5", "--pass-k", "1"))
    assert (cfg.k, cfg.temperature, cfg.top_k, cfg.pass_k) == (2, 0.5, 20, [1])
    default = eval_config(_args())
    assert (default.k, default.temperature, default.top_k, default.pass_k) == (32, 0.85, 20, [1, 8, 32])
    assert model_path(_args("--config", str(preset))) == "/models/m"
    assert model_path(_args("--config", str(preset), "--model", "builtin")) == "builtin"
    assert model_path(_args()) == "builtin"


def test_a_bad_protocol_value_names_the_flag_or_the_preset_it_came_from(tmp_path):
    from ulorl.evaluation.cli import eval_config

    preset = tmp_path / "run.yaml"
    preset.write_text("eval:\n  temperature: -1\n  kk: 2\n")
    with pytest.raises(ConfigError, match=rf"^config file {preset}: unknown config key eval.kk \(did you mean eval.k"):
        eval_config(_args("--config", str(preset)))
    preset.write_text("eval:\n  temperature: -1\n")
    with pytest.raises(ConfigError, match=rf"^config file {preset}: eval.temperature must be a finite number > 0"):
        eval_config(_args("--config", str(preset)))
    # a flag wins over the preset's value, and is what the message names
    with pytest.raises(ConfigError, match=r"^--max-new-tokens: eval.max_new_tokens must be >= 1, got -3$"):
        eval_config(_args("--config", str(preset), "--temperature", "0.5", "--max-new-tokens", "-3"))
    with pytest.raises(ConfigError, match=r"^--k: eval.k must be >= 1, got 0$"):
        eval_config(_args("--k", "0"))


def test_with_a_preset_the_held_out_set_is_the_training_runs(tmp_path):
    """`ulorl eval --config C` with no --data evaluates on the problems C's training run holds out: its data.eval,
    drawn with its size law and seed (here the odometer's, flattened as configs/long.yaml does)."""
    import yaml

    from ulorl.config.data import DataConfig
    from ulorl.config.loader import build
    from ulorl.data import load_prompts
    from ulorl.data.loaders import load_source
    from ulorl.evaluation.cli import data_config, data_sources, eval_config
    from ulorl.models import load_tokenizer

    data = {"train": "builtin:odometer", "eval": "builtin:odometer", "alpha": 0.5, "uniform": 0.3, "eval_size": 12,
            "seed": 3}
    preset = tmp_path / "run.yaml"
    preset.write_text(yaml.safe_dump({"data": data, "eval": {"num_problems": 12}}))
    args = _args("--config", str(preset))
    tok = load_tokenizer("builtin")
    (source,) = data_sources(args)
    got, _ = load_source(source, tok, data_config(args, eval_config(args)), split="eval")
    want, _ = load_prompts(build(DataConfig, data, "data."), tok, "eval")
    assert [(r.prompt_text, r.ground_truth) for r in got] == [(r.prompt_text, r.ground_truth) for r in want]
    plain, _ = load_source("builtin:odometer", tok, data_config(_args(), eval_config(_args("--num-problems", "12"))),
                           split="eval")
    assert [r.prompt_text for r in plain] != [r.prompt_text for r in got]  # the task's own law and seed differ


def test_eval_data_defaults_and_flags(tmp_path):
    from ulorl.evaluation.cli import data_config, data_sources, eval_config

    assert data_sources(_args()) == ["builtin:chain"]
    cfg = data_config(_args(), eval_config(_args()))
    assert (cfg.max_prompt_len, cfg.eval_size, cfg.shuffle) == (4096, 200, False)
    preset = tmp_path / "run.yaml"
    preset.write_text("data:\n  eval: [a.jsonl, b.parquet]\n  prompt_key: question\n  max_prompt_len: 64\n")
    args = _args("--config", str(preset), "--max-prompt-len", "128", "--num-problems", "500")
    assert data_sources(args) == ["a.jsonl", "b.parquet"]
    assert data_sources(_args("--config", str(preset), "--data", "c.jsonl")) == ["c.jsonl"]
    cfg = data_config(args, eval_config(args))
    assert (cfg.prompt_key, cfg.max_prompt_len, cfg.eval_size) == ("question", 128, 500)
    preset.write_text("data:\n  eval: null\n")
    with pytest.raises(ConfigError, match=r"run\.yaml: data\.eval is null.*--data"):
        data_sources(_args("--config", str(preset)))
    preset.write_text("data:\n  on_bad_row: maybe\n")
    with pytest.raises(ConfigError, match="data.on_bad_row"):
        data_config(_args("--config", str(preset)), eval_config(_args()))


def test_sources_that_share_a_file_name_keep_a_result_each():
    """Two --data files named a.jsonl in different folders were one result (the second replaced the first in the
    dict of sets, silently): a shared file name is now reported by the source as given; a source given twice is an
    error before any work."""
    from ulorl.config import ConfigError
    from ulorl.evaluation.cli import set_names

    assert set_names(["d/a.jsonl", "d2/a.jsonl", "e/b.jsonl", "builtin:chain"]) == [
        "d/a.jsonl", "d2/a.jsonl", "b.jsonl", "builtin:chain"]
    assert set_names(["x/a.jsonl"]) == ["a.jsonl"]
    with pytest.raises(ConfigError, match=r"--data d/a.jsonl: given more than once"):
        set_names(["d/a.jsonl", "e/b.jsonl", "d/a.jsonl"])
