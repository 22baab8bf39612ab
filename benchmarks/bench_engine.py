"""Engine efficiency: the engines' decode tokens/s versus plain `model.generate` on the same batch.

The same prompts (64 prompts of the built-in task, left-padded the same way), the same model (the built-in tiny
model, or `--model`), temperature 0.85, no top-k/top-p, `max_new_tokens` for every row: EOS is switched off in
both (the engine gets an EOS id outside the vocabulary, `generate` `eos_token_id=None`), so both decode exactly
B x max_new_tokens tokens and run the same number of model calls. Variants, alternating so drift cancels:

- `torch`: `TorchEngine.generate`, the default engine (tokens *and* behaviour log-probs);
- `engine`: `HFEngine.generate` (tokens and log-probs);
- `generate`: `model.generate(do_sample=True, ...)`, tokens only;
- `generate_logprobs`: `model.generate(..., output_logits=True, return_dict_in_generate=True)` plus the log-probs
  of the sampled tokens from the returned logits (`log_softmax(logits / T)` gathered): like for like.

Reported: medians of wall and process CPU time, decode tokens/s (B x max_new_tokens / wall time, prefill
included) and the ratios engine / generate, torch / engine and torch / generate.

    python benchmarks/bench_engine.py [--quick] [--out docs/bench_engine.json]

The last line printed is one JSON object with at least `ratio` (engine / generate, tokens/s from CPU time),
`ratio_logprobs` (engine / generate_logprobs), `torch_vs_hf` and `torch_vs_generate`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

from benchlib import emit, machine, quiet_torch  # noqa: E402  (benchmarks/ is on sys.path when run as a script)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small run (< 2 minutes on 2 cores)")
    p.add_argument("--model", default="builtin")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--temperature", type=float, default=0.85)
    p.add_argument("--repeats", type=int, default=7, help="alternating timed runs per variant")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="also write the JSON result here")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.max_new_tokens = 3, 96
    quiet_torch(args.threads)
    from transformers import GenerationConfig

    from ulorl.data import load_prompts
    from ulorl.config import DataConfig
    from ulorl.models import load_model, load_tokenizer
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.registry import build_engine

    tok, model = load_tokenizer(args.model), load_model(args.model)
    model.eval()
    prompts, _ = load_prompts(DataConfig(eval=None), tok, "train")
    prefixes = [r.prompt_tokens for r in prompts[: args.prompts]]
    B, N, V = len(prefixes), args.max_new_tokens, model.config.vocab_size
    pad = tok.pad_token_id
    P = max(len(x) for x in prefixes)
    ids = torch.full((B, P), pad, dtype=torch.long)
    attn = torch.zeros((B, P), dtype=torch.long)
    for i, x in enumerate(prefixes):
        ids[i, P - len(x):] = torch.tensor(x)
        attn[i, P - len(x):] = 1

    engine = build_engine("hf", model, tok, [V + 7])  # an id that is never sampled: every row decodes N tokens
    torch_engine = build_engine("torch", model, tok, [V + 7])
    params = SamplingParams(temperature=args.temperature)
    gc = GenerationConfig(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0, max_new_tokens=N,
                          min_new_tokens=0, eos_token_id=None, pad_token_id=pad, bos_token_id=None)

    def run_engine(seed):
        outs = engine.generate(prefixes, N, params, seed=seed)
        return sum(len(o.tokens) for o in outs)

    def run_torch(seed):
        outs = torch_engine.generate(prefixes, N, params, seed=seed)
        return sum(len(o.tokens) for o in outs)

    @torch.no_grad()
    def run_generate(seed):
        torch.manual_seed(seed)
        out = model.generate(input_ids=ids, attention_mask=attn, generation_config=gc)
        return int(out[:, P:].numel())

    @torch.no_grad()
    def run_generate_logprobs(seed):
        torch.manual_seed(seed)
        out = model.generate(input_ids=ids, attention_mask=attn, generation_config=gc, output_logits=True,
                             return_dict_in_generate=True)
        new = out.sequences[:, P:]
        logits = torch.stack(out.logits, dim=1).float() / args.temperature  # (B, N, V)
        lp = torch.log_softmax(logits, dim=-1).gather(-1, new[..., None]).squeeze(-1)
        assert lp.shape == new.shape
        return int(new.numel())

    runs = {"torch": run_torch, "engine": run_engine, "generate": run_generate,
            "generate_logprobs": run_generate_logprobs}
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    for w in range(args.warmup):
        for f in runs.values():
            f(10_000 + w)
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    tokens = {}
    for rep in range(args.repeats):
        for k, f in runs.items():  # torch, engine, generate, generate_logprobs, torch, ...
            w0, c0 = time.perf_counter(), time.process_time()
            tokens[k] = f(rep)
            wall[k].append(time.perf_counter() - w0)
            cpu[k].append(time.process_time() - c0)
    if len(set(tokens.values())) != 1:
        raise RuntimeError(f"variants decoded different numbers of tokens: {tokens}")
    per = {}
    for k in runs:
        mw, mc = statistics.median(wall[k]), statistics.median(cpu[k])
        per[k] = {"wall_s": mw, "cpu_s": mc, "tokens": tokens[k], "tokens_per_s_wall": tokens[k] / mw,
                  "tokens_per_s_cpu": tokens[k] / mc, "wall_all_s": wall[k], "cpu_all_s": cpu[k]}
    result = {
        "ratio": per["engine"]["tokens_per_s_cpu"] / per["generate"]["tokens_per_s_cpu"],
        "ratio_logprobs": per["engine"]["tokens_per_s_cpu"] / per["generate_logprobs"]["tokens_per_s_cpu"],
        "ratio_wall": per["engine"]["tokens_per_s_wall"] / per["generate"]["tokens_per_s_wall"],
        "ratio_logprobs_wall": per["engine"]["tokens_per_s_wall"] / per["generate_logprobs"]["tokens_per_s_wall"],
        "torch_vs_hf": per["torch"]["tokens_per_s_cpu"] / per["engine"]["tokens_per_s_cpu"],
        "torch_vs_generate": per["torch"]["tokens_per_s_cpu"] / per["generate"]["tokens_per_s_cpu"],
        "torch_vs_generate_logprobs": per["torch"]["tokens_per_s_cpu"] / per["generate_logprobs"]["tokens_per_s_cpu"],
        "targets": {"ratio_min": 0.9, "torch_vs_hf_min": 1.0, "torch_vs_generate_min": 1.0},
        "variants": per,
        "batch": {"prompts": B, "prompt_len_max": P, "prompt_len_mean": statistics.mean(len(x) for x in prefixes),
                  "max_new_tokens": N, "vocab": V},
        "machine": machine(load_before),
        "elapsed_s": time.perf_counter() - t0,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
