"""The Python API: config in code, reward functions as objects, rows as datasets, the summary back."""

import json
import runpy
from pathlib import Path

import pytest

from ulorl.api import Trainer, make_config
from ulorl.config import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "python_api.py"
TINY = {"model.warm_start": "none", "data.train_size": 30, "data.eval": None, "rollout.max_response_len": 8,
        "rollout.num_segments": 2, "rollout.group_size": 2, "rollout.decode_batch": 4, "train.train_groups": 1,
        "algo.dynamic_sampling": False, "logging.progress": False, "logging.loggers": ["jsonl"],
        "checkpoint.every": 0, "reward.num_workers": 1}


def test_make_config_forms_agree():
    a = make_config(None, {"rollout.num_segments": 2, "train": {"steps": 3}})
    b = make_config(None, ["rollout.num_segments=2", "train.steps=3"])
    assert (a.rollout.num_segments, a.train.steps) == (b.rollout.num_segments, b.train.steps) == (2, 3)
    with pytest.raises(ConfigError, match="did you mean rollout.num_segments"):
        make_config(None, {"rollout.num_segment": 2})


class LengthParity:
    """TRL batch style, as a callable object: reward = 1 when the completion has an even number of characters."""

    def __init__(self):
        self.calls = 0
        self.columns = set()

    def __call__(self, completions, **columns):
        self.calls += 1
        self.columns |= set(columns)
        return [float(len(c) % 2 == 0) for c in completions]


def test_rows_never_overwrite_a_data_file_that_holds_other_rows(tmp_path):
    """Rows are written to RUN/data/train.jsonl; the same rows again (a resume) reuse the file untouched. Other
    rows for a folder whose train.jsonl holds different rows (an earlier run's, which may still be training or be
    resumed; a user's own file) go to train-<sha256 prefix>.jsonl, and the first file is kept byte for byte."""
    import hashlib

    rows = [{"prompt": f"add {i} {i}", "answer": str(2 * i)} for i in range(6)]
    config = make_config(None, TINY)
    first = Trainer(config, train_dataset=rows, eval_dataset=False, output_dir=tmp_path / "run")
    data = tmp_path / "run" / "data" / "train.jsonl"
    assert first.config.data.train == str(data) and data.read_text().count("\n") == 6
    text, inode = data.read_text(), data.stat().st_ino
    again = Trainer(config, train_dataset=rows, eval_dataset=False, output_dir=tmp_path / "run")
    assert again.config.data.train == str(data) and data.stat().st_ino == inode
    other = rows[:4]
    second = Trainer(config, train_dataset=other, eval_dataset=False, output_dir=tmp_path / "run")
    other_text = "".join(json.dumps(r) + "\n" for r in other)
    expected = data.with_name(f"train-{hashlib.sha256(other_text.encode()).hexdigest()[:12]}.jsonl")
    assert second.config.data.train == str(expected) and expected.read_text() == other_text
    assert data.read_text() == text and data.stat().st_ino == inode
    assert sorted(p.name for p in data.parent.iterdir()) == sorted([data.name, expected.name])  # no leftovers


def test_trainer_with_callable_reward_and_rows(tmp_path):
    rows = [{"prompt": f"add {i} {i}", "answer": str(2 * i)} for i in range(6)]
    reward = LengthParity()
    trainer = Trainer(make_config(None, {**TINY, "train.steps": 2}), reward_funcs=reward, train_dataset=rows,
                      eval_dataset=False, output_dir=tmp_path / "run")
    summary = trainer.train()
    assert summary["steps"] == 2 and summary["trained_samples"] == 4  # 1 group of 2 per step
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 2
    assert reward.calls >= 1 and {"ground_truth", "data_source"} <= reward.columns
    # the rows went through the loaders (written once to the run folder) and every reward is the function's
    assert (tmp_path / "run" / "data" / "train.jsonl").read_text().count("\n") == 6
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert {s["data_source"] for s in samples} == {"train"}
    for s in samples:  # a truncated answer scores 0 (reward.overlong=zero), whatever the function says
        expected = 0.0 if s["stop_reason"] == "truncated" else float(len(s["response"]) % 2 == 0)
        assert s["reward"] == expected
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("rewards/LengthParity/mean" in m for m in metrics)  # logged at the steps that scored
    assert "LengthParity" in (tmp_path / "run" / "config.yaml").read_text()  # the saved config names it
    # a second fresh run into that folder: refused, its hint in the API's words (it named --resume and --output-dir)
    from ulorl.run.checkpoint import CheckpointError

    again = Trainer(make_config(None, {**TINY, "train.steps": 2}), reward_funcs=reward, train_dataset=rows,
                    eval_dataset=False, output_dir=tmp_path / "run")
    with pytest.raises(CheckpointError) as e:
        again.train()
    assert str(e.value).endswith('holds checkpoints of an earlier run: pass resume="auto" to continue it, '
                                 'resume="never" to start over (its files are moved aside), or choose another '
                                 'output_dir')


def test_reward_weights_must_match(tmp_path):
    with pytest.raises(ConfigError, match="2 values for 1 reward functions"):
        Trainer(make_config(None, TINY), reward_funcs=LengthParity(), reward_weights=[1, 2], output_dir=tmp_path)


