"""The paged KV cache: block manager by hand, the split-K decode attention against per-row SDPA, preemption
and shared prompts against unconstrained runs, per-row sampling streams."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ulorl.rollout.engines import SamplingParams, TorchEngine
from ulorl.rollout.engines.torch.attention import build_decode_plan, paged_decode_attention
from ulorl.rollout.engines.torch.block_manager import FREE, BlockManager
from ulorl.rollout.engines.torch.sampler import row_uniforms, sample_tokens

from tests.rollout.engines.test_torch import T, _learner_logprobs, _prefixes, shaken_model

BYTES_PER_TOKEN = 1536  # the tiny model: 3 layers x 2 KV heads x 32 dims x (K, V) x 4 bytes


def _gib(blocks: int, block_size: int) -> float:
    return blocks * block_size * BYTES_PER_TOKEN / 1024**3


@pytest.fixture(scope="module")
def shaken(tiny_model_dir):
    return shaken_model(tiny_model_dir)


def test_block_manager_by_hand():
    bm = BlockManager(6, 4)
    a = bm.allocate(3, uid=7)
    b = bm.allocate(2, uid=8)
    assert (a, b) == ([0, 1, 2], [3, 4]) and bm.num_free == 1 and bm.high_water == 5
    assert bm.owner.tolist() == [7, 7, 7, 8, 8, FREE]
    bm.share(a[:2])  # a second holder of blocks 0 and 1: shared, no single owner
    assert bm.owner.tolist()[:3] == [FREE, FREE, 7] and bm.refs[:3] == [2, 2, 1]
    bm.release(a, uid=7)  # block 2 is free again; 0 and 1 still have one holder
    assert bm.num_free == 2 and bm.refs[:3] == [1, 1, 0]
    assert bm.allocate(1, uid=9) == [2]  # the lowest free block first
    bm.release(b, uid=8)
    assert bm.high_water == 3  # blocks 3 and 4 were the top ones
    with pytest.raises(MemoryError):
        bm.allocate(4, uid=10)  # 3 free
    with pytest.raises(RuntimeError, match="block 4 released by sequence 8 but held by none"):
        bm.release([4], uid=8)  # released twice: a table naming a block it no longer holds


def test_compaction_moves_the_top_blocks_into_the_holes():
    bm = BlockManager(8, 4)
    a, b, c = bm.allocate(2, uid=1), bm.allocate(2, uid=2), bm.allocate(3, uid=3)  # [0, 1], [2, 3], [4, 5, 6]
    bm.share(c[:1])  # block 4 held twice
    bm.release(a, uid=1)
    bm.release(b[1:], uid=2)  # in use: 2, 4, 5, 6 below a high-water mark of 7
    moves = bm.compact()
    assert moves == {4: 0, 5: 1, 6: 3} and bm.high_water == 4 == bm.num_used
    assert bm.refs[:4] == [2, 1, 1, 1] and bm.owner.tolist()[:4] == [FREE, 3, 2, 3]
    assert bm.allocate(1, uid=4) == [4]  # the lowest free block is the first above the used ones


@pytest.mark.parametrize("inner", ["cpu kernel", "explicit (the path off CPU)"])
def test_split_k_decode_attention_equals_sdpa_per_row(inner, monkeypatch):
    """Loop version (SDPA over each row's gathered context) against the split-K version, with shared blocks,
    free blocks in the pool, partial last blocks and a run of consecutive blocks read as one view."""
    import ulorl.rollout.engines.torch.attention as attention

    if inner.startswith("explicit"):
        monkeypatch.setattr(attention, "attend_with_lse", attention.attend_with_lse_explicit)
    torch.manual_seed(0)
    hk, g, d, bs, nb = 2, 2, 8, 4, 12
    kp, vp = torch.randn(hk, nb, bs, d), torch.randn(hk, nb, bs, d)
    # row 0: shared block 5, own blocks 0, 3 (context 4 + 4 + 2 = 10); row 1: shared 5, own 2 (4 + 1 = 5);
    # row 2: own 7, 1, 8 (4 + 4 + 3 = 11); row 3: own 9, 10 as a run, then 4 (4 + 4 + 1 = 9); block 6 is free
    tables = [[5, 0, 3], [5, 2], [7, 1, 8], [9, 10, 4]]
    ctx = [10, 5, 11, 9]
    shared = [1, 1, 0, 0]
    owner = torch.full((nb,), 4)
    for r, t in enumerate(tables):
        owner[t[shared[r]:]] = r
    last_block = torch.tensor([t[-1] for t in tables])
    last_fill = torch.tensor([c - (len(t) - 1) * bs for c, t in zip(ctx, tables)])
    srows = torch.tensor([r for r in range(4) for _ in range(shared[r])])
    sblocks = torch.tensor([t[i] for r, t in enumerate(tables) for i in range(shared[r])])
    q = torch.randn(4, hk, g, d)
    tok_k, tok_v = kp.view(hk, nb * bs, d), vp.view(hk, nb * bs, d)
    plain = build_decode_plan(4, owner[:11], last_block, last_fill, bs, torch.float32, srows, sblocks)
    with_run = build_decode_plan(4, owner[:11], last_block, last_fill, bs, torch.float32, srows, sblocks,
                                 runs=[(3, 9, 2)], run_blocks=torch.tensor([9, 10]))
    for plan in (plain, with_run):
        got = paged_decode_attention(q, kp, vp, plan, 0.3, tok_k, tok_v)
        for r, t in enumerate(tables):
            k = kp[:, t].reshape(hk, -1, d)[:, : ctx[r]]
            v = vp[:, t].reshape(hk, -1, d)[:, : ctx[r]]
            want = F.scaled_dot_product_attention(q[r], k, v, scale=0.3)  # (hk, g, d)
            assert torch.allclose(got[r], want, atol=1e-6), r


def test_row_streams_are_deterministic_and_uniform():
    rows, steps = torch.arange(4000) % 40, torch.arange(4000) // 40
    u = row_uniforms(11, rows, steps)
    assert torch.equal(u, row_uniforms(11, rows, steps)) and not torch.equal(u, row_uniforms(12, rows, steps))
    assert 0 <= u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.02 and len(set(u.tolist())) == 4000
    # the same (row, step) pair gives the same number whatever the other rows are
    assert u[123] == row_uniforms(11, rows[123:124], steps[123:124])[0]


def test_inverse_cdf_sampling_by_hand():
    # probabilities softmax([0, log 3]) = (0.25, 0.75): u < 0.25 picks token 0, otherwise token 1
    logits = torch.tensor([[0.0, torch.log(torch.tensor(3.0)).item()]] * 3)
    tok, lp = sample_tokens(logits, SamplingParams(temperature=1.0), torch.tensor([0.1, 0.3, 0.999], dtype=torch.float64))
    assert tok.tolist() == [0, 1, 1]
    assert torch.allclose(lp, torch.log(torch.tensor([0.25, 0.75, 0.75])))
    # a filtered-out token is never chosen, even by u close to 1 (top-k 1 keeps the argmax, token 1)
    tok, _ = sample_tokens(logits[:, [1, 0]], SamplingParams(temperature=1.0, top_k=1),
                           torch.tensor([0.0, 0.5, 1 - 1e-16], dtype=torch.float64))
    assert tok.tolist() == [0, 0, 0]


def test_preempted_rows_give_the_unconstrained_output(shaken):
    """A pool too small for all rows at once: the newest rows are preempted and resumed, and the output is the
    output of a pool that never runs out."""
    eos = [10_000]  # never sampled: every row grows to 40 new tokens
    prefixes = _prefixes(8)
    params = SamplingParams(temperature=1.0)
    big = TorchEngine(shaken, eos, block_size=4)
    small = TorchEngine(shaken, eos, block_size=4, kv_cache_gib=_gib(24, 4))  # 96 tokens; one row: <= 25 + 40
    a = big.generate(prefixes, 40, params, seed=5)
    b = small.generate(prefixes, 40, params, seed=5)
    assert small.stats.extra.get("preemptions", 0) > 0 and "preemptions" not in big.stats.extra
    assert [o.tokens for o in a] == [o.tokens for o in b]
    assert [o.eos for o in a] == [o.eos for o in b]
    # a resumed row's context is recomputed by a prefill instead of step-by-step decodes: float32 rounding,
    # amplified by the shaken weights (the fresh model's 1e-5 contract against the learner: the test below)
    for x, y in zip(a, b):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)
    assert small.blocks.num_free == small.blocks.num_blocks  # every block is back


def test_preempted_and_continued_rows_match_the_learner(fresh):
    """The float32 contract (1e-5 against the learner) holds for rows that were preempted mid-segment and then
    continued in a second segment."""
    tok, model = fresh
    eng = TorchEngine(model, [tok.eos_token_id], block_size=4, kv_cache_gib=_gib(20, 4))
    params = SamplingParams(temperature=T, top_k=20, top_p=0.9)
    prefixes = _prefixes(6)
    first = eng.generate(prefixes, 14, params, seed=3)
    assert eng.stats.extra.get("preemptions", 0) > 0
    cont = [p + o.tokens for p, o in zip(prefixes, first) if not o.eos]
    second = iter(eng.generate(cont, 10, params, seed=4))
    for p, o in zip(prefixes, first):
        segs = [(o.tokens, o.logprobs)] + ([] if o.eos else [(lambda o2: (o2.tokens, o2.logprobs))(next(second))])
        learner, engine = _learner_logprobs(model, tok, p, segs)
        assert torch.allclose(learner, engine, atol=1e-5, rtol=0), (learner - engine).abs().max()


def test_a_groups_prompt_is_prefilled_once_and_shared(shaken):
    eos = list(range(400, 450))
    prompt = [5 + (j * 7) % 40 for j in range(11)]  # 11 tokens, blocks of 4: 2 full blocks shared, 3 in the last
    prefixes = [prompt] * 4 + [_prefixes(3)[2]]
    params = SamplingParams(temperature=1.0)
    grouped = TorchEngine(shaken, eos, block_size=4)
    alone = TorchEngine(shaken, eos, block_size=4, max_batch=1)  # one row at a time: nothing to share
    a = grouped.generate(prefixes, 12, params, seed=9)
    b = alone.generate(prefixes, 12, params, seed=9)
    assert grouped.stats.prefill_tokens == 11 + len(prefixes[-1])
    assert alone.stats.prefill_tokens == 4 * 11 + len(prefixes[-1])
    assert [o.tokens for o in a] == [o.tokens for o in b]
    assert len({tuple(o.tokens) for o in a[:4]}) > 1  # the samples differ: each has its own stream
    for x, y in zip(a, b):  # the shared prompt's K/V come from one prefill instead of four: float32 rounding
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)


def test_bfloat16_engine_keeps_a_synced_copy_and_float32_logprobs(fresh):
    """rollout.dtype=bfloat16: weights and KV in bf16 (a copy of the float32 model, refreshed by sync_weights),
    behaviour log-probs computed in float32 from the bf16 logits; the gap to the float32 learner is what
    `pois/abs_log_ratio_age0` reports (small, not zero)."""
    tok, model = fresh
    eng = TorchEngine(model, [tok.eos_token_id], dtype=torch.bfloat16, block_size=4)
    assert eng.model is not model and eng.dtype == torch.bfloat16 and eng.cache is None
    prefixes = _prefixes(3)
    outs = eng.generate(prefixes, 10, SamplingParams(temperature=T), seed=1)
    assert eng.cache.k[0].dtype == torch.bfloat16
    assert all(isinstance(x, float) for o in outs for x in o.logprobs)
    gaps = []
    for p, o in zip(prefixes, outs):
        learner, engine = _learner_logprobs(model, tok, p, [(o.tokens, o.logprobs)])
        gaps.append((learner - engine).abs().max())
    assert 0 < max(gaps) < 0.1, gaps
    with torch.no_grad():  # the learner's weights move; the engine's copy follows only on sync
        shifted = {k: v + 0.01 for k, v in model.state_dict().items()}
    eng.sync_weights(shifted)
    w = eng.model.model.embed_tokens.weight
    assert w.dtype == torch.bfloat16
    assert torch.allclose(w.float(), shifted["model.embed_tokens.weight"], atol=1e-2)
    assert not torch.equal(model.model.embed_tokens.weight, shifted["model.embed_tokens.weight"])  # a copy


def test_runs_of_consecutive_blocks_give_the_same_output(shaken, monkeypatch):
    """Rows prefilled alone read their consecutive blocks as one view (CPU): the same tokens as the batched call
    alone, also after compaction has moved blocks."""
    import ulorl.rollout.engines.torch.engine as engine_mod

    eos = list(range(400, 430))
    prefixes = [[5 + (i * 11 + j) % 60 for j in range(30 + 9 * i)] for i in range(6)]  # 7 to 21 full blocks of 4
    outs, stats = {}, {}
    for min_blocks in (0, 2):
        monkeypatch.setitem(engine_mod.RUN_MIN_BLOCKS, "cpu", min_blocks)
        eng = TorchEngine(shaken, eos, block_size=4)
        outs[min_blocks] = eng.generate(prefixes, 24, SamplingParams(greedy=True))
        stats[min_blocks] = eng.stats.extra
    assert [o.tokens for o in outs[2]] == [o.tokens for o in outs[0]]
    assert len({len(o.tokens) for o in outs[0]}) > 1  # rows finish at different steps
    for x, y in zip(outs[0], outs[2]):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_device_generic_attention_equals_the_cpu_kernel(dtype):
    """The decode attention's inner call off CPU (explicit matmul-softmax-matmul) against the CPU flash kernel, with
    a mask: the same outputs and log-sum-exps."""
    from ulorl.rollout.engines.torch.attention import attend_with_lse, attend_with_lse_explicit

    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 5, 3, 16).to(dtype), torch.randn(2, 5, 8, 16).to(dtype), torch.randn(2, 5, 8, 16).to(dtype))
    mask = torch.zeros(1, 5, 1, 8, dtype=dtype)
    mask[..., 6:] = float("-inf")
    o1, l1 = attend_with_lse(q, k, v, mask, 0.25)
    o2, l2 = attend_with_lse_explicit(q, k, v, mask, 0.25)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(o1.float(), o2.float(), atol=tol) and torch.allclose(l1, l2, atol=tol)


@pytest.mark.parametrize("q_shape, k_len", [((2, 0, 1, 8), 32), ((2, 3, 1, 8), 0), ((0, 3, 1, 8), 32)])
def test_attention_over_nothing_is_an_empty_partial_not_a_crash(q_shape, k_len):
    # the CPU flash kernel dies of SIGFPE on zero heads or zero keys (a decode step whose rows all read runs,
    # with no full block below the high-water mark: the long config's first RL round)
    from ulorl.rollout.engines.torch.attention import attend_with_lse

    q = torch.randn(q_shape)
    k = torch.randn(q_shape[0], q_shape[1], k_len, 8)
    o, lse = attend_with_lse(q, k, k, None, 0.35)
    assert o.shape == q_shape and not o.any()
    assert lse.shape == q_shape[:-1] and bool((lse == float("-inf")).all())
