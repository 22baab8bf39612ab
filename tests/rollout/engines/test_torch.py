"""The torch engine (default): the engine contract, continuous batching, the KV budget.

Paged-cache behaviour (preemption, shared prompts, the block manager, the split-K attention) is in
`test_paged_cache.py`.

Reference values come from other code paths: the learner's own log-prob computation
(`LocalLearner.forward` on the full sequence), the HF engine (greedy tokens) and plain
`torch.argmax` / `topk` over the model's logits.
"""

from __future__ import annotations

import pytest
import torch

from ulorl.config import AlgoConfig, TrainConfig
from ulorl.learners.local import LocalLearner, make_micro_batches
from ulorl.models import load_model, load_tokenizer
from ulorl.rollout.engines import HFEngine, SamplingParams, TorchEngine
from ulorl.rollout.engines.torch.kv_cache import KVCacheBudgetError
from ulorl.rollout.engines.torch.runner import UnsupportedModelError
from ulorl.trajectory import Trajectory

T = 0.7


def shaken_model(model_dir):
    """The built-in model with its weights shaken (seeded): the fresh model's greedy output repeats one token,
    this one's depends on the whole context, so a wrong K/V anywhere changes the tokens."""
    model = load_model(str(model_dir))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    return model


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The tokenizer and `shaken_model`."""
    return load_tokenizer(str(tiny_model_dir)), shaken_model(tiny_model_dir)


def _prefixes(n: int) -> list[list[int]]:
    """Prefixes of different lengths (3..25 tokens) from ordinary vocabulary ids."""
    return [[5 + (i * 7 + j) % 40 for j in range(3 + (i * 5) % 23)] for i in range(n)]


def _learner_logprobs(model, tok, prefix: list[int], segments: list[tuple[list[int], list[float]]]):
    """The learner's log-probs of every response token, and the engine's, as flat tensors."""
    traj = Trajectory(sample_id="s/0", group_id="s", prompt_id="p", prompt_tokens=prefix, ground_truth="0",
                      data_source="x")
    for v, (toks, lps) in enumerate(segments):
        traj.append_segment(toks, lps, v)
    learner = LocalLearner(model, TrainConfig(), AlgoConfig(), T, tok.pad_token_id)
    (mb,) = make_micro_batches([traj], torch.zeros(1), len(segments), tok.pad_token_id, 10_000)
    with torch.no_grad():
        lp, _ = learner.forward(mb)
    ours = lp[mb.response_mask]
    return ours, torch.tensor([x for _, lps in segments for x in lps])


def two_segments_match_the_learner(eng, model, tok, prefixes: list[list[int]], params: SamplingParams,
                                   keep: bool = False) -> int:
    """Generate 12 tokens per prefix, continue every unfinished row by 12 more in a second call, and assert that
    the engine's log-probs equal the learner's within 1e-5 at every response position; returns how many.
    `keep`: the first call keeps the unfinished rows' K/V for the second (`kept_rows.py`)."""
    first = eng.generate(prefixes, 12, params, seed=3, **({"keep": True} if keep else {}))
    cont = [p + o.tokens for p, o in zip(prefixes, first) if not o.eos]
    second = iter(eng.generate(cont, 12, params, seed=4))
    checked = 0
    for p, o in zip(prefixes, first):
        segs = [(o.tokens, o.logprobs)]
        if not o.eos:
            o2 = next(second)
            segs.append((o2.tokens, o2.logprobs))
        learner, engine = _learner_logprobs(model, tok, p, segs)
        assert learner.shape == engine.shape
        assert torch.allclose(learner, engine, atol=1e-5, rtol=0), (learner - engine).abs().max()
        checked += learner.numel()
    return checked


def test_logprobs_equal_the_learner_at_every_position_including_continued_segments(fresh):
    # (on the shaken model below, float32 rounding is amplified: the HF engine and this one both differ from the
    # learner by ~2e-5 there, identically)
    tok, model = fresh
    eng = TorchEngine(model, [tok.eos_token_id], max_batch=3, block_size=4)  # 7 prefixes through 3 rows: blocks reused
    params = SamplingParams(temperature=T, top_k=20, top_p=0.9)  # behaviour log-probs are taken before filtering
    checked = two_segments_match_the_learner(eng, model, tok, _prefixes(7), params)
    assert checked >= 7 * 13  # every row decoded its first segment and part of a second one


