"""What resume refuses, what it falls back to, and the run's guards.

Corrupted / partial / unsafe checkpoints, incompatible and harmless config changes, `--resume auto`
with nothing complete, a fresh start over an earlier run, SIGTERM, non-finite updates, engine and
reward failures, and the save protocol's folder handling.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from tests.run.checkpoint import resume_helpers as R
import torch

import ulorl.run.loop as trainer
from ulorl.run.checkpoint import (CheckpointError, find_resumable, load_checkpoint, resolve_resume_path, save_checkpoint,
                              set_latest, verify_checkpoint)
from ulorl.cli import main as cli
from ulorl.data import PromptRecord
from ulorl.learners import local
from ulorl.run.session import open_session
from ulorl.rollout.prompt_source import PromptSource
from ulorl.rollout.segment import SampleError
from ulorl.run.loop import train



def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 4] = bytes(b ^ 0xFF for b in data[mid : mid + 4])
    path.write_bytes(bytes(data))


def cli_train(run: Path, model: Path, *extra: str, resume: str | None = "auto") -> int:
    return cli(["train", "--output-dir", str(run), *(["--resume", resume] if resume else []),
                *R.overrides(model, *extra)])


# -- corrupted, partial, unsafe ----------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["model/model.safetensors", "pools.json", "MANIFEST.json"])
def test_damaged_checkpoint_is_refused_and_auto_falls_back_to_the_previous_one(
        three_steps, eos_model, tmp_path, capsys, damage):
    run = R.copy_run(three_steps, tmp_path / "run")
    step3 = run / "checkpoints" / "step_000003"
    good3 = R.weights(step3)
    metrics3 = R.metrics(run)[2]
    if damage == "MANIFEST.json":  # a partial checkpoint: the manifest is written last
        (step3 / damage).unlink()
        why = "incomplete: no MANIFEST.json"
    else:
        flip_bytes(step3 / damage)
        why = f"{damage} does not match its checksum"
    with pytest.raises(CheckpointError, match=why):
        load_checkpoint(step3)
    capsys.readouterr()
    assert cli_train(run, eos_model, "train.steps=4", resume=str(step3)) == 2  # an explicit path is never replaced
    err = capsys.readouterr().err
    assert why in err and "--resume auto falls back" in err
    assert find_resumable(run / "checkpoints")[0].name == "step_000002"

    summary = train(R.config(eos_model, "train.steps=4"), run, resume="auto")
    out = capsys.readouterr().out
    assert why in out and "resuming from" in out and "step_000002 (step 2)" in out
    assert summary["steps"] == 4
    # step 3 was redone exactly; the damaged folder was replaced by a good one
    R.assert_same_weights(R.weights(step3), good3)
    verify_checkpoint(step3)
    assert R.metrics(run)[2] == metrics3 and [m["step"] for m in R.metrics(run)] == [1, 2, 3, 4]
    ids = [r["sample_id"] for r in R.samples(run)]
    assert len(ids) == len(set(ids))
    assert R.latest(run).name == "step_000004"


class _Evil:
    def __reduce__(self):
        return (Path.touch, (Path(os.environ["ULORL_EVIL_MARK"]),))


def test_loading_never_unpickles_objects(three_steps, tmp_path, monkeypatch):
    run = R.copy_run(three_steps, tmp_path / "run")
    ckpt = run / "checkpoints" / "step_000003"
    mark = tmp_path / "pwned"
    monkeypatch.setenv("ULORL_EVIL_MARK", str(mark))
    torch.save({"state": {}, "param_groups": [], "x": _Evil()}, ckpt / "optimizer.pt")
    manifest = json.loads((ckpt / "MANIFEST.json").read_text())  # a consistent manifest: only the pickle is bad
    from ulorl.run.checkpoint.atomic import sha256

    manifest["files"]["optimizer.pt"] = {"size": (ckpt / "optimizer.pt").stat().st_size,
                                         "sha256": sha256(ckpt / "optimizer.pt")}
    (ckpt / "MANIFEST.json").write_text(json.dumps(manifest))
    verify_checkpoint(ckpt)
    with pytest.raises(CheckpointError, match="not plain tensor data"):
        load_checkpoint(ckpt)
    assert not mark.exists()


# -- config changes -------------------------------------------------------------------------------
def test_incompatible_config_change_is_refused_naming_the_key(three_steps, eos_model, tmp_path, capsys):
    run = R.copy_run(three_steps, tmp_path / "run")
    with pytest.raises(CheckpointError, match=r"rollout\.num_segments: 4 -> 2"):
        train(R.config(eos_model, "train.steps=4", "rollout.num_segments=2"), run, resume="auto")
    capsys.readouterr()
    assert cli_train(run, eos_model, "train.steps=4", "data.train_size=5") == 2
    assert "incompatible config changes" in capsys.readouterr().err
    assert R.latest(run).name == "step_000003"  # nothing was touched


def test_harmless_and_other_config_changes_are_accepted_and_named(three_steps, eos_model, tmp_path, capsys):
    run = R.copy_run(three_steps, tmp_path / "run")
    train(R.config(eos_model, "train.steps=4", "logging.table_every=3", "train.lr=5e-4"), run, resume="auto")
    out = capsys.readouterr().out
    assert "harmless config change logging.table_every: null -> 3" in out
    assert "harmless config change train.steps: 3 -> 4" in out
    assert "may alter results: train.lr: 0.001 -> 0.0005" in out
    assert [m["step"] for m in R.metrics(run)] == [1, 2, 3, 4]


def test_same_number_of_prompts_with_other_content_is_refused():
    recs = lambda answer: [PromptRecord(prompt_id=i, prompt_tokens=[3, 10 + i], prompt_text=f"p{i}",  # noqa: E731
                                        ground_truth=answer, data_source="t") for i in range(4)]
    src = PromptSource(recs("1"), seed=0)
    src.next(3)
    with pytest.raises(ValueError, match="different content"):
        PromptSource(recs("2"), seed=0).load_state_dict(src.state_dict())
    with pytest.raises(ValueError, match="different data"):
        PromptSource(recs("1"), seed=0, shuffle=False).load_state_dict(src.state_dict())


# -- starting from nothing, or over an earlier run ------------------------------------------------
def test_resume_auto_without_a_complete_checkpoint_starts_from_the_beginning(eos_model, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints" / "step_000001.tmp-999" / "model").mkdir(parents=True)  # killed during its first save
    (run / "checkpoints" / "step_000001.tmp-999" / "state.json").write_text("{")
    (run / "warm_start.partial").mkdir()  # and before that, during the SFT warm start, before its first save
    (run / "warm_start.partial" / "metrics.jsonl").write_text('{"step": 1, "sft/loss": 9.0}\n')
    (run / "samples.jsonl").write_text('{"sample_id": "g0/0", "step": 1, "status": "trained"}\n')
    (run / "metrics.jsonl").write_text('{"step": 1, "x": 1.0}\n')
    sft = ["model.warm_start=sft", "sft.steps=2", "sft.batch_size=4", "sft.num_examples=16", "sft.warmup_steps=0"]
    summary = train(R.config(eos_model, "train.steps=1", *sft), run, resume="auto")
    out = capsys.readouterr().out
    assert "no complete checkpoint" in out and "starting from the beginning" in out
    assert "step_000001.tmp-999" in out and "continuing the interrupted SFT" not in out  # no state: started over
    assert summary["steps"] == 1
    assert summary["phase_s"]["warm_start"] > 0  # the SFT ran in this process
    assert not (run / "warm_start.partial").exists() and (run / "warm_start" / "model" / "config.json").exists()
    assert [json.loads(line)["step"] for line in (run / "warm_start" / "metrics.jsonl").read_text().splitlines()] \
        == [1, 2] and not (run / "warm_start" / "sft_state.pt").exists()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_000001"]
    assert [m["step"] for m in R.metrics(run)] == [1] and "x" not in R.metrics(run)[0]
    assert {r["step"] for r in R.samples(run, None)} == {1} and len(R.samples(run)) == 4


def test_fresh_start_over_an_earlier_run_is_refused(three_steps, eos_model, tmp_path, capsys):
    run = R.copy_run(three_steps, tmp_path / "run")
    with pytest.raises(CheckpointError, match="already holds checkpoints"):
        train(R.config(eos_model, "train.steps=3"), run)
    assert cli_train(run, eos_model, "train.steps=3", resume=None) == 2
    assert "--resume auto" in capsys.readouterr().err


def test_resume_path_may_name_the_run_folder(three_steps):
    assert resolve_resume_path(three_steps) == three_steps / "checkpoints" / "step_000003"
    assert resolve_resume_path(three_steps / "checkpoints") == three_steps / "checkpoints" / "step_000003"
    assert resolve_resume_path(three_steps / "checkpoints" / "latest") == three_steps / "checkpoints" / "step_000003"


# -- signals and non-finite updates ----------------------------------------------------------------
def test_sigterm_checkpoints_at_the_step_boundary_and_resume_continues(eos_model, tmp_path, monkeypatch, capsys):
    step = trainer.train_step

    def step_then_sigterm(s):
        m = step(s)
        if s.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets a flag; the loop saves and returns
        return m

    monkeypatch.setattr(trainer, "train_step", step_then_sigterm)
    run = tmp_path / "run"
    out = train(R.config(eos_model, "train.steps=5", "checkpoint.every=0"), run)
    assert out == {"stopped_at": 2, "run_dir": str(run)}
    assert R.latest(run).name == "step_000002" and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    monkeypatch.setattr(trainer, "train_step", step)
    assert train(R.config(eos_model, "train.steps=3", "checkpoint.every=0"), run, resume="auto")["steps"] == 3
    assert "step_000002 (step 2)" in capsys.readouterr().out
    assert [m["step"] for m in R.metrics(run)] == [1, 2, 3]


def test_consecutive_non_finite_updates_stop_with_a_checkpoint_of_the_last_good_weights(
        eos_model, tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(R.config(eos_model, "train.steps=2", "train.max_bad_steps=2"), run)
    good = R.weights(R.latest(run))
    real = local.policy_loss

    def nan_loss(*args, **kw):  # every loss the learner computes from here on is NaN
        loss, m = real(*args, **kw)
        return loss * float("nan"), m

    monkeypatch.setattr(local, "policy_loss", nan_loss)
    with pytest.raises(FloatingPointError, match=r"2 consecutive non-finite updates.*last good update \(step 2\)"):
        train(R.config(eos_model, "train.steps=6", "train.max_bad_steps=2"), run, resume="auto")
    ckpt = R.latest(run)
    assert ckpt.name == "step_000004"
    R.assert_same_weights(R.weights(ckpt), good)
    st = R.state(ckpt)
    assert st["version"] == 2 and st["counters"]["bad_steps"] == 2 and st["counters"]["skipped_steps"] == 2
    rows = R.metrics(run)
    assert [m["step"] for m in rows] == [1, 2, 3, 4]
    assert [m["actor/skipped"] for m in rows] == [0.0, 0.0, 1.0, 1.0] and rows[3]["actor/grad_norm"] is None
    skipped = R.samples(run, "skipped")
    assert {r["step"] for r in skipped} == {3, 4} and {r["reason"] for r in skipped} == {"non_finite"}
    assert {r["step"] for r in R.samples(run)} == {1, 2}
    # with the fault gone, the run continues from that checkpoint
    monkeypatch.undo()
    train(R.config(eos_model, "train.steps=5", "train.max_bad_steps=2"), run, resume="auto")
    assert R.state(R.latest(run))["version"] == 3 and R.state(R.latest(run))["counters"]["bad_steps"] == 0


# -- engine and reward failures name their samples ---------------------------------------------------
class _Broken:
    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):  # anything but the failing calls (engine stats, ...) is the real object's
        return getattr(self.real, name)

    def generate(self, *a, **k):
        raise RuntimeError("engine exploded")

    def score(self, *a, **k):
        raise ValueError("verifier exploded")

    score_detailed = score

    def metrics(self):
        return {}

    def close(self):
        self.real.close()


def test_engine_and_reward_failures_name_the_samples(eos_model, tmp_path):
    s = open_session(R.config(eos_model, "rollout.num_segments=1"), tmp_path / "run")
    try:
        s.rollout.engine = _Broken(s.engine)
        with pytest.raises(SampleError, match=r"the engine failed on 8 sample\(s\) of group\(s\) g0, g1, g2, g3: "
                                              r"g0/0, g0/1, .*RuntimeError: engine exploded") as e:
            trainer.train_step(s)
        assert e.value.group_ids == ["g0", "g1", "g2", "g3"] and len(e.value.sample_ids) == 8
        s.rollout.engine, s.reward = s.engine, _Broken(s.reward)
        s.unfinished.take_all()
        with pytest.raises(SampleError, match=r"reward scoring failed on \d+ sample\(s\) .*ValueError: verifier"):
            trainer.train_step(s)
    finally:
        s.close()


# -- the save protocol's folders ---------------------------------------------------------------------
def test_save_protocol_folders(eos_model, tmp_path):
    from ulorl.models import load_model, load_tokenizer

    model, tok = load_model(eos_model), load_tokenizer(eos_model)
    root = tmp_path / "checkpoints"

    def save(step, marker, keep=2):
        return save_checkpoint(root, step, model=model, tokenizer=tok, optimizer_state={"state": {}},
                               state={"step": step, "marker": marker}, pools={}, keep=keep)

    def names():
        return sorted(p.name for p in root.iterdir())

    for k in (1, 2, 3):
        save(k, "a")
    assert names() == ["latest", "step_000002", "step_000003"]  # keep the last 2
    save(3, "b")  # re-saving a step replaces it, one complete copy at every moment
    assert names() == ["latest", "step_000002", "step_000003"]
    assert load_checkpoint(root / "step_000003")["state"]["marker"] == "b"
    # crash between rename and pointer: the newer folder is complete but not committed
    set_latest(root, root / "step_000002")
    assert find_resumable(root)[0].name == "step_000002"
    # crash while re-saving, between moving the old copy aside and renaming the new one in
    os.replace(root / "step_000003", root / "step_000003.old-1")
    set_latest(root, root / "step_000003")
    assert find_resumable(root)[0].name == "step_000003.old-1"
    # saving an older step (a run resumed from it) removes the abandoned newer ones and the leftovers
    save(2, "c", keep=1)
    assert names() == ["latest", "step_000002"]
    assert load_checkpoint(root / "step_000002")["state"]["marker"] == "c"
