"""Learner efficiency: one `Learner.update` versus a plain cross-entropy step, and padding waste.

(a) Overhead. A realistic batch (6 groups x 8 samples of the built-in task's shape: prompts of 30-60 tokens,
long-tailed responses of 10-160 tokens, random tokens) on the built-in tiny model. We time `Learner.update`
with the default config (POIS, DMMPT, chunked log-probs) against a plain cross-entropy step on the *same*
micro-batches (same padding, same model, same response tokens): forward, `F.cross_entropy` of the response
tokens at the sampling temperature, backward, gradient clipping and the same AdamW step. Two baselines:

- `ce_full`: `model(...).logits` (the full `(b, S, V)` logits, as a plain trainer writes it);
- `ce_gather`: the body, then the LM head on the response positions only (fewer logits).

The variants alternate (ours, ce_full, ce_gather, ours, ...) so machine drift cancels. The headline `overhead`
is the median over rounds of (ours / baseline - 1) in process CPU time (with a ~95% interval), the larger of
the two baselines' (so it is never understated); medians and minima of wall and CPU time are reported too. A staged
replica of the update times its parts (collate, model body, log-prob/entropy pass, IS/mask/loss, backward,
metrics, optimizer) against the same parts of the baseline.

(b) Padding waste: pad tokens / all model-input tokens for the same batch as one padded batch and as the
learner's micro-batches under several token budgets; without `--quick`, also the update time per budget
(alternating budgets), since more, smaller micro-batches trade padding for per-call overhead.

    python benchmarks/bench_learner.py [--quick] [--repeats N] [--out docs/bench_learner.json]

The last line printed is one JSON object with at least `overhead` (paired CPU-time median, see above) and
`pad_ratio` (at the default `train.micro_batch_tokens`).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from benchlib import emit, machine, quiet_torch  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

from ulorl.algo import group_advantages
from ulorl.config import AlgoConfig, TrainConfig
from ulorl.learners.local import LocalLearner, accumulate_metrics, make_micro_batches
from ulorl.trajectory import Trajectory

TEMPERATURE = 0.85


def make_batch(n_groups: int, group_size: int, max_response: int, vocab: int, seed: int,
               segments: int = 2) -> list[Trajectory]:
    """Whole groups with the built-in task's shape; responses long-tailed (discrete Pareto, alpha 1.1)."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(n_groups):
        p = int(rng.integers(30, 61))
        prompt = rng.integers(5, vocab, p).tolist()
        for k in range(group_size):
            r = int(min(max_response, math.floor(10 * (1.0 - rng.random()) ** (-1 / 1.1))))
            t = Trajectory(sample_id=f"g{g}/{k}", group_id=f"g{g}", prompt_id=g, prompt_tokens=prompt,
                           ground_truth="0", data_source="bench", reward=float(rng.random() < 0.4),
                           stop_reason="eos")
            toks, lps = rng.integers(5, vocab, r).tolist(), (-rng.random(r) * 3).tolist()
            cut = [round(r * i / segments) for i in range(segments + 1)]  # a response made of `segments` segments
            for s in range(segments):
                t.append_segment(toks[cut[s]:cut[s + 1]], lps[cut[s]:cut[s + 1]], s)
            out.append(t)
    return out


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class Stages:
    """Accumulates wall and CPU seconds per named stage."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._t = _clock()

    def mark(self, name: str) -> None:
        w, c = _clock()
        self.wall[name] = self.wall.get(name, 0.0) + w - self._t[0]
        self.cpu[name] = self.cpu.get(name, 0.0) + c - self._t[1]
        self._t = (w, c)


def staged_update(ln: LocalLearner, trajs: list[Trajectory], version: int) -> Stages:
    """`Learner.update` step by step (same calls, same order), with a timer between the parts."""
    st = Stages()
    adv = ln.advantages(trajs)
    mbs = ln.micro_batches(trajs, adv, version, None)
    n_tokens = max(sum(int(mb.response_mask.sum()) for mb in mbs), 1)
    ln.model.train()
    ln.optimizer.zero_grad(set_to_none=True)
    acc: dict = {}
    st.mark("collate")
    for mb in mbs:
        hidden = ln.body(mb)
        st.mark("body_forward")
        logprobs, entropy = ln.head_logprobs(mb, hidden)
        st.mark("head_logprob_entropy_forward")
        loss, m = ln.micro_batch_loss(mb, logprobs, entropy, n_tokens)
        finite = bool(torch.isfinite(loss))
        st.mark("is_mask_loss")
        loss.backward()
        st.mark("backward")
        accumulate_metrics(acc, m, int(mb.response_mask.sum()), entropy, mb, logprobs.detach())
        st.mark("metrics")
    if finite:  # the learner's clipping (`train.grad_clip`, 0 = off)
        clip = ln.train_cfg.grad_clip
        torch.nn.utils.clip_grad_norm_(ln.params, clip if clip > 0 else float("inf"))
        ln.optimizer.step()
    ln.optimizer.zero_grad(set_to_none=True)
    st.mark("optimizer")
    return st


class PlainCE:
    """Plain cross-entropy step on pre-built micro-batches: forward, CE on response tokens, backward, AdamW."""

    def __init__(self, model, train: TrainConfig, mbs, gather: bool):
        self.model, self.mbs, self.gather, self.clip = model, mbs, gather, train.grad_clip
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=train.lr, weight_decay=train.weight_decay)
        self.n_tokens = sum(int(mb.response_mask.sum()) for mb in mbs)

    def step(self, st: Stages | None = None) -> None:
        mark = st.mark if st else (lambda name: None)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        mark("collate")
        for mb in self.mbs:
            if self.gather:
                hidden = self.model.base_model(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                                               position_ids=mb.position_ids, use_cache=False).last_hidden_state
                mark("body_forward")
                logits = self.model.get_output_embeddings()(hidden[mb.hidden_rows, mb.hidden_cols])
            else:
                logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                                    position_ids=mb.position_ids, use_cache=False).logits
                mark("body_forward")
                logits = logits[mb.hidden_rows, mb.hidden_cols]
            loss = F.cross_entropy(logits.float() / TEMPERATURE, mb.targets, reduction="sum") / self.n_tokens
            mark("head_logprob_entropy_forward")
            loss.backward()
            mark("backward")
        torch.nn.utils.clip_grad_norm_(self.params, self.clip if self.clip > 0 else float("inf"))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        mark("optimizer")


def median_ci(xs: list[float]) -> list[float]:
    """Distribution-free ~95% interval of the median: order statistics n/2 -+ 0.98 sqrt(n)."""
    xs, n = sorted(xs), len(xs)
    lo, hi = max(0, math.floor(n / 2 - 0.98 * math.sqrt(n))), min(n - 1, math.ceil(n / 2 + 0.98 * math.sqrt(n)) - 1)
    return [xs[lo], xs[hi]]


def timed(fn) -> tuple[float, float]:
    w0, c0 = _clock()
    fn()
    w1, c1 = _clock()
    return w1 - w0, c1 - c0


def overhead(model_path: str, trajs, args) -> dict:
    from ulorl.models import load_model

    model = load_model(model_path)
    train = TrainConfig(lr=1e-6)  # tiny steps: the model (and so the work) stays the same
    ln = LocalLearner(model, train, AlgoConfig(), temperature=TEMPERATURE, pad_id=0)
    rewards = torch.tensor([float(t.reward or 0.0) for t in trajs])
    adv = group_advantages(rewards, [t.group_id for t in trajs])
    mbs = make_micro_batches(trajs, adv, 1, 0, train.micro_batch_tokens, packed=train.packing)
    base = {"ce_full": PlainCE(model, train, mbs, gather=False), "ce_gather": PlainCE(model, train, mbs, gather=True)}
    runs = {"ours": lambda: ln.update(trajs, 1), "ce_full": base["ce_full"].step, "ce_gather": base["ce_gather"].step}
    for _ in range(args.warmup):
        for f in runs.values():
            f()
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for _ in range(args.repeats):
        for k, f in runs.items():  # alternating: ours, ce_full, ce_gather, ours, ...
            w, c = timed(f)
            wall[k].append(w)
            cpu[k].append(c)
    med = {k: {"wall_s": statistics.median(wall[k]), "cpu_s": statistics.median(cpu[k]),
               "wall_min_s": min(wall[k]), "cpu_min_s": min(cpu[k]), "wall_all_s": wall[k], "cpu_all_s": cpu[k]}
           for k in runs}
    # paired: ours / baseline within each alternation round (drift between rounds cancels)
    paired = {b: {"cpu": statistics.median(o / x for o, x in zip(cpu["ours"], cpu[b])) - 1,
                  "wall": statistics.median(o / x for o, x in zip(wall["ours"], wall[b])) - 1,
                  "cpu_ci95": median_ci([o / x - 1 for o, x in zip(cpu["ours"], cpu[b])])}
              for b in ("ce_full", "ce_gather")}
    # staged breakdown (alternating as well)
    stages = {"ours": [], "ce_gather": []}
    for _ in range(args.stage_repeats):
        stages["ours"].append(staged_update(ln, trajs, 1))
        st = Stages()
        base["ce_gather"].step(st)
        stages["ce_gather"].append(st)
    breakdown = {}
    for k, sts in stages.items():
        names = list(dict.fromkeys(n for s in sts for n in s.cpu))
        breakdown[k] = {n: {"wall_ms": 1000 * statistics.median(s.wall.get(n, 0.0) for s in sts),
                            "cpu_ms": 1000 * statistics.median(s.cpu.get(n, 0.0) for s in sts)} for n in names}
    fast = max(base, key=lambda b: paired[b]["cpu"])  # the baseline ours compares worst with: never understated
    ref = med[fast]
    # work outside the model body and backward (same calls in both): ours minus the baseline, per update
    outside = ("collate", "head_logprob_entropy_forward", "is_mask_loss", "metrics", "optimizer")
    ours_ms, ce_ms = breakdown["ours"], breakdown["ce_gather"]
    extra_ms = sum(ours_ms.get(n, {}).get("cpu_ms", 0.0) - ce_ms.get(n, {}).get("cpu_ms", 0.0) for n in outside)
    return {
        "reference": fast,
        "overhead_paired_cpu": paired[fast]["cpu"],
        "overhead_cpu": med["ours"]["cpu_s"] / ref["cpu_s"] - 1,
        "overhead_wall": med["ours"]["wall_s"] / ref["wall_s"] - 1,
        "outside_model_extra_ms": extra_ms,
        "outside_model_extra_share": extra_ms / (1000 * ref["cpu_s"]),
        "overhead_vs_ce_full_cpu": med["ours"]["cpu_s"] / med["ce_full"]["cpu_s"] - 1,
        "overhead_paired": paired,
        "overhead_min_cpu": med["ours"]["cpu_min_s"] / min(med[b]["cpu_min_s"] for b in base) - 1,
        "timings": med, "breakdown": breakdown, "micro_batches": len(mbs),
        "response_tokens": sum(int(mb.response_mask.sum()) for mb in mbs),
        "model_tokens": sum(int(mb.input_ids.numel()) for mb in mbs),
    }


def padding(trajs, budgets: list[int]) -> dict:
    zero = torch.zeros(len(trajs))
    lens = [len(t.prompt_tokens) + t.response_len for t in trajs]
    one = 1 - sum(lens) / (len(lens) * max(lens))
    out = {"one_batch": {"pad_ratio": one, "micro_batches": 1}}
    for b in budgets:
        mbs = make_micro_batches(trajs, zero, 1, 0, b)
        pad = sum(mb.pad_tokens for mb in mbs) / sum(mb.input_ids.numel() for mb in mbs)
        out[f"budget_{b}"] = {"pad_ratio": pad, "micro_batches": len(mbs)}
        out[f"packed_{b}"] = {"pad_ratio": 0.0, "micro_batches": len(make_micro_batches(trajs, zero, 1, 0, b,
                                                                                         packed=True))}
    return out


def budget_times(model_path: str, trajs, budgets: list[int], repeats: int) -> dict:
    """CPU/wall seconds of `Learner.update` per micro-batch token budget, padded (`budget_B`) and packed
    (`packed_B`, `train.packing`), alternating."""
    from ulorl.models import load_model

    model = load_model(model_path)
    lns = {f"{'packed' if packed else 'budget'}_{b}": LocalLearner(
        model, TrainConfig(lr=1e-6, micro_batch_tokens=b, packing=packed), AlgoConfig(), temperature=TEMPERATURE,
        pad_id=0) for b in budgets for packed in (False, True)}
    for ln in lns.values():
        ln.update(trajs, 1)
    wall = {b: [] for b in lns}
    cpu = {b: [] for b in lns}
    for _ in range(repeats):
        for b, ln in lns.items():
            w, c = timed(lambda: ln.update(trajs, 1))
            wall[b].append(w)
            cpu[b].append(c)
    return {b: {"cpu_s": statistics.median(cpu[b]), "wall_s": statistics.median(wall[b]),
                "cpu_min_s": min(cpu[b])} for b in lns}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small run (< 2 minutes on 2 cores)")
    p.add_argument("--model", default="builtin")
    p.add_argument("--groups", type=int, default=6)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-response", type=int, default=160)
    p.add_argument("--repeats", type=int, default=30, help="alternating timed updates per variant")
    p.add_argument("--stage-repeats", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budgets", default="512,1024,2048,4096,8192")
    p.add_argument("--time-budgets", default="512,1024,2048", help="update time per budget (not in --quick)")
    p.add_argument("--budget-repeats", type=int, default=8)
    p.add_argument("--out", default=None, help="also write the JSON result here")
    args = p.parse_args()
    if args.quick:
        args.repeats, args.stage_repeats, args.warmup = 5, 3, 1
    quiet_torch()
    from ulorl.models import load_tokenizer

    vocab = len(load_tokenizer(args.model))
    trajs = make_batch(args.groups, args.group_size, args.max_response, vocab, args.seed)
    resp = [t.response_len for t in trajs]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    ov = overhead(args.model, trajs, args)
    pad = padding(trajs, [int(b) for b in args.budgets.split(",")])
    if not args.quick and args.time_budgets:
        for k, v in budget_times(args.model, trajs, [int(b) for b in args.time_budgets.split(",")],
                                 args.budget_repeats).items():
            pad.setdefault(k, {}).update(v)
    default_pad = pad[f"budget_{TrainConfig().micro_batch_tokens}"]["pad_ratio"] if \
        f"budget_{TrainConfig().micro_batch_tokens}" in pad else None
    result = {
        "overhead": ov["overhead_paired_cpu"], "overhead_wall": ov["overhead_wall"], "pad_ratio": default_pad,
        "targets": {"overhead_max": 0.15, "pad_ratio_max": 0.10},
        **ov, "padding": pad,
        "batch": {"samples": len(trajs), "response_mean": statistics.mean(resp),
                  "response_median": statistics.median(resp), "response_max": max(resp),
                  "prompt_mean": statistics.mean(len(t.prompt_tokens) for t in trajs)},
        "machine": machine(load_before),
        "elapsed_s": time.perf_counter() - t0,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
