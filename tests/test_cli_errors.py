"""Issue 15: every user error is one line naming the file, key or row; a traceback only with --debug.

Each case runs `ulorl.cli.main(argv)` in-process on input built in `tmp_path` and checks the exit
status and that stderr is exactly one `ulorl COMMAND: error: ...` line holding the expected words.
Nothing here trains: every case fails before the warm start (that is part of what is tested).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ulorl.cli import main as cli

QUICK = ["model.warm_start=none", "data.eval=null", "logging.progress=false", "logging.loggers=[jsonl]"]


def run(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    try:
        rc = cli(argv)
    except SystemExit as e:  # argparse's own usage errors
        rc = e.code
    return rc, capsys.readouterr().err


def assert_one_line(err: str, command: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"ulorl {command}: error: "), err
    for w in words:
        assert w in lines[0], (w, lines[0])


# -- config, devices, reward, judge key --------------------------------------------------------------
def _latin1(tmp: Path) -> list[str]:
    (tmp / "latin.yaml").write_bytes("train:\n  steps: 3  # caf\xe9\n".encode("latin-1"))
    return ["config", "-c", str(tmp / "latin.yaml")]


def _judge(tmp: Path, *spoilt: str) -> Path:
    """The built-in tiny model's folder as a judge, with the files `spoilt` removed (config.json: emptied)."""
    from ulorl.models import build_tiny_model

    folder = build_tiny_model(tmp / "judge")
    for name in spoilt:
        if name == "config.json":
            (folder / name).write_text("{}")
        else:
            (folder / name).unlink()
    return folder


