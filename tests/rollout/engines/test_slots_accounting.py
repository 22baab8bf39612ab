"""What `benchmarks/slots_vs_paged_cpu.py` rests on: the paged pool's counts (peak blocks, tokens alive then,
preemptions, lengths) follow from the lengths and the pool's blocks only, so a tiny model on CPU gives the counts
of the Qwen3-1.7B shape's run on a GPU."""

from __future__ import annotations

from tests.rollout.engines.benchmark_modules import benchmark_module

COUNTS = ("pool_blocks", "peak_blocks", "live_tokens_at_peak", "preemptions", "finished_in_segment", "decoded_tokens",
          "longest")


def _bench():
    return benchmark_module("slots_vs_paged_cpu"), benchmark_module("gpu_paged_check").QUICK


def test_the_counts_do_not_depend_on_the_model():
    """Two models (another architecture, other widths, other K/V bytes a token) with a pool of the same blocks: the
    same counts. 3 slots of 64 + 512 tokens are 27 blocks of 64; 12 rows of 64-token prompts stop by the draws."""
    bench, quick = _bench()
    a = bench.run(12, 512, 160, 96.0, 3, shape=quick["qwen3-1.7b"])
    b = bench.run(12, 512, 160, 96.0, 3, shape=quick["qwen2.5-0.5b"])
    assert a["pool_blocks"] == 3 * (64 + 512) // 64 == 27
    assert {k: a[k] for k in COUNTS} == {k: b[k] for k in COUNTS}
    assert 0 < a["finished_in_segment"] < 12 and a["longest"] == 160  # geometric lengths: most stop, some run on
    # every row's prompt block and the blocks of its tokens; a row holds ceil((64 + tokens) / 64) blocks
    assert a["peak_blocks"] * 64 >= a["live_tokens_at_peak"] > (a["peak_blocks"] - 12) * 64
    # the 1.7B shape's bytes: 28 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 114,688 a token
    big = a["qwen3_1.7b"]
    assert big["kv_bytes_per_token"] == 114688
    assert big["peak_kv_gib"] == a["peak_blocks"] * 64 * 114688 / 2**30


def test_a_pool_too_small_preempts_and_decodes_the_same_tokens():
    """One slot's memory (9 blocks) for 12 rows: rows are preempted and prefilled again, and every row still ends
    where its stop draws say, as in a pool that holds them all."""
    bench, _ = _bench()
    ample = bench.run(12, 512, 160, 96.0, 3)
    tight = bench.run(12, 512, 160, 96.0, 1)
    assert tight["pool_blocks"] == 9 and tight["peak_blocks"] <= 9
    assert tight["preemptions"] > 0 == ample["preemptions"]
    assert [tight[k] for k in ("finished_in_segment", "decoded_tokens", "longest")] == \
        [ample[k] for k in ("finished_in_segment", "decoded_tokens", "longest")]
