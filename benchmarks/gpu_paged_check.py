"""The paged torch engine's GPU figures (issue 26), one JSON: decode cost against the bandwidth floor, segment
rollout on a long-tailed workload, and a batch that slots could not hold.

Models are built here from transformers configs with random bfloat16 weights (nothing downloaded; random weights
time the same as trained ones), lengths come from forced EOS (`forced_eos.py`):

0. `attention_paths`: what this torch offers for paged decode (`varlen_attn`'s signature, whether it or the aten
   op under it, `_flash_attention_forward`, takes a `block_table`; flex attention and the experimental
   `PagedAttention` present or not), and one decode layer of 256 rows x 8k through flash attention's paged
   kernel (`varlen_attn`, else the aten op) over shuffled 256-token pages against SDPA over contiguous K/V.
1. `bandwidth`: the device's read bandwidth, `sum` over a 4 GiB bfloat16 tensor (median of 5). `sampler`: ms per
   call of the engine's sampler for 256 rows of bfloat16 logits over the 0.5B shape's 151,936 tokens, with the
   rollout's and the paper's evaluation settings (`bench_sampler.py`): the part of a decode step the floor leaves out.
   `host_step`: ms per decode step of 64 and 256 rows at 2k with the model's work taken out (`bench_host_step.py`):
   the host's part of a step, which the GPU waits for. `norm`: a step's 48 RMSNorms at 256 rows through the
   transformers module and through the engine's one fused op (`runner._norm`), replayed from CUDA graphs: what
   the fused kernel saves a step, and how far its bfloat16 outputs are from the module's. `prefill`: ms per
   packed prefill of the 0.5B shape through each prefill attention (`prefill_attention.py`: per-length SDPA,
   torch's `varlen_attn` in one call per layer), for 64 prompts of distinct lengths (12k tokens) and 4 continued
   samples of 1k-8k (15k tokens), the largest logit difference between the two, and which one
   `rollout.torch.prefill_attention=auto` took here.
2. `decode_paths`: one decode point (256 rows x 8k) through every decode path of the torch engine, side by side
   (`VARIANT_NAMES`, `--paths`: flex_attention and the gather, with CUDA graphs; flex without; the split-K plan of
   the CPU; flex with graphs over KV blocks of 128 tokens, with full blocks, with other Triton settings; our
   Triton kernel `triton_decode.py` with graphs, its settings and slices), so the default
   (`rollout.torch.decode_attention=auto`: flex with graphs on CUDA, blocks of 64, inductor's settings) is
   chosen on a measurement; the decode table and part 3 run on the fastest path that ran
   (`decode_attention_used`, `block_size_used`, `attention_options_used`). Paths not started within
   `--paths-budget-s` (60 s) are recorded as skipped, so that the targets keep their time.
   `decode`: the Qwen2.5-0.5B shape (24 layers, hidden 896, 14 heads, 2 KV heads), 64 and 256 rows at contexts
   of 2k, 8k and 32k: ms per decode iteration (sampling included; rows set up in the pool directly, not
   prefilled), next to the floor (weight bytes + KV bytes read) / bandwidth. Target: <= 2x the floor at 256
   rows. A combination whose KV does not fit in 80% of the free memory is skipped (and says so).
3. `slots_vs_paged`: the Qwen3-1.7B shape, 128 rows of 16k-token answers with a long tail (geometric, mean 2k),
   the first 4k-token segment, in a pool the size that slots would need for 25 rows x 16k: the pool's peak,
   the tokens alive then, and preemptions.
4. `segment_rollout`: the 0.5B shape, `SegmentRollout` with 32 groups x 8 per round, L = 16k, geometric
   lengths with mean L/8, M = 1, 4, 2, 8 (in that order), each until 256 samples finished: trained (finished)
   samples per second of rollout and decoded tokens/s. Target: M = 4 >= 1.6x M = 1. Seconds per sample leave
   out the work left in the unfinished pool (M > 1), which favours M = 1. Each round stands for a training
   step: continued rows are prefilled again every round (nothing is kept between rounds), as after an update.
   Every batch bucket is compiled and captured before the clock starts (`TorchEngine.warm_up`, what `reserve`
   does at a run's start; its seconds are `warm_up_s`): otherwise the first M measured pays every compilation
   and the later ones none (the first H200 run: M = 1 passed through up to 20 buckets in one call).
   `decode_floor_s`: the same rollouts' decode at the bandwidth floor (the weights once per decode iteration,
   each row's context once per decode step: the engine's iterations and the K/V positions its rollouts' segments
   read), `over_floor`, and `floor_speedup_M{2,4,8}`: what an engine at the floor would gain on these rollouts
   (`segment_floor.py` prices the workload the same way without a GPU: M = 4 about 1.3x at the floor).
   `segment_rollout_64_rows`: the same with 8 groups x 8 per round, M = 1, 4, 8, each until 128 samples
   finished: a batch whose decode is mostly the weights' bytes, where the floor allows more (M = 8 1.6-1.9x).

Issue 26's targets come first, so that a short loan measures them: `bandwidth`, `attention_paths`, then the paper's
mechanism (`segment_rollout` M = 1 and 4, on the path `rollout.torch.decode_attention=auto` takes: two H200 runs ran
out of time before M = 4), `decode_paths`, then the other targets on the fastest path (`decode` at 256 rows,
`slots_vs_paged`), each started whatever the budget. Every segment rollout (M = 2 and 8, 64 rows, later) runs on the
path of the first one (`segment_path`), so that its speedups compare one engine. Then what explains them (`decode`
at 64 rows, `sampler`, `host_step`, `norm`, `prefill`, `segment_rollout` M = 2 and 8, `segment_rollout_64_rows`),
each started only within `--budget-s` (default 300 s; a part skipped is recorded as skipped). The JSON is rewritten
after every part, with each part's seconds in `part_s` (where a loan's minutes went) and the part under way in
`part_running`, so a run cut short by a timeout keeps what it measured and says where it stopped. `--quick`: tiny
shapes and lengths, a dry run of the script (CPU).

    python benchmarks/gpu_paged_check.py [--device cuda] [--quick] [--budget-s 300] [--out gpu_paged_check.json]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
import warnings

import torch

from bench_host_step import host_step_ms
from bench_sampler import SETTINGS as SAMPLER_SETTINGS
from bench_sampler import case as sampler_case
from benchlib import decoding_rows, emit, kv_bytes_per_token, machine, write_result
from forced_eos import HazardEOS

GIB = 1024**3
SHAPES = {
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, intermediate_size=4864, vocab_size=151936),
    "qwen3-1.7b": dict(model_type="qwen3", hidden_size=2048, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, intermediate_size=6144, vocab_size=151936),
}
QUICK = {  # the same model types, tiny
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=128, vocab_size=512),
    "qwen3-1.7b": dict(model_type="qwen3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=512),
}


def error_text(e: Exception, limit: int = 300) -> str:
    """An exception in one line of the JSON: its type and the start of its message."""
    return f"{type(e).__name__}: {str(e)[:limit]}"


@contextlib.contextmanager
def recorded(skipped: list[str], label: str):
    """A part that may fail on this torch or device: its exception goes into `skipped` as a finding (`label:
    error`), and the check goes on after the part."""
    try:
        yield
    except Exception as e:
        skipped.append(f"{label}: {error_text(e)}")


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build_model(shape: dict, dev: torch.device, dtype: torch.dtype):
    """A causal LM of `shape` with random weights, on `dev` in `dtype`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    kw = dict(shape)
    cfg = AutoConfig.for_model(kw.pop("model_type"), tie_word_embeddings=True, max_position_embeddings=65536, **kw)
    torch.manual_seed(0)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg)
    return model.to(dtype).eval()


