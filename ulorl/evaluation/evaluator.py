"""`evaluate`: avg@k, pass@k, response lengths and truncation rate on a set of prompts.

Protocol (paper, section 4): k samples per problem (32) with temperature 0.85,
top_p 0.95, top_k 20; avg@k = mean correctness over all samples. A response
with no EOS within `max_new_tokens` is truncated and scores 0, as in training
(the paper gives truncated answers reward 0). Response length counts generated
tokens, EOS included (verl's convention). A finished response whose reward was not computed (its function
raised or timed out) counts as not correct; `reward_failed` counts them, and `reward_failure_note` is the line
that says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ulorl.data.records import PromptRecord
from ulorl.config.evaluation import EvalConfig
from ulorl.evaluation.metrics import length_stats, pass_at_k
from ulorl.evaluation.groups import sample_groups
from ulorl.logging.base import json_text
from ulorl.rollout.engines.base import Engine

# (responses, ground_truths, data_sources, extra_infos=[each row's extra_info]) -> rewards: a list of floats, or
# an object with `.rewards` and `.uncomputed` (None, or why that response has no reward), as
# `RewardManager.score_detailed` returns
ScoreFn = Callable[..., Any]
SAMPLE_CHARS = 300  # characters of one response kept per problem in the JSON results


@dataclass
class EvalResult:
    """Summary metrics, a per-problem table and the settings that produced them."""

    name: str
    summary: dict[str, float]
    per_problem: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    # problems scored by the exact measure only (`eval.reference_problems` beyond the sampled ones): prompt_id,
    # reference_prob, reference_tokens
    reference_only: list[dict] = field(default_factory=list)
    # how many finished responses have no computed reward, and why the first has none (None: every one has one)
    reward_failure: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self, indent: int = 2) -> str:
        return json_text(self.to_dict(), indent=indent)

    def to_markdown(self, max_rows: int = 20) -> str:
        """A short report: the summary table, then the per-problem table (first `max_rows` rows)."""
        lines = [f"## {self.name}", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(v)} |" for k, v in self.summary.items()]
        c = self.config
        lines += ["", f"Sampling: k={c.get('k')}, temperature={c.get('temperature')}, top_p={c.get('top_p')}, "
                      f"top_k={c.get('top_k')}, max_new_tokens={c.get('max_new_tokens')}.", ""]
        rows = self.per_problem[:max_rows]
        lines += ["| prompt id | source | correct | mean length | truncated |", "|---|---|---|---|---|"]
        lines += [f"| {p['prompt_id']} | {p['data_source']} | {p['correct']}/{p['n']} | {p['mean_length']:.1f} "
                  f"| {p['truncated']} |" for p in rows]
        if len(self.per_problem) > max_rows:
            lines.append(f"\n({len(self.per_problem) - max_rows} more problems in results.json)")
        if self.reference_only:
            lines.append(f"\n({len(self.reference_only)} more problems scored by the exact measure only, in "
                         "results.json)")
        return "\n".join(lines) + "\n"


def _fmt(v: float) -> str:
    return str(v) if isinstance(v, int) else f"{v:.4f}"


def evaluate(
    engine: Engine,
    tokenizer,
    prompts: list[PromptRecord],
    cfg: EvalConfig,
    score_fn: ScoreFn,
    *,
    name: str = "eval",
    progress: bool = True,
) -> EvalResult:
    """Sample `cfg.k` responses per prompt (the first `cfg.num_problems`), score them, aggregate."""
    prompts = cfg.sampled(prompts)
    if not prompts:
        raise ValueError(f"{name}: no prompts to evaluate")
    params = cfg.sampling()
    groups = sample_groups(engine, [p.prompt_tokens for p in prompts], cfg.k, params, cfg.max_new_tokens,
                           batch_size=cfg.batch_size, seed=cfg.seed, desc=f"eval {name}", progress=progress)
    outs = [o for g in groups for o in g]
    texts = [tokenizer.decode(o.tokens, skip_special_tokens=True) for o in outs]
    gts = [p.ground_truth for p in prompts for _ in range(cfg.k)]
    sources = [p.data_source for p in prompts for _ in range(cfg.k)]
    infos = [p.extra_info for p in prompts for _ in range(cfg.k)]
    done = [i for i, o in enumerate(outs) if o.eos]  # truncated responses score 0 without being verified
    scores = score_fn([texts[i] for i in done], [gts[i] for i in done], [sources[i] for i in done],
                      extra_infos=[infos[i] for i in done]) if done else []
    rewards = getattr(scores, "rewards", scores)
    failed = [u for u in getattr(scores, "uncomputed", []) if u is not None]
    if len(rewards) != len(done):
        raise RuntimeError(f"score_fn returned {len(rewards)} rewards for {len(done)} responses")
    flat = np.zeros(len(outs), dtype=bool)
    flat[done] = np.asarray(rewards, dtype=np.float64) > 0.5
    correct = flat.reshape(len(prompts), cfg.k)
    lengths = [len(o.tokens) for o in outs]
    truncated = np.array([not o.eos for o in outs]).reshape(len(prompts), cfg.k)

    ks = cfg.reported_pass_k()
    per_problem = []
    for i, p in enumerate(prompts):
        c = int(correct[i].sum())
        per_problem.append({
            "prompt_id": p.prompt_id, "data_source": p.data_source, "ground_truth": p.ground_truth,
            "correct": c, "n": cfg.k, "mean_length": float(np.mean(lengths[i * cfg.k : (i + 1) * cfg.k])),
            "truncated": int(truncated[i].sum()), "sample_response": texts[i * cfg.k][:SAMPLE_CHARS],
        })
    summary: dict[str, float] = {"avg@k": float(correct.mean()), "k": cfg.k, "num_problems": len(prompts)}
    for kk in ks:
        summary[f"pass@{kk}"] = float(np.mean([pass_at_k(cfg.k, pp["correct"], kk) for pp in per_problem]))
    summary.update(length_stats(lengths))
    summary["truncation_rate"] = float(truncated.mean())
    summary["reward_failed"] = len(failed)
    config = asdict(cfg) | {"num_problems": len(prompts)}
    failure = (f"{len(failed)} of the {len(done)} finished responses have no reward, counted as not correct (their "
               f"reward function failed or timed out); the first: {failed[0]}") if failed else None
    return EvalResult(name=name, summary=summary, per_problem=per_problem, config=config, reward_failure=failure)


def reward_failure_note(result: EvalResult) -> str | None:
    """A warning line when some finished responses of `result` have no computed reward (None: every one has)."""
    return f"warning: {result.name}: {result.reward_failure}" if result.reward_failure else None
