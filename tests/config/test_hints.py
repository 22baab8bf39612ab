"""Unknown config keys: "did you mean" for typos, the ulorl key for verl's well-known keys."""

import pytest

from ulorl.config import ConfigError, load_run_config
from ulorl.config.hints import VERL_KEYS, unknown_key_hint


def error(overrides: list[str], tmp_path=None, yaml_text: str | None = None) -> str:
    path = None
    if yaml_text is not None:
        path = tmp_path / "c.yaml"
        path.write_text(yaml_text)
    with pytest.raises(ConfigError) as e:
        load_run_config(path, overrides)
    return str(e.value)


def test_typo_gets_did_you_mean():
    msg = error(["rollout.num_segment=4"])
    assert "unknown config key rollout.num_segment (did you mean rollout.num_segments?)" in msg
    assert "valid keys under 'rollout'" in msg  # the full list is still there


def test_no_suggestion_for_a_far_name():
    msg = error(["rollout.zzzz=4"])
    assert "did you mean" not in msg and "verl" not in msg


@pytest.mark.parametrize("override, expected", [
    ("data.train_files=x.parquet", "verl's data.train_files is data.train"),
    ("actor_rollout_ref.rollout.n=8", "verl's actor_rollout_ref.rollout.n is rollout.group_size in ulorl"),
    ("actor_rollout_ref.actor.optim.lr=1e-6", "verl's actor_rollout_ref.actor.optim.lr is train.lr in ulorl"),
    ("trainer.total_training_steps=5", "is train.steps in ulorl"),
])
def test_verl_keys_name_their_ulorl_equivalent(override, expected):
    assert expected in error([override])


def test_verl_keys_in_nested_yaml(tmp_path):
    msg = error([], tmp_path, "actor_rollout_ref:\n  rollout:\n    n: 8\n    temperature: 1.0\n")
    assert "actor_rollout_ref.rollout.n is rollout.group_size" in msg
    assert "actor_rollout_ref.rollout.temperature is rollout.temperature" in msg


def test_unmapped_verl_section_points_to_the_table():
    assert "verl -> ulorl key table in docs/data.md" in error(["trainer.nnodes=2"])


def test_every_mapped_ulorl_key_exists():
    """Each equivalent that names a ulorl key (first word, dotted) must be a real config key."""
    from ulorl.config import RunConfig, to_dict

    cfg = to_dict(RunConfig())
    for verl, eq in VERL_KEYS.items():
        first = eq.split()[0].split("=")[0]
        if "." not in first:
            continue
        node = cfg
        for part in first.split("."):
            assert part in node, f"{verl} -> {first}: no such ulorl key"
            node = node[part]


def test_hint_function_directly():
    assert unknown_key_hint("", "modle", 1, ["model", "rollout"]) == " (did you mean model?)"
    assert unknown_key_hint("", "xyz", 1, ["model"]) == ""


def test_docs_table_lists_every_verl_key():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text()
    missing = [k for k in VERL_KEYS if f"| `{k}` |" not in doc]
    assert not missing, f"docs/data.md's verl -> ulorl table lacks {missing}"


@pytest.mark.parametrize("override, expected", [
    ("actor_rollout_ref.model.lora_rank=8", "verl's actor_rollout_ref.model.lora_rank is model.lora.rank"),
    ("actor_rollout_ref.model.target_modules=[q_proj]", "is model.lora.target_modules"),
    ("lora_r=8", "TRL's lora_r is model.lora.rank in ulorl"),
    ("model.lora_alpha=16", "TRL's lora_alpha is model.lora.alpha in ulorl"),
    ("model.lora.lora_dropout=0.1", "peft's lora_dropout is model.lora.dropout in ulorl"),
    ("model.lora.r=8", "peft's r is model.lora.rank in ulorl"),
    ("use_peft=true", "TRL's use_peft is model.lora.rank > 0"),
])
def test_verl_trl_and_peft_lora_names_name_the_ulorl_key(override, expected):
    assert expected in error([override])