def weight_bytes(model) -> int:
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def bandwidth(dev: torch.device, gib: float) -> dict:
    x = torch.ones(int(gib * GIB) // 2, dtype=torch.bfloat16, device=dev)
    times = []
    for _ in range(6):
        sync(dev)
        t0 = time.perf_counter()
        x.sum()
        sync(dev)
        times.append(time.perf_counter() - t0)
    s = statistics.median(times[1:])
    del x
    return {"bytes": int(gib * GIB), "seconds": s, "bytes_per_s": gib * GIB / s}


def attention_paths(dev: torch.device, rows: int, ctx: int, page: int = 256) -> dict:
    """What this torch offers for paged decode attention, and one decode layer's time through each path that runs.

    Flash attention's paged kernel (`varlen_attn` with `block_table` where this torch's has it, else the aten op
    under it where that takes one), against SDPA over contiguous K/V (what a slot
    cache reads; the speed a paged kernel should match). The 0.5B shape's heads: 14 query, 2 KV, 64 wide,
    bfloat16; K/V pages of `page` tokens in a shuffled pool."""
    import inspect

    import torch.nn.functional as F

    out: dict = {"rows": rows, "context": ctx, "page": page}
    try:
        from torch.nn.attention.varlen import varlen_attn

        sig = str(inspect.signature(varlen_attn))
        out["varlen_attn"] = {"signature": sig, "block_table": "block_table" in sig}
    except ImportError as e:
        varlen_attn, out["varlen_attn"] = None, {"missing": str(e)}
    try:  # the op under varlen_attn: a torch whose wrapper lacks `block_table` may still have it here
        schema = str(torch.ops.aten._flash_attention_forward.default._schema)
        out["flash_attention_forward"] = {"schema": schema, "block_table": "block_table" in schema}
    except (AttributeError, RuntimeError) as e:
        out["flash_attention_forward"] = {"missing": str(e)[:200]}
    for name, mod, attr in (("flex_attention", "torch.nn.attention.flex_attention", "flex_attention"),
                            ("PagedAttention", "torch.nn.attention.experimental._paged_attention", "PagedAttention")):
        try:
            getattr(__import__(mod, fromlist=[attr]), attr)
            out[name] = {"present": True}
        except (ImportError, AttributeError) as e:
            out[name] = {"present": False, "error": str(e)[:200]}
    hq, hkv, d, dt = 14, 2, 64, torch.bfloat16
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(rows, hq, d, generator=g).to(dev, dt)
    k = torch.randn(rows, ctx, hkv, d, generator=g).to(dev, dt)
    v = torch.randn(rows, ctx, hkv, d, generator=g).to(dev, dt)

    def timed(fn) -> float:
        for _ in range(2):
            fn()
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(10):
            fn()
        sync(dev)
        return (time.perf_counter() - t0) / 10 * 1000

    ref = lambda: F.scaled_dot_product_attention(q[:, :, None], k.transpose(1, 2), v.transpose(1, 2),  # noqa: E731
                                                 enable_gqa=True)
    out["sdpa_contiguous_ms"] = timed(ref)
    expect = ref()[:, :, 0]
    wrapper = varlen_attn is not None and out["varlen_attn"].get("block_table")
    if (wrapper or out["flash_attention_forward"].get("block_table")) and ctx % page == 0:
        pages = ctx // page
        perm = torch.randperm(rows * pages, generator=g).to(dev)
        kp = torch.empty(rows * pages, page, hkv, d, dtype=dt, device=dev)
        vp = torch.empty_like(kp)
        kp[perm] = k.reshape(rows * pages, page, hkv, d)
        vp[perm] = v.reshape(rows * pages, page, hkv, d)
        table = perm.view(rows, pages).to(torch.int32)
        cu_q = torch.arange(rows + 1, device=dev, dtype=torch.int32)
        cu_k = cu_q * ctx
        used = torch.full((rows,), ctx, device=dev, dtype=torch.int32)
        errors = []
        out["paged_call"] = "varlen_attn" if wrapper else "aten._flash_attention_forward"

        def paged(cu, kpool, vpool):
            if wrapper:
                return varlen_attn(q, kpool, vpool, cu_q, cu, 1, ctx, enable_gqa=True, seqused_k=used,
                                   block_table=table)
            return torch.ops.aten._flash_attention_forward(q, kpool, vpool, cu_q, cu, 1, ctx, 0.0, False, False,
                                                           seqused_k=used, block_table=table)[0]

        works = None
        for cu in (cu_k, None):  # cu_seq_k is optional with a block table in later torch versions
            call = lambda cu=cu: paged(cu, kp, vp)  # noqa: E731
            try:
                got = call()
            except Exception as e:  # a path this torch or device lacks is a finding, not a failure
                errors.append(f"cu_seq_k={'set' if cu is not None else 'None'}: {error_text(e)}")
                continue
            out["varlen_paged_ms"] = timed(call)
            out["varlen_paged_max_abs_err"] = float((got.float() - expect.float()).abs().max())
            works = cu
            break
        if errors:
            out["varlen_paged_errors"] = errors
        if "varlen_paged_ms" in out:  # the torch engine's pool layout, (KV heads, tokens, D), as a strided view
            kh = kp.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)  # same values, heads outermost in memory
            vh = vp.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)
            try:
                got = paged(works, kh, vh)
                out["varlen_paged_heads_major_ms"] = timed(lambda: paged(works, kh, vh))
                out["varlen_paged_heads_major_max_abs_err"] = float((got.float() - expect.float()).abs().max())
            except Exception as e:
                out["varlen_paged_heads_major_error"] = error_text(e)
    return out


