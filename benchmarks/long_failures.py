"""Where long odometer answers go wrong: each model's held-out samples, sorted by `ulorl.tasks.odometer.diagnose`.

    python benchmarks/long_failures.py --config configs/long.yaml \
        --model before=RUN/warm_start/model --model after=RUN/export [--min-tokens 1000] [--out F.json]

Each model is evaluated as the run evaluates it (the config's held-out set and `eval` section, through
`sample_groups` with its seed: the same samples, so the same avg@k as the run's summary), then every sample of a
problem whose worked solution has at least `--min-tokens` tokens (EOS included) is sorted: right, truncated,
short (lines skipped), over (too many lines) or slip (a wrong digit at about the right length), with the first
line that differs from the worked solution. Reported per model: avg@k on all problems and on the long ones, the
counts by kind, where the first wrong line falls (line 0 is the copy of the prompt, lines 1-9 need the addition
table, from line 10 on a value also follows from the line ten above), and per long problem its size, correct count
and first wrong lines.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys

from benchlib import emit, machine, quiet_torch

WHERE = ((0, 0), (1, 1), (2, 2), (3, 9), (10, 99), (100, None))


def _where(line: int) -> str:
    for lo, hi in WHERE:
        if line >= lo and (hi is None or line <= hi):
            return str(lo) if lo == hi else f"{lo}+" if hi is None else f"{lo}-{hi}"
    raise ValueError(line)


def evaluate_model(config: str, model_path: str, procs: int | None, min_tokens: int) -> dict:
    from ulorl.config import load_run_config
    from ulorl.data import load_prompts
    from ulorl.evaluation.groups import sample_groups
    from ulorl.models import eos_token_ids, load_model, load_tokenizer
    from ulorl.reward import RewardManager
    from ulorl.rollout.engines.base import SamplingParams, close_engine
    from ulorl.rollout.engines.registry import build_engine
    from ulorl.tasks.odometer import diagnose

    cfg = load_run_config(config)
    ev = cfg.eval
    tok = load_tokenizer(model_path)
    records, _ = load_prompts(cfg.data, tok, "eval")
    records = records[: ev.num_problems] if ev.num_problems else records
    model = load_model(model_path)
    model.eval()
    torch_opts = cfg.rollout.torch if procs is None else dataclasses.replace(cfg.rollout.torch, procs=procs)
    engine = build_engine("torch", model, tok, eos_token_ids(model, tok), max_batch=ev.batch_size,
                          model_path=model_path, seed=ev.seed, torch=torch_opts)
    try:
        groups = sample_groups(engine, [r.prompt_tokens for r in records], ev.k,
                               SamplingParams(temperature=ev.temperature, top_p=ev.top_p, top_k=ev.top_k),
                               ev.max_new_tokens, batch_size=ev.batch_size, seed=ev.seed, desc=model_path,
                               progress=sys.stderr.isatty())
    finally:
        close_engine(engine)
    kinds, where, problems, right_all, n_all = collections.Counter(), collections.Counter(), [], 0, 0
    with RewardManager(cfg.reward) as rm:
        for rec, outs in zip(records, groups):
            texts = [tok.decode(o.tokens, skip_special_tokens=True) for o in outs]
            done = [i for i, o in enumerate(outs) if o.eos]
            scores = rm.score([texts[i] for i in done], [rec.ground_truth] * len(done), [rec.data_source] * len(done),
                              extra_infos=[rec.extra_info] * len(done)) if done else []
            right = [False] * len(outs)
            for i, s in zip(done, scores):
                right[i] = s > 0.5
            right_all, n_all = right_all + sum(right), n_all + len(outs)
            solution = rec.extra_info["solution"]
            if len(tok(solution, add_special_tokens=False)["input_ids"]) + 1 < min_tokens:
                continue
            ds = [diagnose(t, solution, o.eos, r) for t, o, r in zip(texts, outs, right)]
            kinds.update(d.kind for d in ds)
            wrong_lines = [d.first_wrong for d in ds if d.kind != "right" and d.first_wrong is not None]
            where.update(_where(w) for w in wrong_lines)
            problems.append({"size": rec.extra_info["size"], "correct": sum(right), "k": len(outs),
                             "kinds": [d.kind for d in ds], "first_wrong": [d.first_wrong for d in ds],
                             "first_wrong_slot": [d.first_wrong_slot for d in ds]})
    n_long = sum(kinds.values())
    return {"model": model_path, "avg_at_k": right_all / n_all, "long_problems": len(problems),
            "long_avg_at_k": kinds["right"] / n_long if n_long else None, "long_kinds": dict(kinds),
            "first_wrong_line": {_where(lo): where[_where(lo)] for lo, _ in WHERE},
            "long_problems_detail": problems}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the run's config (its data, eval and reward sections)")
    ap.add_argument("--model", action="append", required=True, metavar="LABEL=PATH")
    ap.add_argument("--min-tokens", type=int, default=1000)
    ap.add_argument("--procs", type=int, default=None, help="engine processes (default: the config's)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    quiet_torch(1)
    load0 = os.getloadavg()
    models = {}
    for spec in args.model:
        label, sep, path = spec.partition("=")
        if not sep:
            ap.error(f"--model {spec!r}: expected LABEL=PATH")
        models[label] = evaluate_model(args.config, path, args.procs, args.min_tokens)
        m = models[label]
        print(f"{label}: avg@k {m['avg_at_k']:.4f}, on {m['long_problems']} problems of >= {args.min_tokens} tokens "
              f"{m['long_avg_at_k']:.4f}; {m['long_kinds']}; first wrong line {m['first_wrong_line']}", flush=True)
    return emit({"config": args.config, "min_tokens": args.min_tokens, "models": models, "machine": machine(load0)},
                args.out)


if __name__ == "__main__":
    raise SystemExit(main())
