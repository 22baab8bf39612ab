"""K/V kept between calls (`kept_rows.py`): rows continued under the same weights start from their kept blocks
instead of a prefill, with the output of a run that prefills them again; other weights, other prefixes or a
short pool never use or lose anything."""

from __future__ import annotations

import pytest
import torch

from ulorl.models import load_model, load_tokenizer
from ulorl.rollout.engines import SamplingParams, TorchEngine
from ulorl.rollout.engines.scripted import ScriptedEngine
from ulorl.rollout.engines.torch.kept_rows import weights_version
from ulorl.rollout.pools import UnfinishedPool
from ulorl.rollout.prompt_source import PromptSource
from ulorl.rollout.segment import SegmentRollout

from tests.rollout.engines.test_paged_cache import _gib
from tests.rollout.engines.test_torch import T, _prefixes, shaken_model, two_segments_match_the_learner

NEVER = [10_000]  # an EOS id never sampled: every row runs to max_new_tokens


def _two_calls(eng: TorchEngine, prefixes, params, keep: bool, n1: int = 9, n2: int = 11):
    first = eng.generate(prefixes, n1, params, seed=3, keep=keep)
    cont = [p + o.tokens for p, o in zip(prefixes, first)]
    return first, cont, eng.generate(cont, n2, params, seed=4)


def test_continued_rows_resume_from_kept_blocks_with_the_prefilled_output(tiny_model_dir):
    model = shaken_model(tiny_model_dir)
    params = SamplingParams(temperature=1.0, top_k=20)
    prefixes = _prefixes(7)
    plain = TorchEngine(model, NEVER, max_batch=4, block_size=4)  # 7 rows through 4: kept rows and waiting ones
    kept = TorchEngine(model, NEVER, max_batch=4, block_size=4)
    a1, _, a2 = _two_calls(plain, prefixes, params, keep=False)
    b1, cont, b2 = _two_calls(kept, prefixes, params, keep=True)
    assert [o.tokens for o in a1] == [o.tokens for o in b1]
    assert [o.tokens for o in a2] == [o.tokens for o in b2]  # the same draws from (nearly) the same logits
    for x, y in zip(a2, b2):  # decode-built K/V against prefilled K/V: float32 rounding on the shaken weights
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)
    # every row was kept; a call starts at most max_batch = 4 of them, the others are released and prefilled
    assert [o.resumed for o in b2] == [True] * 4 + [False] * 3 and not any(o.resumed for o in a2)
    assert [o.prefill_tokens for o in b2] == [0] * 4 + [len(c) for c in cont[4:]]
    resumed_ctx = sum(len(c) - 1 for c in cont[:4])
    assert kept.stats.extra["resumed_rows"] == 4 and kept.stats.extra["resumed_tokens"] == resumed_ctx
    assert plain.stats.prefill_tokens - kept.stats.prefill_tokens == sum(len(c) for c in cont[:4])
    assert kept.blocks.num_used == 0 and len(kept.kept) == 0  # the second call kept nothing


def test_kept_rows_match_the_learner(tiny_model_dir):
    """The float32 contract (1e-5 against the learner) holds for a segment continued from kept K/V, rows copied into
    a run included (contexts of up to 25 + 11 tokens: 8 full blocks of 4, RUN_MIN_BLOCKS on CPU)."""
    tok, model = load_tokenizer(str(tiny_model_dir)), load_model(str(tiny_model_dir))
    eng = TorchEngine(model, [tok.eos_token_id], max_batch=8, block_size=4)
    params = SamplingParams(temperature=T, top_k=20, top_p=0.9)
    assert two_segments_match_the_learner(eng, model, tok, _prefixes(6), params, keep=True) >= 6 * 13
    assert eng.stats.extra["resumed_rows"] == 6  # every row continued from its kept K/V
    assert eng.blocks.num_used == 0


@pytest.mark.parametrize("change", ["optimizer step", "load_state_dict"])
def test_changed_weights_release_the_kept_rows(tiny_model_dir, change):
    model = shaken_model(tiny_model_dir)
    eng = TorchEngine(model, NEVER, block_size=4)
    prefixes = _prefixes(3)
    first = eng.generate(prefixes, 6, SamplingParams(greedy=True), keep=True)
    assert len(eng.kept) == 3 and eng.blocks.num_used > 0
    v0 = weights_version(model)
    if change == "optimizer step":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model(torch.tensor([prefixes[0]])).logits.sum().backward()
        opt.step()
    else:
        model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()})
    assert weights_version(model) != v0
    outs = eng.generate([p + o.tokens for p, o in zip(prefixes, first)], 4, SamplingParams(greedy=True))
    assert not any(o.resumed for o in outs)
    assert eng.blocks.num_used == 0 and len(eng.kept) == 0


def test_rows_not_continued_are_released_and_eos_rows_are_not_kept(tiny_model_dir):
    model = shaken_model(tiny_model_dir)
    eng = TorchEngine(model, list(range(400, 450)), block_size=4)  # some rows end at EOS, others at the cap
    prefixes = _prefixes(9)
    first = eng.generate(prefixes, 20, SamplingParams(greedy=True), keep=True)
    assert 0 < len(eng.kept) == sum(not o.eos for o in first) < 9
    eng.generate(_prefixes(12)[9:], 5, SamplingParams(greedy=True))  # continues none of them
    assert eng.blocks.num_used == 0 and len(eng.kept) == 0
    eng.generate(prefixes, 20, SamplingParams(greedy=True), keep=True)
    eng.release_kept()
    assert eng.blocks.num_used == 0 and len(eng.kept) == 0


