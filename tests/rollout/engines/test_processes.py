"""The torch engine in several processes (`rollout.torch.procs`, `torch/processes.py`): each row samples what one
engine samples, continued rows resume where their K/V was kept, the children follow the driver's weights, and a
failure in a child reaches the caller."""

from __future__ import annotations

import json

import pytest
import torch

from ulorl.config import RolloutConfig, RunConfig
from ulorl.config.rollout import TorchEngineConfig
from ulorl.config.loader import ConfigError
from ulorl.models import load_tokenizer
from ulorl.rollout.engines import SamplingParams, TorchEngine
from ulorl.rollout.engines.registry import build_engine
from ulorl.rollout.engines.torch.kv_cache import KVCacheBudgetError
from ulorl.rollout.engines.torch.processes import ProcessEngine, waited_for_last

from tests.rollout.engines.test_torch import T, _prefixes, shaken_model, two_segments_match_the_learner

NEVER = [10_000]  # an EOS id never sampled: every row runs to max_new_tokens


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return shaken_model(tiny_model_dir)


@pytest.fixture(scope="module")
def pool(model):
    """Two engine processes over the shaken model (module-scoped: spawning costs seconds)."""
    eng = build_engine("torch", model, None, NEVER, max_batch=4, torch=TorchEngineConfig(block_size=4, procs=2))
    assert isinstance(eng, ProcessEngine) and eng.procs == 2
    yield eng
    eng.close()


def _same(a, b, atol=1e-5):
    assert [o.tokens for o in a] == [o.tokens for o in b]
    assert [o.eos for o in a] == [o.eos for o in b]
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=atol, rtol=0)


def test_rows_sample_what_one_engine_samples(model, pool):
    params = SamplingParams(temperature=1.0, top_k=20)
    prefixes = _prefixes(9)
    one = TorchEngine(model, NEVER, max_batch=4, block_size=4)
    seen = []
    _same(one.generate(prefixes, 10, params, seed=7), pool.generate(prefixes, 10, params, seed=7, progress=seen.append))
    assert sum(seen) == 9  # every finished row reported through the pipe
    assert pool.assign(prefixes) == [[0, 2, 4, 6, 8], [1, 3, 5, 7]]  # nothing kept: rows alternate
    assert pool.stats.useful_tokens >= 90 and pool.stats.prefill_tokens >= sum(len(p) for p in prefixes)


def test_continued_rows_go_to_the_process_that_kept_them(model, pool):
    params = SamplingParams(temperature=1.0, top_k=20)
    prefixes = _prefixes(6)
    one = TorchEngine(model, NEVER, max_batch=4, block_size=4)
    a1 = one.generate(prefixes, 8, params, seed=3)
    b1 = pool.generate(prefixes, 8, params, seed=3, keep=True)
    _same(a1, b1)
    # rows 0-5 were kept by children 0, 1, 0, 1, 0, 1; continued in another order beside two new rows
    order = [5, 2, 0, 4]
    cont = [prefixes[i] + b1[i].tokens for i in order] + _prefixes(8)[6:]
    # kept rows to their children (1 to child 1, 3 to child 0), then the new rows to the child with fewer rows
    assert pool.assign(cont) == [[1, 2, 3], [0, 4, 5]]
    a2, b2 = one.generate(cont, 5, params, seed=4), pool.generate(cont, 5, params, seed=4)
    _same(a2, b2, atol=1e-4)  # decode-built K/V against prefilled K/V: float32 rounding on the shaken weights
    assert [o.resumed for o in b2] == [True] * 4 + [False] * 2
    assert [o.prefill_tokens for o in b2] == [0] * 4 + [len(c) for c in cont[4:]]


def test_rows_with_one_context_go_back_to_every_child_that_kept_one(model, pool):
    """A group's samples are often the same tokens: four greedy copies of one prompt are kept two by each child,
    and their four continuations resume there, two in each (not all four where the last copy was kept)."""
    params = SamplingParams(greedy=True)
    prompt = _prefixes(1)[0]
    first = pool.generate([prompt] * 4 + _prefixes(3)[1:], 6, params, keep=True)
    assert len({tuple(o.tokens) for o in first[:4]}) == 1
    cont = [prompt + first[0].tokens] * 4 + _prefixes(3)[1:]
    # copies 0 and 1 resume in child 0, which kept two of them, 2 and 3 in child 1; the new rows alternate
    assert pool.assign(cont) == [[0, 1, 4], [2, 3, 5]]
    out = pool.generate(cont, 4, params)
    assert [o.resumed for o in out] == [True] * 4 + [False] * 2
    assert [o.prefill_tokens for o in out[:4]] == [0] * 4
    _same(TorchEngine(model, NEVER, max_batch=4, block_size=4).generate(cont, 4, params), out, atol=1e-4)


