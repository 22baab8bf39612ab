"""Exact resume: N steps in one go == k steps, stop, resume, N - k steps (weights bit-exact).

The reference run keeps every checkpoint, so the test picks its interruption points from what the
run really did: k_mid, a step boundary where samples are half decoded (the unfinished pool is not
empty) and the data cursor is inside an epoch, and k_epoch, a step boundary exactly at the end of an
epoch (verl #7401: a job resumed there ran 0 steps and exited 0). With 3 training prompts and 4
prompt draws per empty round, the data also runs out in the middle of steps.
"""

from __future__ import annotations

import json
import shutil

import pytest
from tests.run.checkpoint import resume_helpers as R
import torch

from ulorl.run.loop import train
from ulorl.run.report import PHASES

N = 8


@pytest.fixture(scope="module")
def reference(eos_model, tmp_path_factory):
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("reference") / "run"
    summary = train(R.config(eos_model, f"train.steps={N}", f"checkpoint.keep={N}"), run)
    torch.set_num_threads(old)
    assert summary["steps"] == N
    # one process: its phases are parts of its wall-clock time
    assert summary["phase_s"]["rl_steps"] > 0 and sum(summary["phase_s"].values()) <= summary["wall_s"] + 0.5
    return run


def interruption_point(reference, kind: str) -> int:
    for k in range(2, N):
        ckpt = reference / "checkpoints" / f"step_{k:06d}"
        src = R.state(ckpt)["prompt_source"]
        at_epoch_end = src["cursor"] == src["num_records"]
        if kind == "mid_sample" and R.pools(ckpt)["unfinished"]["items"] and not at_epoch_end:
            return k
        if kind == "epoch_boundary" and at_epoch_end:
            return k
    pytest.fail(f"the reference run has no {kind} step boundary to interrupt at; adjust the config")


@pytest.mark.parametrize("kind", ["mid_sample", "epoch_boundary"])
def test_interrupted_and_resumed_run_equals_uninterrupted_run(reference, eos_model, tmp_path, kind):
    k = interruption_point(reference, kind)
    run = tmp_path / "run"
    first = train(R.config(eos_model, f"train.steps={k}"), run)
    assert first["steps"] == k
    first_times = json.loads((run / "history.json").read_text())["phase_s"]
    at_k = run / "checkpoints" / f"step_{k:06d}"
    ref_k = reference / "checkpoints" / f"step_{k:06d}"
    # the stopped run's checkpoint holds exactly the reference's state at step k
    assert R.pools(at_k) == R.pools(ref_k)
    if kind == "mid_sample":
        assert R.pools(at_k)["unfinished"]["items"], "no half-decoded sample at the interruption"
    else:
        src = R.state(at_k)["prompt_source"]
        assert src["cursor"] == src["num_records"], "not at an epoch boundary"
    drop_config = lambda s: {key: v for key, v in s.items() if key != "config"}  # noqa: E731 (train.steps differs)
    assert drop_config(R.state(at_k)) == drop_config(R.state(ref_k))

    second = train(R.config(eos_model, f"train.steps={N}"), run, resume="auto")
    assert second["steps"] == N and [m["step"] for m in R.metrics(run)] == list(range(1, N + 1))
    end, ref_end = R.latest(run), R.latest(reference)
    assert end.name == ref_end.name == f"step_{N:06d}"
    R.assert_same_weights(R.weights(end), R.weights(ref_end))
    opt, ref_opt = (torch.load(c / "optimizer.pt", weights_only=True)["state"] for c in (end, ref_end))
    assert opt.keys() == ref_opt.keys()
    assert all(torch.equal(opt[i][n], ref_opt[i][n]) for i in opt for n in opt[i])
    assert R.pools(end) == R.pools(ref_end)
    assert drop_config(R.state(end)) == drop_config(R.state(ref_end))
    assert R.metrics(run) == R.metrics(reference)
    trained = R.samples(run)
    ids = [r["sample_id"] for r in trained]
    assert len(ids) == len(set(ids)), "a sample was trained twice"
    assert trained == R.samples(reference)
    assert R.state(end)["prompt_source"]["epoch"] >= 2  # the data ran out, and was wrapped, during the run

    # phase times: both processes' start-ups and every step's time (metrics.jsonl holds the steps of both)
    times = json.loads((run / "history.json").read_text())["phase_s"]  # unrounded
    assert times["start"] > first_times["start"] > 0
    steps_s = sum(row["timing_s/step"] for row in R.read_jsonl(run / "metrics.jsonl"))
    assert times["rl_steps"] == pytest.approx(steps_s, rel=1e-12)
    assert list(second["phase_s"]) == [p for p in PHASES if p in times] and "warm_start" not in times


def test_resume_after_the_last_step_runs_nothing_and_keeps_the_result(reference, eos_model, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    before = R.weights(R.latest(run))
    files = [R.latest(run) / "state.json", R.latest(run) / "model" / "model.safetensors",
             run / "export" / "model.safetensors"]
    inodes = [p.stat().st_ino for p in files]  # a rewritten file is a new file (written aside, then renamed)
    capsys.readouterr()
    summary = train(R.config(eos_model, f"train.steps={N}", f"checkpoint.keep={N}"), run, resume="auto")
    assert summary["steps"] == N and summary["export_dir"] == str(run / "export")
    assert f"this run already finished {N} steps (train.steps={N}): nothing to train" in capsys.readouterr().out
    assert [p.stat().st_ino for p in files] == inodes  # neither the last checkpoint nor the export written again
    R.assert_same_weights(R.weights(R.latest(run)), before)
    assert R.metrics(run) == R.metrics(reference) and R.samples(run) == R.samples(reference)