ATTENTION = "auto"  # --decode-attention: the engine's decode path for part 3 and the first of part 4
BLOCK_SIZE = None  # the KV block size for part 3: the fastest path's (None: the engine's default)
OPTIONS: dict = {}  # the decode path's options for part 3 (TorchEngine's `attention_options`): the fastest's
# part 2's side-by-side at one point: every decode path, with and without CUDA graphs
# --paths: name -> (decode attention, CUDA graphs, KV block size (None: the engine's), the path's options)
VARIANT_NAMES = {
    "flex+graphs": ("flex", True, None, {}),
    # our kernel (`triton_decode.py`): 4 warps, 2 stages, slices per row for ~2 programs per SM (1 at 256 rows)
    "triton+graphs": ("triton", True, None, {}),
    "triton+graphs+stages3": ("triton", True, None, {"num_stages": 3}),
    "triton+graphs+split4": ("triton", True, None, {"splits": 4}),  # 2,048 programs, each a quarter of a row
    "triton+graphs@128": ("triton", True, 128, {}),  # KV tiles of 128 tokens
    "gather+graphs": ("gather", True, None, {}),
    "flex": ("flex", False, None, {}),
    "split_k": ("split_k", False, None, {}),
    "flex+graphs@128": ("flex", True, 128, {}),  # KV blocks of 128 tokens (CUDA's default: 64)
    "flex+graphs+full": ("flex", True, None, {"full_blocks": True}),  # the mask on each row's last block only
    # inductor's flex decoding config on sm_90 is BLOCK_N 64, 1 stage, 2 warps (torch 2.11-2.13: its sm_90
    # choice of 3 stages is overwritten by the next `if`); pipelined loads and more warps per row:
    "flex+graphs+stages3": ("flex", True, None, {"kernel_options": {"num_stages": 3}}),
    "flex+graphs+stages3w4": ("flex", True, None, {"kernel_options": {"num_stages": 3, "num_warps": 4}}),
    # 256 rows x 2 KV heads outnumber the 132 SMs, so inductor does not split a row's blocks (SPLIT_KV 1)
    "flex+graphs+split4": ("flex", True, None, {"kernel_options": {"SPLIT_KV": 4}}),
}
# the default side-by-side, most promising first (gather+graphs, flex eager and split_k measured 147, 21.8 and 98 ms
# against flex+graphs' 17.7 ms on an H200, docs/scale.md; `--paths` runs them again)
DEFAULT_PATHS = ("flex+graphs", "triton+graphs", "triton+graphs+stages3", "triton+graphs+split4",
                 "flex+graphs+stages3w4", "flex+graphs+split4", "flex+graphs+full", "triton+graphs@128",
                 "flex+graphs+stages3", "flex+graphs@128")


