"""`train.pipeline=overlap`: the learner in a child process, the next step's rounds during the update.

- the process learner computes the same update as the in-process one (same weights, same metrics);
- the schedule is fixed by the step number: the batch trained at step s (s >= 2) was decoded with the
  weights of update s - 2 at the newest (s - 1 in sync mode; older when the batch is leftovers of earlier
  rounds), and a run reproduces with its seed;
- a run stopped at a step boundary and resumed equals the uninterrupted run (samples, metrics,
  weights, pools): the filled pool of the next step is part of the checkpoint;
- the overlap metrics are logged; configurations the mode cannot run fail at load.
(SIGKILL at random moments in overlap mode: tests/run/checkpoint/test_resume_kill.py.)
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from tests.run.checkpoint import resume_helpers as R
import torch

from ulorl.config import ConfigError, check_runnable, load_run_config
from ulorl.learners.local import make_micro_batches
from ulorl.run.loop import train
from ulorl.trajectory import Trajectory

N = 5
OVERLAP = "train.pipeline=overlap"


def _run(eos_model, run: Path, *extra: str, resume: str | None = None) -> dict:
    return train(R.config(eos_model, *extra), run, resume=resume)


@pytest.fixture(scope="module")
def overlap_run(eos_model, tmp_path_factory):
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("overlap") / "run"
    _run(eos_model, run, f"train.steps={N}", f"checkpoint.keep={N}", OVERLAP)
    torch.set_num_threads(old)
    return run


def test_the_process_learner_computes_the_in_process_update(eos_model):
    from ulorl.learners.local import LocalLearner
    from ulorl.learners.process import ProcessLearner
    from ulorl.models import load_model

    cfg = R.config(eos_model)
    batch, pad = _batch(eos_model)
    a, b = load_model(eos_model), load_model(eos_model)
    local = LocalLearner(a, cfg.train, cfg.algo, cfg.rollout.temperature, pad)
    remote = ProcessLearner(b, cfg.train, cfg.algo, cfg.rollout.temperature, pad)
    try:
        for version in (0, 1):  # two updates: the optimizer state crosses the process boundary too
            m_local = local.update(batch, version)
            remote.submit(batch, version)
            m_remote = remote.result()  # afterwards `b` holds the child's weights
            assert {k: v for k, v in m_remote.items() if k.startswith(("actor/", "pois/"))} == \
                {k: v for k, v in m_local.items() if k.startswith(("actor/", "pois/"))}
            R.assert_same_weights(a.state_dict(), b.state_dict())
        state = remote.state_dict()["optimizer"]["state"]
        assert state and all(torch.equal(state[i]["exp_avg"], s["exp_avg"])
                             for i, s in local.state_dict()["optimizer"]["state"].items())
    finally:
        remote.close()
    assert not remote._proc.is_alive()


def _batch(eos_model) -> tuple[list, int]:
    """Two scored groups of real samples (rounds of a fresh session) and the tokenizer's pad id."""
    import tempfile

    from ulorl.run.session import open_session
    from ulorl.run.scoring import RewardScorer

    with tempfile.TemporaryDirectory() as d:
        s = open_session(R.config(eos_model), Path(d) / "run")
        try:
            while s.experience.num_ready() < 2:
                res = s.rollout.round(s.unfinished, 0, 0)
                if res.finished:
                    RewardScorer(s.reward, s.tokenizer, s.cfg, step=1).score(res.finished)
                for t in res.finished:
                    group = s.experience.add(t)
                    if group is not None:
                        s.experience.admit(group)
            return [t for g in s.experience.take(2) for t in g], s.tokenizer.pad_token_id
        finally:
            s.close()


def test_the_schedule_is_fixed_by_the_step_number(overlap_run, eos_model, tmp_path):
    newest = {}
    for r in R.samples(overlap_run):
        newest[r["step"]] = max(newest.get(r["step"], 0), max(r["versions"]))
    # the rounds that run during update s - 1 decode on W_{s-2}: nothing trained at step s is newer. A step's
    # batch may also be all leftovers (FIFO) from earlier rounds, so the bound need not be reached every step.
    assert newest[1] == 0 and newest[2] == 0
    assert all(newest[s] <= s - 2 for s in range(2, N + 1)), newest
    assert any(newest[s] == s - 2 for s in range(3, N + 1)), newest  # and the pipeline does reach it
    sync = tmp_path / "sync"
    _run(eos_model, sync, f"train.steps={N}")
    sync_newest = {}
    for r in R.samples(sync):
        sync_newest[r["step"]] = max(sync_newest.get(r["step"], 0), max(r["versions"]))
    assert all(sync_newest[s] <= s - 1 for s in range(1, N + 1)), sync_newest  # sync: on W_{s-1} at the newest
    assert sync_newest != newest  # the two schedules differ
    # and the same seed gives the same run, whatever the timing of the two processes
    again = tmp_path / "again"
    _run(eos_model, again, f"train.steps={N}", f"checkpoint.keep={N}", OVERLAP)
    assert R.samples(again) == R.samples(overlap_run)
    assert R.metrics(again) == R.metrics(overlap_run)
    R.assert_same_weights(R.weights(R.latest(again)), R.weights(R.latest(overlap_run)))