def test_example_script_runs(tmp_path):
    """examples/python_api.py --quick: two reward functions (verl + TRL style), weights, summary back."""
    main = runpy.run_path(str(EXAMPLE))["main"]
    summary = main(["--quick", "--steps", "2", "--output-dir", str(tmp_path / "ex")])
    assert summary["steps"] == 2 and summary["eval_before"] is not None and summary["eval_after"] is not None
    logged = set().union(*(json.loads(line) for line in (tmp_path / "ex" / "metrics.jsonl").read_text().splitlines()))
    assert {"rewards/correct_answer/mean", "rewards/correct_answer/answered", "rewards/brevity/mean"} <= logged


def test_reward_functions_receive_the_rows_extra_info(tmp_path):
    """verl passes each row's extra_info to compute_score; a batch function gets its keys as columns."""
    rows = [{"prompt": f"add {i} {i}", "answer": str(2 * i), "extra_info": {"tag": f"t{i}"}} for i in range(6)]
    reward = LengthParity()
    seen = []

    def batch(completions, tag=None, **columns):  # a default: the start-up check refuses required extra columns
        seen.extend(tag or [None])
        return reward(completions, **columns)

    Trainer(make_config(None, {**TINY, "train.steps": 2}), reward_funcs=batch, train_dataset=rows,
            eval_dataset=False, output_dir=tmp_path / "run").train()
    assert seen and set(seen) <= {f"t{i}" for i in range(6)}  # before: extra_info never reached the function


def test_a_script_without_a_main_guard_gets_one_line_from_the_spawned_learner(tmp_path):
    """`train.pipeline=overlap` spawns the learner, which imports the script again: a training call at the
    script's top level runs there too. The child stops with one line naming the fix, and the parent's error says
    the learner died before it answered (instead of multiprocessing's three tracebacks and an exit code)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    overrides = {**TINY, "train.steps": 1, "train.pipeline": "overlap"}
    script.write_text(f"from ulorl.api import Trainer, make_config\n"
                      f"Trainer(make_config(None, {overrides!r}), output_dir={str(tmp_path / 'run')!r}).train()\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 1
    assert ("ulorl: Trainer.train() ran while a child process imported this script again (Python's spawn start "
            "method does that): put the training code under `if __name__ == \"__main__\":`") in done.stderr
    assert done.stderr.rstrip().splitlines()[-1] == (
        "ulorl.learners.process.LearnerProcessError: the learner process ended unexpectedly (exit code 1) before it "
        "answered once (its own error is printed above; from a script, a training call outside `if __name__ == "
        "\"__main__\":` does that: the spawned process imports the script again)")
    assert "bootstrapping phase" not in done.stderr  # multiprocessing's own error never comes


def test_trainer_refuses_arguments_it_would_ignore_or_misread(tmp_path):
    """Each of these was accepted and then ignored, or failed later with a message about something else."""
    with pytest.raises(ConfigError, match=r"reward_weights=\.\.\.\) weighs reward_funcs: give those functions too"):
        Trainer(TINY, reward_weights=[3.0], output_dir=tmp_path / "a")
    with pytest.raises(ConfigError, match=r"eval_dataset=True\) names no data"):
        Trainer(TINY, eval_dataset=True, output_dir=tmp_path / "b")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"output_dir='.*file'\) is a file, not a run folder"):
        Trainer(TINY, output_dir=tmp_path / "file")
    with pytest.raises(ConfigError, match=r"sets 'train\.steps' twice \(also in 'train'\); give it once"):
        make_config(None, {"train.steps": 3, "train": {"steps": 4}})
    with pytest.raises(ConfigError, match=r"sets 'rollout\.torch\.decode_attention' twice"):
        make_config(None, {"rollout": {"torch": {"decode_attention": "sdpa"}}, "rollout.torch.decode_attention": "x"})
    with pytest.raises(ConfigError, match=r"sets 'train\.steps' under a key that another entry sets to a value"):
        make_config(None, {"train": 5, "train.steps": 3})
    assert make_config(None, {"train.steps": 3, "train": {"lr": 1e-4}}).train.steps == 3  # two keys, once each
    from ulorl.run.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"checkpoint sometimes does not exist \(resume takes auto, never or "
                                              r"a checkpoint's path\)"):
        Trainer(TINY, resume="sometimes", output_dir=tmp_path / "c").train()


def test_own_train_rows_with_the_built_in_eval_task_get_a_note(tmp_path, capsys):
    rows = [{"prompt": f"add {i} {i}", "answer": str(2 * i)} for i in range(4)]
    Trainer({**TINY, "data.eval": "builtin:chain"}, train_dataset=rows, output_dir=tmp_path / "a")
    assert ("note: Trainer(eval_dataset=...) not given: the held-out evaluation keeps data.eval=builtin:chain, a "
            "built-in task, not your train_dataset's; give your held-out rows as eval_dataset, or eval_dataset=False"
            in capsys.readouterr().out)
    Trainer({**TINY, "data.eval": "builtin:chain"}, train_dataset=rows, eval_dataset=False, output_dir=tmp_path / "b")
    Trainer({**TINY, "data.eval": "builtin:chain"}, output_dir=tmp_path / "c")  # the built-in task for both
    assert "note:" not in capsys.readouterr().out