def engine_for(model, kv_gib: float, max_batch: int, attention: str | None = None, graphs: bool = True,
               block_size: int | None = None, options: dict | None = None):
    from ulorl.rollout.engines.torch import TorchEngine

    eos = model.config.vocab_size - 1
    return TorchEngine(model, [eos], max_batch=max_batch, kv_cache_gib=kv_gib, decode_attention=attention or ATTENTION,
                       cuda_graphs=graphs, block_size=block_size or BLOCK_SIZE,
                       attention_options=OPTIONS if options is None else options), eos


def sampler_used(engine) -> str:
    """What sampled an engine's steps: `sample_tokens`, or the fused kernel (its steps, or why it stopped)."""
    fused = engine.fused_sampler
    if fused is None:
        return "sample_tokens"
    if fused.failed:
        return f"fused kernel failed, then sample_tokens: {fused.failed}"
    return f"fused ({fused.calls} steps)"


def decode_ms(model, dev: torch.device, rows: int, ctx: int, iters: int, attention: str | None = None,
              graphs: bool = True, block_size: int | None = None, options: dict | None = None) -> dict:
    """ms per decode iteration of `rows` rows whose contexts are `ctx` tokens (set up in the pool, not prefilled)
    through the decode path `attention` (the engine's default when None); the first 2 iterations (compilation,
    graph capture) are not timed."""
    from ulorl.rollout.engines import SamplingParams

    bpt = kv_bytes_per_token(model)
    tokens = rows * (ctx + iters + 64)
    eng, eos = engine_for(model, tokens * bpt / GIB * 1.02 + 0.01, rows, attention, graphs, block_size, options)
    sched = decoding_rows(eng, rows, ctx, iters + 8, SamplingParams(temperature=1.0), eos)
    with torch.no_grad():
        for _ in range(2):  # warm-up
            sched._sample(sched._decode())
        sync(dev)
        t0 = time.perf_counter()
        for _ in range(iters):
            sched._sample(sched._decode())
        sync(dev)
    ms = (time.perf_counter() - t0) / iters * 1000
    mean_ctx = ctx + 2 + iters / 2
    kv_read = rows * mean_ctx * bpt
    path = {"decode_attention": eng.decode_attention.value, "graphs": eng.graph_mode.value,
            "sampler": sampler_used(eng), "block_size": eng.block_size, "options": eng.attention_options,
            "graphs_captured": len(eng.table.graphs) if eng.table else 0,
            "fallbacks": eng.table.fallbacks if eng.table else []}
    del sched, eng
    return {"rows": rows, "context": ctx, "ms_per_iteration": ms, "kv_bytes_read": kv_read, **path}


# what a round prefills: prompts (their G samples share one prefill) and continued samples prefilled again
PREFILL_CASES = {"prompts": [64 + 4 * i for i in range(64)], "continued": [1024, 2048, 4096, 8192]}
QUICK_PREFILL_CASES = {"prompts": [8 + i for i in range(8)], "continued": [32, 64, 96]}


