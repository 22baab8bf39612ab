"""Fixed-shape decode over block tables (`table_attention.py`, `graph_decoder.py`): the CUDA-graph path, run on CPU.

References: a per-row loop of softmax attention over each row's own context (the attention), and the split-K
engine (`attention.py`, the CPU default) for whole generations: same tokens, log-probs within float32 rounding.
`emulate` mode keeps each captured step's output tensor and recomputes into it on replay, as a CUDA graph does,
so the static buffers and padding rows are exercised here; the CUDA capture itself runs in
`benchmarks/gpu_paged_check.py`.

The triton backend's kernels (`triton_decode.py`) run here under Triton's interpreter (`tests/conftest.py` sets
TRITON_INTERPRET=1 before anything imports triton); their bfloat16 products run only on a GPU (the interpreter's
are wrong; see that module).
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest
import torch

from ulorl.config import ConfigError
from ulorl.config.rollout import TorchEngineConfig
from ulorl.rollout.engines import SamplingParams, TorchEngine
from ulorl.rollout.engines.torch.graph_decoder import GraphMode, batch_buckets, bucket, width_bucket
from ulorl.rollout.engines.torch.table_attention import table_backend

from tests.rollout.engines.benchmark_modules import benchmark_module
from tests.rollout.engines.test_paged_cache import _gib, shaken  # noqa: F401 (a fixture)
from tests.rollout.engines.test_torch import _prefixes, two_segments_match_the_learner

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
TRITON = pytest.param("triton", marks=needs_triton)


def _loop_attention(q, k_tok, v_tok, tables, ctx, bs, scale):
    """Row by row: gather the row's first ctx tokens through its table, softmax(q k^T) v per head."""
    out = torch.empty_like(q)
    for b, (t, n) in enumerate(zip(tables, ctx)):
        slots = torch.tensor([blk * bs + o for blk in t for o in range(bs)])[:n]
        k, v = k_tok[:, slots], v_tok[:, slots]  # (H_kv, n, D)
        w = torch.softmax(torch.einsum("hgd,hnd->hgn", q[b], k) * scale, dim=-1)
        out[b] = torch.einsum("hgn,hnd->hgd", w, v)
    return out


@pytest.mark.parametrize("name", ["gather", "flex", TRITON])
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # eager flex is the point here
def test_table_attention_equals_a_per_row_loop(name):
    torch.manual_seed(0)
    h_kv, g, d, bs, nb = 2, 3, 8, 4, 12  # G = 3: not a power of two (flex decoding's own GQA needs one)
    k_tok, v_tok = torch.randn(h_kv, (nb + 1) * bs, d), torch.randn(h_kv, (nb + 1) * bs, d)
    scratch = nb
    # row 0 and row 1 share block 3 (a shared prompt block); row 2 ends exactly at a block boundary;
    # row 3 is a padding row (the scratch block, one position)
    tables = [[3, 7, 1], [3, 5], [9, 2, 11, 4], [scratch]]
    ctx = [10, 6, 16, 1]
    width = 4
    table = torch.full((4, width), scratch, dtype=torch.long)
    for i, t in enumerate(tables):
        table[i, : len(t)] = torch.tensor(t)
    q = torch.randn(4, h_kv, g, d)
    backend = table_backend(name)
    step = backend.prepare(table, torch.tensor(ctx), bs, nb + 1, g)
    got = backend.attend(q, k_tok, v_tok, step, 0.3)
    want = _loop_attention(q, k_tok, v_tok, tables, ctx, bs, 0.3)
    assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()


def test_buckets_by_hand():
    assert batch_buckets(256) == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    assert batch_buckets(100) == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 100]
    assert batch_buckets(5) == [1, 2, 4, 5]  # max_batch itself is always a bucket
    assert batch_buckets(1) == [1]
    assert [bucket(n, [1, 2, 4, 5]) for n in (1, 2, 3, 5)] == [1, 2, 4, 5]
    with pytest.raises(ValueError, match="exceed"):
        bucket(6, [1, 2, 4, 5])
    assert [width_bucket(b) for b in (1, 2, 3, 4, 5, 17, 64)] == [1, 2, 4, 4, 8, 32, 64]


def _engine(model, eos, mode: str, graphs: GraphMode, **kw) -> TorchEngine:
    if mode == "flex":  # off CUDA the engine says that eager flex is a slow reference, not a path to run
        with pytest.warns(UserWarning, match="flex off CUDA runs torch's eager flex_attention"):
            eng = TorchEngine(model, eos, decode_attention=mode, **kw)
    else:
        eng = TorchEngine(model, eos, decode_attention=mode, **kw)
    eng.graph_mode = graphs  # CUDA graphs are CUDA-only; emulate runs the same bookkeeping on CPU
    return eng


