"""Measure this machine's cost model with a model (default: the built-in tiny one).

Decode: the real engine (built by `build_engine`: `torch` by default, or `hf`) generates `n` tokens for `b`
prefixes of lengths spread over [c/2, c] with an EOS id that can never be sampled,
so every call runs exactly `n` iterations at batch `b`. The prefill is timed on its
own (the torch engine's packed prefill, or the HF engine's padded prefill forward,
found by a forward hook); the rest of the call divided by `n` is the cost of one
decode iteration (forward, sampling, bookkeeping). The torch engine's cost model is
unpadded (`CostModel.padded = False`): prefill is priced per real token.
Update: `Learner.update` on synthetic whole groups of a few sizes and lengths.
Reward: the rule verifier on short boxed answers.
Each point is the median of `repeats`; time is the process's CPU time by default
(robust on a shared machine; run with one torch thread) or wall time.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

from ulorl.plan.cost import PADDED_ENGINES, CostModel, fit_linear


@dataclass
class Clock:
    cpu: bool = True

    def __call__(self) -> float:
        return time.process_time() if self.cpu else time.perf_counter()


def _median_time(fn, repeats: int, clock: Clock) -> float:
    ts = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        ts.append(clock() - t0)
    return statistics.median(ts)


def _prefill_timer(eng, model, clock: Clock, acc: dict) -> list:
    """Accumulate the prefill's time of each `generate` into `acc["prefill"]`; returns the callables that undo it."""
    if hasattr(eng, "runner"):  # torch engine: its packed prefill is one method of the model runner
        inner = eng.runner.prefill

        def timed(*a, **kw):
            t0 = clock()
            try:
                return inner(*a, **kw)
            finally:
                acc["prefill"] += clock() - t0

        eng.runner.prefill = timed
        return [lambda: delattr(eng.runner, "prefill")]

    def pre(module, args, kwargs):  # hf engine: the forward call with more than one input token
        acc["t0"] = clock()

    def post(module, args, kwargs, out):
        if kwargs["input_ids"].shape[1] > 1:
            acc["prefill"] += clock() - acc["t0"]

    hooks = [model.register_forward_pre_hook(pre, with_kwargs=True),
             model.register_forward_hook(post, with_kwargs=True)]
    return [h.remove for h in hooks]


