"""The training loop with a deterministic scripted engine: accounting, synchronous M=1, fixed batches."""

import json
from collections import Counter

import pytest

from ulorl.config import load_run_config
from ulorl.run.session import open_session
from ulorl.rollout.engines.scripted import ScriptedEngine
from ulorl.run.loop import train_step

# a long-tailed length script: most short, a few 10x longer
LENGTHS = [3, 5, 2, 8, 4, 6, 30, 3, 2, 7, 5, 48, 4, 3, 9, 2, 64, 6, 3, 5]


def session(tmp_path, fake_reward, overrides, lengths=LENGTHS):
    cfg = load_run_config(None, ["model.warm_start=none", "data.eval=null", "data.train_size=300",
                                 "logging.progress=false", "logging.loggers=[jsonl]", "train.lr=1e-4",
                                 "rollout.max_response_len=64", "rollout.group_size=4", *overrides])
    s = open_session(cfg, tmp_path / "run")
    s.engine = ScriptedEngine(lengths, eos_id=s.tokenizer.eos_token_id)
    s.rollout.engine = s.engine
    s.reward.close()
    s.reward = fake_reward
    return s


def read_samples(s):
    s.samples._f.flush()
    return [json.loads(l) for l in (s.run_dir / "samples.jsonl").read_text().splitlines()]


def test_no_sample_lost_or_duplicated_over_50_steps(tmp_path, fake_reward):
    s = session(tmp_path, fake_reward, ["rollout.num_segments=4", "rollout.decode_batch=16",
                                        "train.train_groups=2"])
    for _ in range(50):
        train_step(s)
    recs = read_samples(s)
    ids = [r["sample_id"] for r in recs]
    assert len(ids) == len(set(ids)), "a sample was trained or dropped twice"
    trained = [r for r in recs if r["status"] == "trained"]
    assert Counter(r["step"] for r in trained) == {k: 8 for k in range(1, 51)}  # 2 groups x G=4 every step
    # every drawn sample is trained, dropped, or still in a pool: nothing vanished
    in_pools = {t.sample_id for t in s.unfinished.items()}
    in_pools |= {t.sample_id for g in s.experience._ready for t in g}
    in_pools |= {t.sample_id for ms in s.experience._pending.values() for t in ms}
    drawn = {f"g{i}/{k}" for i in range(s.prompts.counter) for k in range(4)}
    assert set(ids) | in_pools == drawn and not (set(ids) & in_pools)
    # groups are trained or dropped whole
    by_group = Counter(r["group_id"] for r in recs)
    assert set(by_group.values()) == {4}
    dropped = [r for r in recs if r["status"] == "dropped"]
    assert all(r["reason"] == "all_rewards_equal" for r in dropped)
    assert s.counters["dropped_groups"] * 4 == len(dropped)
    # long samples spanned several segments; versions never go back, and a step with a single rollout round
    # gives each segment its own version (several rounds before one update may share one)
    multi = [r for r in trained if r["num_segments"] >= 3]
    assert multi and all(r["versions"] == sorted(r["versions"]) for r in multi)
    assert any(len(set(r["versions"])) == r["num_segments"] >= 3 for r in multi)
    s.close()


def test_num_segments_one_is_synchronous_grpo(tmp_path, fake_reward):
    # M=1, decode batch = train_groups x G, no dynamic sampling: every step trains exactly the groups
    # drawn in that step, each response generated in one segment by the current policy version.
    s = session(tmp_path, fake_reward, ["rollout.num_segments=1", "rollout.decode_batch=8", "train.train_groups=2",
                                        "algo.dynamic_sampling=false", "algo.is_mode=tois"])
    for step in range(1, 6):
        m = train_step(s)
        assert m["rollout/rounds"] == 1 and m["rollout/unfinished_pool"] == 0
        assert m["rollout/experience_pool"] == 0 and m["rollout/reprefill_tokens"] == 0
        trained = [r for r in read_samples(s) if r["step"] == step]
        assert len(trained) == 8
        assert all(r["versions"] == [step - 1] and r["num_segments"] == 1 for r in trained)
        assert {r["group_id"] for r in trained} == {f"g{2 * (step - 1)}", f"g{2 * (step - 1) + 1}"}
    s.close()


