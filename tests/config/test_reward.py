"""RewardConfig validation, registries and overlong policies (no worker processes)."""

import pytest
import torch

from ulorl.config.loader import ConfigError, build
from ulorl.reward import apply_overlong_policy
from ulorl.config import RewardConfig
from ulorl.reward.registry import BuiltinReward, parse_reward_fn, score_from_result


def test_overlong_policies_hand_values():
    rewards = [1.0, 1.0, 0.0, 1.0]
    lengths = [10, 100, 100, 95]
    truncated = [False, True, True, False]
    # zero: truncated rewards -> 0, keep everything
    r, keep = apply_overlong_policy("zero", rewards, lengths, truncated, max_len=100, buffer_len=10)
    assert r.tolist() == [1.0, 0.0, 0.0, 1.0] and keep.tolist() == [True] * 4
    # filter: rewards untouched, truncated dropped
    r, keep = apply_overlong_policy("filter", rewards, lengths, truncated, max_len=100, buffer_len=10)
    assert r.tolist() == rewards and keep.tolist() == [True, False, False, True]
    # soft_penalty: L_exp = 100 - 10 = 90; 10 -> 0; 100 -> -min(1, 10/10) = -1; 95 -> -5/10 = -0.5
    r, keep = apply_overlong_policy("soft_penalty", rewards, lengths, truncated, max_len=100, buffer_len=10)
    assert r.tolist() == pytest.approx([1.0, 0.0, -1.0, 0.5]) and keep.all()


def test_overlong_does_not_modify_input_and_checks_shapes():
    rewards = torch.tensor([1.0, 1.0])
    apply_overlong_policy("zero", rewards, torch.tensor([5, 8]), torch.tensor([False, True]), max_len=8)
    assert rewards.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="equal length"):
        apply_overlong_policy("zero", [1.0], [1, 2], [False], max_len=8)
    with pytest.raises(ValueError, match="buffer_len"):
        apply_overlong_policy("soft_penalty", [1.0], [1], [False], max_len=8, buffer_len=0)


def test_unknown_names_list_valid_ones():
    with pytest.raises(ValueError, match=r"soft_penalty"):
        apply_overlong_policy("drop", [1.0], [1], [False], max_len=8)
    with pytest.raises(ValueError, match=r"\['rule', 'exact'\]"):
        parse_reward_fn("math")
    with pytest.raises(ValueError, match="cannot load"):
        parse_reward_fn("no_such_module_xyz:fn")
    assert parse_reward_fn("rule") is BuiltinReward.RULE


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fn": "math"}, r"reward\.fn.*allowed"),
        ({"judge": "maybe"}, r"reward\.judge=.*rule_then_judge"),
        ({"judge": "judge_only"}, r"exactly one of reward\.judge_model_path or reward\.judge_url"),
        ({"judge": "judge_only", "judge_url": "http://x", "judge_model_path": "/m"}, "exactly one"),
        ({"judge_url": "ftp://x"}, "http"),
        ({"overlong": "cut"}, r"reward\.overlong=.*allowed.*zero"),
        ({"overlong": "soft_penalty"}, r"overlong_buffer > 0"),
        ({"timeout_s": 0}, r"reward\.timeout_s"),
        ({"num_workers": 0}, r"reward\.num_workers"),
        ({"extractors": {"gsm8k": "nope"}}, r"reward\.extractors\['gsm8k'\]"),
        ({"judge_prompt": "{prediction} {answer}"}, "unknown fields"),
        ({"judge_prompt": "{prediction} only"}, "reference"),
        ({"api_key_env": "sk-live-abc123"}, "NAME of an environment variable"),
    ],
)
def test_config_validation_names_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RewardConfig(**kwargs)


def test_config_round_trip_and_unknown_keys():
    cfg = RewardConfig(fn="exact", extractors={"synthetic": "builtin"}, overlong="soft_penalty", overlong_buffer=16)
    assert build(RewardConfig, cfg.to_dict(), "reward.") == cfg
    with pytest.raises(ConfigError, match=r"unknown config key reward\.api_key.*valid keys under 'reward'"):
        build(RewardConfig, {"fn": "rule", "api_key": "x"}, "reward.")
    assert RewardConfig().judge_trust_remote_code is False


def test_score_from_result():
    assert score_from_result(1) == 1.0
    assert score_from_result(True) == 1.0
    assert score_from_result({"score": 0.25, "acc": True}) == 0.25
    with pytest.raises(ValueError, match="score"):
        score_from_result({"acc": 1})
    with pytest.raises(ValueError, match="finite"):
        score_from_result(float("nan"))