def test_the_wait_for_the_slowest_process_is_counted(pool):
    assert waited_for_last([2.0, 5.0, 3.0]) == pytest.approx(3.0 + 2.0)  # the first waited 3 s, the third 2 s
    assert waited_for_last([4.0, 4.0]) == 0.0 and waited_for_last([]) == 0.0
    from collections import Counter

    from ulorl.run.report import procs_idle_share

    assert procs_idle_share(Counter(procs_busy_s=6.0, procs_wait_s=2.0)) == {"rollout/procs_idle_share": 0.25}
    assert procs_idle_share(Counter(gen_s=3.0)) == {}  # one engine: no such metric
    before = pool.stats.extra
    pool.generate(_prefixes(5), 4, SamplingParams(greedy=True))
    after = pool.stats.extra
    assert after["procs_busy_s"] > before["procs_busy_s"]
    assert after["procs_wait_s"] >= before["procs_wait_s"]


def test_processes_follow_the_drivers_weights(tiny_model_dir):
    model = shaken_model(tiny_model_dir)
    eng = build_engine("torch", model, None, NEVER, torch=TorchEngineConfig(block_size=4, procs=2))
    try:
        params = SamplingParams(greedy=True)
        prefixes = _prefixes(4)
        first = eng.generate(prefixes, 6, params, keep=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        model(torch.tensor([prefixes[0]])).logits.sum().backward()
        opt.step()  # in place: the children see it before their next call, kept rows are of no use
        cont = [p + o.tokens for p, o in zip(prefixes, first)]
        after = eng.generate(cont, 6, params)
        assert not any(o.resumed for o in after)
        _same(TorchEngine(model, NEVER, block_size=4).generate(cont, 6, params), after)
    finally:
        eng.close()


def test_logprobs_match_the_learner_across_processes(tiny_model_dir):
    from ulorl.models import load_model

    tok, model = load_tokenizer(str(tiny_model_dir)), load_model(str(tiny_model_dir))
    eng = build_engine("torch", model, tok, [tok.eos_token_id], max_batch=8,
                       torch=TorchEngineConfig(block_size=4, procs=2))
    try:
        params = SamplingParams(temperature=T, top_k=20, top_p=0.9)
        assert two_segments_match_the_learner(eng, model, tok, _prefixes(6), params, keep=True) >= 6 * 13
        assert eng.stats.extra["resumed_rows"] == 6
    finally:
        eng.close()


def test_a_failure_in_a_process_reaches_the_caller(pool):
    with pytest.raises(KVCacheBudgetError, match="kv_cache_gib"):
        pool.reserve(1, 10**9)  # a sequence no pool of 4 GiB holds: the child's error, re-raised here
    out = pool.generate(_prefixes(2), 3, SamplingParams(greedy=True))  # the pipes are still in step
    assert [len(o.tokens) for o in out] == [3, 3]


def test_config_needs_a_local_cpu_torch_engine():
    assert RolloutConfig(torch=TorchEngineConfig(procs=2)).torch.procs == 2
    with pytest.raises(ConfigError, match="rollout.torch.procs"):
        TorchEngineConfig(procs=0)
    with pytest.raises(ConfigError, match="rollout.torch.procs=2 .*rollout.engine=torch"):
        RunConfig(rollout=RolloutConfig(engine="hf", torch=TorchEngineConfig(procs=2)))


def test_a_run_with_engine_processes_trains_the_samples_of_one_engine(tmp_path):
    """Two training steps of the real loop (tiny model, built-in task, segments of 16 tokens, weights updated
    between steps): the same samples, segment versions and rewards with one engine and with two processes."""
    from ulorl.config import load_run_config
    from ulorl.run.loop import train_step
    from ulorl.run.session import open_session

    from tests.conftest import FakeReward

    runs = {}
    for procs in (1, 2):
        cfg = load_run_config(None, ["model.warm_start=none", "data.eval=null", "data.train_size=64",
                                     "logging.progress=false", "logging.loggers=[jsonl]", "train.lr=1e-3",
                                     "rollout.max_response_len=64", "rollout.num_segments=4", "rollout.group_size=4",
                                     "rollout.decode_batch=16", "train.train_groups=2", f"rollout.torch.procs={procs}"])
        s = open_session(cfg, tmp_path / f"procs{procs}")
        try:
            assert isinstance(s.engine, ProcessEngine) == (procs == 2)
            s.reward.close()
            s.reward = FakeReward()
            metrics = [train_step(s) for _ in range(2)]
            norms = [m["actor/grad_norm"] for m in metrics]
            shares = [m.get("rollout/procs_idle_share") for m in metrics]
            assert all(0.0 <= x < 1.0 for x in shares) if procs == 2 else shares == [None, None]
            s.samples._f.flush()
            recs = [json.loads(line) for line in (s.run_dir / "samples.jsonl").read_text().splitlines()]
            runs[procs] = norms, [(r["sample_id"], r["response"], r["versions"], r["reward"], r["status"])
                                  for r in recs]
        finally:
            s.close()
    assert runs[2][1] == runs[1][1] and len(runs[1][1]) >= 16
    assert runs[2][0] == pytest.approx(runs[1][0], rel=1e-4)
