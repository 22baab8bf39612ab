"""Config: YAML presets, dotted overrides, and the errors users see."""

from pathlib import Path

import pytest

from ulorl.config import ConfigError, RunConfig, dump_yaml, load_run_config
from ulorl.config_loader import parse_overrides

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_presets_load():
    demo = load_run_config(CONFIGS / "demo.yaml")
    assert demo.rollout.num_segments == 4 and demo.algo.is_mode == "pois" and demo.model.path == "builtin"
    paper = load_run_config(CONFIGS / "paper_qwen3.yaml")
    assert paper.rollout.max_response_len == 131072 and paper.rollout.segment_len == 16384
    assert paper.train.lr == pytest.approx(1e-6) and paper.algo.tau == 0.99 and paper.algo.sigma == 0.2


def test_dotted_overrides_are_typed():
    cfg = load_run_config(CONFIGS / "demo.yaml", ["rollout.num_segments=8", "algo.is_mode=sais", "train.lr=1e-5",
                                                  "data.eval=null", "logging.loggers=[jsonl,console]"])
    assert cfg.rollout.num_segments == 8 and cfg.algo.is_mode == "sais"
    assert cfg.train.lr == pytest.approx(1e-5) and isinstance(cfg.train.lr, float)  # YAML reads 1e-5 as a string
    assert cfg.data.eval is None and cfg.logging.loggers == ["jsonl", "console"]
    assert parse_overrides(["a.b.c=3", "a.d=x"]) == {"a": {"b": {"c": 3}, "d": "x"}}


@pytest.mark.parametrize("override, message", [
    ("rollout.nsegs=3", "unknown config key rollout.nsegs; valid keys under 'rollout'"),
    ("bogus.x=1", "unknown config key bogus"),
    ("train.steps=abc", "train.steps: expected an integer, got 'abc'"),
    ("algo.dynamic_sampling=maybe", "algo.dynamic_sampling: expected true or false"),
    ("rollout.num_segments=3", "rollout.num_segments=3 must divide rollout.max_response_len=160; allowed values: "
                               "[1, 2, 4, 5, 8"),
    ("algo.tau=1.5", "algo.tau=1.5 must be in (0, 1)"),
    ("algo.tau=0", "algo.tau=0.0 must be in (0, 1)"),
    ("algo.is_mode=foo", "choose one of: tois, pois, sais, pois_tis, mask_stale"),
    ("algo.entropy_mask=all", "choose one of: none, mpt, dmmpt"),
    ("reward.overlong=cut", "reward.overlong"),
    ("logging.loggers=[console,mlflow]", "logging.loggers='mlflow' is not allowed"),
    ("data.on_bad_row=ignore", "data.on_bad_row"),
    ("nonsense", "must look like key.subkey=value"),
])
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError) as e:
        load_run_config(CONFIGS / "demo.yaml", [override])
    assert message in str(e.value)


def test_tois_requires_one_segment():
    with pytest.raises(ConfigError, match="needs rollout.num_segments=1"):
        load_run_config(None, ["algo.is_mode=tois", "rollout.num_segments=4"])
    assert load_run_config(None, ["algo.is_mode=tois", "rollout.num_segments=1"]).algo.is_mode == "tois"


def test_missing_or_invalid_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_run_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run_config(bad)


def test_resolved_config_round_trips(tmp_path):
    cfg = load_run_config(CONFIGS / "demo.yaml", ["rollout.num_segments=2"])
    path = tmp_path / "config.yaml"
    path.write_text(dump_yaml(cfg))
    again = load_run_config(path)
    assert again == cfg and isinstance(again, RunConfig)
