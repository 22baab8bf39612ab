"""`decide_resume`: the one call that says what a run resumes from, with the notes to print, or why it stops.

No training here: the checkpoints are written directly with `save_checkpoint` (the tiny model, a state
holding every key a run needs), so each case checks the decision alone.
"""

from __future__ import annotations

import pytest

from ulorl.run.checkpoint import (LATEST, STATE_KEYS, CheckpointError, commit_resumed, decide_resume, save_checkpoint,
                              set_latest)

CONFIG = {"train": {"steps": 3, "seed": 0}, "rollout": {"num_segments": 4}}


@pytest.fixture(scope="module")
def model_and_tokenizer(eos_model):
    from ulorl.models import load_model, load_tokenizer

    return load_model(eos_model), load_tokenizer(eos_model)


def save(run, step, model_and_tokenizer, config=CONFIG):
    model, tok = model_and_tokenizer
    state = {k: 0 for k in STATE_KEYS if k != "rng"} | {"step": step, "config": config}
    return save_checkpoint(run / "checkpoints", step, model=model, tokenizer=tok, optimizer_state={"state": {}},
                           state=state, pools={"unfinished": [], "experience": []}, keep=5)


def damage(checkpoint):
    (checkpoint / "state.json").write_text("{}")  # no longer matches the manifest


def test_a_fresh_run_folder_starts_from_the_beginning(tmp_path):
    for resume in (None, "never"):
        d = decide_resume(tmp_path / "run", CONFIG, resume)
        assert (d.checkpoint, d.notes, d.error) == (None, [], None)
    d = decide_resume(tmp_path / "run", CONFIG, "auto")
    assert (d.checkpoint, d.error) == (None, None)
    assert d.notes == [f"--resume auto: no complete checkpoint in {tmp_path / 'run' / 'checkpoints'}; starting from "
                       "the beginning"]


def test_a_fresh_start_over_checkpoints_must_be_asked_for(tmp_path, model_and_tokenizer):
    run = tmp_path / "run"
    save(run, 1, model_and_tokenizer)
    d = decide_resume(run, CONFIG, None)
    assert d.checkpoint is None and isinstance(d.error, CheckpointError) and "already holds" in str(d.error)
    assert decide_resume(run, CONFIG, "never").error is None


def test_auto_falls_back_and_names_what_it_skipped_and_what_changed(tmp_path, model_and_tokenizer):
    run = tmp_path / "run"
    save(run, 2, model_and_tokenizer)
    damage(save(run, 3, model_and_tokenizer))
    changed = {**CONFIG, "train": {"steps": 5, "seed": 0}}
    d = decide_resume(run, changed, "auto")
    assert d.error is None and d.checkpoint["path"].name == "step_000002"
    assert d.notes[0].startswith("--resume auto: skipped the checkpoint named by") and "step_000003" in d.notes[0]
    assert d.notes[1] == "resume: harmless config change train.steps: 3 -> 5"
    assert d.notes[-1] == f"resuming from {run / 'checkpoints' / 'step_000002'} (step 2)"
    # resuming from it commits it: `latest` names it until the next save
    commit_resumed(run / "checkpoints", d.checkpoint["path"])
    assert (run / "checkpoints" / LATEST).read_text().strip() == "step_000002"


def test_auto_stops_with_its_notes_when_no_checkpoint_verifies(tmp_path, model_and_tokenizer):
    run = tmp_path / "run"
    damage(save(run, 1, model_and_tokenizer))
    d = decide_resume(run, CONFIG, "auto")
    assert d.checkpoint is None and "none verifies" in str(d.error)
    assert d.notes and all(n.startswith("--resume auto: skipped") for n in d.notes)


