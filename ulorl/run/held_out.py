"""The run's held-out measures beside sampled avg@k: each problem's worked-solution length, and the exact
probability that the policy writes that solution (`eval.reference`, `ulorl.evaluation.reference`).

Both need the held-out rows' `extra_info.solution` (the built-in tasks have it). The lengths split the paired
before/after comparison into all problems and those of at least `eval.long_tokens` tokens; the exact measure
gives the same comparison without sampling noise. Neither is in the paper, which reports sampled avg@k.
"""

from __future__ import annotations

from ulorl.evaluation.metrics import paired_difference
from ulorl.evaluation.reference import reference_means, score_eval_references


def solution_tokens(tokenizer, records: list) -> list[int] | None:
    """Tokens of each row's worked solution plus EOS, or None when a row has none."""
    if not records or not all(isinstance((r.extra_info or {}).get("solution"), str) for r in records):
        return None
    return [len(tokenizer(r.extra_info["solution"], add_special_tokens=False)["input_ids"]) + 1 for r in records]


def reference_eval(session, label: str) -> dict[str, float]:
    """P(reference) of every held-out problem the exact measure scores (`eval.reference_problems`) under the
    evaluation's sampling with the current weights, kept in `history["eval_reference"][label]` (and its log in
    `eval_reference_logprob`); returns the means over all of them and over the long ones."""
    ev, h = session.cfg.eval, session.history
    scores = score_eval_references(session.model, session.tokenizer, ev.referenced(session.eval_prompts), ev,
                                   progress=session.cfg.logging.progress)
    h.setdefault("eval_reference", {})[label] = [s.prob for s in scores]
    h.setdefault("eval_reference_logprob", {})[label] = [s.logprob for s in scores]  # where probs underflow to 0
    return reference_means(scores, ev.long_tokens)


def paired_by_length(before: list[float], after: list[float], tokens: list[int] | None, long_tokens: int,
                     k: int) -> dict:
    """`paired_difference` over all problems (`all`) and over those of >= `long_tokens` solution tokens
    (`long`, when `tokens` is known and at least 2 problems qualify)."""
    out = {"all": paired_difference(before, after, k)}
    if tokens is not None:
        keep = [i for i, n in enumerate(tokens) if n >= long_tokens]
        if len(keep) >= 2:
            out["long"] = {**paired_difference([before[i] for i in keep], [after[i] for i in keep], k),
                           "min_tokens": long_tokens}
    return out
