"""The host's part of a decode step on the torch engine's CUDA path: ms per step with the device's work taken out.

On a GPU a decode step is replayed from a CUDA graph, and what is left to the host is the scheduler in Python
(room for each row's next token, the block tables, the inputs copied into the graph's buffers, the sampler's
launches, one synchronisation for the sampled tokens, retirement). While the host does that the GPU waits, so it
adds to every step. This measures it alone: the engine's fixed-shape path (`TableDecoder`) with the model step
replaced by a fixed logits tensor (a device with no work), a vocabulary of 16 tokens (the sampler's launches
without its passes over a real vocabulary: `bench_sampler.py` times those), a table as wide as the flex and Triton
paths make it (the call's capacity), and `rows` rows set up in the pool at `ctx` tokens (not prefilled), as
`gpu_paged_check.py`'s `decode` does. Set up and run on `--device` (cuda: the launches and copies are real).

    python benchmarks/bench_host_step.py [--rows 64,256] [--ctx 2048] [--iters 300] [--device cpu] [--out F]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from benchlib import decoding_rows, emit, kv_bytes_per_token, machine, quiet_torch

VOCAB = 16


def host_step_ms(dev: torch.device, rows: int, ctx: int, iters: int, passes: int = 3) -> dict:
    """ms per decode step of `rows` rows at `ctx` tokens with the model step taken out (median of `passes` passes
    of `iters` steps, after 3 untimed)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.torch import TorchEngine

    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=64, vocab_size=VOCAB)
    model = Qwen2ForCausalLM(cfg).to(dev).eval()
    steps = 3 + passes * iters
    kv_gib = rows * (ctx + steps + 128) * kv_bytes_per_token(model) / 1024**3 * 1.05 + 0.001
    eng = TorchEngine(model, [VOCAB], max_batch=rows, kv_cache_gib=kv_gib, decode_attention="gather",
                      cuda_graphs=False, block_size=64)  # EOS id VOCAB: never sampled, no row finishes
    sched = decoding_rows(eng, rows, ctx, steps + 1, SamplingParams(temperature=0.85), VOCAB)
    eng.table.backend.fixed_width = True  # tables as wide as the call's capacity, as flex and Triton take them
    logits = torch.randn(eng.table.buckets[-1], VOCAB, device=dev)
    eng.table._run_or_fall_back = lambda n, width: logits[:n]  # the device's step: nothing
    with torch.no_grad():
        for _ in range(3):
            sched._sample(sched._decode())
        times = []
        for _ in range(passes):
            t0 = time.perf_counter()
            for _ in range(iters):
                sched._sample(sched._decode())  # the sampled tokens reach the host: the step's synchronisation
            times.append((time.perf_counter() - t0) / iters * 1000)
    return {"rows": rows, "context": ctx, "ms_per_step": statistics.median(times), "ms_passes": times,
            "table_width": eng.table._width}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="64,256")
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    load = os.getloadavg()
    quiet_torch()
    dev = torch.device(args.device)
    res = []
    for rows in map(int, args.rows.split(",")):
        r = host_step_ms(dev, rows, args.ctx, args.iters, args.passes)
        res.append(r)
        print(f"{rows} rows x {args.ctx}: {r['ms_per_step']:.3f} ms per step on the host", file=sys.stderr, flush=True)
    return emit({"device": str(dev), "steps": res, "machine": machine(load)}, args.out)


if __name__ == "__main__":
    sys.exit(main())
