"""The torch engine on a CUDA device (or, for a dry run, the CPU): correctness, long decoding, segment rollout.

Needs only torch and transformers (no vLLM, no network): what a lent GPU machine has. A small Qwen3-architecture
model is created here with random weights (hidden 256, 4 layers, 4 heads / 2 KV heads, head size 64), float32.

1. correctness: 16 prefixes, two segments each (the second continues the first, as segment rollout does); the
   engine's behaviour log-probs against the learner's recomputation (`LocalLearner.forward`) at every position, TF32
   off. Reported: the largest absolute difference (the contract: <= 1e-5 in float32); on CUDA then the same
   through our Triton decode kernel (`correctness_triton`, `rollout.torch.decode_attention=triton`).
2. long decoding: 16 rows x 2,048 and 8,192 new tokens (EOS off): tokens/s, ms per decode iteration, peak memory.
3. segment rollout, M = 1 vs M = 4: rollout rounds of the real `SegmentRollout` (pools, routing) on this engine
   with lengths drawn by the model itself: E = V // 512 EOS ids (at least one) out of the vocabulary make every
   token end the answer with probability ~E/V (geometric lengths, mean ~V/E tokens: 448 with the built-in
   448-token vocabulary; capped at L = 4,096), until 256 samples finished. (The first GPU run used 64 EOS ids:
   mean length 7, nothing long.)
   Reported: rollout seconds per finished sample for each M and their ratio (the update is not included), and
   decoded tokens per second. Seconds per sample charge the work still in the unfinished pool (M > 1) to the
   samples finished so far, so they favour M = 1 on a short run; tokens per second do not.

    python benchmarks/gpu_engine_check.py [--device cuda] [--quick] [--out runs/gpu_engine_check.json]

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

from benchlib import emit, machine, write_result  # noqa: E402  (benchmarks/ is on sys.path when run as a script)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def correctness(model, tok, dev, decode_attention: str = "auto") -> dict:
    from ulorl.config import AlgoConfig, TrainConfig
    from ulorl.config.rollout import TorchEngineConfig
    from ulorl.learners.local import LocalLearner, make_micro_batches
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.registry import build_engine
    from ulorl.trajectory import Trajectory

    eng = build_engine("torch", model, tok, [tok.eos_token_id], max_batch=5,
                       torch=TorchEngineConfig(decode_attention=decode_attention))
    params = SamplingParams(temperature=0.85)
    prefixes = [[5 + (i * 7 + j) % 40 for j in range(4 + (i * 5) % 23)] for i in range(16)]
    first = eng.generate(prefixes, 64, params, seed=1)
    second = eng.generate([p + o.tokens for p, o in zip(prefixes, first)], 64, params, seed=2)
    learner = LocalLearner(model, TrainConfig(device=str(dev)), AlgoConfig(), 0.85, tok.pad_token_id)
    worst = 0.0
    for i, (p, a, b) in enumerate(zip(prefixes, first, second)):
        t = Trajectory(sample_id=f"{i}/0", group_id=str(i), prompt_id=str(i), prompt_tokens=p, ground_truth="0",
                       data_source="x")
        t.append_segment(a.tokens, a.logprobs, 0)
        if not a.eos:
            t.append_segment(b.tokens, b.logprobs, 1)
        (mb,) = make_micro_batches([t], torch.zeros(1), 2, tok.pad_token_id, 100_000)
        mb = mb.to(dev)
        with torch.no_grad():
            lp, _ = learner.forward(mb)
        ours = torch.tensor(t.behaviour_logprobs)
        worst = max(worst, float((lp[mb.response_mask].cpu() - ours).abs().max()))
    return {"max_abs_diff": worst, "tolerance": 1e-5, "ok": worst <= 1e-5,
            "decode_attention": eng.decode_attention.value, "fallbacks": eng.table.fallbacks if eng.table else []}


def long_decode(model, dev, lengths) -> dict:
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.registry import build_engine

    never = model.config.vocab_size + 7
    eng = build_engine("torch", model, None, [never], kv_cache_gib=64)  # the torch engine needs no tokenizer
    prefixes = [[5 + (i * 7 + j) % 40 for j in range(8)] for i in range(16)]
    eng.generate(prefixes, 8, SamplingParams(), seed=0)  # warm-up
    out = {}
    for n in lengths:
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        _sync(dev)
        t0 = time.perf_counter()
        outs = eng.generate(prefixes, n, SamplingParams(temperature=0.85), seed=0)
        _sync(dev)
        dt = time.perf_counter() - t0
        toks = sum(len(o.tokens) for o in outs)
        out[str(n)] = {"tokens_per_s": toks / dt, "ms_per_iteration": 1000 * dt / n, "seconds": dt,
                       "peak_mem_gib": torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None}
        print(f"long decode: 16 x {n}: {toks / dt:.0f} tokens/s, {1000 * dt / n:.2f} ms/iteration", file=sys.stderr)
    return out


def segment_rollout(model, tok, dev, L: int, target: int, decode_batch: int) -> dict:
    from ulorl.data.records import PromptRecord
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.registry import build_engine
    from ulorl.rollout.pools import UnfinishedPool
    from ulorl.rollout.prompt_source import PromptSource
    from ulorl.rollout.segment import SegmentRollout

    V = model.config.vocab_size
    eos = list(range(V - max(1, V // 512), V))
    records = [PromptRecord(prompt_id=i, prompt_tokens=[5 + (i * 7 + j) % 40 for j in range(8)], prompt_text="",
                            ground_truth="0", data_source="gpu_check") for i in range(512)]
    out = {}
    for m in (1, 4):
        eng = build_engine("torch", model, tok, eos, kv_cache_gib=64)
        ro = SegmentRollout(eng, PromptSource(records, seed=0), SamplingParams(temperature=1.0), group_size=8,
                            decode_batch=decode_batch, max_response_len=L, num_segments=m, seed=0)
        pool, done, lengths, rounds, decoded = UnfinishedPool(), 0, [], 0, 0
        t0 = time.perf_counter()
        eng.warm_up(8 + L)  # every batch bucket compiled and captured first (as `reserve` does in a run)
        _sync(dev)
        warm_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        while done < target:
            res = ro.round(pool, rounds, rounds)
            rounds += 1
            done += len(res.finished)
            decoded += res.decoded_tokens
            lengths += [t.response_len for t in res.finished]
        _sync(dev)
        dt = time.perf_counter() - t0
        out[str(m)] = {"s_per_sample": dt / done, "decoded_tokens_per_s": decoded / dt, "samples": done,
                       "rounds": rounds, "seconds": dt, "warm_up_s": warm_s,
                       "mean_len": sum(lengths) / len(lengths), "max_len": max(lengths)}
        print(f"segment rollout M={m}: {1000 * dt / done:.1f} ms/sample over {done} samples, "
              f"{decoded / dt:.0f} decoded tokens/s", file=sys.stderr)
    out["speedup_M4"] = out["1"]["s_per_sample"] / out["4"]["s_per_sample"]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a dry run of the script (CPU)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_engine_check: torch sees no CUDA device (use --device cpu for a dry run)")
    if dev.type == "cpu":
        torch.set_num_threads(1)  # a dry run: OpenMP spin-waiting on a busy small machine slows it many-fold
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    from ulorl.models import TinyModelSpec, build_tiny_model, load_model, load_tokenizer

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        spec = TinyModelSpec(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=1024,
                             max_positions=16384)
        build_tiny_model(d, spec)
        tok, model = load_tokenizer(d), load_model(d).to(dev)
    model.eval()
    lengths = (64, 256) if args.quick else (2048, 8192)
    L, target, decode_batch = (256, 32, 32) if args.quick else (4096, 256, 128)
    result = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "quick": args.quick}
    result["correctness"] = ok = correctness(model, tok, dev)
    print(f"log-probs against the learner: max abs difference {ok['max_abs_diff']:.2e} (contract 1e-5)",
          file=sys.stderr, flush=True)
    write_result(result, args.out)  # after each part: a run cut short by a timeout keeps what it measured
    if dev.type == "cuda":
        try:
            result["correctness_triton"] = ok = correctness(model, tok, dev, "triton")
            print(f"log-probs against the learner, Triton decode kernel: max abs difference {ok['max_abs_diff']:.2e}",
                  file=sys.stderr, flush=True)
        except Exception as e:  # a finding, not the end of the check
            result["correctness_triton"] = {"error": f"{type(e).__name__}: {str(e)[:600]}"}
        write_result(result, args.out)
    result["long_decode"] = long_decode(model, dev, lengths)
    write_result(result, args.out)
    result["segment_rollout"] = segment_rollout(model, tok, dev, L, target, decode_batch)
    result["machine"], result["elapsed_s"] = machine(), time.perf_counter() - t_start
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