@pytest.mark.parametrize("mode,graphs", [("gather", GraphMode.OFF), ("gather", GraphMode.EMULATE),
                                         ("flex", GraphMode.EMULATE),
                                         pytest.param("triton", GraphMode.EMULATE, marks=needs_triton)])
def test_table_decode_gives_the_split_k_output(shaken, mode, graphs):
    """9 prompts through 4 rows (batch buckets 1-4 and growing table widths are all met): the tokens of the split-K
    engine, and log-probs equal up to float32 rounding (amplified by the shaken weights, as for preemption)."""
    eos = list(range(400, 450))  # rows end at different steps
    prefixes = _prefixes(9)
    params = SamplingParams(temperature=0.7)
    kw = dict(max_batch=4, block_size=4, kv_cache_gib=_gib(64, 4))  # a small pool: flex's eager path reads it all
    ref = TorchEngine(shaken, eos, **kw).generate(prefixes, 30, params, seed=1)
    eng = _engine(shaken, eos, mode, graphs, **kw)
    out = eng.generate(prefixes, 30, params, seed=1)
    assert len({len(o.tokens) for o in ref}) > 2
    assert [o.tokens for o in out] == [o.tokens for o in ref]
    assert [o.eos for o in out] == [o.eos for o in ref]
    for x, y in zip(out, ref):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)
    if graphs is GraphMode.EMULATE:
        assert eng.table.replays > 20 and len(eng.table.graphs) >= 1  # steps replayed from captured shapes


def test_warm_up_runs_every_bucket_once_and_changes_no_output(shaken):
    """`warm_up` (what `reserve` does on CUDA) runs every batch bucket's step with padding rows only: afterwards a
    call of the same capacity captures nothing new, replays from the start, and samples what a cold engine does
    (padding rows wrote only the scratch block, so the pool's blocks hold nothing stale)."""
    eos = list(range(400, 450))
    prefixes = _prefixes(9)
    params = SamplingParams(temperature=0.7)
    kw = dict(max_batch=6, block_size=4, kv_cache_gib=_gib(64, 4))
    cold = _engine(shaken, eos, "flex", GraphMode.EMULATE, **kw)
    ref = cold.generate(prefixes, 30, params, seed=1)
    warm = _engine(shaken, eos, "flex", GraphMode.EMULATE, **kw)
    seen = []
    capacity = max(len(p) for p in prefixes) + 30
    assert warm.warm_up(capacity, progress=lambda done, total: seen.append((done, total))) == 4
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]  # buckets 1, 2, 4, 6
    assert sorted(r for r, _ in warm.table.graphs) == [1, 2, 4, 6]
    captured = dict(warm.table.graphs)
    out = warm.generate(prefixes, 30, params, seed=1)
    assert warm.table.graphs == captured  # every shape the call met was captured by the warm-up
    assert [o.tokens for o in out] == [o.tokens for o in ref]
    assert [o.logprobs for o in out] == [o.logprobs for o in ref]
    assert TorchEngine(shaken, eos, **kw).warm_up(capacity) == 0  # split-K (the CPU default): nothing to warm


@pytest.mark.parametrize("mode", ["gather", "flex", TRITON])
def test_table_decode_logprobs_equal_the_learner_with_preemption_and_continuation(fresh, mode):
    """The float32 contract (1e-5 against the learner) on the fixed-shape path, with emulated graph replay, a pool
    small enough that rows are preempted, and a second segment continuing every unfinished row."""
    tok, model = fresh
    eng = _engine(model, [tok.eos_token_id], mode, GraphMode.EMULATE, max_batch=4, block_size=4,
                  kv_cache_gib=_gib(20, 4))  # 80 tokens for rows of up to 25 + 2 x 12
    params = SamplingParams(temperature=0.7, top_k=20)
    assert two_segments_match_the_learner(eng, model, tok, _prefixes(6), params) >= 6 * 13
    assert eng.stats.extra.get("preemptions", 0) > 0
    assert eng.blocks.num_free == eng.blocks.num_blocks


def test_decode_attention_is_validated(fresh):
    with pytest.raises(ConfigError, match="rollout.torch.decode_attention='paged'.*split_k"):
        TorchEngineConfig(decode_attention="paged")
    with pytest.raises(ConfigError, match="rollout.torch.block_size"):
        TorchEngineConfig(block_size=0)
    with pytest.raises(ConfigError, match="decode_attention"):
        TorchEngine(fresh[1], [0], decode_attention="paged")
    assert TorchEngine(fresh[1], [0]).decode_attention.value == "split_k"  # auto on CPU