@torch.no_grad()
def norm_paths(dev: torch.device, rows: int, hidden: int, layers: int, repeats: int = 20) -> dict:
    """A decode step's RMSNorms (two a layer) over `rows` x `hidden` bfloat16, through the transformers module and
    through the engine's `_norm` (one fused kernel on CUDA), each step replayed from a CUDA graph on CUDA (eager
    elsewhere): ms per step each, and their outputs' largest difference in bfloat16 steps."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    from ulorl.rollout.engines.torch.graph_decoder import capture_cuda_graph
    from ulorl.rollout.engines.torch.runner import _norm

    torch.manual_seed(0)
    m = Qwen2RMSNorm(hidden, eps=1e-6).to(dev, torch.bfloat16)
    m.weight.data.normal_(1.0, 0.5)
    x = (torch.randn(rows, hidden, device=dev) * 3).to(torch.bfloat16)
    out = {"rows": rows, "hidden": hidden, "norms_per_step": 2 * layers}
    for name, norm in (("module", m), ("engine", lambda t: _norm(m, t))):
        def step(norm=norm) -> None:
            for _ in range(2 * layers):
                norm(x)
        run = step
        if dev.type == "cuda":
            run = capture_cuda_graph(step, dev)[0].replay
        times = []
        for _ in range(repeats):
            sync(dev)
            t0 = time.perf_counter()
            run()
            sync(dev)
            times.append(time.perf_counter() - t0)
        out[f"{name}_ms"] = statistics.median(times) * 1000
    ref = m(x).double()
    steps = 2.0 ** (torch.floor(torch.log2(ref.abs().clamp_min(1e-30))) - 7)
    out["max_diff_bf16_steps"] = float(((_norm(m, x).double() - ref).abs() / steps).max())
    return out


def prefill_paths(model, dev: torch.device, cases: dict[str, list[int]], repeats: int = 5) -> dict:
    """ms per packed prefill (`ModelRunner.prefill`, median of `repeats` after one untimed) of each case's sequence
    lengths through each prefill attention that runs here (`sdpa`; `varlen` when `auto` takes it), the largest
    difference between their logits, and what `auto` chose (with its warning, if its probe failed)."""
    from ulorl.rollout.engines.torch.prefill_attention import SDPAPrefill, varlen_unavailable

    tokens = max(sum(lens) + 64 * len(lens) for lens in cases.values())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eng, _ = engine_for(model, tokens * kv_bytes_per_token(model) / GIB * 1.1 + 0.01, 8, "split_k", False)
    runner = eng.runner
    auto = runner.prefill_attention
    res = {"auto": auto.name, "warnings": [str(w.message)[:400] for w in caught], "cases": []}
    backends = {"sdpa": SDPAPrefill()}
    if auto.name == "varlen":
        backends["varlen"] = auto
    else:
        res["varlen_not_run"] = varlen_unavailable(dev, runner.dtype, runner.head_dim) or "its probe failed (warnings)"
    cache, blocks = eng._pool_for(max(max(lens) for lens in cases.values()) + 1)
    for name, lens in cases.items():
        seqs = [[5 + (i * 7 + j) % 400 for j in range(n)] for i, n in enumerate(lens)]
        tables = [blocks.allocate(blocks.blocks_for(n), i) for i, n in enumerate(lens)]
        row, logits = {"case": name, "sequences": len(lens), "tokens": sum(lens)}, {}
        for bname, backend in backends.items():
            runner.prefill_attention = backend
            times = []
            with torch.no_grad():
                for _ in range(repeats + 1):
                    sync(dev)
                    t0 = time.perf_counter()
                    logits[bname] = runner.prefill(cache, seqs, tables).float()
                    sync(dev)
                    times.append((time.perf_counter() - t0) * 1000)
            row[f"{bname}_ms"] = statistics.median(times[1:])
        if "varlen" in logits:
            row["speedup"] = row["sdpa_ms"] / row["varlen_ms"]
            row["max_abs_logit_diff"] = (logits["varlen"] - logits["sdpa"]).abs().max().item()
            row["argmax_agree"] = (logits["varlen"].argmax(-1) == logits["sdpa"].argmax(-1)).float().mean().item()
        res["cases"].append(row)
        for i, t in enumerate(tables):
            blocks.release(t, i)
    runner.prefill_attention = auto
    del eng, cache, blocks
    return res


def decode_variants(model, dev: torch.device, rows: int, ctx: int, iters: int, floor,
                    names=DEFAULT_PATHS, budget_s: float = float("inf"), skipped: list | None = None) -> list[dict]:
    """`decode_ms` through every path of `names` (`VARIANT_NAMES`); a path that fails here (a compiler, a
    kernel) is recorded, a path not started within `budget_s` seconds is named in `skipped`."""
    out, skipped = [], [] if skipped is None else skipped
    t0 = time.perf_counter()
    for name in names:
        if time.perf_counter() - t0 > budget_s:
            skipped.append(f"decode path {name}: --paths-budget-s")
            continue
        attention, graphs, block_size, options = VARIANT_NAMES[name]
        t1 = time.perf_counter()
        try:
            r = decode_ms(model, dev, rows, ctx, iters, attention, graphs, block_size, options)
            r["path"] = name
            r["over_floor"] = r["ms_per_iteration"] / floor(r)
            r["wall_s"] = time.perf_counter() - t1
        except Exception as e:  # a finding, not a failure of the check
            r = {"path": name, "rows": rows, "context": ctx, "decode_attention": attention, "graphs": graphs,
                 "block_size": block_size, "error": f"{error_text(e)} [...] {str(e)[-500:]}"}
        out.append(r)
        print(f"decode path {name} {rows} x {ctx}: "
              f"{r.get('ms_per_iteration', r.get('error'))}", file=sys.stderr, flush=True)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return out


def free_bytes(dev: torch.device) -> int:
    """Free device memory, after the last part's engine (its pool) is collected and the allocator's cache is
    emptied: otherwise the cached pool makes the next part's pool smaller, a different shape for every compiled
    kernel (which are per pool size), and all of them are compiled again."""
    if dev.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info(dev)[0]
    return 8 * GIB


def slots_vs_paged(model, dev, rows: int, cap: int, segment: int, mean: float, slot_rows: int) -> dict:
    """`rows` rows with geometric lengths (mean `mean`, cap `cap`), the first `segment` tokens, in a pool of the
    size slots need for `slot_rows` rows of `cap` tokens."""
    from ulorl.rollout.engines import SamplingParams

    prompt = 64
    bpt = kv_bytes_per_token(model)
    slot_gib = slot_rows * (prompt + cap) * bpt / GIB
    eng, eos = engine_for(model, slot_gib, rows)
    HazardEOS.install(eng, mean, eos)
    prefixes = [[5 + (i * 7 + j) % 400 for j in range(prompt)] for i in range(rows)]
    t0 = time.perf_counter()
    eng.warm_up(prompt + segment)  # every batch bucket compiled and captured (as `reserve` does in a run)
    sync(dev)
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    outs = eng.generate(prefixes, segment, SamplingParams(temperature=1.0), seed=0)
    sync(dev)
    x = eng.stats.extra
    return {"rows": rows, "cap": cap, "segment": segment, "mean_length": mean, "slot_rows_of_pool": slot_rows,
            "pool_gib": slot_gib, "slots_needed_gib": rows * (prompt + cap) * bpt / GIB,
            "peak_kv_gib": x.get("peak_blocks", 0) * eng.cache.block_bytes / GIB,
            "live_tokens_at_peak": x.get("live_tokens_at_peak", 0), "preemptions": x.get("preemptions", 0),
            "finished_in_segment": sum(o.eos for o in outs), "seconds": time.perf_counter() - t0,
            "warm_up_s": warm_s}


def segment_rollout(model, dev, m: int, L: int, groups: int, target: int, path: dict) -> dict:
    """`SegmentRollout` with M = `m` until `target` samples finished, on the decode path `path` (`attention`,
    `block_size`, `options`: every M of a comparison runs on the same one)."""
    from ulorl.data.records import PromptRecord
    from ulorl.plan.simulate import context_reads
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.pools import UnfinishedPool
    from ulorl.rollout.prompt_source import PromptSource
    from ulorl.rollout.segment import SegmentRollout

    bpt = kv_bytes_per_token(model)
    kv_gib = min(0.6 * free_bytes(dev), groups * 8 * (L + 64) * bpt) / GIB
    eng, eos = engine_for(model, kv_gib, groups * 8, path["attention"], block_size=path["block_size"],
                          options=path["options"])
    HazardEOS.install(eng, L / 8, eos)
    records = [PromptRecord(prompt_id=i, prompt_tokens=[5 + (i * 7 + j) % 400 for j in range(64)], prompt_text="",
                            ground_truth="0", data_source="gpu_check") for i in range(4096)]
    ro = SegmentRollout(eng, PromptSource(records, seed=0), SamplingParams(temperature=1.0), group_size=8,
                        decode_batch=groups * 8, max_response_len=L, num_segments=m, seed=0)
    pool, finished, rounds, decoded = UnfinishedPool(), [], 0, 0
    t0 = time.perf_counter()
    eng.warm_up(64 + L)  # every batch bucket compiled and captured first (as `reserve` does in a run): not timed
    sync(dev)
    warm_s = time.perf_counter() - t0
    st = eng.stats
    iterations0, prefill0 = st.decode_iterations, st.prefill_tokens
    t0 = time.perf_counter()
    while len(finished) < target:
        res = ro.round(pool, rounds, rounds)
        ro.end_step()  # each round stands for a step: new weights, so continued rows are prefilled again
        rounds += 1
        finished += res.finished
        decoded += res.decoded_tokens
    sync(dev)
    dt = time.perf_counter() - t0
    done, lengths = len(finished), [t.response_len for t in finished]
    # what the decode floor reads (`main`): the weights once per decode iteration, and each row's context once per
    # decode step, from the segments decoded here (finished samples and those left unfinished). A segment of n
    # tokens after a prefix of p: its first token comes from the prefill, its n - 1 decode steps read p + 1, ...
    segments = [(len(t.prompt_tokens) + s.start + 1, s.end - s.start - 1) for t in finished + pool.items()
                for s in t.segments]
    return {"M": m, "samples": done, "seconds": dt, "samples_per_s": done / dt, "decoded_tokens_per_s": decoded / dt,
            "rounds": rounds, "mean_len": sum(lengths) / len(lengths), "max_len": max(lengths),
            "decode_iterations": st.decode_iterations - iterations0, "prefill_tokens": st.prefill_tokens - prefill0,
            "context_tokens": context_reads(*zip(*segments)), "row_iterations": sum(n for _, n in segments),
            "preemptions": eng.stats.extra.get("preemptions", 0), "warm_up_s": warm_s,
            "decode_attention": eng.decode_attention.value, "block_size": eng.block_size,
            "fallbacks": eng.table.fallbacks if eng.table else [], "sampler": sampler_used(eng),
            "prefill_attention": eng.runner.prefill_attention.name}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny shapes: a dry run of the script (CPU)")
    p.add_argument("--budget-s", type=float, default=300.0)
    p.add_argument("--out", default=None)
    p.add_argument("--decode-attention", default="auto", help="the engine's decode path: auto (the decode table "
                   "and part 3 take the fastest of decode_paths; part 4, measured before them, takes "
                   "rollout.torch.decode_attention=auto's path) | flex | triton | gather | split_k")
    p.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                   help=f"decode_paths' side-by-side, comma-separated from {', '.join(VARIANT_NAMES)}")
    p.add_argument("--paths-budget-s", type=float, default=60.0,
                   help="decode_paths: paths not started within this many seconds are skipped")
    args = p.parse_args()
    unknown = [v for v in args.paths.split(",") if v not in VARIANT_NAMES]
    if unknown:
        p.error(f"--paths: unknown {', '.join(unknown)}; expected some of {', '.join(VARIANT_NAMES)}")
    global ATTENTION, BLOCK_SIZE, OPTIONS
    ATTENTION = args.decode_attention
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_paged_check: torch sees no CUDA device (use --device cpu --quick for a dry run)")
    if dev.type == "cpu":
        torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    from torch._dynamo import config as dyn  # (`import torch._dynamo` here would make `torch` local to main)

    # dynamo counts compiled kernels per function across every engine of the process: this check builds ~20 engines
    # whose flex kernels (one per batch bucket and pool size) come to about 100, near the per-function limit the
    # engine sets for one engine (FLEX_RECOMPILE_LIMIT); past a limit dynamo runs flex eagerly, over the whole pool
    dyn.recompile_limit = max(dyn.recompile_limit, 512)
    if hasattr(dyn, "accumulated_recompile_limit"):
        dyn.accumulated_recompile_limit = max(dyn.accumulated_recompile_limit, 1024)
    t_start = time.perf_counter()
    left = lambda: args.budget_s - (time.perf_counter() - t_start)  # noqa: E731
    shapes = QUICK if args.quick else SHAPES
    q = args.quick
    res: dict = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "quick": q,
                 "torch": torch.__version__, "skipped": [], "part_s": {}, "decode": [],
                 "dynamo_limits": {"recompile": dyn.recompile_limit,
                                   "accumulated": getattr(dyn, "accumulated_recompile_limit", None)}}
    save = lambda: write_result(res, args.out)  # noqa: E731  (after every part: a timeout keeps what was measured)

    @contextlib.contextmanager
    def part(name: str):
        """Times a part into `part_s` (where a short loan's minutes went) and saves the JSON after it; while it
        runs, the JSON names it in `part_running` (so a run the timeout ends says where)."""
        t0 = time.perf_counter()
        res["part_running"] = {"name": name, "at_s": round(t0 - t_start, 1)}
        save()
        try:
            yield
        finally:
            res["part_s"][name] = round(res["part_s"].get(name, 0.0) + time.perf_counter() - t0, 2)
            del res["part_running"]
            save()

    with part("bandwidth"):
        res["bandwidth"] = bw = bandwidth(dev, 0.0625 if q else 4.0)
        print(f"bandwidth: {bw['bytes_per_s'] / 1e9:.0f} GB/s", file=sys.stderr, flush=True)
    with part("attention_paths"):
        res["attention_paths"] = ap = attention_paths(dev, 4 if q else 256, 512 if q else 8192)
        print(f"attention paths: varlen_attn {ap['varlen_attn']}, sdpa contiguous {ap['sdpa_contiguous_ms']:.2f} "
              f"ms, varlen paged {ap.get('varlen_paged_ms', ap.get('varlen_paged_errors', 'not run'))}",
              file=sys.stderr, flush=True)

    small = build_model(shapes["qwen2.5-0.5b"], dev, torch.bfloat16)
    wb, bpt = weight_bytes(small), kv_bytes_per_token(small)
    res["bytes"] = {"weights": wb, "kv_per_token": bpt}  # of the 0.5B shape (`gpu_report.py` prices with them)
    floor = lambda r: (wb + r["kv_bytes_read"]) / bw["bytes_per_s"] * 1000  # noqa: E731

    def decode_table(rows: int, target: bool = False) -> None:
        """ms per decode iteration of `rows` rows at each context into `res["decode"]`, next to the floor (a
        `target` part starts whatever the budget: only the timeout ends it)."""
        for ctx in ((64, 256) if q else (2048, 8192, 32768)):
            need, free = rows * (ctx + 100) * bpt, free_bytes(dev)
            if not q and need > 0.8 * free:
                res["skipped"].append(f"decode {rows} x {ctx}: KV over 80% of free memory ({need / GIB:.1f} of "
                                      f"{free / GIB:.1f} GiB free)")
                continue
            if left() < 0 and not target:
                res["skipped"].append(f"decode {rows} x {ctx}: budget")
                continue
            with part(f"decode {rows}"):
                try:
                    r = decode_ms(small, dev, rows, ctx, 4 if q else 20)
                except Exception as e:  # recorded; the parts after this one still run
                    res["skipped"].append(f"decode {rows} x {ctx}: {error_text(e)}")
                    continue
                r["floor_ms"] = floor(r)
                r["over_floor"] = r["ms_per_iteration"] / r["floor_ms"]
                res["decode"].append(r)
                print(f"decode {rows} x {ctx}: {r['ms_per_iteration']:.2f} ms/iteration, floor {r['floor_ms']:.2f} "
                      f"ms ({r['over_floor']:.1f}x)", file=sys.stderr, flush=True)
            if dev.type == "cuda":
                torch.cuda.empty_cache()

    def run_segments(key: str, ms: tuple[int, ...], groups: int, samples: int, target: bool = False) -> None:
        """Segment rollout of `groups` x 8 rows for each M until `samples` finished, into `res[key]`, with its decode
        floor and, once M = 1 is there, its speedups (saved after each M: a run cut short keeps them)."""
        out = res.setdefault(key, {})
        # every M of every comparison on one path: the one in use when the first of them ran (the check's first
        # target runs before `decode_paths`, on `rollout.torch.decode_attention=auto`'s path)
        path = res.setdefault("segment_path", {"attention": ATTENTION, "block_size": BLOCK_SIZE, "options": OPTIONS})
        for m in ms:
            if left() < 0 and not target:
                res["skipped"].append(f"{key} M={m}: budget")
                continue
            with part(f"{key} M={m}"):
                try:
                    r = segment_rollout(small, dev, m, 256 if q else 16384, 2 if q else groups, 16 if q else samples,
                                        path)
                except Exception as e:
                    out[str(m)] = {"error": error_text(e, 400)}
                    continue
                path.update(attention=r["decode_attention"], block_size=r["block_size"])  # "auto" as resolved here
                # the same rollout at the bandwidth floor (its decode alone: weights per iteration, K/V per token)
                r["decode_floor_s"] = (r["decode_iterations"] * wb + r["context_tokens"] * bpt) / bw["bytes_per_s"]
                r["over_floor"] = r["seconds"] / r["decode_floor_s"]
                r["floor_samples_per_s"] = r["samples"] / r["decode_floor_s"]
                out[str(m)] = r
                if m != 1 and "samples_per_s" in out.get("1", {}):
                    out[f"speedup_M{m}"] = r["samples_per_s"] / out["1"]["samples_per_s"]
                    # what an engine at the floor would gain on the same rollouts (docs/scale.md: the target's reach)
                    out[f"floor_speedup_M{m}"] = r["floor_samples_per_s"] / out["1"]["floor_samples_per_s"]
                print(f"{key} M={m}: {r['samples_per_s']:.2f} samples/s, {r['decoded_tokens_per_s']:.0f} tokens/s "
                      f"({r['over_floor']:.1f}x its decode floor)", file=sys.stderr, flush=True)

    # issue 26's three targets first, each started whatever the budget (only the timeout ends them). The paper's
    # mechanism (segment rollout M = 1 and 4) comes before the side-by-side of decode paths, on the path that
    # `rollout.torch.decode_attention=auto` takes (two H200 runs ran out of time before M = 4); then decode at 256
    # rows on the fastest path, and the batch that slots could not hold
    run_segments("segment_rollout", (1, 4), 32, 256, target=True)
    with part("decode_paths"):
        res["decode_paths"] = paths = decode_variants(small, dev, 4 if q else 256, 256 if q else 8192,
                                                      4 if q else 10, floor, args.paths.split(","),
                                                      args.paths_budget_s, res["skipped"])
        ok = [r for r in paths if "ms_per_iteration" in r]
        if ATTENTION == "auto" and ok:  # the rest of the check runs on the fastest path that ran here (recorded)
            best = min(ok, key=lambda r: r["ms_per_iteration"])
            ATTENTION, BLOCK_SIZE, OPTIONS = best["decode_attention"], best["block_size"], best["options"]
        res.update(decode_attention_used=ATTENTION, block_size_used=BLOCK_SIZE, attention_options_used=OPTIONS)

    decode_table(8 if q else 256, target=True)
    with part("slots_vs_paged"):
        try:
            big = build_model(shapes["qwen3-1.7b"], dev, torch.bfloat16)
            res["slots_vs_paged"] = r = slots_vs_paged(big, dev, 8 if q else 128, 256 if q else 16384,
                                                       64 if q else 4096, 32 if q else 2048, 2 if q else 25)
        except Exception as e:  # recorded; the parts after it still run
            r = res["slots_vs_paged"] = {"error": error_text(e, 400)}
        big = None
        if "error" not in r:
            print(f"128 rows at 16k: peak KV {r['peak_kv_gib']:.2f} GiB in a pool of {r['pool_gib']:.2f} GiB "
                  f"(slots for {r['slot_rows_of_pool']} rows; all rows in slots: {r['slots_needed_gib']:.1f} "
                  f"GiB), {r['preemptions']} preemptions", file=sys.stderr, flush=True)
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    # then what explains them: decode at 64 rows, and what a decode step pays besides the floor
    decode_table(4 if q else 64)
    diagnostics(res, small, dev, shapes, q, left, part)
    run_segments("segment_rollout", (2, 8), 32, 256)
    # 8 groups x 8: where the weights are most of a step's bytes (segment_floor.py: M = 8 1.6-1.9x at the floor)
    run_segments("segment_rollout_64_rows", (1, 4, 8), 8, 128)
    res["machine"] = machine()
    res["elapsed_s"] = time.perf_counter() - t_start
    return emit(res, args.out)


def diagnostics(res: dict, small, dev: torch.device, shapes: dict, q: bool, left, part) -> None:
    """The sampler alone, the host's part of a step, a step's RMSNorms and the packed prefill into `res` (each
    recorded, never fatal; skipped past the budget)."""
    if left() < 0:
        res["skipped"].append("sampler / host_step / norm / prefill: budget")
        return
    with part("sampler / host_step"), recorded(res["skipped"], "sampler / host_step"):
        # the sampler alone on the 0.5B shape's vocabulary
        res["sampler"] = [sampler_case(4 if q else 256, shapes["qwen2.5-0.5b"]["vocab_size"], setting, dev,
                                       torch.bfloat16, 5, None, fused=dev.type == "cuda")
                          for setting in SAMPLER_SETTINGS]
        print("sampler: " + ", ".join(f"{r['setting']} {r['ms']:.2f} ms" + (
            f" (fused {r['fused_ms']:.3f} ms, same tokens {r['fused_same_tokens']})" if "fused_ms" in r else "")
            for r in res["sampler"]), file=sys.stderr, flush=True)
        # the host's part of a step (the scheduler in Python, the copies into the graph's inputs, the sampler's
        # launches)
        res["host_step"] = [host_step_ms(dev, rows, 256 if q else 2048, 20 if q else 200)
                            for rows in ((4,) if q else (64, 256))]
        print("host per step: " + ", ".join(f"{r['rows']} rows {r['ms_per_step']:.3f} ms"
                                            for r in res["host_step"]), file=sys.stderr, flush=True)
    with part("norm"), recorded(res["skipped"], "norm"):
        # a step's RMSNorms: the transformers module (8 operations each in bf16) against the engine's one op
        small_shape = shapes["qwen2.5-0.5b"]
        res["norm"] = nm = norm_paths(dev, 4 if q else 256, small_shape["hidden_size"],
                                      small_shape["num_hidden_layers"])
        print(f"norms per step: module {nm['module_ms']:.3f} ms, engine {nm['engine_ms']:.3f} ms, outputs "
              f"within {nm['max_diff_bf16_steps']:.1f} bf16 steps", file=sys.stderr, flush=True)
    with part("prefill"), recorded(res["skipped"], "prefill"):
        # the packed prefill's attention: per-length SDPA against one varlen_attn call per layer
        res["prefill"] = pf = prefill_paths(small, dev, QUICK_PREFILL_CASES if q else PREFILL_CASES)
        times = [f"{c['case']} sdpa {c['sdpa_ms']:.1f} ms" + (
            f", varlen {c['varlen_ms']:.1f} ms" if "varlen_ms" in c else "") for c in pf["cases"]]
        print(f"prefill (auto: {pf['auto']}): " + "; ".join(times), file=sys.stderr, flush=True)
    if dev.type == "cuda":
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
