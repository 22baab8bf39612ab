"""Warm-start accuracy of a model on the long-output task `builtin:odometer`, by problem length.

    python benchmarks/long_task_warmstart.py --model runs/long-sft/model --per-bucket 4 --k 8

For each size bucket (n steps; a correct answer has 6n + 9 tokens with EOS), `--per-bucket`
problems with n drawn uniformly in the bucket (their own seed: not the train, eval or SFT
problems) are sampled `--k` times with the paper's evaluation sampling (temperature 0.85,
top_p 0.95, top_k 20) through `build_engine` and scored by the reward manager. Reported per
bucket: accuracy (mean over problems x samples), how many problems have a mixed group
(0 < correct < k: what RL learns from), mean response length and truncated share, and
`path_prob`, the probability of sampling the exact worked solution at that temperature
(teacher-forced, without top-k/top-p: a lower bound of the accuracy that needs no sampling).
A bucket's samples are capped at `--cap-factor` x the longest correct answer in it (a wrong count
otherwise runs on to 4,096 tokens; a response that long cannot be the worked solution).

Also reports the answer-length distribution of the task's default law (mean, p50, p90, max,
max/mean over 20,000 generated problems): a property of the generator, not of the model.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
import torch

from benchlib import emit, machine, quiet_torch

BUCKETS = ((2, 9), (10, 29), (30, 59), (60, 99), (100, 199), (200, 399), (400, 680))
# `--buckets tokens`: the steps whose answers (6n + 9 tokens with EOS) are <256, 256-1023, 1024-2047, 2048-4096
TOKEN_BUCKETS = ((2, 41), (42, 169), (170, 339), (340, 680))


def length_distribution(n: int = 20_000, seed: int = 0) -> dict:
    from ulorl.tasks.odometer import generate_problems

    lengths = np.array([p.num_tokens + 1 for p in generate_problems(n, seed=seed)])  # + EOS
    return {"problems": n, "mean": float(lengths.mean()), "p50": float(np.median(lengths)),
            "p90": float(np.percentile(lengths, 90)), "p99": float(np.percentile(lengths, 99)),
            "max": int(lengths.max()), "max_over_mean": float(lengths.max() / lengths.mean())}


def path_logprob(model, prompt: list[int], response: list[int], temperature: float) -> float:
    """log P(response | prompt) when sampling at `temperature` (no top-k/top-p)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits / temperature, -1)
    return float(lp.gather(-1, torch.tensor(response)[:, None]).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF folder of the warm-start model")
    ap.add_argument("--per-bucket", type=int, default=4)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-bucket", type=int, default=len(BUCKETS), help="evaluate the first N buckets")
    ap.add_argument("--buckets", choices=["steps", "tokens"], default="steps",
                    help="steps: the 7 step ranges; tokens: answers of <256, 256-1023, 1024-2047, 2048-4096 tokens")
    ap.add_argument("--engine", default="torch")
    ap.add_argument("--max-new-tokens", type=int, default=4096)
    ap.add_argument("--cap-factor", type=float, default=1.25, help="cap = this x the bucket's longest answer")
    ap.add_argument("--temperature", type=float, default=0.85)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    quiet_torch(args.threads)
    load = os.getloadavg()

    from ulorl.data.records import PromptRecord
    from ulorl.evaluation import evaluate
    from ulorl.config.evaluation import EvalConfig
    from ulorl.models import eos_token_ids, load_model, load_tokenizer
    from ulorl.reward import RewardManager
    from ulorl.config import RewardConfig
    from ulorl.rollout.engines.registry import build_engine
    from ulorl.tasks.odometer import DATA_SOURCE, OdometerProblem

    tok = load_tokenizer(args.model)
    model = load_model(args.model).eval()
    engine = build_engine(args.engine, model, tok, eos_token_ids(model, tok), max_batch=64)
    rng = np.random.default_rng(args.seed)
    buckets = []
    with RewardManager(RewardConfig()) as rm:
        for lo, hi in (TOKEN_BUCKETS if args.buckets == "tokens" else BUCKETS)[: args.max_bucket]:
            probs = [OdometerProblem(int(rng.integers(10)), int(rng.integers(lo, hi + 1)))
                     for _ in range(args.per_bucket)]
            records, lps = [], []
            for i, p in enumerate(probs):
                text = tok.apply_chat_template([{"role": "user", "content": p.prompt_text}],
                                               add_generation_prompt=True, tokenize=False)
                prompt = tok(text, add_special_tokens=False)["input_ids"]
                records.append(PromptRecord(i, prompt, text, str(p.answer), DATA_SOURCE, {"size": p.steps}))
                response = tok(p.solution_text(), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
                lps.append(path_logprob(model, prompt, response, args.temperature))
            cap = min(args.max_new_tokens, math.ceil(args.cap_factor * OdometerProblem(0, hi).num_tokens + 1))
            cfg = EvalConfig(k=args.k, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                             max_new_tokens=cap, pass_k=[1], seed=args.seed, batch_size=64)
            t0 = time.perf_counter()
            res = evaluate(engine, tok, records, cfg, rm.score, name=f"n{lo}-{hi}", progress=False)
            per_problem = np.array([pp["correct"] for pp in res.per_problem])
            row = {"bucket": f"{lo}-{hi}", "steps": [p.steps for p in probs],
                   "answer_tokens_mean": float(np.mean([p.num_tokens + 1 for p in probs])),
                   "accuracy": res.summary["avg@k"],
                   "accuracy_se": float(np.std(per_problem / args.k, ddof=1) / np.sqrt(len(probs))) if len(probs) > 1
                   else float("nan"),
                   "answer_tokens": f"{OdometerProblem(0, lo).num_tokens + 1}-{OdometerProblem(0, hi).num_tokens + 1}",
                   "path_prob": float(np.mean(np.exp(lps))),
                   "response_length_mean": res.summary["response_length/mean"],
                   "truncation_rate": res.summary["truncation_rate"], "max_new_tokens": cap,
                   "sample_s": time.perf_counter() - t0,
                   "correct_per_problem": per_problem.tolist(),
                   "mixed_groups": int(((per_problem > 0) & (per_problem < args.k)).sum())}
            buckets.append(row)
            print(row, flush=True)
    return emit({"benchmark": "long_task_warmstart", "model": args.model, "k": args.k,
                 "per_bucket": args.per_bucket, "engine": args.engine, "buckets": buckets,
                 "length_distribution": length_distribution(), "machine": machine(load)}, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
