"""Issue 25, cases 4-14: each hostile input of the red-team pass gets one line (or a handled fallback).

Each test is named by its case. CLI cases run `ulorl.cli.main` in-process and check the exit status and that
stderr is one `ulorl COMMAND: error: ...` line naming the file, field or setting. Exit statuses: 2 for a
user error, 3 non-finite updates, 4 a stall, 5 a process of the run died, 130 interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import struct
from pathlib import Path

import pytest
from tests.test_cli_errors import assert_one_line, run

from ulorl.run.checkpoint import CheckpointError, verify_checkpoint

QUICK = ["model.warm_start=none", "data.eval=null", "logging.progress=false", "logging.loggers=[jsonl]"]


def tiny_run(model_dir: Path, *extra: str) -> list[str]:
    return [*QUICK, f"model.path={model_dir}", "data.train_size=20", "rollout.max_response_len=8",
            "rollout.num_segments=2", "rollout.group_size=2", "rollout.decode_batch=4", "train.train_groups=1",
            "algo.dynamic_sampling=false", "reward.fn=exact", *extra]


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, tiny_model_dir):
    """A finished 2-step run with checkpoints step_000001 and step_000002; tests copy it before damaging it."""
    from ulorl.config import load_run_config
    from ulorl.run.loop import train

    run = tmp_path_factory.mktemp("two") / "run"
    train(load_run_config(None, tiny_run(tiny_model_dir, "train.steps=2", "checkpoint.every=1")), run)
    return run


def copy_of(run: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(run, tmp_path / "run", symlinks=True))


# -- 4. a full disk during a save -------------------------------------------------------------------
def test_disk_full_during_a_save_is_one_line(tmp_path, tiny_model_dir, capsys, monkeypatch):
    from safetensors import SafetensorError

    import ulorl.models.lora as lora

    def full(model, folder):  # what safetensors raises when the disk fills while it writes
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
                              'space left on device" })')

    monkeypatch.setattr(lora, "save_policy", full)
    rc, err = run(["train", "-o", str(tmp_path / "run"), *tiny_run(tiny_model_dir, "train.steps=1",
                                                                    "checkpoint.every=1")], capsys)
    assert rc == 2
    assert_one_line(err, "train", "saving checkpoint step 1", "No space left on device", "partial folder was "
                    "removed", "Free space")
    assert not list((tmp_path / "run" / "checkpoints").glob("step_*"))  # nothing half-written is left


# -- 5. binary bytes in checkpoints/latest -----------------------------------------------------------
def test_binary_bytes_in_latest_are_rewritten_on_resume(two_steps, tmp_path, tiny_model_dir):
    from ulorl.config import load_run_config
    from ulorl.run.loop import train

    run = copy_of(two_steps, tmp_path)
    (run / "checkpoints" / "latest").write_bytes(b"\xff\xfe\x00garbage")
    summary = train(load_run_config(None, tiny_run(tiny_model_dir, "train.steps=3", "checkpoint.every=1")), run,
                    resume="auto")
    assert summary["steps"] == 3  # resumed from step 2 (the newest verifying) and went on
    assert (run / "checkpoints" / "latest").read_text() == "step_000003"


# -- 6. a checkpoint's model/ folder symlinked out of the run -----------------------------------------
def test_a_model_folder_symlinked_out_of_the_checkpoint_is_refused(two_steps, tmp_path, tiny_model_dir):
    import shutil

    from ulorl.run.checkpoint import find_resumable

    run = copy_of(two_steps, tmp_path)
    ckpt = run / "checkpoints" / "step_000002"
    outside = tmp_path / "elsewhere"
    shutil.move(ckpt / "model", outside)  # the same bytes, so only the symlink can be the reason
    (ckpt / "model").symlink_to(outside, target_is_directory=True)
    with pytest.raises(CheckpointError, match="symlink .* leads out of the checkpoint"):
        verify_checkpoint(ckpt)
    path, notes = find_resumable(run / "checkpoints")
    assert path == run / "checkpoints" / "step_000001"  # falls back to the older one, and says why
    assert any("leads out of the checkpoint" in n for n in notes)


# -- 7. rollout.engine=vllm without vllm -------------------------------------------------------------
def test_vllm_engine_without_vllm_fails_before_any_work(tmp_path, tiny_model_dir, capsys):
    pytest.importorskip("torch")
    if __import__("importlib").util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    rc, err = run(["train", "-o", str(tmp_path / "run"), *QUICK, "model.warm_start=sft", "rollout.engine=vllm"],
                  capsys)
    assert rc == 2
    assert_one_line(err, "train", "rollout.engine=vllm", "pip install", "rollout.engine=torch")
    assert not (tmp_path / "run").exists()  # not even the run folder: no warm start, no data loading


# -- 8. the overlap learner process dies ---------------------------------------------------------------
def test_a_dead_learner_process_is_one_line_with_its_own_status(capsys, monkeypatch):
    import ulorl.cli as cli_module
    from ulorl.learners.process import LearnerProcessError

    def dies(args):
        raise LearnerProcessError("the learner process failed:\nTraceback (most recent call last):\n  File "
                                  "\"x.py\", line 1, in f\nRuntimeError: CUDA error: out of memory\n")

    monkeypatch.setattr(cli_module, "cmd_train", dies)
    rc, err = run(["train"], capsys)
    assert rc == 5  # its own status: not 2 (user error) nor 3 (non-finite updates)
    assert_one_line(err, "train", "the learner process failed", "RuntimeError: CUDA error: out of memory",
                    "--resume auto")


# -- 9. `ulorl eval` on bad models and numbers ------------------------------------------------------------
def _damaged(model_dir: Path, tmp: Path, how: str) -> Path:
    import shutil

    d = Path(shutil.copytree(model_dir, tmp / how))
    weights = (d / "model.safetensors").read_bytes()
    if how == "corrupt":
        (d / "model.safetensors").write_bytes(b"not a safetensors file" * 4)
    elif how == "huge_header":  # the 8-byte header length says 10^15 bytes
        (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**15) + weights[8:])
    elif how == "unknown_model_type":
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "model_type": "no_such_architecture"}))
    return d


@pytest.mark.parametrize("how, words", [("corrupt", ["cannot load the model", "SafetensorError"]),
                                        ("huge_header", ["cannot load the model", "SafetensorError"]),
                                        ("unknown_model_type", ["cannot load the model", "no_such_architecture"])])
def test_eval_of_a_model_that_does_not_load_is_one_line(how, words, tmp_path, tiny_model_dir, capsys):
    model = _damaged(tiny_model_dir, tmp_path, how)
    rc, err = run(["eval", "--model", str(model), "--num-problems", "1", "--k", "1", "-o", str(tmp_path / "o")],
                  capsys)
    assert rc == 2
    assert_one_line(err, "eval", str(model), *words)
    if how == "huge_header":  # safetensors' own reason: "header too large" (0.8), "HeaderTooLarge" (0.4.3)
        assert "headertoolarge" in err.lower().replace(" ", ""), err


@pytest.mark.parametrize("value, message", [("nan", "eval.temperature=nan is not a finite number"),
                                            ("inf", "eval.temperature=inf is not a finite number"),
                                            ("-1", "eval.temperature must be a finite number > 0")])
def test_eval_temperature_is_validated_like_the_train_config(value, message, tmp_path, tiny_model_dir, capsys):
    # the flags are built into the eval section as the train config's are: the same messages as
    # `ulorl train ... eval.temperature=nan`
    rc, err = run(["eval", "--model", str(tiny_model_dir), "--temperature", value, "-o", str(tmp_path / "o")],
                  capsys)
    assert rc == 2
    assert_one_line(err, "eval", message)


# -- 10. `ulorl show` and `ulorl plot` on malformed logs -------------------------------------------------------
def _sample(step, gid="g0", sid="g0/0", **kw) -> str:
    return json.dumps({"sample_id": sid, "group_id": gid, "prompt_id": 0, "step": step, "status": "trained",
                       "reward": 1.0, "response": "ok", **kw})


def test_show_skips_malformed_lines_with_a_count_naming_the_first(tmp_path, capsys):
    path = tmp_path / "samples.jsonl"
    path.write_bytes("\n".join([_sample(1), "[1, 2, 3]", _sample("1", sid="g0/1"), _sample(2, "g1", "g1/0")])
                     .encode() + b"\n\xff\xfe not utf-8\n")
    capsys.readouterr()
    from ulorl.cli import main as cli

    rc = cli(["show", str(tmp_path), "--step", "1"])
    text = capsys.readouterr().out
    assert rc == 0
    assert f"skipped 3 malformed line(s) of {path} (first: {path}:2: a JSON list, not an object)" in text
    assert "step 1: 1 sample in 1 group (" in text and "g0/1" not in text


def test_show_skips_a_line_over_the_limit_without_reading_it_whole(tmp_path, monkeypatch):
    import ulorl.run.show as show

    monkeypatch.setattr(show, "MAX_LINE_BYTES", 400)
    path = tmp_path / "samples.jsonl"
    path.write_text(_sample(1) + "\n" + _sample(1, sid="g0/1", response="x" * 5000) + "\n" + _sample(2, "g1", "g1/0"))
    records, note = show.read_jsonl_records(path, show._sample_problem)
    assert [r["sample_id"] for r in records] == ["g0/0", "g1/0"]  # the lines after the long one are read
    assert note == f"skipped 1 malformed line(s) of {path} (first: {path}:2: longer than 400 bytes)"


def test_show_of_a_file_without_one_sample_says_so_instead_of_empty(tmp_path, capsys):
    data = tmp_path / "train.jsonl"  # a data file given by mistake: its rows have no step
    data.write_text(json.dumps({"prompt": "1+1?", "answer": "2"}) + "\n")
    rc, err = run(["show", str(data)], capsys)
    assert rc == 2
    assert_one_line(err, "show", f"{data}: no sample of a `ulorl train` run in it", f"{data}:1: 'step' is None",
                    "give the folder of a `ulorl train` run")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "samples.jsonl").write_text('{"step": 1, "gro')  # only a line torn by a crash so far
    rc, err = run(["show", str(run_dir)], capsys)
    assert rc == 2
    assert_one_line(err, "show", "no sample of a `ulorl train` run in it", "not JSON (a torn line?)")
    assert "give the folder" not in err  # it was given
    (run_dir / "samples.jsonl").write_text("")  # an empty file is no error
    from ulorl.cli import main as cli

    assert cli(["show", str(run_dir)]) == 0 and "is empty (no step has finished yet)" in capsys.readouterr().out


def test_show_counts_groups_left_out_and_refuses_limit_below_0_or_chars_below_minus_1(tmp_path, capsys):
    (tmp_path / "samples.jsonl").write_text(_sample(1) + "\n" + _sample(1, "g1", "g1/0") + "\n")
    from ulorl.cli import main as cli

    assert cli(["show", str(tmp_path), "--limit", "1"]) == 0
    assert "\n... 1 more group (--limit 0 shows all)" in capsys.readouterr().out
    rc, err = run(["show", str(tmp_path), "--limit", "-1"], capsys)  # it showed every group but the last
    assert rc == 2
    assert_one_line(err, "show", "--limit -1: give a number of groups, or 0 for all")
    rc, err = run(["show", str(tmp_path), "--chars", "-2"], capsys)  # it was taken as -1 (all the text)
    assert rc == 2
    assert_one_line(err, "show", "--chars -2: give a number of characters, 0 for no text or -1 for all recorded")


def test_show_of_a_step_the_run_lacks_exits_2(tmp_path, capsys):
    (tmp_path / "samples.jsonl").write_text(_sample(1) + "\n" + _sample(2, "g1", "g1/0") + "\n")
    rc, err = run(["show", str(tmp_path), "--step", "99"], capsys)
    assert rc == 2
    assert_one_line(err, "show", "no samples at step 99", "steps logged: 1-2")


def test_plot_notes_metric_values_that_are_not_numbers(tmp_path, capsys, caplog):
    from ulorl.run.plot import load_run

    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "actor/entropy": 0.5}) + "\n" +
                                            json.dumps({"step": 2, "actor/entropy": "high"}) + "\n")
    run_ = load_run(tmp_path)
    assert [r["step"] for r in run_.rows] == [1, 2]
    assert "1 metric value(s) are not numbers and are left out of the plots (first: step 2, 'actor/entropy')" \
        in caplog.text


# -- 11. a reward module that calls sys.exit at import -------------------------------------------------------
def test_a_reward_module_exiting_at_import_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "ulorl_test_exiting_reward.py").write_text("import sys\nsys.exit(3)\ndef score(*a): return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, err = run(["config", "reward.fn=ulorl_test_exiting_reward:score"], capsys)
    assert rc == 2  # not 3 (silently, the module's own status)
    assert_one_line(err, "config", "ulorl_test_exiting_reward", "called sys.exit(3)")


# -- 12. data that is not a regular file -----------------------------------------------------------------
def test_a_fifo_as_data_is_refused_before_it_is_opened(tmp_path, capsys):
    fifo = tmp_path / "x.jsonl"
    os.mkfifo(fifo)  # open() on it would block until a writer came
    rc, err = run(["clean", "--input", str(fifo), "--output", str(tmp_path / "o.jsonl")], capsys)
    assert rc == 2
    assert_one_line(err, "clean", str(fifo), "named pipe (FIFO)")
    rc, err = run(["train", "-o", str(tmp_path / "run"), *QUICK, f"data.train={fifo}"], capsys)
    assert rc == 2
    assert_one_line(err, "train", str(fifo), "named pipe (FIFO)")


def test_data_resolving_to_dev_zero_is_refused(tmp_path, capsys):
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")  # reading it would never end
    rc, err = run(["clean", "--input", str(link), "--output", str(tmp_path / "o.jsonl")], capsys)
    assert rc == 2
    assert_one_line(err, "clean", str(link), "is a device")


def test_a_jsonl_line_over_the_limit_is_a_bad_row(tmp_path, monkeypatch):
    import ulorl.data.formats as formats

    monkeypatch.setattr(formats, "MAX_LINE_BYTES", 100)
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "q", "answer": "1"}\n' + json.dumps({"prompt": "x" * 200, "answer": "1"}) + "\n")
    rows = formats.read_rows(path, formats.Storage.JSONL)
    assert rows[0] == {"prompt": "q", "answer": "1"}
    assert rows[1].reason == "line_too_long" and "line 2" in rows[1].expected and rows[1].got.endswith("bytes")


# -- 13. the Python API's argument types ---------------------------------------------------------------------
def test_trainer_takes_a_mapping_of_settings_and_refuses_other_types(tmp_path):
    from ulorl.api import Trainer
    from ulorl.config import ConfigError, load_run_config

    t = Trainer({"train": {"steps": 7}, "rollout.num_segments": 2}, output_dir="runs/never-trained")
    assert (t.config.train.steps, t.config.rollout.num_segments) == (7, 2)
    preset = Path(__file__).resolve().parents[2] / "configs" / "demo.yaml"
    assert Trainer(str(preset), output_dir="runs/never-trained").config == load_run_config(preset)
    with pytest.raises(ConfigError, match="nosuch.yaml does not exist"):
        Trainer(tmp_path / "nosuch.yaml")
    with pytest.raises(ConfigError, match=r"Trainer\(config=...\) takes a RunConfig .* not int"):
        Trainer(42)
    with pytest.raises(ConfigError, match=r"Trainer\(output_dir=...\) takes a path, not list"):
        Trainer(output_dir=["a"])
    for weights in (["1"], 1):  # a lone number was a TypeError inside the type check itself
        with pytest.raises(ConfigError, match=r"reward_weights=...\) takes a list of numbers"):
            Trainer(reward_funcs=[len], reward_weights=weights)
    takes = r"Trainer\(train_dataset=...\) takes a path, a list of paths, or rows \(dicts\)"
    row = r"Trainer\(train_dataset=...\) row 1, field 'answer': a value of type "
    for dataset, says in ((123, f"{takes}, not int"), ({"prompt": "q", "answer": "1"}, f"{takes}, not dict"),
                          ([{"prompt": "q", "answer": "1"}, 7], f"{takes}; item 1 is int"),
                          ([], r"Trainer\(train_dataset=...\) has no rows"),
                          # written as their str() before ("{1, 2}", "<object object at 0x...>") and trained on
                          ([{"prompt": "q", "answer": "1"}, {"prompt": "q", "answer": {1, 2}}], row + "set"),
                          ([{"prompt": "q", "answer": "1"}, {"prompt": "q", "answer": object()}], row + "object")):
        with pytest.raises(ConfigError, match=says):
            Trainer(train_dataset=dataset, output_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # make_config's arguments: each was an AttributeError or TypeError from deep inside
    from ulorl.api import make_config

    for args, says in (((None, "train.steps=2"), r"overrides=...\) takes a mapping .* not str"),
                       ((None, 5), r"overrides=...\) takes a mapping .* not int"),
                       ((None, [1, 2]), r"overrides=\[...\]\) takes strings like 'train.steps=20', got \[1, 2\]"),
                       ((5,), r"preset=...\) takes a YAML file's path or None, not int")):
        with pytest.raises(ConfigError, match=r"make_config\(" + says):
            make_config(*args)


def test_trainer_takes_the_rows_of_a_dataframe(tmp_path):
    pd = pytest.importorskip("pandas")
    from ulorl.api import Trainer

    frame = pd.DataFrame({"prompt": ["1+1?", "2+2?"], "answer": ["2", "4"]})  # iterating it gives column names
    t = Trainer(train_dataset=frame, output_dir=tmp_path / "run")
    written = (tmp_path / "run" / "data" / "train.jsonl").read_text().splitlines()
    assert t.config.data.train == str(tmp_path / "run" / "data" / "train.jsonl")
    assert [json.loads(line) for line in written] == [{"prompt": "1+1?", "answer": "2"},
                                                      {"prompt": "2+2?", "answer": "4"}]


# -- 14. minor ------------------------------------------------------------------------------------------------
def test_clean_of_an_empty_file_is_an_error(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    rc, err = run(["clean", "--input", str(tmp_path / "empty.jsonl"), "--output", str(tmp_path / "o.jsonl")],
                  capsys)
    assert rc == 2
    assert_one_line(err, "clean", "empty.jsonl", "no rows to clean")
    assert not (tmp_path / "o.jsonl").exists()


def test_clean_that_skips_every_row_is_an_error_naming_the_first(tmp_path, capsys):
    # a wrong --prompt-key reads every row as bad: with --on-bad-row skip that wrote an empty output, exit 0
    (tmp_path / "q.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n{"question": "2+2?", "answer": "4"}\n')
    rc, err = run(["clean", "--input", str(tmp_path / "q.jsonl"), "--output", str(tmp_path / "o.jsonl"),
                   "--on-bad-row", "skip"], capsys)
    assert rc == 2
    assert_one_line(err, "clean", "q.jsonl: no usable row (2 bad rows skipped; first: ", "row 0, field 'prompt'",
                    "nothing was written", "--prompt-key")
    assert not (tmp_path / "o.jsonl").exists() and not (tmp_path / "o.jsonl.report.json").exists()
    rc, _ = run(["clean", "--input", str(tmp_path / "q.jsonl"), "--output", str(tmp_path / "o.jsonl"),
                 "--prompt-key", "question"], capsys)
    assert rc == 0 and len((tmp_path / "o.jsonl").read_text().splitlines()) == 2


def test_a_second_signal_stops_at_once_and_says_what_is_left(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import ulorl.run.loop as trainer

    real = trainer.train_step

    def step_then_two_signals(s):
        m = real(s)
        if s.step == 2:  # after step 1 was checkpointed: the first signal asks to stop, the second insists
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return m

    monkeypatch.setattr(trainer, "train_step", step_then_two_signals)
    from ulorl.cli import main as cli

    capsys.readouterr()
    rc = cli(["train", "-o", str(tmp_path / "run"), *tiny_run(tiny_model_dir, "train.steps=5", "checkpoint.every=1")])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert rc == 130, out
    assert "stopped at once by a second signal, 2 steps done; the last committed checkpoint is" in out
    run_dir = tmp_path / "run"
    command = f"ulorl train --config {run_dir / 'config.yaml'} --resume auto --output-dir {run_dir}"
    assert "step_000001" in out and f"; resume with: {command}\n" in out, out
    # the hint, run as printed (the first run's overrides are in its config.yaml), resumes it to the end
    monkeypatch.setattr(trainer, "train_step", real)
    assert cli(command.split()[1:]) == 0
    assert "resuming from" in capsys.readouterr().out
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 5


def test_a_warm_start_stopped_by_ctrl_c_leaves_its_config_and_the_rerun_replaces_it(tmp_path, tiny_model_dir, capsys,
                                                                                     monkeypatch):
    """The start line names RUN/config.yaml: it is written before the SFT warm start (it was written after, so a
    Ctrl-C during the SFT left a line naming a file that was not there), and a config alone is no earlier run's
    result: the rerun replaces it instead of moving it to an earlier-<time>/ folder."""
    import ulorl.run.session as session
    from ulorl.cli import main as cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    run_dir = tmp_path / "run"
    argv = ["train", "-o", str(run_dir), *tiny_run(tiny_model_dir, "train.steps=1", "model.warm_start=sft",
                                                   "sft.steps=1", "sft.num_examples=8", "sft.batch_size=4")]
    monkeypatch.setattr(session, "run_sft", interrupted)
    assert cli(argv) == 130
    assert f"(every setting: {run_dir / 'config.yaml'})" in capsys.readouterr().out
    assert "warm_start: sft" in (run_dir / "config.yaml").read_text()
    monkeypatch.undo()
    assert cli(argv) == 0
    assert "starting over" not in capsys.readouterr().out
    assert not list(run_dir.glob("earlier-*")) and (run_dir / "warm_start" / "model" / "config.json").exists()


def test_a_load_errors_message_keeps_its_later_lines_on_one_line():
    """transformers says what is wrong after its first line ("... from one of:" then the cases); the one-line CLI
    error kept the first line only."""
    from ulorl.models.loading import _one_line

    e = ValueError("Couldn't instantiate the backend tokenizer from one of:\n (1) a `tokenizers` library serialization "
                   "file,\n\n (2) a slow tokenizer instance to convert")
    assert _one_line(e) == ("Couldn't instantiate the backend tokenizer from one of: (1) a `tokenizers` library "
                            "serialization file, (2) a slow tokenizer instance to convert")
    assert len(_one_line(ValueError("x" * 2000))) == 500
