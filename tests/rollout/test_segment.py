"""SegmentRollout, pools and prompt source with a deterministic scripted engine."""

import json

import pytest

from ulorl.data import PromptRecord
from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.engines.scripted import ScriptedEngine
from ulorl.rollout.pools import ExperiencePool, UnfinishedPool
from ulorl.rollout.prompt_source import PromptSource
from ulorl.rollout.segment import SegmentRollout

EOS = 4


def records(n):
    return [PromptRecord(prompt_id=i, prompt_tokens=[3, 10 + i], prompt_text=f"p{i}", ground_truth="0",
                         data_source="test") for i in range(n)]


def make(lengths, *, G=1, decode_batch=1, L=16, M=4, n_prompts=50):
    eng = ScriptedEngine(lengths, eos_id=EOS)
    src = PromptSource(records(n_prompts), seed=0, shuffle=False)
    ro = SegmentRollout(eng, src, SamplingParams(), group_size=G, decode_batch=decode_batch, max_response_len=L,
                        num_segments=M)
    return eng, ro


def test_three_stop_conditions_and_versions():
    # L=16, M=4 -> segments of 4 tokens. Sample 0 wants 3 tokens (EOS in round 1), sample 1 wants 10
    # (4 + 4 + 2: two segment caps then EOS), sample 2 wants 100 (cut at 16: truncated after 4 rounds).
    eng, ro = make([3, 10, 100], decode_batch=3)
    pool = UnfinishedPool()
    finished = {}
    for version in range(4):
        res = ro.round(pool, version=version, step=version)
        for t in res.finished:
            finished[t.sample_id] = t
        eng.sync_weights()
    assert len(pool) == 0 or all(t.sample_id not in finished for t in pool.items())
    a, b, c = finished["g0/0"], finished["g1/0"], finished["g2/0"]
    assert (a.stop_reason, a.response_len, a.versions()) == ("eos", 3, [0])
    assert (b.stop_reason, b.response_len, b.versions()) == ("eos", 10, [0, 1, 2])
    assert [(s.start, s.end) for s in b.segments] == [(0, 4), (4, 8), (8, 10)]
    assert (c.stop_reason, c.response_len, c.versions()) == ("truncated", 16, [0, 1, 2, 3])
    # behaviour log-probs of each segment come from the version that generated it: -0.01 * (version + 1)
    assert b.behaviour_logprobs == [-0.01] * 4 + [-0.02] * 4 + [-0.03] * 2
    assert b.token_versions() == [0] * 4 + [1] * 4 + [2] * 2


def test_reprefill_counts_continued_response_tokens():
    eng, ro = make([12], decode_batch=1)  # one sample of 12 tokens: rounds of 4, 4, 4
    pool = UnfinishedPool()
    r1 = ro.round(pool, 0, 0)
    r2 = ro.round(pool, 1, 1)
    r3 = ro.round(pool, 2, 2)
    # round 2 re-prefills the 4 tokens of round 1, round 3 the 8 tokens so far
    assert (r1.reprefill_tokens, r2.reprefill_tokens, r3.reprefill_tokens) == (0, 4, 8)
    assert (r1.continued, r2.continued, r3.continued) == (0, 1, 1)
    assert len(r3.finished) == 1 and r3.max_staleness == 2


def test_decode_batch_target_is_held():
    # G=4, target 16: new prompts = (16 - unfinished) // 4, so every call has 13..16 rows
    lengths = [2, 30, 5, 9, 60, 3, 17, 1]
    eng, ro = make(lengths, G=4, decode_batch=16, L=64, M=8, n_prompts=200)
    pool = UnfinishedPool()
    for v in range(30):
        ro.round(pool, v, v)
    assert all(16 - 4 < n <= 16 for n in eng.calls), eng.calls


def test_num_segments_one_is_synchronous():
    # M=1: every sample finishes in the round that started it, nothing is ever unfinished
    eng, ro = make([3, 40, 7, 100], G=2, decode_batch=4, L=64, M=1)
    pool = UnfinishedPool()
    for v in range(5):
        res = ro.round(pool, v, v)
        assert len(pool) == 0 and res.continued == 0 and len(res.finished) == 4
        assert all(len(t.segments) == 1 and t.versions() == [v] for t in res.finished)


def test_group_admission_waits_for_slowest_member():
    # one group of G=4: three members need 2 tokens, one needs 30 (segments of 8: rounds 1..4)
    eng, ro = make([2, 2, 2, 30], G=4, decode_batch=4, L=64, M=8)
    ro.num_new_prompts = lambda n_unfinished: 1 if n_unfinished == 0 and not ro.rounds else 0
    pool, exp = UnfinishedPool(), ExperiencePool(4)
    complete_at = None
    for v in range(4):
        for t in ro.round(pool, v, v).finished:
            if exp.add(t) is not None:
                complete_at = v
    assert complete_at == 3  # 30 tokens = 8 + 8 + 8 + 6: the group completes in round 4 (version 3)
    assert exp.num_pending_samples() == 0


def test_experience_pool_fifo_and_errors():
    eng, ro = make([1], G=2, decode_batch=6)
    pool, exp = UnfinishedPool(), ExperiencePool(2)
    groups = []
    for t in ro.round(pool, 0, 0).finished:
        g = exp.add(t)
        if g:
            groups.append(g)
            exp.admit(g)
    assert [g[0].group_id for g in groups] == ["g0", "g1", "g2"]
    assert [g[0].group_id for g in exp.take(2)] == ["g0", "g1"]
    with pytest.raises(ValueError, match="only 1 ready"):
        exp.take(2)
    with pytest.raises(ValueError, match="twice"):
        exp.add(groups[0][0]) or exp.add(groups[0][0])


def test_pools_round_trip_through_json():
    eng, ro = make([3, 10, 100, 2], G=2, decode_batch=4)
    pool, exp = UnfinishedPool(), ExperiencePool(2)
    for v in range(2):
        for t in ro.round(pool, v, v).finished:
            g = exp.add(t)
            if g:
                exp.admit(g)
    blob = json.dumps({"u": pool.to_dict(), "e": exp.to_dict()})
    d = json.loads(blob)
    pool2, exp2 = UnfinishedPool.from_dict(d["u"]), ExperiencePool.from_dict(d["e"])
    assert [t.to_dict() for t in pool2.items()] == [t.to_dict() for t in pool.items()]
    assert exp2.to_dict() == exp.to_dict() and exp2.num_samples() == exp.num_samples()


def test_prompt_source_wraps_epochs_and_restores():
    src = PromptSource(records(5), seed=1, shuffle=True)
    first = [d.record.prompt_id for d in src.next(5)]
    assert sorted(first) == [0, 1, 2, 3, 4]
    more = src.next(3)  # crosses into epoch 1
    assert [d.epoch for d in more] == [1, 1, 1] and src.counter == 8
    state = src.state_dict()
    nxt = [d.record.prompt_id for d in src.next(4)]
    src2 = PromptSource(records(5), seed=1, shuffle=True)
    src2.load_state_dict(state)
    assert [d.record.prompt_id for d in src2.next(4)] == nxt
    with pytest.raises(ValueError, match="different data"):
        PromptSource(records(6), seed=1).load_state_dict(state)
