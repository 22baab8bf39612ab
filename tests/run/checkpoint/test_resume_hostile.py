"""Issue 15: `--resume auto` never destroys a run; hostile pointers and states; a full disk during a save.

The runs are the tiny 3-step run of `test_resume_guards.py` (checkpoints step_000002 and step_000003).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.run.checkpoint import resume_helpers as R
import torch

import ulorl.run.checkpoint.store as ckpt_mod
from ulorl.run.checkpoint import CheckpointError, find_resumable, resolve_resume_path, verify_checkpoint
from ulorl.run.checkpoint.atomic import sha256
from ulorl.cli import main as cli
from ulorl.run.lock import LOCK_FILE
from ulorl.run.loop import train


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of a run folder, by relative path."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def cli_train(run: Path, model: Path, *extra: str, resume: str | None = "auto") -> int:
    return cli(["train", "--output-dir", str(run), *(["--resume", resume] if resume else []),
                *R.overrides(model, *extra)])


def rewrite_manifest(checkpoint: Path, rel: str) -> None:
    """Make the manifest agree with an edited file, so only the edit itself is hostile."""
    mf = json.loads((checkpoint / "MANIFEST.json").read_text())
    f = checkpoint / rel
    mf["files"][rel] = {"size": f.stat().st_size, "sha256": sha256(f)}
    (checkpoint / "MANIFEST.json").write_text(json.dumps(mf))


# -- 1. no checkpoint verifies: stop, list them, change nothing ------------------------------------------
def test_resume_auto_stops_when_checkpoints_exist_but_none_verifies(three_steps, eos_model, tmp_path, capsys):
    run = R.copy_run(three_steps, tmp_path / "run")
    for step in ("step_000002", "step_000003"):
        truncate(run / "checkpoints" / step / "model" / "model.safetensors")
    before = snapshot(run)
    capsys.readouterr()
    assert cli_train(run, eos_model, "train.steps=4") == 2
    err = capsys.readouterr().err
    assert "holds checkpoints but none verifies; nothing was changed" in err
    assert "step_000002" in err and "step_000003" in err and "does not match its checksum" in err
    assert "--resume never" in err and "Traceback" not in err
    assert snapshot(run) == before  # samples.jsonl (once cut from 960 lines to 32), checkpoints: untouched


def test_resume_never_moves_the_earlier_run_aside(three_steps, eos_model, tmp_path):
    run = R.copy_run(three_steps, tmp_path / "run")
    before = snapshot(run)
    assert cli_train(run, eos_model, "train.steps=1", resume="never") == 0
    earlier = [p for p in run.iterdir() if p.name.startswith("earlier-")]
    assert len(earlier) == 1
    moved = snapshot(earlier[0])
    for rel, data in before.items():  # every file of the earlier run, byte for byte (warm start: none here)
        if rel != LOCK_FILE:  # the folder's lock stays with the folder
            assert moved.get(rel) == data, rel
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_000001"]
    assert {r["step"] for r in R.samples(run)} == {1}


def test_a_fresh_start_never_truncates_an_earlier_runs_logs(eos_model, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    old = '{"sample_id": "g0/0", "step": 7, "status": "trained"}\n' * 5
    (run / "samples.jsonl").write_text(old)  # a run killed before its first checkpoint
    train(R.config(eos_model, "train.steps=1"), run)
    (earlier,) = [p for p in run.iterdir() if p.name.startswith("earlier-")]
    assert (earlier / "samples.jsonl").read_text() == old
    assert {r["step"] for r in R.samples(run)} == {1}


# -- 10. the `latest` pointer stays inside the run -----------------------------------------------------------
def test_a_pointer_out_of_the_run_is_ignored(three_steps, tmp_path, capsys):
    other = R.copy_run(three_steps, tmp_path / "other")
    shutil.copytree(other / "checkpoints" / "step_000003", other / "checkpoints" / "step_000060")
    run = R.copy_run(three_steps, tmp_path / "runs" / "run")
    root = run / "checkpoints"
    (root / "latest").write_text("../../../other/checkpoints/step_000060")
    found, notes = find_resumable(root)
    assert found == root / "step_000003"
    assert any("not a checkpoint folder inside" in n for n in notes)
    with pytest.raises(CheckpointError, match="not a checkpoint folder inside"):
        resolve_resume_path(run)
    # a symlinked step folder leading out of the run is no checkpoint of this run either
    (root / "step_000009").symlink_to(other / "checkpoints" / "step_000060")
    (root / "latest").write_text("step_000009")
    assert find_resumable(root)[0] == root / "step_000003"


def test_a_binary_pointer_is_ignored_with_a_note(three_steps, tmp_path):
    run = R.copy_run(three_steps, tmp_path / "run")
    (run / "checkpoints" / "latest").write_bytes(b"\xff\xfe\x00step\x81")
    found, notes = find_resumable(run / "checkpoints")
    assert found.name == "step_000003" and any("binary bytes" in n for n in notes)
    with pytest.raises(CheckpointError, match="binary bytes"):
        resolve_resume_path(run)


# -- 7. a state.json without its config is refused by name ---------------------------------------------------
def test_a_state_without_config_is_refused_by_name(three_steps, eos_model, tmp_path, capsys):
    run = R.copy_run(three_steps, tmp_path / "run")
    step3 = run / "checkpoints" / "step_000003"
    state = json.loads((step3 / "state.json").read_text())
    del state["config"]
    (step3 / "state.json").write_text(json.dumps(state))
    rewrite_manifest(step3, "state.json")
    verify_checkpoint(step3)
    capsys.readouterr()
    assert cli_train(run, eos_model, "train.steps=4") == 2
    err = capsys.readouterr().err
    assert "state.json has no 'config'" in err and "Traceback" not in err


# -- 8. a full disk during a save ---------------------------------------------------------------------------
def test_a_full_disk_during_a_save_leaves_the_last_checkpoint_and_resume_works(eos_model, tmp_path, monkeypatch):
    run = tmp_path / "run"
    real_save = torch.save

    def full_disk(obj, path, *a, **k):
        if "step_000002" in str(path):
            Path(path).write_bytes(b"\0" * 100)  # part of the file got written, then the disk was full
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_save(obj, path, *a, **k)

    monkeypatch.setattr(ckpt_mod.torch, "save", full_disk)
    with pytest.raises(CheckpointError, match=r"saving checkpoint step 2 .* No space left on device; the partial "
                                              r"folder was removed and the last committed checkpoint .*step_000001"):
        train(R.config(eos_model, "train.steps=3"), run)
    root = run / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000001"]  # no step_000002.tmp-PID left
    verify_checkpoint(root / "step_000001")
    assert json.loads((run / "history.json").read_text())["entropy"]  # written whole at close
    monkeypatch.undo()  # space freed
    assert train(R.config(eos_model, "train.steps=3"), run, resume="auto")["steps"] == 3
    assert [m["step"] for m in R.metrics(run)] == [1, 2, 3]


HISTORY_UNDER_A_FULL_DISK = """
import json, resource, signal, sys
from pathlib import Path
from ulorl.run.session import write_history
run = Path(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, like ENOSPC
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
write_history(run, {"entropy": [0.5] * 1000})
"""


def test_history_json_is_never_left_empty_by_a_full_disk(tmp_path):
    (tmp_path / "history.json").write_text('{"entropy": [1.0]}')
    out = subprocess.run([sys.executable, "-c", HISTORY_UNDER_A_FULL_DISK, str(tmp_path)], capture_output=True,
                         text=True, timeout=900, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    assert "could not write" in out.stdout + out.stderr
    assert (tmp_path / "history.json").read_text() == '{"entropy": [1.0]}'
    assert [p.name for p in tmp_path.iterdir()] == ["history.json"]  # no temp file left


# -- 3. a step whose rewards were not all computed is never trained or checkpointed ---------------------------
def test_an_interrupt_while_scoring_trains_nothing_of_that_step_and_resume_redoes_it(eos_model, tmp_path,
                                                                                    monkeypatch):
    from ulorl.run.scoring import RewardScorer

    whole = tmp_path / "whole"
    train(R.config(eos_model, "train.steps=2"), whole)
    real = RewardScorer.score

    def second_ctrl_c_while_scoring_step_2(self, finished):
        if self.step == 2:
            raise KeyboardInterrupt  # the second Ctrl-C stops at once, mid-scoring
        return real(self, finished)

    monkeypatch.setattr(RewardScorer, "score", second_ctrl_c_while_scoring_step_2)
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train(R.config(eos_model, "train.steps=2"), run)
    assert R.latest(run).name == "step_000001"  # nothing of step 2 was checkpointed...
    assert {r["step"] for r in R.samples(run, None)} == {1}  # ...or trained
    monkeypatch.undo()
    train(R.config(eos_model, "train.steps=2"), run, resume="auto")
    assert R.samples(run) == R.samples(whole)  # step 2 redone: the same samples, same rewards
    R.assert_same_weights(R.weights(R.latest(run)), R.weights(R.latest(whole)))


def test_a_full_disk_is_one_line_from_the_cli(eos_model, tmp_path, monkeypatch, capsys):
    def full_disk(obj, path, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(ckpt_mod.torch, "save", full_disk)
    capsys.readouterr()
    assert cli_train(tmp_path / "run", eos_model, "train.steps=1", resume=None) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith("ulorl train: error: saving checkpoint step 1") and "No space left on device" in err[0]
    assert "--resume auto" in err[0] and not list((tmp_path / "run" / "checkpoints").glob("*.tmp-*"))
