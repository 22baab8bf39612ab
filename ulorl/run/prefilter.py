"""Before RL: drop the training problems whose groups the policy RL starts from would write all right, or all
wrong (`data.prefilter`).

The paper cleans its RL data of "overly easy questions (a strong model answered all 8 attempts correctly)"
(SPEC section 6). With `data.prefilter.method: exact`, each distinct training problem's worked solution is
scored exactly under the rollout's sampling (`ulorl.evaluation.reference`): p = P(the policy writes it). One
uniform draw u per problem then decides: with `too_easy`, the problem goes when u < p^k, the probability that k
sampled answers are all that solution (the paper's rule in law, without decoding k answers of up to L tokens);
with `too_hard`, when u >= 1 - (1 - p)^K, the probability that all K are wrong (K = `hard_k`, k unless set). The
two events are disjoint, so turning `too_hard` on leaves the `too_easy` decisions as they were.

Deviations from the paper:
- the judge is the policy RL starts from (the SFT warm start or `model.path`), not a separate strong model; so
  the rule removes, before their rollouts are paid for, groups that dynamic sampling would drop anyway;
- `too_hard` is not in the paper. A problem the starting policy never solves gives no gradient until RL has
  moved the policy towards it; dropping it gives up that later chance to save its rollouts (off by default);
- p counts only the worked solution (a lower bound of the accuracy where another token path is also right), so
  a few too-easy problems stay in and a few solvable ones count as hard;
- it needs rows with `extra_info.solution` (the built-in tasks'); for data without one, `ulorl clean --steps
  too_easy` applies the sampled too-easy rule to the files before a run.

Decided once, at a run's fresh start, and kept in the run folder's `prefilter.json`; a resumed run, whose
policy is a checkpoint's, reads its prompts from there.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ulorl.config import ConfigError, RunConfig
from ulorl.evaluation.reference import check_references, score_references
from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.prompt_source import PromptSource
from ulorl.run.checkpoint import atomic_write_text
from ulorl.run.console import say

FILE = "prefilter.json"
_STREAM = 7011  # the draws' random stream beside data.seed (the prompt order uses data.seed alone)
KEPT, EASY, HARD = "kept", "too_easy", "too_hard"


def problem_keys(rows: list) -> list[tuple]:
    """One key per row; rows with the same prompt tokens and worked solution are the same problem."""
    return [(tuple(r.prompt_tokens), r.extra_info["solution"]) for r in rows]


def prefilter_draws(probs: list[float], keys: list, k: int, seed: int, too_easy: bool = True,
                    too_hard: bool = False, hard_k: int | None = None) -> list[str]:
    """Each row's fate: one uniform u per distinct key (first appearance order, a stream keyed by `seed`); with
    `too_easy` the problem is `EASY` when u < p^k, with `too_hard` it is `HARD` when u >= 1 - (1 - p)^hard_k
    (`hard_k` None: k), else `KEPT`.

    Args:
        probs: `(N,)` P(correct) of each row's problem, in [0, 1] (copies of a problem agree).
        keys: `(N,)` hashable problem keys.
    Returns:
        `(N,)` `KEPT`, `EASY` or `HARD`; copies of a problem share one fate."""
    rng = np.random.default_rng([seed, _STREAM])
    hard_k = hard_k or k
    fate: dict = {}
    for key, p in zip(keys, probs):
        if key not in fate:
            u = rng.random()
            fate[key] = (EASY if too_easy and u < p ** k else
                         HARD if too_hard and u >= 1.0 - (1.0 - p) ** hard_k else KEPT)
    return [fate[key] for key in keys]


@dataclass
class Prefilter:
    """What `data.prefilter` decided for a run: the training rows kept (indices into the loaded split, which is
    shuffled when `data.shuffle`), each row's p under the starting policy, each row's prompt id (the index's row in
    its source, as `samples.jsonl` names it), and the counts the summary reports."""

    method: str
    k: int
    too_easy: bool
    too_hard: bool
    hard_k: int
    rows_fingerprint: str  # `PromptSource.fingerprint` of the whole training split
    kept: list[int]
    probs: list[float]
    problems: int  # distinct problems scored
    dropped_easy: int  # distinct problems
    dropped_hard: int
    seconds: float
    prompt_ids: list[int] = field(default_factory=list)  # (N,) per loaded row; empty in files written before it

    def summary(self) -> dict:
        return {"method": self.method, "k": self.k, "hard_k": self.hard_k, "rows": len(self.probs),
                "kept_rows": len(self.kept), "problems": self.problems, "dropped_easy": self.dropped_easy,
                "dropped_hard": self.dropped_hard, "seconds": round(self.seconds, 1)}

    def settings(self) -> tuple:
        return self.method, self.k, self.too_easy, self.too_hard, self.hard_k


def decide_prefilter(model, tokenizer, rows: list, params: SamplingParams, eos_id: int, k: int, seed: int,
                     too_easy: bool = True, too_hard: bool = False, hard_k: int | None = None,
                     progress: bool = False) -> Prefilter:
    """Score each distinct problem of `rows` once under `params` and draw the fates (`prefilter_draws`)."""
    t0 = time.perf_counter()
    keys = problem_keys(rows)
    first = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    scores = score_references(model, tokenizer, [rows[i] for i in first.values()], params, eos_id, progress,
                              desc="prefilter: exact P(worked solution)")
    p_of = {key: s.prob for key, s in zip(first, scores)}
    probs = [p_of[key] for key in keys]
    fates = prefilter_draws(probs, keys, k, seed, too_easy, too_hard, hard_k)
    per_problem = [fates[i] for i in first.values()]
    return Prefilter("exact", k, too_easy, too_hard, hard_k or k, PromptSource(rows, shuffle=False).fingerprint(),
                     [i for i, f in enumerate(fates) if f == KEPT], probs, len(first), per_problem.count(EASY),
                     per_problem.count(HARD), time.perf_counter() - t0, [r.prompt_id for r in rows])


def apply_prefilter(cfg: RunConfig, run_dir: Path, model, tokenizer, rows: list, fresh: bool) -> tuple[list, dict]:
    """The training rows RL draws from under `cfg.data.prefilter`, and what was decided (empty when method none).

    A fresh start scores `rows` with `model` (the starting policy) and writes `run_dir/prefilter.json`
    atomically; a resumed run reads that file, and refuses (ConfigError) when it is missing or was made for
    other rows or settings."""
    f = cfg.data.prefilter
    if f.method == "none":
        return rows, {}
    k, hard_k = f.ks(cfg.rollout.group_size)
    path = run_dir / FILE
    if fresh:
        check_references(rows, f"data.train={cfg.data.train}", f"data.prefilter.method={f.method}")
        from ulorl.models import eos_token_ids

        r = cfg.rollout
        params = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k)
        say(f"prefilter (data.prefilter): scoring the {len(set(problem_keys(rows)))} distinct training problems "
            "under the starting policy")
        decided = decide_prefilter(model, tokenizer, rows, params, eos_token_ids(model, tokenizer)[0], k,
                                   cfg.data.seed, f.too_easy, f.too_hard, hard_k, progress=cfg.logging.progress)
        atomic_write_text(path, json.dumps(asdict(decided)))
    else:
        decided = _load(path, rows, (f.method, k, f.too_easy, f.too_hard, hard_k))
    s = decided.summary()
    say(f"prefilter: of {s['problems']} distinct problems, {s['dropped_easy']} too easy (all {k} right) and "
        f"{s['dropped_hard']} too hard (all {hard_k} wrong) dropped; RL draws from {s['kept_rows']} of {s['rows']} "
        "training rows" + (f" ({s['seconds']:.0f} s)" if fresh else f" (as decided at the start: {path})"))
    if not decided.kept:
        raise ConfigError(f"data.prefilter dropped every training problem ({path}); nothing is left to train on: "
                          "use data.prefilter.method=none or other data")
    return [rows[i] for i in decided.kept], s


def _load(path: Path, rows: list, settings: tuple) -> Prefilter:
    try:
        decided = Prefilter(**json.loads(path.read_text()))
    except FileNotFoundError:
        raise ConfigError(f"data.prefilter.method={settings[0]}: resuming needs {path}, written when the run "
                          "started (it holds the prompts RL draws from); start the run afresh") from None
    except (ValueError, TypeError) as e:
        raise ConfigError(f"data.prefilter: {path} is not a prefilter decision file ({e})") from None
    if decided.settings() != settings:
        raise ConfigError(f"data.prefilter: {path} was decided with (method, k, too_easy, too_hard, hard_k) = "
                          f"{decided.settings()}; this config asks for {settings}: resume with the run's own settings")
    if decided.rows_fingerprint != PromptSource(rows, shuffle=False).fingerprint():
        raise ConfigError(f"data.prefilter: {path} was decided for other training rows than data.train now gives: "
                          "resume with the run's own data")
    return decided
