"""Resume at a longer L (issue 16): killed mid-segment with samples up to 7 segments deep in the pool.

A shortened long configuration: the long-output `odometer` task, L = 512 in M = 8 segments of 64 tokens, a
tiny random model with a weak EOS (answers of 1 to 512 tokens, most truncated at L, so the unfinished pool
holds samples 2 to 7 segments deep at every step boundary). The run is SIGKILLed while step 4 rolls out (its
step-3 checkpoint committed), resumed with `--resume auto`, and must equal an uninterrupted run: the same
trained samples (no loss, no duplicate), metrics, pools and bit-identical weights.
"""

from __future__ import annotations

import time

import pytest
from tests.procs import forkserver_context
from tests.run.checkpoint import resume_helpers as R
from tests.run.checkpoint.test_resume_kill import Child, committed, samples_logged

from ulorl.run.loop import train

N, KILL_AFTER = 6, 3
LONG = ["data.train=builtin:odometer", "rollout.max_response_len=512", "rollout.num_segments=8",
        "reward.overlong_buffer=512", f"checkpoint.keep={N}"]


@pytest.fixture(scope="module")
def weak_eos_model(tmp_path_factory):
    return R.make_eos_model(tmp_path_factory.mktemp("weak_eos") / "model", strength=0.3)


def test_long_run_killed_mid_segment_resumes_with_nothing_lost_or_trained_twice(weak_eos_model, tmp_path):
    ref = tmp_path / "reference"
    ref_summary = train(R.config(weak_eos_model, *LONG, f"train.steps={N}"), ref)
    assert ref_summary["steps"] == N
    deep = [len(t["segments"]) for t in R.pools(ref / "checkpoints" / f"step_{KILL_AFTER:06d}")["unfinished"]["items"]]
    assert deep and max(deep) >= 4, deep  # half-decoded samples several segments deep wait in the pool

    run = tmp_path / "run"
    argv = ["train", "-o", str(run), "--resume", "auto", *R.overrides(weak_eos_model, *LONG, f"train.steps={N}")]
    child = Child(forkserver_context(), argv, tmp_path / "child.log")
    deadline = time.time() + 300
    while committed(run) != KILL_AFTER and child.proc.is_alive() and time.time() < deadline:
        time.sleep(0.01)
    # into step 4's rollout: a short wait, cut short when step 4 is logged, so step 5 is never reached
    end = time.time() + 0.3
    while time.time() < end and child.proc.is_alive() and not samples_logged(run, KILL_AFTER + 1):
        time.sleep(0.002)
    child.kill()
    assert child.proc.exitcode is not None and child.proc.exitcode != 0, child.text()
    assert committed(run) in (KILL_AFTER, KILL_AFTER + 1), child.text()

    summary = train(R.config(weak_eos_model, *LONG, f"train.steps={N}"), run, resume="auto")
    assert summary["steps"] == N
    trained = R.samples(run)
    ids = [r["sample_id"] for r in trained]
    assert len(ids) == len(set(ids)), "a sample was trained twice"
    assert trained == R.samples(ref)
    assert max(len(r["versions"]) for r in trained) >= 4
    assert R.metrics(run) == R.metrics(ref)
    assert R.pools(R.latest(run)) == R.pools(R.latest(ref))
    R.assert_same_weights(R.weights(R.latest(run)), R.weights(R.latest(ref)))
    # the summary's long-run figures survive the kill, and agree with the samples log
    for key in ("trained_lengths", "staleness_hist", "segments_hist", "segments_eos_truncated", "trained_eos_at_least"):
        assert summary[key] == ref_summary[key], key
    by_stop = {}
    for r in trained:
        d = by_stop.setdefault(str(r["num_segments"]), {"eos": 0, "truncated": 0})
        d["eos" if r["stop_reason"] == "eos" else "truncated"] += 1
    assert summary["segments_eos_truncated"] == dict(sorted(by_stop.items(), key=lambda kv: int(kv[0])))
    assert summary["trained_eos_at_least"] == {str(n): sum(r["stop_reason"] == "eos" and r["response_length"] >= n
                                                           for r in trained) for n in (1024, 2048)}
    lengths = sorted(r["response_length"] for r in trained)
    assert summary["trained_lengths"]["max"] == lengths[-1] and summary["trained_lengths"]["mean"] == pytest.approx(
        sum(lengths) / len(lengths))
    assert summary["trained_lengths"]["truncated_share"] == pytest.approx(
        sum(r["stop_reason"] == "truncated" for r in trained) / len(trained))
    assert sum(summary["staleness_hist"].values()) == len(trained)
    assert summary["checkpoint_mib"] > 0 and summary["peak_rss_mib"]["driver"] > 100