@pytest.mark.parametrize("mode,backend,label", [
    ("flex", "FlexAttention", "flex attention"),
    pytest.param("triton", "TritonAttention", "triton paged decode", marks=needs_triton)])
def test_a_kernel_that_fails_on_a_new_shape_falls_back_to_the_gather(shaken, monkeypatch, mode, backend, label):
    """A kernel failing (no compiler, a kernel this torch lacks) on its first step: a warning, the gather path, and
    the split-K engine's tokens all the same. A failure on a shape that has already run is an error."""
    from ulorl.rollout.engines.torch import table_attention
    from ulorl.rollout.engines.torch.table_attention import GatherAttention

    cls = getattr(table_attention, backend)
    attend = cls.attend

    def broken(*args, **kw):
        raise RuntimeError("no triton here")

    eos = list(range(400, 450))
    prefixes = _prefixes(5)
    params = SamplingParams(temperature=0.7)
    kw = dict(max_batch=4, block_size=4, kv_cache_gib=_gib(64, 4))
    ref = TorchEngine(shaken, eos, **kw).generate(prefixes, 12, params, seed=2)
    monkeypatch.setattr(cls, "attend", broken)
    eng = _engine(shaken, eos, mode, GraphMode.EMULATE, **kw)
    with pytest.warns(UserWarning, match=f"{label} -> gather after RuntimeError: no triton here"):
        out = eng.generate(prefixes, 12, params, seed=2)
    assert [o.tokens for o in out] == [o.tokens for o in ref]
    assert len(eng.table.fallbacks) == 1 and isinstance(eng.table.backend, GatherAttention)

    calls = {"n": 0}

    def fails_later(self, *args, **kw):
        calls["n"] += 1
        if calls["n"] > 3:  # the first step (3 layers) ran; the second has the same shape (4 rows, the call's width)
            raise RuntimeError("device lost")
        return attend(self, *args, **kw)

    monkeypatch.setattr(cls, "attend", fails_later)  # a kernel that works, then fails
    eng = _engine(shaken, eos, mode, GraphMode.EMULATE, **kw)
    with pytest.raises(RuntimeError, match="device lost"):
        eng.generate(prefixes, 12, params, seed=2)
    assert eng.table.fallbacks == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="torch.compile on CPU needs a C++ compiler")
@pytest.mark.parametrize("full_blocks", [False, True])
def test_compiled_flex_equals_the_gather(full_blocks):
    """The flex construction through torch.compile (the CPU backend here; Triton on CUDA): the compiled kernel has
    requirements the eager reference does not check (the mask's KV extent must cover the pool). Two batch sizes:
    the second compiles a kernel of its own (a static batch). G = 7 query heads per KV head, as the Qwen2.5-0.5B
    shape. `full_blocks`: every block but a row's last skips the mask, which only the compiled kernel honours."""
    torch.manual_seed(0)
    h_kv, g, d, bs, nb = 2, 7, 16, 16, 40
    k_tok, v_tok = torch.randn(h_kv, (nb + 1) * bs, d), torch.randn(h_kv, (nb + 1) * bs, d)
    flex, gather = table_backend("flex", compiled=True, options={"full_blocks": full_blocks}), table_backend("gather")
    for rows in (4, 2):
        tables = [[(5 * i + j) % nb for j in range(1 + i % 4)] for i in range(rows)]
        ctx = torch.tensor([len(t) * bs - i % 5 for i, t in enumerate(tables)])
        table = torch.full((rows, 8), nb, dtype=torch.long)
        for i, t in enumerate(tables):
            table[i, : len(t)] = torch.tensor(t)
        q = torch.randn(rows, h_kv, g, d)
        got = flex.attend(q, k_tok, v_tok, flex.prepare(table, ctx, bs, nb + 1, g), 0.25)
        want = gather.attend(q, k_tok, v_tok, gather.prepare(table, ctx, bs, nb + 1, g), 0.25)
        assert torch.allclose(got, want, atol=1e-5, rtol=0), (rows, (got - want).abs().max())