def test_an_explicit_checkpoint_is_never_replaced_and_incompatible_changes_are_refused(tmp_path,
                                                                                         model_and_tokenizer):
    run = tmp_path / "run"
    good = save(run, 1, model_and_tokenizer)
    bad = save(run, 2, model_and_tokenizer)
    damage(bad)
    set_latest(run / "checkpoints", good)
    d = decide_resume(run, CONFIG, str(bad))
    assert d.checkpoint is None and "--resume auto falls back" in str(d.error)
    d = decide_resume(run, {**CONFIG, "rollout": {"num_segments": 2}}, str(good))
    assert d.checkpoint is None and "rollout.num_segments: 4 -> 2" in str(d.error)
    assert decide_resume(run, CONFIG, str(run)).checkpoint["path"] == good  # a run folder: its `latest`


def test_a_path_that_is_not_a_checkpoint_is_named_for_what_it_is(tmp_path, model_and_tokenizer):
    run = tmp_path / "run"
    ckpt = save(run, 1, model_and_tokenizer)
    model = tmp_path / "export"
    model_and_tokenizer[0].save_pretrained(model)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "empty_run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "nothing").mkdir()
    interrupted = run / "checkpoints" / "step_000002.tmp-123"
    interrupted.mkdir()
    expected = {
        model: f"{model} is a model folder (an export, or a model's own files), not a checkpoint: it has no "
               f"optimizer, pools or run state to resume; to start a new run from its weights, set model.path={model}",
        ckpt / "model": f"{ckpt / 'model'} is a part of checkpoint {ckpt}: resume from that folder (--resume {ckpt})",
        tmp_path / "notes.txt": f"{tmp_path / 'notes.txt'} is a file, not a checkpoint folder",
        tmp_path / "empty_run": f"{tmp_path / 'empty_run'} is a run folder whose checkpoints/ holds no committed "
                                "checkpoint (no latest pointer)",
        tmp_path / "nothing": f"{tmp_path / 'nothing'} is not a checkpoint: it holds no MANIFEST.json (--resume PATH "
                              "takes a checkpoint folder, RUN/checkpoints/step_N, or a run folder)",
        tmp_path / "gone": f"checkpoint {tmp_path / 'gone'} does not exist",
    }
    for path, message in expected.items():
        assert str(decide_resume(tmp_path / "new", CONFIG, str(path)).error) == message
    # what was, or is being, saved as a checkpoint: the hint on what `auto` would do follows
    assert str(decide_resume(run, CONFIG, str(interrupted)).error) == (
        f"checkpoint {interrupted} is incomplete: no MANIFEST.json (the save was interrupted)\n"
        "(--resume auto falls back to the newest valid checkpoint)")


def test_config_changes_are_written_as_the_yaml_file_writes_them():
    from ulorl.run.checkpoint.resume import compare_configs

    saved = {"logging": {"table_every": None, "progress": True}, "algo": {"is_mode": "pois"}}
    current = {"logging": {"table_every": 3, "progress": False}, "algo": {"is_mode": "sais"}}
    bad, ok, other = compare_configs(saved, current)
    assert ok == ["logging.progress: true -> false", "logging.table_every: null -> 3"]
    assert bad + other == ["algo.is_mode: 'pois' -> 'sais'"]


def test_a_changed_optimizer_is_refused_and_its_settings_are_allowed():
    """The saved state of AdamW is no SGD state (SGD's step raised KeyError 'momentum' after the resume); a changed
    learning rate, weight decay or eps is allowed and applies (`optimizers.load_keeping_settings`)."""
    from ulorl.run.checkpoint.resume import compare_configs

    saved = {"train": {"optimizer": "adamw", "lr": 1e-6, "weight_decay": 0.0}}
    current = {"train": {"optimizer": "sgd", "lr": 1e-3, "weight_decay": 0.1}}
    bad, ok, other = compare_configs(saved, current)
    assert bad == ["train.optimizer: 'adamw' -> 'sgd'"]
    assert other == ["train.lr: 1e-06 -> 0.001", "train.weight_decay: 0.0 -> 0.1"] and ok == []