def test_stop_and_resume_equals_the_uninterrupted_run(overlap_run, eos_model, tmp_path):
    run = tmp_path / "run"
    _run(eos_model, run, "train.steps=2", OVERLAP)
    ckpt = R.latest(run)
    assert R.pools(ckpt)["experience"]["ready"], "the next step's batch, filled during update 2, is saved"
    _run(eos_model, run, f"train.steps={N}", OVERLAP, resume="auto")
    assert R.samples(run) == R.samples(overlap_run)
    assert R.metrics(run) == R.metrics(overlap_run)
    R.assert_same_weights(R.weights(R.latest(run)), R.weights(R.latest(overlap_run)))
    assert R.pools(R.latest(run)) == R.pools(R.latest(overlap_run))


def test_overlap_metrics_are_logged(overlap_run):
    rows = R.read_jsonl(overlap_run / "metrics.jsonl")
    for row in rows:
        for k in ("pipeline/wait_for_update_s", "pipeline/learner_idle_s", "pipeline/overlap_efficiency",
                  "pipeline/ahead_rounds", "timing_s/update_compute"):
            assert k in row and row[k] >= 0, (k, row)
        assert 0 <= row["pipeline/overlap_efficiency"] <= 1
    # staleness by version: from step 2 on, no trained token is from the current version
    assert all("pois/token_share_age0" not in row for row in rows[1:])
    assert all(abs(sum(v for k, v in row.items() if k.startswith("pois/token_share_age")) - 1) < 1e-9
               for row in rows)


@pytest.mark.parametrize("extra, match", [
    (["train.pipeline=async"], "train.pipeline='async' is not allowed; choose one of: sync, overlap"),
    ([OVERLAP, "algo.is_mode=tois", "rollout.num_segments=1"], "tois is true on-policy"),
    ([OVERLAP, "distributed.backend=ray"], "distributed.backend=ray is not supported"),
    (["train.learner_device=cuda:1"], "with train.pipeline=sync the learner runs on train.device"),
    ([OVERLAP, "train.learner_device=gpu0"], "train.learner_device='gpu0' is not a device name"),
])
def test_configurations_the_mode_cannot_run_fail_at_load(extra, match):
    with pytest.raises(ConfigError, match=match):
        load_run_config("configs/demo.yaml", extra)


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has the GPUs")
def test_gpu_placement_loads_and_a_missing_learner_device_is_named_before_any_work():
    """Engine on cuda:0, learner process on cuda:1 is a valid configuration (docs/scale.md); on a machine
    without them the run stops before any work, naming the setting."""
    cfg = load_run_config("configs/demo.yaml", [OVERLAP, "train.device=cpu", "train.learner_device=cuda:1"])
    assert cfg.train.learner_device == "cuda:1"
    with pytest.raises(ConfigError, match=r"train.learner_device='cuda:1': no such device on this machine"):
        check_runnable(cfg)


def test_a_micro_batch_moves_every_tensor_to_the_models_device():
    """The learner collates on the CPU and computes where the model is (GPU learners, colocated or not)."""
    traj = Trajectory(sample_id="s/0", group_id="s", prompt_id="p", prompt_tokens=[5, 6, 7], ground_truth="0",
                      data_source="x")
    traj.append_segment([8, 9], [-0.5, -0.25], 0)
    (mb,) = make_micro_batches([traj], torch.zeros(1), 1, 0, 1000)
    moved = mb.to(torch.device("meta"))
    for f in fields(mb):
        got = getattr(moved, f.name)
        if not isinstance(getattr(mb, f.name), torch.Tensor):  # counts and absent optional tensors stay as they are
            assert got == getattr(mb, f.name), f.name
        else:
            assert got.device.type == "meta" and got.shape == getattr(mb, f.name).shape, f.name