def _sliding(tmp: Path) -> Path:
    """The built-in tiny model's folder with sliding-window attention in every layer (its weights unchanged):
    an SFT trains it, the torch engine refuses it."""
    from ulorl.models import build_tiny_model

    folder = build_tiny_model(tmp / "sliding")
    config = json.loads((folder / "config.json").read_text())
    config.pop("layer_types", None)
    config.update(use_sliding_window=True, sliding_window=8, max_window_layers=0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _bad_yaml(tmp: Path) -> str:
    (tmp / "bad.yaml").write_text("train:\n  steps: [1\n")
    return str(tmp / "bad.yaml")


def _odometer_preset(tmp: Path) -> str:
    (tmp / "odo.yaml").write_text("data:\n  train: builtin:odometer\n  eval: builtin:odometer\n  uniform: 0.3\n")
    return str(tmp / "odo.yaml")


def _sft_run(tmp: Path) -> Path:
    """The layout of a `ulorl sft` run folder: its model (a plain HF folder) at RUN/model, no checkpoints."""
    (tmp / "sft" / "model").mkdir(parents=True)
    (tmp / "sft" / "model" / "config.json").write_text("{}")
    return tmp / "sft"


CONFIG_CASES = {
    "non-UTF-8 config file": (_latin1, "config", ["latin.yaml", "not UTF-8"]),
    "a directory as --config": (lambda t: ["config", "-c", str(t)], "config", ["is a directory"]),
    "train.device=tpu": (lambda t: ["config", "train.device=tpu"], "config", ["train.device='tpu'"]),
    "a typo in reward.fn": (lambda t: ["config", "reward.fn=rulle"], "config", ["reward.fn", "rulle"]),
    "an unknown reward module": (lambda t: ["config", "reward.fn=no_such_module_xyz:score"], "config",
                                 ["reward.fn", "no_such_module_xyz"]),
    "NaN learning rate": (lambda t: ["config", "train.lr=.nan"], "config", ["train.lr=nan", "not a finite"]),
    "a missing judge API key, before any work": (
        lambda t: ["train", "-o", str(t / "run"), *QUICK, "reward.judge=rule_then_judge",
                   "reward.judge_url=http://127.0.0.1:9", "reward.api_key_env=ULORL_TEST_UNSET_KEY"],
        "train", ["reward.api_key_env='ULORL_TEST_UNSET_KEY'", "not set"]),
    "a CUDA device that is not there": (lambda t: ["train", "-o", str(t / "run"), *QUICK, "train.device=cuda:64"],
                                        "train", ["train.device='cuda:64'", "no such device"]),
    "eval on a CUDA device that is not there": (lambda t: ["eval", "--device", "cuda:64", "-o", str(t / "ev")],
                                                "eval", ["--device='cuda:64'", "no such device", "use --device cpu"]),
    "eval on a device torch does not know": (lambda t: ["eval", "--device", "gpu0", "-o", str(t / "ev")], "eval",
                                             ["--device='gpu0' is not a device torch knows"]),
    "clean's model steps on a CUDA device that is not there": (
        lambda t: ["clean", "--input", "builtin:chain", "-o", str(t / "c.jsonl"), "--model", "builtin",
                   "--device", "cuda:64"], "clean", ["--device='cuda:64'", "no such device"]),
    "clean's --k 0 (it was a traceback)": (
        lambda t: ["clean", "--input", "builtin:chain", "-o", str(t / "c.jsonl"), "--k", "0"], "clean",
        ["--k must be >= 1, got 0"]),
    "clean's --consensus-threshold nan": (
        lambda t: ["clean", "--input", "builtin:chain", "-o", str(t / "c.jsonl"), "--consensus-threshold", "nan"],
        "clean", ["--consensus-threshold must be in (0, 1], got nan"]),
    **{f"clean's --temperature {t} (it was accepted, and unused by the rule steps)": (
        lambda tmp, t=t: ["clean", "--input", "builtin:chain", "-o", str(tmp / "c.jsonl"), "--temperature", t],
        "clean", [f"--temperature must be a finite number > 0, got {float(t)}"]) for t in ("-1", "0", "inf", "nan")},
    "show of a `ulorl sft` run": (lambda t: ["show", str(_sft_run(t))], "show",
                                 ["a `ulorl sft` run", "logs no samples", "`ulorl eval --model ", "/sft/model`"]),
    "export of a `ulorl sft` run": (lambda t: ["export", str(_sft_run(t))], "export",
                                   ["a `ulorl sft` run", "already a plain Hugging Face folder: ", "/sft/model"]),
    "export of a folder that is not there": (lambda t: ["export", str(t / "norun")], "export",
                                             ["norun: no such folder", "give the folder of a `ulorl train` run"]),
    "export of a file": (lambda t: ["export", str(_file(t))], "export", ["afile: is a file, not a run folder"]),
    "a train data file that is not there, before the warm start": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=sft", "sft.steps=1", "logging.progress=false",
                   f"data.train={t / 'missing.jsonl'}"], "train", ["missing.jsonl: no such file or folder"]),
    "a train data path without an extension that is not there": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=none", f"data.train={t / 'nope'}"], "train",
        ["nope: no such file or folder"]),
    "a clean output named .csv": (
        lambda t: ["clean", "--input", "builtin:chain", "-o", str(t / "out.csv"), "--steps", "multi_question"],
        "clean", ["out.csv: CSV is not written; name the output .jsonl or .parquet"]),
    "an eval data file no format reads, before the warm start": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=sft", "sft.steps=1", "logging.progress=false",
                   f"data.eval={_file(t)}"], "train", ["afile: cannot tell the format from the name"]),
    "a bad train row, before the warm start": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=sft", "sft.steps=1", "logging.progress=false",
                   f"data.train={_jsonl(t, GOOD + NO_ANSWER)}"], "train",
        ["in.jsonl: row 1, field 'answer': expected a reference answer", "data.on_bad_row=skip"]),
    "train prompts all longer than data.max_prompt_len, before the warm start": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=sft", "sft.steps=1", "logging.progress=false",
                   f"data.train={_jsonl(t, GOOD)}", "data.max_prompt_len=3"], "train",
        ["in.jsonl: 0/1 rows loaded", "1 prompt too long dropped: no usable prompts; raise data.max_prompt_len "
         "(now 3 tokens) to keep the long ones"]),
    "eval.reference on rows without a worked solution, before the warm start": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=sft", "sft.steps=1", "logging.progress=false",
                   f"data.eval={_jsonl(t, GOOD)}", "eval.reference=true"], "train",
        ["eval.reference=true", "in.jsonl: row 0 (prompt id 0) has no extra_info.solution"]),
    "a KV cache budget too small, before the warm start": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=sft", "sft.steps=1", "logging.progress=false",
                   "rollout.kv_cache_gib=0.0001"], "train",
        # 10-token prompt + 160 new tokens: 6 blocks of 32 x 1,536 bytes per token = 0.281 MiB; 0.0001 GiB = 0.102 MiB
        ["needs 0.281 MiB of KV cache, over the budget rollout.kv_cache_gib=0.0001 (0.102 MiB)",
         "lower rollout.max_response_len"]),
    "a model the torch engine does not run, before the warm start": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=sft", "sft.steps=1", "logging.progress=false",
                   f"model.path={_sliding(t)}"], "train",
        ["sliding-window attention (qwen3, layer types ['sliding_attention'])", "use rollout.engine=hf"]),
    "a negative train.seed": (lambda t: ["config", "train.seed=-1"], "config",
                              ["train.seed=-1 must be an integer in [0, 4294967295]"]),
    "a data.seed past numpy's range": (lambda t: ["config", "data.seed=4294967296"], "config",
                                       ["data.seed=4294967296 must be an integer in [0, 4294967295]"]),
    "data.train_uniform on builtin:chain": (
        lambda t: ["config", "data.train_uniform=0.5"], "config",
        ["data.train_uniform=0.5 is for builtin:odometer", "not builtin:chain (data.train)"]),
    "sft.max_size under the smallest problem": (lambda t: ["config", "sft.max_size=1"], "config",
                                                ["sft.max_size=1 must be >= 2"]),
    "an unknown built-in model preset": (
        lambda t: ["train", "-o", str(t / "run"), "model.path=builtin:foo"], "train",
        ["builtin:foo: no such built-in model preset; choose one of: builtin, builtin:long"]),
    "eval's unknown built-in model preset": (
        lambda t: ["eval", "--model", "builtin:foo", "-o", str(t / "ev")], "eval",
        ["builtin:foo: no such built-in model preset"]),
    "--resume auto without the run's folder": (lambda t: ["train", "--resume", "auto"], "train",
                                                ["--resume auto continues the run in --output-dir: give it"]),
    "eval's --config that does not parse": (  # a traceback: eval read its sections with yaml.safe_load
        lambda t: ["eval", "--config", _bad_yaml(t), "-o", str(t / "ev")], "eval",
        ["bad.yaml is not valid YAML: line 3, column 1: expected ',' or ']'"]),
    "eval's --reward without a value": (lambda t: ["eval", "--reward", "fn", "-o", str(t / "ev")], "eval",
                                        ["--reward 'fn': expected KEY=VALUE"]),
    "eval's --engine that is no engine": (lambda t: ["eval", "--engine", "foo", "-o", str(t / "ev")], "eval",
                                          ["--engine='foo' is not allowed; choose one of: torch, hf, vllm"]),
    "eval of builtin:chain with an odometer preset's size law": (  # a TypeError from the chain task before
        lambda t: ["eval", "--config", _odometer_preset(t), "--data", "builtin:chain", "-o", str(t / "ev")], "eval",
        ["data.uniform=0.3 is for builtin:odometer", "not builtin:chain (data.eval)"]),
    "clean's --steps naming no step": (  # ran the default steps, silently
        lambda t: ["clean", "--input", "builtin:chain", "-o", str(t / "c.jsonl"), "--steps", ""], "clean",
        ["--steps '': names no step; leave it out for the default steps"]),
    "a bad held-out row, before the SFT": (
        lambda t: ["sft", "-o", str(t / "run"), "sft.steps=1", "logging.progress=false",
                   f"data.eval={_jsonl(t, NO_ANSWER + GOOD)}"], "sft", ["in.jsonl: row 0, field 'answer'"]),
    "a judge model folder that is not there, before the warm start": (
        lambda t: ["train", "-o", str(t / "run"), "model.warm_start=sft", "sft.steps=1", "logging.progress=false",
                   "reward.judge=rule_then_judge", f"reward.judge_model_path={t / 'nojudge'}"], "train",
        ["reward.judge_model_path=", "nojudge': no such folder", "reward.judge_url"]),
    "a judge model folder without config.json": (
        lambda t: ["train", "-o", str(t / "run"), *QUICK, "reward.judge=judge_only",
                   f"reward.judge_model_path={t}"], "train", ["no config.json, so not a Hugging Face model folder"]),
    "a judge model whose config does not load": (
        lambda t: ["train", "-o", str(t / "run"), *QUICK, "reward.judge=judge_only",
                   f"reward.judge_model_path={_judge(t, 'config.json')}"], "train",
        ["judge': its config or tokenizer does not load (ValueError: "]),
    "a judge model folder without its tokenizer's files": (
        lambda t: ["train", "-o", str(t / "run"), *QUICK, "reward.judge=judge_only",
                   f"reward.judge_model_path={_judge(t, 'tokenizer.json', 'tokenizer_config.json')}"], "train",
        ["judge': its tokenizer is empty (are its files, e.g. tokenizer.json, in the folder?)"]),
    "a judge model without a chat template, before the SFT": (
        lambda t: ["sft", "-o", str(t / "run"), "sft.steps=1", "logging.progress=false", "reward.judge=judge_only",
                   f"reward.judge_model_path={_judge(t, 'chat_template.jinja')}"], "sft",
        ["judge': its tokenizer has no chat template", "use a chat (instruct) model"]),
    "eval's judge model folder that is not there, before the model loads": (
        lambda t: ["eval", "--reward", "judge=judge_only", f"judge_model_path={t / 'nojudge'}", "-o", str(t / "ev")],
        "eval", ["reward.judge_model_path=", "nojudge': no such folder"]),
    "eval's judge key that is not set, before the model loads": (
        lambda t: ["eval", "--reward", "judge=judge_only", "judge_url=http://127.0.0.1:9",
                   "api_key_env=ULORL_TEST_UNSET_KEY", "-o", str(t / "ev")], "eval",
        ["reward.api_key_env='ULORL_TEST_UNSET_KEY'", "not set"]),
    "clean's judge model folder that is not there, with model steps": (
        lambda t: ["clean", "--input", "builtin:chain", "-o", str(t / "c.jsonl"), "--model", "builtin", "--reward",
                   "judge=judge_only", f"judge_model_path={t / 'nojudge'}"], "clean",
        ["reward.judge_model_path=", "nojudge': no such folder"]),
    "sft's held-out file that is not there, before the SFT": (
        lambda t: ["sft", "-o", str(t / "run"), "sft.steps=1", "logging.progress=false",
                   f"data.eval={t / 'missing.jsonl'}"], "sft", ["missing.jsonl: no such file or folder"]),
    "eval's --procs 0, named as the flag": (lambda t: ["eval", "--procs", "0", "-o", str(t / "ev")], "eval",
                                            ["--procs: rollout.torch.procs=0 must be > 0"]),
    "eval's --max-prompt-len 0, named as the flag": (
        lambda t: ["eval", "--max-prompt-len", "0", "-o", str(t / "ev")], "eval",
        ["--max-prompt-len: data.max_prompt_len must be >= 1"]),
    "eval's pass@k above its k": (lambda t: ["eval", "--k", "4", "--pass-k", "1", "8", "-o", str(t / "ev")], "eval",
                                  ["--pass-k 1 8", "--k is 4", "raise --k to 8"]),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_config_errors_are_one_line(case, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ULORL_TEST_UNSET_KEY", raising=False)
    build, command, words = CONFIG_CASES[case]
    rc, err = run(build(tmp_path), capsys)
    assert rc == 2
    assert_one_line(err, command, *words)
    assert not (tmp_path / "run" / "warm_start").exists()  # failed before the warm start
    assert not (tmp_path / "run" / "model").exists()  # ... or before the SFT


@pytest.mark.parametrize("setting,words", [
    ("rollout.torch.decode_attention=triton", ["decode_attention=triton runs its kernel on CUDA (this engine's "
                                               "device: cpu)", "On CPU use split_k"]),
    ("rollout.torch.prefill_attention=varlen", ["prefill_attention=varlen cannot run here: ", "use sdpa (or auto)"])])
def test_an_attention_path_this_device_cannot_run_fails_before_the_warm_start(setting, words, tmp_path, capsys,
                                                                              monkeypatch):
    # each was a traceback (ValueError) when the engine started, after the minutes of the SFT warm start
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the suite runs Triton's interpreter, under which triton runs on CPU
    rc, err = run(["train", "-o", str(tmp_path / "run"), "model.warm_start=sft", "sft.steps=1",
                   "logging.progress=false", setting], capsys)
    assert rc == 2
    assert_one_line(err, "train", *words)
    assert not (tmp_path / "run" / "warm_start").exists()


def test_a_logger_whose_package_is_missing_fails_before_the_warm_start(tmp_path, capsys, monkeypatch):
    # it was a traceback (ImportError) from the logger, after the minutes of the SFT warm start
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    rc, err = run(["train", "-o", str(tmp_path / "run"), "model.warm_start=sft", "sft.steps=1",
                   "logging.progress=false", "logging.loggers=[console,wandb]"], capsys)
    assert rc == 2
    assert_one_line(err, "train", "logging.loggers=['console', 'wandb'] needs the wandb package",
                    "pip install 'ulorl[wandb]' or drop 'wandb' from logging.loggers")
    assert not (tmp_path / "run").exists()  # refused before the run folder is made


def test_ulorl_alone_lists_the_commands(capsys):
    assert cli([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ulorl") and all(f"    {c} " in out for c in ("train", "eval", "config"))


def test_python_dash_m_is_the_same_command_line():
    # `python -m ulorl` (launchers that run a module) gives the script's output and exit statuses
    def module(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ulorl", *argv], capture_output=True, text=True, timeout=300)

    ok = module("config", "--changed", "train.steps=5")
    assert ok.returncode == 0 and ok.stdout == "train.steps: 5 (default: 30)\n"
    bad = module("config", "train.device=tpu")
    assert bad.returncode == 2 and bad.stderr.startswith("ulorl config: error: train.device='tpu'")


def test_config_takes_no_output_folder(capsys):
    # `ulorl config` prints; an -o it accepted and ignored suggested it wrote a run folder
    rc, err = run(["config", "-o", "somewhere"], capsys)
    assert rc == 2 and "ulorl config: error: unrecognized arguments: -o" in err  # the command's name and usage
    assert "usage: ulorl config [-h] [--config CONFIG] [--changed] [overrides ...]" in err
    assert run(["config", "rollout.num_segments=2"], capsys)[0] == 0


def test_debug_shows_the_traceback(tmp_path, capsys):
    with pytest.raises(Exception, match="train.device='tpu'"):
        cli(["config", "--debug", "train.device=tpu"])


# -- the output folder ----------------------------------------------------------------------------------
def _file(tmp: Path) -> Path:
    (tmp / "afile").write_text("x")
    return tmp / "afile"


OUTPUT_CASES = {
    "is a file": (lambda t: _file(t), ["afile: File exists (it exists and is not a folder)"]),
    "lies under a file": (lambda t: _file(t) / "run", ["afile/run", "Not a directory", "is a file"]),
}


@pytest.mark.parametrize("case", list(OUTPUT_CASES))
def test_an_unusable_output_folder_is_one_line(case, tmp_path, capsys):
    make, words = OUTPUT_CASES[case]
    rc, err = run(["train", "-o", str(make(tmp_path)), *QUICK], capsys)
    assert rc == 2
    assert_one_line(err, "train", *words)
    assert err.count("not a folder") <= 1  # the meaning is said once


def test_a_read_only_output_folder_is_one_line(tmp_path, capsys, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if os.geteuid() == 0:  # root writes anywhere: make the permission check say what it says for a user
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == ro / "run" else real(p, mode, **k))
        ro.chmod(0o700)
    rc, err = run(["train", "-o", str(ro / "run"), *QUICK], capsys)
    assert rc == 2
    assert_one_line(err, "train", f"{ro / 'run'}: Permission denied (choose a path you can write)")


def test_run_folders_are_private(tmp_path, capsys):
    from ulorl.run.checkpoint import make_run_dir

    run_dir = make_run_dir(tmp_path / "a" / "run")
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700  # configs can name endpoints: not world-readable
    rc, _ = run(["sft", "-o", str(tmp_path / "sft"), "train.device=tpu"], capsys)  # refused before the folder
    assert rc == 2 and not (tmp_path / "sft").exists()


# -- overrides anywhere on the line ------------------------------------------------------------------------
def test_overrides_are_accepted_after_options(capsys):
    rc = cli(["config", "train.steps=7", "-c", "configs/demo.yaml", "train.lr=0.5"])
    out = capsys.readouterr().out
    assert rc == 0 and "steps: 7" in out and "lr: 0.5" in out
    from ulorl.cli import build_parser, parse_args

    args = parse_args(build_parser(), ["train", "--resume", "auto", "train.steps=3", "rollout.num_segments=2"])
    assert args.resume == "auto" and args.overrides == ["train.steps=3", "rollout.num_segments=2"]
    rc, err = run(["train", "--resume", "auto", "--bogus-flag"], capsys)
    assert rc == 2 and "ulorl train: error: unrecognized arguments: --bogus-flag" in err


def test_an_override_to_a_command_of_flags_names_the_flag(capsys):
    # eval, clean, export, ... take flags: a train-style `eval.num_problems=10` is told the flag it meant
    rc, err = run(["eval", "--model", "builtin", "eval.num_problems=10", "k=2"], capsys)
    assert rc == 2 and ("ulorl eval: error: unrecognized arguments: eval.num_problems=10 k=2; ulorl eval takes flags, "
                        "not KEY=VALUE overrides: --num-problems 10 --k 2") in err
    rc, err = run(["export", "runs/x", "export.bogus=1"], capsys)
    assert rc == 2 and ("unrecognized arguments: export.bogus=1; ulorl export takes flags, not KEY=VALUE overrides "
                        "(`ulorl export --help` lists them)") in err
    rc, err = run(["eval", "--bogus"], capsys)
    assert rc == 2 and err.strip().endswith("ulorl eval: error: unrecognized arguments: --bogus")  # no hint


# -- `ulorl clean` inputs ------------------------------------------------------------------------------------
def _jsonl(tmp: Path, text: str | bytes, name: str = "in.jsonl") -> str:
    p = tmp / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


def _disk(tmp: Path, broken: str) -> str:
    folder = tmp / "ds"
    folder.mkdir()
    if broken == "dataset_dict.json":
        (folder / "dataset_dict.json").write_text('{"splits": ')
    else:
        (folder / "state.json").write_text('{"_data_files": 3}')
    return str(folder)


def _binary_parquet(tmp: Path) -> str:
    pq.write_table(pa.table({"prompt": [b"What is 1+1?"], "answer": ["2"]}), tmp / "bin.parquet")
    return str(tmp / "bin.parquet")


GOOD = '{"prompt": "What is 1+1?", "answer": "2"}\n'
NO_ANSWER = '{"prompt": "What is 2+2?"}\n'
CLEAN_CASES = {
    "save_to_disk folder with a broken state.json": (lambda t: ["--input", _disk(t, "state.json")],
                                                      ["state.json", "_data_files"]),
    "save_to_disk folder with a broken dataset_dict.json": (lambda t: ["--input", _disk(t, "dataset_dict.json")],
                                                             ["dataset_dict.json", "splits"]),
    "JSONL nested 10^5 levels deep": (
        lambda t: ["--input", _jsonl(t, '{"prompt": "q?", "answer": "1", "x": ' + "[" * 10**5 + "]" * 10**5 + "}\n")],
        ["row 0", "nested too deeply"]),
    "invalid UTF-8 in a column that is not validated": (
        lambda t: ["--input", _jsonl(t, b'{"prompt": "q?", "answer": "1", "note": "\xff\xfe"}\n')],
        ["row 0", "field 'note'", "undecodable_text"]),
    "--format jsonl on a directory": (lambda t: ["--input", str(t), "--format", "jsonl"], ["is a folder"]),
    "a bad --steps": (lambda t: ["--input", _jsonl(t, GOOD), "--steps", "bogus"], ["--steps", "bogus"]),
    "a model step without --model": (lambda t: ["--input", _jsonl(t, GOOD), "--steps", "too_easy"],
                                     ["too_easy", "--model"]),
    "an unknown input extension": (lambda t: ["--input", _jsonl(t, GOOD, "in.txt")], ["in.txt", "--format"]),
    "--output naming a folder that ends in .jsonl": (lambda t: ["--input", _jsonl(t, GOOD), "--output",
                                                                str(_mkdir(t / "out.jsonl"))],
                                                     ["out.jsonl", "existing folder"]),
    "--output naming a folder that holds other files": (
        lambda t: ["--input", _jsonl(t, GOOD), "--output", str(t)],  # datasets would write its files among them
        ["not a save_to_disk dataset", "(it holds in.jsonl)"]),
}


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


@pytest.mark.parametrize("case", list(CLEAN_CASES))
def test_clean_input_errors_are_one_line(case, tmp_path, capsys):
    build, words = CLEAN_CASES[case]
    argv = build(tmp_path)
    if "--output" not in argv:
        argv += ["--output", str(tmp_path / "out" / "clean.jsonl")]
    rc, err = run(["clean", *argv], capsys)
    assert rc == 2
    assert_one_line(err, "clean", *words)


def test_clean_bad_on_bad_row_is_a_usage_error(tmp_path, capsys):
    rc, err = run(["clean", "--input", _jsonl(tmp_path, GOOD), "--output", str(tmp_path / "o.jsonl"),
                   "--on-bad-row", "maybe"], capsys)
    assert rc == 2 and "Traceback" not in err and "--on-bad-row: invalid choice: 'maybe'" in err


def test_clean_writes_save_to_disk_into_an_empty_or_earlier_output_folder(tmp_path, capsys):
    """An existing folder output is a save_to_disk dataset: an empty folder, or one an earlier clean wrote (its
    data-*.arrow, dataset_info.json and state.json), is written; the rows read back."""
    pytest.importorskip("datasets")
    import datasets

    src = _jsonl(tmp_path, GOOD + '{"prompt": "What is 2+2?", "answer": "4"}\n')
    (tmp_path / "out").mkdir()
    for _ in range(2):  # the second: over the first clean's output
        rc, err = run(["clean", "--input", src, "--output", str(tmp_path / "out")], capsys)
        assert rc == 0, err
        assert datasets.load_from_disk(str(tmp_path / "out"))["answer"] == ["2", "4"]


def test_clean_binary_parquet_prompt_is_written_as_text(tmp_path, capsys):
    rc, err = run(["clean", "--input", _binary_parquet(tmp_path), "--output", str(tmp_path / "o.jsonl")], capsys)
    assert rc == 0, err
    assert json.loads((tmp_path / "o.jsonl").read_text()) == {"prompt": "What is 1+1?", "answer": "2"}


def test_a_kv_cache_over_budget_stops_at_start_in_one_line(tmp_path, capsys):
    # one sequence of a 10-token prompt + 160 new tokens: 6 blocks of 32 x 1,536 bytes per token = 295 KB > 105 KB
    # (the paged pool needs room for one sequence; more rows than fit wait or are preempted): refused at start
    rc, err = run(["train", "-o", str(tmp_path / "run"), *QUICK, "rollout.kv_cache_gib=0.0001"], capsys)
    assert rc != 0
    assert_one_line(err, "train", "rollout.kv_cache_gib=0.0001", "rollout.max_response_len")
    assert not list((tmp_path / "run").glob("checkpoints/step_*"))


# -- a model path that is not a model folder -----------------------------------------------------------------
def _run_folder(tmp: Path) -> Path:
    """The layout `ulorl train` leaves: an export, two checkpoints, and one of LoRA adapters only (no config.json)."""
    run_dir = tmp / "myrun"
    for model in ("export", "checkpoints/step_000020/model", "checkpoints/step_000100/model"):
        (run_dir / model).mkdir(parents=True)
        (run_dir / model / "config.json").write_text("{}")
    (run_dir / "checkpoints/step_000200/model").mkdir(parents=True)  # adapters: not a folder to load as a model
    return run_dir


def _checkpoint(tmp: Path) -> Path:
    """A checkpoint folder of that layout (its manifest beside the policy's folder)."""
    ckpt = _run_folder(tmp) / "checkpoints" / "step_000100"
    (ckpt / "MANIFEST.json").write_text("{}")
    return ckpt


def _latest(tmp: Path) -> Path:
    """A run's `checkpoints/latest`: a file naming its newest step, not a model folder."""
    ckpts = _run_folder(tmp) / "checkpoints"
    (ckpts / "latest").write_text("step_000100\n")
    return ckpts / "latest"


MODEL_CASES = {
    "a missing folder": (lambda t: t / "nowhere", ["--model '", "nowhere", "no such folder"]),
    "a file": (_file, ["--model '", "afile", "a file, not a folder"]),
    "a missing .gguf file": (lambda t: t / "smol.gguf", ["--model '", "smol.gguf", "no such GGUF file"]),
    "a checkpoint": (_checkpoint, ["no config.json", "a `ulorl train` checkpoint: give", "step_000100/model'"]),
    "a folder without config.json": (lambda t: t, ["no config.json", "not a Hugging Face model folder"]),
    "a run folder": (_run_folder, ["no config.json", "run folder", "myrun/export'", "step_000100/model'"]),
    "an sft run folder": (_sft_run, ["no config.json", "it is a `ulorl sft` run folder: give '", "sft/model'"]),
    "a run's latest pointer": (_latest, ["the pointer to a run's newest checkpoint, not a model: give '",
                                         "checkpoints/step_000100/model'"]),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_a_model_path_that_is_no_model_is_one_line(case, tmp_path, capsys):
    make, words = MODEL_CASES[case]
    rc, err = run(["eval", "--model", str(make(tmp_path)), "-o", str(tmp_path / "out")], capsys)
    assert rc == 2
    assert_one_line(err, "eval", *words)
    assert "step_000200" not in err and "step_000020" not in err  # only the newest checkpoint that is a model
    assert not (tmp_path / "out").exists()
    assert "model.path" not in err  # the flag the user typed, not the config key


def test_a_model_path_from_the_config_file_is_named_as_its_key(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"model:\n  path: {tmp_path / 'nowhere'}\n")
    rc, err = run(["eval", "--config", str(config), "-o", str(tmp_path / "out")], capsys)
    assert rc == 2
    assert_one_line(err, "eval", "model.path='", "nowhere", "no such folder")


def test_ctrl_c_while_the_cli_starts_is_one_line(capsys, monkeypatch):
    # Ctrl-C during the imports of the first seconds (transformers, torch) was a KeyboardInterrupt traceback
    import ulorl.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_quiet_transformers", interrupted)
    assert cli.main(["config"]) == cli.EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "ulorl: interrupted while starting\n"
    with pytest.raises(KeyboardInterrupt):  # --debug shows the traceback, as for every other error
        cli.main(["config", "--debug"])
