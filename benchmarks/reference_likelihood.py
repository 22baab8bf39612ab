"""Each model's exact probability of writing every held-out worked solution under the evaluation's sampling,
and paired comparisons of the models on it: avg@infinity without sampling noise (`ulorl.evaluation.reference`).

    python benchmarks/reference_likelihood.py --config configs/long.yaml \
        --model before=RUN/warm_start/model --model after=RUN/export [--min-tokens 1000] [--out F.json]

For every problem of the config's held-out set that the run scores exactly (as the run loads it: `data.eval`,
`eval.reference_problems`, else `eval.num_problems`) the reference is the worked solution (`extra_info.solution`,
the built-in tasks') followed by EOS, and its probability is computed under `eval.temperature / top_p / top_k` in
one forward pass. Reported per model: the mean probability over all problems and over those whose reference has at
least `--min-tokens` tokens (EOS included), and the expected number of tokens that leave the reference per 1,000
tokens. Each model after the first is compared with the first, problem by problem (`paired_difference` on the
probabilities): the change, its standard error and z, for all problems and for the long ones. The probability
counts only the worked form of a right answer; a response that reaches the right value through cancelling errors is
right for the reward but not here, so these means are slightly below avg@k. The config's `train.cpu_numerics`
applies here too, so a pinned run's models are scored with the kernels its own evaluation used.
"""

from __future__ import annotations

import argparse
import os
import sys

from benchlib import emit, machine, quiet_torch


def score_model(config: str, model_path: str, min_tokens: int, overrides: list[str] | None = None) -> dict:
    from ulorl.config import ConfigError, load_run_config
    from ulorl.data import load_prompts
    from ulorl.evaluation.reference import referenced_rows, score_eval_references
    from ulorl.models import load_model, load_tokenizer

    cfg = load_run_config(config, overrides or [])
    ev = cfg.eval
    tok = load_tokenizer(model_path)
    records, _ = load_prompts(cfg.data, tok, "eval")
    try:
        records = referenced_rows(ev, records, f"data.eval={cfg.data.eval}", config)
    except ConfigError as e:
        raise SystemExit(str(e)) from None
    scores = score_eval_references(load_model(model_path), tok, records, ev, progress=sys.stderr.isatty())
    problems = [{"size": rec.extra_info.get("size"), "tokens": s.tokens, "prob": s.prob, "slips": s.slips}
                for rec, s in zip(records, scores)]
    return {"model": model_path, "sampling": {"temperature": ev.temperature, "top_p": ev.top_p, "top_k": ev.top_k},
            "all": _summary(problems), "long": _summary([p for p in problems if p["tokens"] >= min_tokens]),
            "problems": problems}


def pin_numerics(config: str, overrides: list[str] | None = None) -> str:
    """Apply the config's `train.cpu_numerics` to this process (before any tensor operation): the scores are then
    the ones the run's own evaluation computes. Returns the mode."""
    from ulorl.config import load_run_config
    from ulorl.run.numerics import apply_cpu_numerics

    mode = load_run_config(config, overrides or []).train.cpu_numerics
    apply_cpu_numerics(mode)
    return mode


def _summary(problems: list[dict]) -> dict:
    n, tokens = len(problems), sum(p["tokens"] for p in problems)
    return {"problems": n, "mean_prob": sum(p["prob"] for p in problems) / n if n else None,
            "slips_per_1k_tokens": 1000 * sum(p["slips"] for p in problems) / tokens if tokens else None}


def paired(before: dict, after: dict, min_tokens: int) -> dict:
    from ulorl.evaluation import paired_difference

    out = {}
    for name, keep in (("all", lambda p: True), ("long", lambda p: p["tokens"] >= min_tokens)):
        pairs = [(b["prob"], a["prob"]) for b, a in zip(before["problems"], after["problems"]) if keep(b)]
        out[name] = paired_difference([b for b, _ in pairs], [a for _, a in pairs], k=1) if len(pairs) > 1 else None
    return out


# reference-answer tokens; the long run's wall sits near 2,300 tokens, so its frontier gets narrow buckets
LENGTH_EDGES = (0, 256, 1024, 2048, 2400, 3000, 4097)


def by_length(before: dict, after: dict, edges: tuple[int, ...] = LENGTH_EDGES) -> list[dict]:
    """Where a change sits: per bucket [lo, hi) of reference tokens, the problems in it, the first model's mean
    probability, and the sums of the per-problem gains and of the losses (in problems: -1.5 is one and a half
    problems' worth of probability lost). Gains and losses are summed apart, so a bucket where RL moves problems
    both ways shows both."""
    rows = []
    for lo, hi in zip(edges, edges[1:]):
        pairs = [(b["prob"], a["prob"]) for b, a in zip(before["problems"], after["problems"])
                 if lo <= b["tokens"] < hi]
        rows.append({"tokens": [lo, hi], "problems": len(pairs),
                     "before": sum(b for b, _ in pairs) / len(pairs) if pairs else None,
                     "gain": sum((max(0.0, a - b) for b, a in pairs), 0.0),
                     "loss": sum((min(0.0, a - b) for b, a in pairs), 0.0)})
    return rows


def main() -> int:
    from ulorl.evaluation.metrics import z_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the run's config (its data and eval sections)")
    ap.add_argument("--model", action="append", required=True, metavar="LABEL=PATH",
                    help="repeat; every model after the first is compared with the first")
    ap.add_argument("--min-tokens", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pin_numerics(args.config)
    quiet_torch(args.threads)
    load0 = os.getloadavg()
    models, first = {}, None
    for spec in args.model:
        label, sep, path = spec.partition("=")
        if not sep:
            ap.error(f"--model {spec!r}: expected LABEL=PATH")
        m = models[label] = score_model(args.config, path, args.min_tokens)
        line = (f"{label}: P(reference) {m['all']['mean_prob']:.4f} on {m['all']['problems']} problems, "
                f"{m['long']['mean_prob']:.4f} on {m['long']['problems']} of >= {args.min_tokens} tokens; "
                f"{m['all']['slips_per_1k_tokens']:.3f} slips per 1k tokens")
        if first is None:
            first = label
        else:
            m["vs_" + first] = cmp = paired(models[first], m, args.min_tokens)
            m["by_length_vs_" + first] = by_length(models[first], m)
            line += "".join(f"; {k} {v['delta']:+.4f} (se {v['se']:.4f}, z {z_text(v['z'], 2)})"
                            for k, v in cmp.items() if v)
        print(line, flush=True)
    return emit({"config": args.config, "min_tokens": args.min_tokens, "models": models, "machine": machine(load0)},
                args.out)


if __name__ == "__main__":
    raise SystemExit(main())