def test_greedy_matches_the_hf_engine_and_does_not_depend_on_the_number_of_rows(tiny):
    """Block reuse and rows admitted as others finish must not change any output."""
    tok, model = tiny
    eos = list(range(400, 450))  # rows end at different times, so rows and blocks free up mid-run
    prefixes = _prefixes(9)
    greedy = SamplingParams(greedy=True)
    ref = HFEngine(model, tok.pad_token_id, eos).generate(prefixes, 20, greedy)
    assert len({len(o.tokens) for o in ref}) > 2  # the test needs rows that finish at different steps
    for rows in (1, 2, 4, 16):
        outs = TorchEngine(model, eos, max_batch=rows, block_size=4).generate(prefixes, 20, greedy)
        assert [o.tokens for o in outs] == [o.tokens for o in ref], rows
        assert [o.eos for o in outs] == [o.eos for o in ref]


def test_greedy_is_the_argmax_of_the_models_logits(tiny):
    tok, model = tiny
    prefix = _prefixes(2)[1]
    (out,) = TorchEngine(model, [10_000]).generate([prefix], 6, SamplingParams(greedy=True))
    seq = list(prefix)
    for t in out.tokens:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        assert t == int(logits.argmax())
        seq.append(t)


def test_top_k_samples_only_among_the_k_best(tiny):
    tok, model = tiny
    prefixes = _prefixes(6)
    outs = TorchEngine(model, [10_000]).generate(prefixes, 8, SamplingParams(temperature=1.0, top_k=3), seed=0)
    for p, o in zip(prefixes, outs):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p + o.tokens])).logits[0, len(p) - 1: -1]
        top3 = logits.topk(3, dim=-1).indices
        assert all(t in top3[j].tolist() for j, t in enumerate(o.tokens))


def test_several_eos_ids_end_rows_at_the_first_one(tiny):
    tok, model = tiny
    eos = list(range(400, 450))
    outs = TorchEngine(model, eos, max_batch=4).generate(_prefixes(10), 30, SamplingParams(temperature=1.0), seed=1)
    assert any(o.eos for o in outs)
    for o in outs:
        hits = [j for j, t in enumerate(o.tokens) if t in eos]
        if o.eos:
            assert hits == [len(o.tokens) - 1]
        else:
            assert not hits and len(o.tokens) == 30


def test_seeded_runs_reproduce_and_seeds_differ(tiny):
    tok, model = tiny
    eng = TorchEngine(model, [tok.eos_token_id], max_batch=4)
    p, params = _prefixes(6), SamplingParams(temperature=1.0)
    a, b, c = (eng.generate(p, 10, params, seed=s) for s in (5, 5, 6))
    assert [o.tokens for o in a] == [o.tokens for o in b]
    assert [o.logprobs for o in a] == [o.logprobs for o in b]
    assert [o.tokens for o in a] != [o.tokens for o in c]


def test_prefill_is_packed_and_counted(tiny):
    tok, model = tiny
    prefixes = _prefixes(8)
    real = sum(map(len, prefixes))
    eng = TorchEngine(model, [10_000], max_batch=3)
    eng.generate(prefixes, 4, SamplingParams(), seed=0)
    assert eng.stats.prefill_tokens == eng.stats.prefill_padded_tokens == real
    assert eng.stats.useful_tokens == 8 * 4
    assert eng.stats.extra["peak_blocks"] <= 3  # 3 rows at most (max_batch), each of <= 29 tokens: one block of 32
    hf = HFEngine(model, tok.pad_token_id, [10_000], max_batch=3)
    hf.generate(prefixes, 4, SamplingParams(), seed=0)
    # hf pads each chunk of 3 to its longest prefix
    padded = sum(len(prefixes[i:i + 3]) * max(map(len, prefixes[i:i + 3])) for i in range(0, 8, 3))
    assert hf.stats.prefill_tokens == real and hf.stats.prefill_padded_tokens == padded > real


