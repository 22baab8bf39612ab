"""Ray placement on a local CPU cluster: two HF engine actors and one learner actor train like one process."""

import json
import signal
from collections import Counter

import pytest
import torch

from ulorl.config import load_run_config
from ulorl.run.session import open_session
from ulorl.run.loop import train_step

ray = pytest.importorskip("ray", reason="distributed.backend=ray needs Ray: pip install 'ulorl[ray]'")

G, GROUPS, STEPS = 2, 2, 3
RUN = ["model.warm_start=none", "data.eval=null", "data.train_size=200", "logging.progress=false",
       "logging.loggers=[jsonl]", "train.lr=1e-4", "rollout.max_response_len=24", "rollout.num_segments=2",
       f"rollout.group_size={G}", "rollout.decode_batch=4", f"train.train_groups={GROUPS}",
       "algo.dynamic_sampling=false", "checkpoint.every=0"]
RAY = ["distributed.backend=ray", "distributed.num_engines=2", "distributed.learner_procs=1",
       "distributed.cpus_per_engine=1", "distributed.cpus_per_learner=1"]


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray cluster for the module (3 logical CPUs: two engine actors and a learner)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, object_store_memory=256 * 1024**2)
    yield
    ray.shutdown()
    for sig, h in handlers.items():  # ray.init installs its own SIGTERM handler and leaves it behind
        signal.signal(sig, h)


def run(run_dir, fake_reward, overrides, steps=STEPS):
    """`steps` training steps; (session, per-step metrics, samples.jsonl records). The session stays open."""
    s = open_session(load_run_config(None, [*RUN, *overrides]), run_dir)
    s.reward.close()
    s.reward = fake_reward
    metrics = [train_step(s) for _ in range(steps)]
    s.samples.sync()
    recs = [json.loads(line) for line in (s.run_dir / "samples.jsonl").read_text().splitlines()]
    return s, metrics, recs


def accounting(s, metrics, recs):
    """What must not depend on where engines and learner run."""
    trained = [r for r in recs if r["status"] == "trained"]
    assert len({r["sample_id"] for r in recs}) == len(recs), "a sample was logged twice"
    by_group = Counter(r["group_id"] for r in trained)
    assert set(by_group.values()) == {G}, "a group was trained partly"
    return {"per_step": dict(Counter(r["step"] for r in trained)), "statuses": dict(Counter(r["status"] for r in recs)),
            "counters": dict(s.counters), "trained_metric": [m["train/trained_samples"] for m in metrics],
            "skipped": [m["actor/skipped"] for m in metrics]}


def test_ray_two_engines_same_accounting_as_local(tmp_path, fake_reward, ray_session):
    local, m_local, r_local = run(tmp_path / "local", fake_reward, [])
    local.close()
    s, m_ray, r_ray = run(tmp_path / "ray", fake_reward, RAY)
    try:
        want = accounting(local, m_local, r_local)
        assert want["per_step"] == {k: G * GROUPS for k in range(1, STEPS + 1)} and want["skipped"] == [0.0] * STEPS
        assert accounting(s, m_ray, r_ray) == want
        # segment rollout across actors: samples continued in a later round, under newer weights
        assert any(r["num_segments"] == 2 for r in r_ray if r["status"] == "trained")
        # every drawn sample is trained or still in a pool: nothing vanished in the actors
        drawn = {f"g{i}/{k}" for i in range(s.prompts.counter) for k in range(G)}
        pooled = {t.sample_id for t in s.unfinished.items()} | {t.sample_id for g in s.experience._ready for t in g}
        pooled |= {t.sample_id for ms in s.experience._pending.values() for t in ms}
        assert {r["sample_id"] for r in r_ray} | pooled == drawn
        # the learner actor saw exactly the trained batch: its token count is the samples' response tokens
        for step, m in enumerate(m_ray, 1):
            assert m["actor/response_tokens"] == sum(r["response_length"] for r in r_ray if r["step"] == step)
        assert s.engine.stats.useful_tokens == sum(m["rollout/decoded_tokens"] for m in m_ray)
        # weights: driver (checkpoints, evaluation) == both engine actors == learner actor, after the updates
        total = float(sum(p.double().sum() for p in s.model.state_dict().values()))
        assert s.engine.checksums() == pytest.approx([total, total], rel=1e-12)
        assert not torch.equal(s.model.state_dict()["lm_head.weight"], local.model.state_dict()["lm_head.weight"])
        # a Ray checkpoint resumes with backend=local: weights and optimizer come from the learner actor
        s.save()
        opt = s.learner.state_dict()["optimizer"]
        weights = {k: v.clone() for k, v in s.model.state_dict().items()}
    finally:
        s.close()
    back = open_session(load_run_config(None, RUN), tmp_path / "ray", resume="auto")
    try:
        assert back.step == STEPS
        for k, v in back.model.state_dict().items():
            assert torch.equal(v, weights[k]), k
        for i, st in opt["state"].items():
            assert torch.equal(back.learner.optimizer.state_dict()["state"][i]["exp_avg"], st["exp_avg"])
    finally:
        back.close()


@pytest.mark.slow  # two more actors to start (~25 s on 2 busy cores); the gloo arithmetic itself is tested without Ray
def test_ray_learner_two_gloo_actors_equal_one_process(tiny_model_dir, ray_session):
    # two learner actors form a gloo group through Ray (rank 0's address, a free port) and shard the batch
    from tests.distributed.test_sharded_learner import batch

    from ulorl.distributed.ray_learner import RayLearner
    from ulorl.learners.local import LocalLearner
    from ulorl.models import load_model

    cfg = load_run_config(None, ["distributed.backend=ray", "distributed.learner_procs=2", "train.lr=1e-3",
                                 "train.micro_batch_tokens=40", "algo.is_mode=sais"])
    trajs = batch(3)
    one = LocalLearner(load_model(tiny_model_dir), cfg.train, cfg.algo, cfg.rollout.temperature, pad_id=0)
    want = one.update(trajs, 2)
    rl = RayLearner(cfg, load_model(tiny_model_dir), pad_id=0)
    try:
        got = rl.update(trajs, 2)
        assert got["actor/pg_loss"] == pytest.approx(want["actor/pg_loss"], rel=1e-5)
        assert got["actor/grad_norm"] == pytest.approx(want["actor/grad_norm"], rel=1e-5)
        for k, v in one.model.state_dict().items():  # the driver's model received the actors' weights
            assert torch.allclose(rl.model.state_dict()[k], v, atol=1e-5, rtol=0), k
        assert got["actor/lr"] == pytest.approx(1e-3)
    finally:
        rl.close()