@needs_triton
@pytest.mark.parametrize("splits,d", [(1, 24), (2, 24), (3, 24), (8, 24), (None, 24), (3, 32)])
def test_triton_kernel_slices_equal_a_per_row_loop(splits, d):
    """The Triton kernel (interpreted) against the per-row loop at the Qwen2.5-0.5B's GQA ratio (G = 7), with a head
    size that is not a power of two (24: padded to 32 and masked in the kernel) and one that is (32: unmasked
    loads), rows of 1 to 80 positions in blocks of 16, and S slices per row: S > a row's blocks leaves late slices
    empty, S = 3 splits 5 blocks 2 / 2 / 1."""
    torch.manual_seed(1)
    h_kv, g, bs, nb = 2, 7, 16, 12
    k_tok, v_tok = torch.randn(h_kv, (nb + 1) * bs, d), torch.randn(h_kv, (nb + 1) * bs, d)
    tables = [[4, 0, 9, 2, 7], [4, 5], [11], [nb], [3, 8, 1]]
    ctx = [80, 17, 16, 1, 33]
    table = torch.full((5, 8), nb, dtype=torch.long)
    for i, t in enumerate(tables):
        table[i, : len(t)] = torch.tensor(t)
    q = torch.randn(5, h_kv, g, d)
    backend = table_backend("triton", options={"splits": splits})
    step = backend.prepare(table, torch.tensor(ctx), bs, nb + 1, g)
    got = backend.attend(q, k_tok, v_tok, step, 0.2)
    want = _loop_attention(q, k_tok, v_tok, tables, ctx, bs, 0.2)
    assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()
    # bfloat16 K/V and queries: the same loop over the rounded values, the output rounded to bfloat16
    qb, kb, vb = q.bfloat16(), k_tok.bfloat16(), v_tok.bfloat16()
    got = backend.attend(qb, kb, vb, step, 0.2)
    want = _loop_attention(qb.float(), kb.float(), vb.float(), tables, ctx, bs, 0.2)
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.float(), want, atol=1e-2, rtol=1e-2), (got.float() - want).abs().max()


def test_auto_splits_by_hand():
    from ulorl.rollout.engines.torch.table_attention import MAX_SPLITS, auto_splits

    h200 = 132  # SMs: about 264 programs wanted
    assert auto_splits(256, 2, 128, h200) == 1  # 512 programs already
    assert auto_splits(64, 2, 128, h200) == 3  # ceil(264 / 128)
    assert auto_splits(16, 2, 128, h200) == 9  # ceil(264 / 32)
    assert auto_splits(1, 2, 4, h200) == 4  # no more slices than the table's blocks
    assert auto_splits(1, 2, 128, h200) == MAX_SPLITS
    assert auto_splits(4, 2, 16, 1) == 1  # off CUDA


def test_triton_off_cuda_needs_the_interpreter(fresh, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="decode_attention=triton runs its kernel on CUDA.*TRITON_INTERPRET=1"):
        TorchEngine(fresh[1], [0], decode_attention="triton")
    with pytest.raises(ValueError, match="splits=0 must be >= 1"):  # checked before triton is imported
        table_backend("triton", options={"splits": 0})


def test_the_gpu_checks_probe_of_flash_paged_decode_reads_both_pool_layouts(monkeypatch):
    """`gpu_paged_check.attention_paths`' paged-kernel probe, first run here: torch's `varlen_attn` replaced by a
    stand-in with its documented paged semantics (a row's pages from `block_table`, its first `seqused_k` tokens,
    any strides), so the probe's calls, its comparison with SDPA and its second, heads-major pool layout (the torch
    engine's) run before a GPU sees them."""
    import torch.nn.attention.varlen as varlen_module

    def paged_varlen(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                     window_size=(-1, -1), enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
        rows, hq, d = query.shape
        group = hq // key.shape[2]
        out = torch.empty_like(query)
        for b in range(rows):
            k = key[block_table[b].long()].reshape(-1, key.shape[2], d)[: int(seqused_k[b])]  # (ctx, H_kv, D)
            v = value[block_table[b].long()].reshape(-1, key.shape[2], d)[: int(seqused_k[b])]
            kq = k.repeat_interleave(group, dim=1).transpose(0, 1).float()  # (H, ctx, D)
            vq = v.repeat_interleave(group, dim=1).transpose(0, 1).float()
            p = torch.softmax((query[b].float()[:, None, :] @ kq.transpose(1, 2))[:, 0] * (scale or d ** -0.5), -1)
            out[b] = (p[:, None, :] @ vq)[:, 0].to(query.dtype)
        return out

    monkeypatch.setattr(varlen_module, "varlen_attn", paged_varlen)
    r = benchmark_module("gpu_paged_check").attention_paths(torch.device("cpu"), 4, 512)
    assert r["varlen_attn"]["block_table"] and r["paged_call"] == "varlen_attn"
    assert "varlen_paged_errors" not in r and "varlen_paged_heads_major_error" not in r, r
    assert r["varlen_paged_ms"] > 0 and r["varlen_paged_heads_major_ms"] > 0
    assert r["varlen_paged_max_abs_err"] < 0.02 and r["varlen_paged_heads_major_max_abs_err"] < 0.02
