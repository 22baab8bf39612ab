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
