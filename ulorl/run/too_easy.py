"""Before RL: drop the training problems that the policy RL starts from already answers (`data.too_easy`).

The paper cleans its RL data of "overly easy questions (a strong model answered all 8 attempts correctly)"
(SPEC section 6). With `data.too_easy.method: exact`, each distinct training problem's worked solution is
scored exactly under the rollout's sampling (`ulorl.evaluation.reference`): p = P(the policy writes it), and
the problem is dropped with probability p^k, the probability that k sampled answers are all that solution. That
is the paper's rule in law, without decoding k answers of up to L tokens per problem: one forward pass each.

Deviations from the paper:
- the judge is the policy RL starts from (the SFT warm start or `model.path`), not a separate strong model; so
  the rule removes, before their rollouts are paid for, most of the groups that dynamic sampling would drop as
  all right;
- p counts only the worked solution (a lower bound of the accuracy where another token path is also right), so
  a few too-easy problems stay in;
- it needs rows with `extra_info.solution` (the built-in tasks'); for data without one, `ulorl clean --steps
  too_easy` applies the sampled rule to the files before a run.

Decided once, at a run's fresh start, and kept in the run folder's `too_easy.json`; a resumed run, whose
policy is a checkpoint's, reads its prompts from there.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ulorl.config import ConfigError, RunConfig
from ulorl.evaluation.reference import check_references, score_references
from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.prompt_source import PromptSource
from ulorl.run.checkpoint import atomic_write_text
from ulorl.run.console import say

FILE = "too_easy.json"
_STREAM = 7011  # the draws' random stream beside data.seed (the prompt order uses data.seed alone)


def problem_keys(rows: list) -> list[tuple]:
    """One key per row; rows with the same prompt tokens and worked solution are the same problem."""
    return [(tuple(r.prompt_tokens), r.extra_info["solution"]) for r in rows]


def too_easy_draws(probs: list[float], keys: list, k: int, seed: int) -> list[bool]:
    """Which rows are dropped: each distinct key (first appearance order) is dropped with probability
    `probs[i]^k` (its rows agree on `probs`), by one uniform draw from a stream keyed by `seed`.

    Args:
        probs: `(N,)` P(correct) of each row's problem, in [0, 1].
        keys: `(N,)` hashable problem keys.
    Returns:
        `(N,)` True where the row is dropped; copies of a problem share the decision."""
    rng = np.random.default_rng([seed, _STREAM])
    decided: dict = {}
    for key, p in zip(keys, probs):
        if key not in decided:
            decided[key] = bool(rng.random() < p ** k)
    return [decided[key] for key in keys]


@dataclass
class TooEasy:
    """What `data.too_easy` decided for a run: the training rows kept (indices into the loaded split), each row's
    p under the starting policy, and the counts the summary reports."""

    method: str
    k: int
    rows_fingerprint: str  # `PromptSource.fingerprint` of the whole training split
    kept: list[int]
    probs: list[float]
    problems: int  # distinct problems scored
    dropped_problems: int
    seconds: float

    def summary(self) -> dict:
        return {"method": self.method, "k": self.k, "rows": len(self.probs), "kept_rows": len(self.kept),
                "problems": self.problems, "dropped_problems": self.dropped_problems,
                "seconds": round(self.seconds, 1)}


def decide_too_easy(model, tokenizer, rows: list, params: SamplingParams, eos_id: int, k: int, seed: int,
                    progress: bool = False) -> TooEasy:
    """Score each distinct problem of `rows` once under `params` and draw which are too easy (`too_easy_draws`)."""
    t0 = time.perf_counter()
    keys = problem_keys(rows)
    first = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    scores = score_references(model, tokenizer, [rows[i] for i in first.values()], params, eos_id, progress)
    p_of = {key: s.prob for key, s in zip(first, scores)}
    probs = [p_of[key] for key in keys]
    dropped = too_easy_draws(probs, keys, k, seed)
    dropped_problems = sum(dropped[i] for i in first.values())
    return TooEasy("exact", k, PromptSource(rows, shuffle=False).fingerprint(), [i for i, d in enumerate(dropped)
                   if not d], probs, len(first), dropped_problems, time.perf_counter() - t0)


def apply_too_easy(cfg: RunConfig, run_dir: Path, model, tokenizer, rows: list, fresh: bool) -> tuple[list, dict]:
    """The training rows RL draws from under `cfg.data.too_easy`, and what was decided (empty when method none).

    A fresh start scores `rows` with `model` (the starting policy) and writes `run_dir/too_easy.json`
    atomically; a resumed run reads that file, and refuses (ConfigError) when it is missing or was made for
    other rows or settings."""
    t = cfg.data.too_easy
    if t.method == "none":
        return rows, {}
    k = t.k or cfg.rollout.group_size
    path = run_dir / FILE
    if fresh:
        source = f"data.train={cfg.data.train}"
        check_references(rows, source, "data.too_easy.method=exact")
        from ulorl.models import eos_token_ids

        r = cfg.rollout
        params = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k)
        say(f"too easy (data.too_easy): scoring the {len(set(problem_keys(rows)))} distinct training problems "
            "under the starting policy")
        decided = decide_too_easy(model, tokenizer, rows, params, eos_token_ids(model, tokenizer)[0], k,
                                  cfg.data.seed, progress=cfg.logging.progress)
        atomic_write_text(path, json.dumps(asdict(decided)))
    else:
        decided = _load(path, rows, t.method, k)
    s = decided.summary()
    say(f"too easy: {s['dropped_problems']} of {s['problems']} distinct problems dropped (each with probability "
        f"p^{k}); RL draws from {s['kept_rows']} of {s['rows']} training rows" +
        (f" ({s['seconds']:.0f} s)" if fresh else f" (as decided at the start: {path})"))
    if not decided.kept:
        raise ConfigError(f"data.too_easy: every training problem was judged too easy for the starting policy "
                          f"({path}); nothing is left to train on: use data.too_easy.method=none or harder data")
    return [rows[i] for i in decided.kept], s


def _load(path: Path, rows: list, method: str, k: int) -> TooEasy:
    try:
        decided = TooEasy(**json.loads(path.read_text()))
    except FileNotFoundError:
        raise ConfigError(f"data.too_easy.method={method}: resuming needs {path}, written when the run started "
                          "(it holds the prompts RL draws from); start the run afresh") from None
    except (ValueError, TypeError) as e:
        raise ConfigError(f"data.too_easy: {path} is not a too_easy decision file ({e})") from None
    if (decided.method, decided.k) != (method, k):
        raise ConfigError(f"data.too_easy: {path} was decided with method={decided.method}, k={decided.k}; this "
                          f"config asks for method={method}, k={k}: resume with the run's own settings")
    if decided.rows_fingerprint != PromptSource(rows, shuffle=False).fingerprint():
        raise ConfigError(f"data.too_easy: {path} was decided for other training rows than data.train now gives: "
                          "resume with the run's own data")
    return decided
