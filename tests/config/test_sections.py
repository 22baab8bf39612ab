"""Config: YAML presets, dotted overrides, and the errors users see."""

from pathlib import Path

import pytest

from ulorl.config import ConfigError, RunConfig, dump_yaml, load_run_config
from ulorl.config.loader import parse_overrides

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_presets_load():
    demo = load_run_config(CONFIGS / "demo.yaml")
    assert demo.rollout.num_segments == 4 and demo.algo.is_mode == "pois" and demo.model.path == "builtin"
    paper = load_run_config(CONFIGS / "paper_qwen3.yaml")
    assert paper.rollout.max_response_len == 131072 and paper.rollout.segment_len == 16384
    assert paper.train.lr == pytest.approx(1e-6) and paper.algo.tau == 0.99 and paper.algo.sigma == 0.2


@pytest.mark.parametrize("preset", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_preset_loads_and_round_trips(preset, tmp_path):
    # each shipped preset validates, and its dump (a run's config.yaml) loads back to the same config
    cfg = load_run_config(CONFIGS / preset)
    (tmp_path / "config.yaml").write_text(dump_yaml(cfg))
    assert load_run_config(tmp_path / "config.yaml") == cfg


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
    ("reward.overlong=cut", "reward.overlong='cut' is not allowed; choose one of: zero, filter, soft_penalty"),
    ("reward.judge=maybe", "reward.judge='maybe' is not allowed; choose one of: none, rule_then_judge, judge_only"),
    ("reward.fns=[{fn: rule, wieght: 2}]",
     "unknown config key reward.fns[0].wieght (did you mean reward.fns[0].weight?)"),
    ("reward.fns=[{fn: rule, style: torch}]", "reward.fns[0].style='torch' is not allowed; choose one of: auto, verl"),
    ("reward.fn=math", "reward.fn='math' is not allowed; choose one of: rule, exact, 'module:function' or"),
    ("rollout.engine=sglang", "rollout.engine='sglang' is not allowed; choose one of: torch, hf, vllm"),
    ("distributed.backend=mpi", "distributed.backend='mpi' is not allowed; choose one of: local, ray"),
    ("sft.task=builtin:nope", "sft.task='builtin:nope' is not allowed; choose one of: builtin:chain, builtin:od"),
    ("eval.top_p=0", "eval.top_p must be in (0, 1]"),
    ("eval.reference_problems=2000", "eval.reference_problems needs eval.reference: true"),
    ("logging.loggers=[console,mlflow]", "logging.loggers='mlflow' is not allowed"),
    ("data.on_bad_row=ignore", "data.on_bad_row='ignore' is not allowed; choose one of: error, skip"),
    ("nonsense", "must look like key.subkey=value"),
    ("model.warm_start=null", "model.warm_start: expected a string, got None; this setting cannot be null (its "
                              "default: 'sft')"),
    ("train.steps=null", "train.steps: expected an integer, got None; this setting cannot be null (its default: "),
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
    with pytest.raises(ConfigError, match="not valid YAML") as e:
        load_run_config(bad)
    # one line, at the file's line and column (PyYAML's own text is 7 lines naming "<unicode string>")
    assert str(e.value) == (f"config file {bad} is not valid YAML: line 2, column 1: expected ',' or ']', but got "
                            f"'<stream end>' (while parsing a flow sequence)")
    bad.write_text("train:\n\tsteps: 3\n")
    with pytest.raises(ConfigError) as e:
        load_run_config(bad)
    assert str(e.value) == (f"config file {bad} is not valid YAML: line 2, column 1: found character '\\t' that "
                            f"cannot start any token (while scanning for the next token)")


def test_a_bad_value_from_the_file_names_the_file_and_one_from_an_override_does_not(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("eval:\n  k: 0\n  kk: 1\n")
    with pytest.raises(ConfigError, match=rf"^config file {f}: unknown config key eval.kk \(did you mean eval.k\?\)"):
        load_run_config(f)
    f.write_text("foo: 1\n")
    with pytest.raises(ConfigError, match=rf"^config file {f}: unknown config key foo; valid keys"):
        load_run_config(f)
    f.write_text("eval:\n  k: 0\ntrain:\n  train_groups: 1000\n")
    with pytest.raises(ConfigError, match=rf"^config file {f}: eval.k must be >= 1, got 0$"):
        load_run_config(f)
    with pytest.raises(ConfigError, match=r"^eval.k must be >= 1, got -1$"):  # the override replaced the file's
        load_run_config(f, ["eval.k=-1"])
    with pytest.raises(ConfigError, match=rf"^config file {f}: train.train_groups=1000 cannot be filled"):
        load_run_config(f, ["eval.k=2"])
    with pytest.raises(ConfigError, match=r"^train.train_groups=1000 cannot be filled"):
        load_run_config(None, ["train.train_groups=1000"])


def test_resolved_config_round_trips(tmp_path):
    cfg = load_run_config(CONFIGS / "demo.yaml", ["rollout.num_segments=2"])
    path = tmp_path / "config.yaml"
    path.write_text(dump_yaml(cfg))
    again = load_run_config(path)
    assert again == cfg and isinstance(again, RunConfig)


# -- hostile values (issue 15) ---------------------------------------------------------------------
NON_FINITE = ["train.lr=.inf", "train.lr=nan", "rollout.temperature=.nan", "eval.temperature=.nan",
              "algo.sigma=.nan", "algo.tau=.nan", "algo.eps_high=.inf", "train.grad_clip=-.inf",
              "model.rope_scaling_factor=.inf", "reward.timeout_s=.nan"]


@pytest.mark.parametrize("override", NON_FINITE)
def test_nan_and_inf_are_refused_for_every_float(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key}=.*not a finite number"):
        load_run_config(None, [override])


def test_direct_construction_refuses_nan_too():
    from ulorl.config import AlgoConfig, TrainConfig

    with pytest.raises(ConfigError, match="algo.sigma=nan"):
        AlgoConfig(sigma=float("nan"))  # `nan <= 0` is False: this silently turned DMMPT off
    with pytest.raises(ConfigError, match="train.lr=inf"):
        TrainConfig(lr=float("inf"))


def test_group_of_one_with_dynamic_sampling_is_refused_at_load():
    with pytest.raises(ConfigError, match="rollout.group_size=1 with algo.dynamic_sampling=true"):
        load_run_config(None, ["rollout.group_size=1"])
    assert load_run_config(None, ["rollout.group_size=1", "algo.dynamic_sampling=false"]).rollout.group_size == 1


def test_a_batch_the_rounds_cannot_supply_is_refused_at_load():
    from ulorl.config import RolloutConfig, worst_case_groups

    # decode_batch 16 / group 8 = 2 groups per wave; 4 segments -> 64 // 4 = 16 waves -> 32 groups < 100
    assert worst_case_groups(RolloutConfig(decode_batch=16, group_size=8, num_segments=4), 64) == 32
    with pytest.raises(ConfigError, match=r"train.train_groups=100 cannot be filled.*at most 32 groups.*"
                                          r"rollout.decode_batch>=56"):  # ceil(100 / 16) = 7 groups x 8
        load_run_config(None, ["train.train_groups=100", "rollout.decode_batch=16", "algo.dynamic_sampling=false"])
    assert load_run_config(None, ["train.train_groups=100", "rollout.decode_batch=56"]).train.train_groups == 100


def test_device_names_are_checked():
    from ulorl.config import check_runnable

    with pytest.raises(ConfigError, match="train.device='tpu' is not a device name"):
        load_run_config(None, ["train.device=tpu"])
    check_runnable(load_run_config(None, ["train.device=cpu"]))
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ConfigError, match=rf"train.device='cuda:{n}': no such device"):
        check_runnable(load_run_config(None, [f"train.device=cuda:{n}"]))


MISSING_PACKAGE_CASES = {  # override -> (package, the error's text, whether `ulorl sft` needs it too)
    "rollout.engine=vllm": ("vllm", "rollout.engine=vllm needs the vllm package, which is not installed here: pip "
                            "install 'ulorl[vllm]' (a GPU machine with CUDA), or use rollout.engine=torch", True),
    "distributed.backend=ray": ("ray", "distributed.backend=ray needs the ray package, which is not installed here: "
                                "pip install 'ulorl[ray]' or use distributed.backend=local", False),
    "model.lora.rank=8": ("peft", "model.lora.rank=8 needs the peft package, which is not installed here: pip install "
                          "'peft>=0.18' or use model.lora.rank=0 (every weight trained)", False),
    "logging.loggers=[console,wandb]": ("wandb", "logging.loggers=['console', 'wandb'] needs the wandb package, which "
                                        "is not installed here: pip install 'ulorl[wandb]' or drop 'wandb' from "
                                        "logging.loggers", False),
    "logging.loggers=[tensorboard]": ("tensorboard", "logging.loggers=['tensorboard'] needs the tensorboard package, "
                                      "which is not installed here: pip install 'ulorl[tensorboard]' or drop "
                                      "'tensorboard' from logging.loggers", False),
}


def _uninstall(monkeypatch, *names: str) -> None:
    """Make `names` look not installed: not imported, and not found by importlib."""
    import importlib.util
    import sys

    real = importlib.util.find_spec
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a))