def test_kv_budget_is_checked_before_allocating(tiny):
    tok, model = tiny
    # tiny model: 3 layers x 2 KV heads x 32 dims x (K, V) x 4 bytes = 1536 bytes per token; blocks of 32 tokens:
    # a budget of 1536 x 32 x 31 bytes holds 31 blocks = 992 tokens
    eng = TorchEngine(model, [tok.eos_token_id], max_batch=64, kv_cache_gib=1536 * 32 * 31 / 1024**3, block_size=32)
    with pytest.raises(KVCacheBudgetError) as e:
        eng.reserve(64, 993)  # one sequence of 993 tokens needs 32 blocks
    assert str(e.value).startswith("one sequence of 993 tokens (prefix + new tokens) needs 1.5 MiB of KV cache, over "
                                   "the budget rollout.kv_cache_gib=0.00141907 (1.45 MiB); raise rollout.kv_cache_gib")
    assert "lower rollout.max_response_len" in str(e.value)
    assert eng.cache is None  # nothing was allocated
    with pytest.raises(KVCacheBudgetError):
        eng.generate([[5] * 10], 983, SamplingParams())
    eng.reserve(64, 992)  # exactly the budget fits one sequence; 64 rows are not reserved up front
    assert eng.cache.num_blocks == 31 and eng.cache.nbytes == 1536 * 32 * 31


def test_weights_are_shared_or_synced(tiny, tiny_model_dir):
    tok, model = tiny
    other = model  # the shaken weights
    greedy, prefixes = SamplingParams(greedy=True), _prefixes(4)
    want = [o.tokens for o in TorchEngine(other, [10_000]).generate(prefixes, 8, greedy)]
    own = load_model(str(tiny_model_dir))
    eng = TorchEngine(own, [10_000])
    before = [o.tokens for o in eng.generate(prefixes, 8, greedy)]
    eng.sync_weights(own.state_dict())  # its own tensors: nothing to copy
    assert [o.tokens for o in eng.generate(prefixes, 8, greedy)] == before
    eng.sync_weights(other.state_dict())
    assert [o.tokens for o in eng.generate(prefixes, 8, greedy)] == want != before


def test_an_unsupported_architecture_gets_a_clear_error():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=32))
    with pytest.raises(UnsupportedModelError, match="rollout.engine=hf"):
        TorchEngine(model, [1])


@pytest.mark.parametrize("family", ["qwen3", "qwen2", "llama"])
def test_the_kv_shape_read_off_a_config_is_the_loaded_models(family):
    """`kv_shape_of(config)` (what a run checks before its SFT) against `ModelRunner.kv_shape()` read off the model's
    modules; Qwen2 keeps no head_dim in its config (hidden 32 / 4 heads = 8), Qwen3 and Llama set it (here 4)."""
    import transformers

    from ulorl.rollout.engines.torch.kv_cache import KVShape, kv_shape_of
    from ulorl.rollout.engines.torch.runner import ModelRunner

    names = {"qwen3": "Qwen3", "qwen2": "Qwen2", "llama": "Llama"}[family]
    shape = dict(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=16, vocab_size=40)
    if family != "qwen2":
        shape["head_dim"] = 4
    config = getattr(transformers, f"{names}Config")(**shape)
    model = getattr(transformers, f"{names}ForCausalLM")(config).to(torch.bfloat16)
    want = KVShape(3, 2, 8 if family == "qwen2" else 4, torch.bfloat16)
    assert kv_shape_of(config, torch.bfloat16) == ModelRunner(model).kv_shape() == want