def test_a_short_pool_releases_kept_rows_before_preempting(tiny_model_dir):
    """Rows kept while others still run hold blocks; a pool that runs short takes them back first, so the call
    preempts exactly as often as one that keeps nothing, with the same output."""
    model = shaken_model(tiny_model_dir)
    params = SamplingParams(temperature=1.0)
    prefixes = _prefixes(8)
    eos = list(range(400, 430))  # rows stop at different times: some are kept while others still run

    def run(keep: bool):
        eng = TorchEngine(model, eos, block_size=4, kv_cache_gib=_gib(24, 4))  # 96 tokens for 8 rows of <= 65
        outs = eng.generate(prefixes, 40, params, seed=5, keep=keep)
        return eng, outs

    plain, a = run(False)
    kept, b = run(True)
    assert plain.stats.extra.get("preemptions", 0) > 0
    assert kept.stats.extra.get("preemptions", 0) == plain.stats.extra["preemptions"]
    assert kept.stats.extra.get("kept_rows_released", 0) > 0, kept.stats.extra
    assert [o.tokens for o in a] == [o.tokens for o in b]
    assert kept.blocks.num_used == sum(len(r.blocks) for rows in kept.kept.rows.values() for r in rows)


def test_segment_rounds_of_one_step_continue_from_kept_rows(tiny_model_dir):
    """Two rounds of one step with the torch engine: the second continues every unfinished sample from its kept
    K/V (no response token prefilled again); the step's end gives every block back."""
    model = shaken_model(tiny_model_dir)
    eng = TorchEngine(model, NEVER, block_size=4)
    from ulorl.data.records import PromptRecord

    records = [PromptRecord(prompt_id=i, prompt_tokens=p, prompt_text="", ground_truth="", data_source="t")
               for i, p in enumerate(_prefixes(4))]
    rollout = SegmentRollout(eng, PromptSource(records, seed=0), SamplingParams(temperature=1.0), group_size=2,
                             decode_batch=4, max_response_len=24, num_segments=3)
    pool = UnfinishedPool()
    r1 = rollout.round(pool, version=0, step=0)
    assert r1.finished == [] and len(pool) == 4 and r1.reprefill_tokens == 0
    r2 = rollout.round(pool, version=0, step=0)
    assert r2.continued == 4 and r2.new_prompts == 0 and eng.stats.extra["resumed_rows"] == 4
    assert r2.reprefill_tokens == 0 == r2.prefill_tokens  # nothing prefilled again
    rollout.end_step()
    assert eng.blocks.num_used == 0 and len(eng.kept) == 0
    # an engine without kept rows is called as before and counts every continued token as prefilled again
    scripted = SegmentRollout(ScriptedEngine([100], eos_id=4), PromptSource(records, seed=0),
                              SamplingParams(temperature=1.0), group_size=2, decode_batch=4, max_response_len=24,
                              num_segments=3)
    pool = UnfinishedPool()
    scripted.round(pool, version=0, step=0)
    assert scripted.round(pool, version=0, step=0).reprefill_tokens == 4 * 8
    scripted.end_step()


def test_compaction_moves_kept_rows_with_their_tables(tiny_model_dir, monkeypatch):
    """Rows kept early in a call (admitted first, at the cap first) hold blocks while later rows run and rows
    ending at EOS leave holes; compaction moves kept blocks too, and the next call still continues them right."""
    from ulorl.rollout.engines.torch import scheduler
    from ulorl.rollout.engines.torch.block_manager import BlockManager

    moved: list[int] = []
    compact = BlockManager.compact

    def recording(self):
        moves = compact(self)
        moved.extend(moves.values())
        return moves

    monkeypatch.setattr(BlockManager, "compact", recording)
    monkeypatch.setattr(scheduler, "COMPACT_MIN_HOLES", 2)
    model = shaken_model(tiny_model_dir)
    eos = list(range(400, 440))
    prefixes = _prefixes(16)
    params = SamplingParams(temperature=1.0)
    plain = TorchEngine(model, eos, max_batch=6, block_size=2)
    kept = TorchEngine(model, eos, max_batch=6, block_size=2)
    a1, _, a2 = _two_calls(plain, prefixes, params, keep=False, n1=16, n2=8)
    moved.clear()
    first = kept.generate(prefixes, 16, params, seed=3, keep=True)
    held = {b for rows in kept.kept.rows.values() for r in rows for b in r.blocks}
    assert moved and held & set(moved)  # blocks of kept rows were moved
    assert [o.tokens for o in first] == [o.tokens for o in a1]
    second = kept.generate([p + o.tokens for p, o in zip(prefixes, first)], 8, params, seed=4)
    assert sum(o.resumed for o in second) > 0
    assert [o.tokens for o in second] == [o.tokens for o in a2]


def test_a_call_that_continues_some_kept_rows_releases_the_others_before_compacting(tiny_model_dir):
    """Rows 0 and 1 are resumed and copied into runs at the top, leaving holes at the bottom; the kept rows nobody
    continues lie above those holes. They are released before the holes are compacted: compaction must not move
    blocks that a released row's table still names."""
    model = shaken_model(tiny_model_dir)
    eng = TorchEngine(model, NEVER, block_size=4)
    prefixes = [[5 + (i * 7 + j) % 40 for j in range(30)] for i in range(10)]  # 7 full blocks: prefilled at the bottom
    first = eng.generate(prefixes, 10, SamplingParams(greedy=True), keep=True)
    assert len(eng.kept) == 10
    outs = eng.generate([p + o.tokens for p, o in zip(prefixes[:2], first[:2])], 4, SamplingParams(greedy=True))
    assert [o.resumed for o in outs] == [True, True]
    assert eng.blocks.num_used == 0 and eng.blocks.refs == [0] * eng.blocks.num_blocks