@pytest.mark.parametrize("override", list(MISSING_PACKAGE_CASES))
def test_a_setting_whose_package_is_missing_is_refused_before_any_work(override, monkeypatch):
    import sys
    import types

    from ulorl.config import check_runnable

    package, message, sft = MISSING_PACKAGE_CASES[override]
    cfg = load_run_config(None, [override])
    monkeypatch.setitem(sys.modules, package, types.ModuleType(package))  # imported: installed
    check_runnable(cfg)
    _uninstall(monkeypatch, package)
    with pytest.raises(ConfigError) as e:
        check_runnable(cfg)
    assert str(e.value) == message
    if sft:
        with pytest.raises(ConfigError):
            check_runnable(cfg, sft=True)
    else:
        check_runnable(cfg, sft=True)  # `ulorl sft` does not use it: a train preset still runs its SFT
    _uninstall(monkeypatch, *(p for p, _, _ in MISSING_PACKAGE_CASES.values()))
    check_runnable(load_run_config(None, []))  # the defaults need none of them


def test_unreadable_config_files_are_one_line_errors(tmp_path):
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("train:\n  steps: 3 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml is not UTF-8 text \(invalid byte at offset"):
        load_run_config(latin)
    with pytest.raises(ConfigError, match="is a directory"):
        load_run_config(tmp_path)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 100_000)
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run_config(deep)


