"""`trained_positions` reads a model's context without loading it; a run warns when its lengths reach past it."""

from __future__ import annotations

import json

from ulorl.config import load_run_config
from ulorl.models.loading import trained_positions
from ulorl.run.session import context_warning


def _folder(tmp_path, **config):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **config}))
    return tmp_path


def test_positions_of_a_folder_a_preset_and_yarn(tmp_path):
    folder = _folder(tmp_path, max_position_embeddings=2048)
    assert trained_positions(folder) == 2048
    assert trained_positions(folder, rope_scaling_factor=4.0) == 8192  # 2,048 x 4, as load_model stretches it
    assert trained_positions(folder, rope_scaling_factor=1.5, rope_original_max_len=1000) == 1500
    assert trained_positions("builtin") == 4096 and trained_positions("builtin:long") == 8192  # the presets


def test_positions_unknown_without_the_field_or_a_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert trained_positions(tmp_path) is None
    assert trained_positions(tmp_path / "missing") is None


def test_a_run_past_the_model_context_is_warned_and_yarn_silences_it(tmp_path):
    folder = _folder(tmp_path, max_position_embeddings=1024)
    base = [f"model.path={folder}", "model.warm_start=none", "data.max_prompt_len=100"]
    assert context_warning(load_run_config(None, [*base, "rollout.max_response_len=924"])) is None  # 1,024: fits
    warning = context_warning(load_run_config(None, [*base, "rollout.max_response_len=1024"]))
    assert warning.startswith("warning: data.max_prompt_len + rollout.max_response_len = 1,124 positions, past the "
                              "1,024 of model.path=")
    assert "model.rope_scaling_factor" in warning
    assert context_warning(load_run_config(None, [*base, "rollout.max_response_len=1024",
                                                  "model.rope_scaling_factor=2.0"])) is None