def test_fixed_batch_size_leftovers_wait(tmp_path, fake_reward):
    # a large decode batch makes more complete groups than one update takes: the rest wait (FIFO)
    s = session(tmp_path, fake_reward, ["rollout.num_segments=2", "rollout.decode_batch=32", "train.train_groups=2",
                                        "algo.dynamic_sampling=false"])
    seen = []
    for _ in range(6):
        m = train_step(s)
        assert m["actor/response_tokens"] > 0
        step_groups = sorted({r["group_id"] for r in read_samples(s) if r["step"] == s.step},
                             key=lambda g: int(g[1:]))
        assert len(step_groups) == 2
        seen += step_groups
    assert m["rollout/experience_pool"] > 0  # leftovers are waiting
    assert len(seen) == len(set(seen))
    s.close()


def test_overlong_keep_is_decided_once_when_scored_and_reaches_the_learner(tmp_path, fake_reward):
    # max_response_len=32: the scripted 48- and 64-token answers are truncated; reward.overlong=filter keeps them
    # out of the loss. Scoring sets Trajectory.loss_keep once; the learner receives exactly that mask.
    s = session(tmp_path, fake_reward, ["rollout.max_response_len=32", "rollout.num_segments=1",
                                        "rollout.decode_batch=20", "train.train_groups=5", "algo.dynamic_sampling=false",
                                        "reward.overlong=filter"])
    calls, update = [], s.learner.update

    def spy(batch, version, loss_keep=None):
        calls.append((batch, loss_keep))
        return update(batch, version, loss_keep)

    s.learner.update = spy
    m = train_step(s)
    (batch, keep), = calls
    assert any(t.truncated for t in batch)
    assert keep == [t.loss_keep for t in batch] == [not t.truncated for t in batch]
    assert m["actor/lr"] == pytest.approx(1e-4)  # the learner reports its learning rate (train.lr)
    s.close()


def test_train_threads_sets_the_process_thread_count_before_any_work(tmp_path, fake_reward):
    import torch

    from ulorl.config import ConfigError

    with pytest.raises(ConfigError, match="train.threads"):
        load_run_config(None, ["train.threads=-1"])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        s = session(tmp_path, fake_reward, ["train.threads=1"])
        try:
            assert torch.get_num_threads() == 1
        finally:
            s.close()
    finally:
        torch.set_num_threads(before)


def test_a_step_without_a_token_in_the_loss_says_so_and_counts_zero_tokens(tmp_path, capsys):
    """`reward.overlong=filter` with every answer cut at L: no token is trained. The step reports 0 response
    tokens (it reported 1, the divisor's floor) and a warning, not a silent entropy of 0."""
    from ulorl.cli import main

    assert main(["train", "-o", str(tmp_path / "run"), "model.warm_start=none", "data.train_size=20",
                 "data.eval=null", "rollout.max_response_len=4", "rollout.group_size=2", "rollout.decode_batch=4",
                 "train.train_groups=1", "train.steps=1", "algo.dynamic_sampling=false", "logging.progress=false",
                 "logging.loggers=[jsonl]", "reward.overlong=filter", "reward.num_workers=1"]) == 0
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    if row["response_length/clip_ratio"] < 1:  # the random tiny model ended an answer within 4 tokens: no claim
        pytest.skip("an answer ended before L; the case needs every answer cut")
    assert row["actor/response_tokens"] == 0.0 and row["actor/grad_norm"] == 0.0
    assert "warning: step 1: no response token was in the loss (every sample masked out, e.g. reward.overlong=filter " \
           "on answers cut at rollout.max_response_len)" in capsys.readouterr().out