def test_the_engine_says_what_it_runs_at_a_runs_start(fresh):
    """`reserve` logs one line (the run's console prints it): device, dtype, decode / prefill / sampling paths, pool."""
    import logging

    from ulorl.rollout.engines.torch.prefill_attention import VarlenPrefill
    from ulorl.rollout.engines.torch.triton_sampler import FusedSampler
    from ulorl.run.console import ROLLOUT_LOGGER

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    tok, model = fresh
    eng = TorchEngine(model, [tok.eos_token_id], kv_cache_gib=0.01, block_size=8)
    assert eng.describe().endswith("KV pool not allocated yet")
    # a handler on the logger itself, not caplog's: a run earlier in this process (`show_library_notes`) stops the
    # logger propagating to the root, and whether caplog then hears it (or hears it twice) depends on pytest's version
    logger, lines = logging.getLogger(ROLLOUT_LOGGER), Lines()
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        eng.reserve(4, 100)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    blocks = eng.cache.num_blocks
    want = (f"torch engine: cpu, float32 weights and KV; decode split_k; prefill sdpa; sampling sample_tokens; KV pool "
            f"0.01 GiB in {blocks:,} blocks of 8 tokens, memory committed as blocks are written")
    assert lines.lines == [want]
    eng.runner.prefill_attention, eng.fused_sampler = VarlenPrefill(lambda *a, **k: None), FusedSampler()
    assert "prefill varlen; sampling fused Triton kernel" in eng.describe()
    eng.fused_sampler.failed = "a compile error"
    assert "sampling sample_tokens" in eng.describe()
    table = TorchEngine(model, [tok.eos_token_id], kv_cache_gib=0.01, block_size=8, decode_attention="gather")
    table.reserve(4, 100)
    assert "decode gather;" in table.describe()  # the table decoder's backend (after any fallback)


def test_the_norm_is_one_fused_op_where_that_keeps_the_arithmetic():
    """`runner._norm`: float32 through `F.rms_norm` (the module's own arithmetic: the same numbers); bfloat16 on CPU
    through the module (CPU runs keep their floats); on CUDA in bfloat16 `F.rms_norm` too, whose float32-inside
    arithmetic (here torch's CPU composite, the fused CUDA kernel's semantics) rounds once: within one bfloat16 step
    of the module's output and within half a step of the float64 result, where the module's two roundings are not."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    from ulorl.rollout.engines.torch.runner import _norm

    torch.manual_seed(0)
    m = Qwen2RMSNorm(96, eps=1e-6)
    m.weight.data = torch.randn(96) * 0.5 + 1
    x = torch.randn(64, 96) * 3
    assert torch.allclose(_norm(m, x), m(x), rtol=1e-6, atol=1e-6)
    m16, x16 = m.to(torch.bfloat16), x.to(torch.bfloat16)
    assert torch.equal(_norm(m16, x16), m16(x16))

    fused = torch.nn.functional.rms_norm(x16, (96,), m16.weight, 1e-6).double()
    exact = x16.double() * torch.rsqrt(x16.double().pow(2).mean(-1, keepdim=True) + 1e-6) * m16.weight.double()
    step = 2.0 ** (torch.floor(torch.log2(exact.abs().clamp_min(1e-30))) - 7)  # a bfloat16 step at each value
    assert ((fused - m16(x16).double()).abs() / step).max() <= 1.0
    assert ((fused - exact).abs() / step).max() <= 0.5 + 1e-6
    assert ((m16(x16).double() - exact).abs() / step).max() > 0.5  # the module's second rounding shows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rotary_embedding_is_transformers_bit_for_bit(dtype):
    """`runner._rope` rolls x and multiplies by sin with its first half negated, where transformers multiplies
    rotate_half(x) = (-x_2, x_1) by sin: the sign moves, the numbers do not (compared for exact equality)."""
    from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

    from ulorl.rollout.engines.torch.runner import _rope, _signed_sin

    torch.manual_seed(0)
    q, k = torch.randn(5, 14, 64).to(dtype), torch.randn(5, 2, 64).to(dtype)
    cos, sin = torch.randn(5, 64).to(dtype), torch.randn(5, 64).to(dtype)  # any values: no symmetry assumed
    # transformers' layout: (batch, heads, positions, D), cos and sin (batch, positions, D)
    q_ref, k_ref = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos[None], sin[None])
    assert torch.equal(_rope(q, cos, _signed_sin(sin)), q_ref[0].transpose(0, 1))
    assert torch.equal(_rope(k, cos, _signed_sin(sin)), k_ref[0].transpose(0, 1))