def measure_engine(model, pad_id: int, batches=(1, 2, 4, 8, 16, 32, 64), contexts=(32, 64, 128, 256),
                   new_tokens: int = 33, repeats: int = 3, clock: Clock | None = None,
                   engine: str = "torch") -> list[dict]:
    """Rows {batch, context, prefill_s, iter_s, real/padded prefill counts}: one prefill and one decode iteration
    at each grid point. Medians over `repeats`."""
    from ulorl.rollout.engines import SamplingParams
    from ulorl.rollout.engines.registry import build_engine

    clock = clock or Clock()
    never = model.config.vocab_size + 7  # an EOS id no row can sample: every call runs to max_new_tokens
    eng = build_engine(engine, model, None, [never], pad_id=pad_id)
    params = SamplingParams(temperature=0.85)
    acc = {"t0": 0.0, "prefill": 0.0}
    undo = _prefill_timer(eng, model, clock, acc)
    rows = []
    try:
        for c in contexts:
            for b in batches:
                # lengths spread over [c/2, c], as in a real round
                prefixes = [[5 + (i % 50) for i in range(c - (r * c // 2) // max(b - 1, 1))] for r in range(b)]
                lens = np.array([len(p) for p in prefixes], dtype=float)
                eng.generate(prefixes, 2, params, seed=0)  # warm-up
                pre_s, it_s = [], []
                for _ in range(repeats):
                    acc["prefill"] = 0.0
                    t0 = clock()
                    eng.generate(prefixes, new_tokens, params, seed=0)
                    total = clock() - t0
                    pre_s.append(acc["prefill"])
                    it_s.append((total - acc["prefill"]) / new_tokens)
                rows.append({"batch": b, "context": c, "new_tokens": new_tokens, "engine": engine,
                             "prefill_tokens": float(lens.sum()), "prefill_sq": float((lens ** 2).sum()),
                             "prefill_s": statistics.median(pre_s), "iter_s": statistics.median(it_s)})
    finally:
        for u in undo:
            u()
    return rows


def fit_engine(rows: list[dict], base: CostModel | None = None, relative: bool = False) -> CostModel:
    """Decode and prefill coefficients from `measure_engine` rows; `padded` follows the rows' engine (hf: padded).

    Decode contexts are the call's longest prefix for both engines (the torch engine's attention reads each live
    slot up to the longest live context). Absolute least squares by default: a step's time is a sum of these
    costs, dominated by the large calls.
    """
    n = rows[0]["new_tokens"]
    padded = rows[0].get("engine", "hf") in PADDED_ENGINES
    dec = [{"iterations": 1, "row_iters": r["batch"], "ctx_sum": r["batch"] * (r["context"] + n / 2)} for r in rows]
    cost = fit_linear(dec, [max(r["iter_s"], 1e-9) for r in rows], ["decode_fixed", "decode_row", "decode_ctx"],
                      base=base, relative=relative)
    pre = [{"rounds": 1, "prefill_tokens": r["batch"] * r["context"] if padded else r["prefill_tokens"],
            "prefill_sq": r["batch"] * r["context"] ** 2 if padded else r["prefill_sq"]} for r in rows]
    cost = fit_linear(pre, [max(r["prefill_s"], 1e-9) for r in rows], ["round_fixed", "prefill_token", "prefill_sq"],
                      base=cost, relative=relative)
    cost.padded = padded
    return cost


def measure_update(model, pad_id: int, cfg_train=None, cfg_algo=None, sizes=((8, 16), (8, 64), (32, 16), (32, 64)),
                   G: int = 8, prompt_len: int = 32, repeats: int = 2, clock: Clock | None = None) -> list[dict]:
    """Rows {groups, length, tokens, update_s}: `Learner.update` on synthetic groups (lr 0: weights unchanged)."""
    from ulorl.config import AlgoConfig, TrainConfig
    from ulorl.learners.local import LocalLearner
    from ulorl.trajectory import Trajectory

    clock = clock or Clock()
    train = cfg_train or TrainConfig(lr=1e-12)
    learner = LocalLearner(model, train, cfg_algo or AlgoConfig(dynamic_sampling=False), 0.85, pad_id)
    g = torch.Generator().manual_seed(0)
    rows = []
    for n_groups, length in sizes:
        trajs = []
        for k in range(n_groups * G):
            t = Trajectory(sample_id=f"g{k // G}/{k % G}", group_id=f"g{k // G}", prompt_id=k // G,
                           prompt_tokens=torch.randint(5, 60, (prompt_len,), generator=g).tolist(), ground_truth="0",
                           data_source="plan")
            t.append_segment(torch.randint(5, 60, (length,), generator=g).tolist(), [-1.0] * length, 0)
            t.stop_reason, t.reward = "eos", float(k % 2)
            trajs.append(t)
        learner.update(trajs, 0)  # warm-up
        ts = _median_time(lambda: learner.update(trajs, 0), repeats, clock)
        rows.append({"groups": n_groups, "length": length, "tokens": n_groups * G * (prompt_len + length),
                     "update_s": ts})
    return rows


def fit_update(rows: list[dict], base: CostModel) -> CostModel:
    return fit_linear([{"updates": 1, "trained_tokens": r["tokens"]} for r in rows], [r["update_s"] for r in rows],
                      ["update_fixed", "update_token"], base=base)


def calibrate_builtin(repeats: int = 3, cpu_clock: bool = True, quick: bool = False,
                      engine: str = "torch") -> tuple[CostModel, dict]:
    """Measure the built-in tiny model and `engine` on this machine (one torch thread). Returns the model and the
    raw rows."""
    import tempfile

    from ulorl.models import build_tiny_model, load_model, load_tokenizer

    torch.set_num_threads(1)
    clock = Clock(cpu_clock)
    with tempfile.TemporaryDirectory() as d:
        build_tiny_model(d)
        tok, model = load_tokenizer(d), load_model(d)
    grid = dict(batches=(1, 4, 16, 64), contexts=(32, 128)) if quick else {}
    eng_rows = measure_engine(model, tok.pad_token_id, repeats=repeats, clock=clock, engine=engine, **grid)
    cost = fit_engine(eng_rows)
    sizes = ((8, 16), (8, 64), (16, 16), (16, 64)) if quick else ((8, 16), (8, 64), (32, 16), (32, 64))
    upd_rows = measure_update(model, tok.pad_token_id, sizes=sizes, repeats=max(1, repeats - 1), clock=clock)
    cost = fit_update(upd_rows, cost)
    cost.reward_sample = measure_reward(clock=clock)
    return cost, {"engine": eng_rows, "update": upd_rows}


def measure_reward(n: int = 256, clock: Clock | None = None) -> float:
    """Seconds per scored sample: the rule verifier on short boxed integer answers (in-process fast path)."""
    from ulorl.reward import RewardManager
    from ulorl.config.reward import RewardConfig

    clock = clock or Clock()
    mgr = RewardManager(RewardConfig(num_workers=1))
    try:
        texts = [f"so the answer is \\boxed{{{i % 97}}}" for i in range(n)]
        gts = [str((i * 7) % 97) for i in range(n)]
        mgr.score(texts[:8], gts[:8], ["chain"] * 8)
        return _median_time(lambda: mgr.score(texts, gts, ["chain"] * n), 3, clock) / n
    finally:
        mgr.close()