def test_duplicate_yaml_keys_are_refused(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("train:\n  steps: 3\n  lr: 1.0e-6\n  steps: 30\n")
    with pytest.raises(ConfigError, match=r"dup.yaml: duplicate key 'steps' at line 4 \(first at line 2\)"):
        load_run_config(dup)


def test_every_section_raises_config_error_when_built_directly():
    """One error type (a UlorlError, so the CLI prints one line) whether a section comes from YAML or from code."""
    from ulorl.config import AlgoConfig, RolloutConfig
    from ulorl.config.loader import check_choice
    from ulorl.config.data import DataConfig
    from ulorl.errors import UlorlError
    from ulorl.config.evaluation import EvalConfig
    from ulorl.config.reward import RewardConfig, RewardFnConfig

    assert issubclass(ConfigError, UlorlError) and issubclass(ConfigError, ValueError)
    for make in (lambda: AlgoConfig(loss_agg="sum"), lambda: RolloutConfig(top_k=0), lambda: DataConfig(format="csv"),
                 lambda: EvalConfig(k=0), lambda: RewardConfig(timeout_s=0), lambda: RewardFnConfig(style="x"),
                 lambda: RewardConfig(fns=[{"fn": "rule", "extra": 1}])):
        with pytest.raises(ConfigError):
            make()
    with pytest.raises(ConfigError, match=r"^algo.loss_agg='sum' is not allowed; choose one of: token-mean, "):
        AlgoConfig(loss_agg="sum")
    with pytest.raises(ConfigError, match=r"^unknown config key reward\.fns\[0\]\.extra; valid keys"):
        RewardConfig(fns=[{"fn": "rule", "extra": 1}])
    with pytest.raises(ConfigError, match=r"^k='z' is not allowed; choose one of: a, b, or a number$"):
        check_choice("k", "z", ["a", "b"], also="or a number")


def test_a_config_made_in_code_is_type_checked_as_yaml_is():
    """`build` checks (or converts) every value read from YAML; a config made in code, or edited with
    `dataclasses.replace`, is refused the same way, naming the key, instead of failing later in other code
    (`DataConfig(train=5)` failed in the loader with an AttributeError)."""
    import dataclasses
    from pathlib import Path

    from ulorl.config import DataConfig, ModelConfig, RewardConfig, RunConfig, SFTConfig, TrainConfig

    cases = [(lambda: DataConfig(train=5), r"data\.train: expected str \| list\[str\], got 5 \(a int\)"),
             (lambda: RewardConfig(num_workers="2"), r"reward\.num_workers: expected an integer, got '2'"),
             (lambda: dataclasses.replace(TrainConfig(), steps="x"), r"train\.steps: expected an integer, got 'x'"),
             (lambda: TrainConfig(lr="1e-5"), r"train\.lr: expected float, got '1e-5' \(a str\)"),
             (lambda: RunConfig(train={"steps": 3}), r"train: expected TrainConfig, got \{'steps': 3\} \(a dict\)"),
             (lambda: SFTConfig(bucketed=1), r"sft\.bucketed: expected true or false, got 1"),
             (lambda: ModelConfig(dtype=None), r"model\.dtype: .*this setting cannot be null")]
    for make, message in cases:
        with pytest.raises(ConfigError, match=message):
            make()
    # what YAML would give: paths as strings, numbers of the annotated kind, tuples as lists
    assert ModelConfig(path=Path("/m")).path == "/m"
    assert DataConfig(train=[Path("a.jsonl"), "b.jsonl"]).train == ["a.jsonl", "b.jsonl"]
    assert TrainConfig(lr=1).lr == 1.0 and isinstance(TrainConfig(lr=1).lr, float)
    assert SFTConfig(steps=3.0).steps == 3 and isinstance(SFTConfig(steps=3.0).steps, int)
    assert RunConfig().train == TrainConfig()  # the defaults pass their own check
