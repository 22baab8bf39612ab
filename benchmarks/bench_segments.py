"""Segment-rollout speedup: time per trained sample for M = 1, 2, 4, 8 on the built-in long-tailed task.

Same model (an SFT warm start of the tiny model), data, seed and number of trained samples for every M; the
configurations alternate within one session (M=1,2,4,8,1,2,4,8,...) so machine drift cancels. Pass k uses
seed k (sampling, and the built-in task's problems and their order) for every M: answer lengths depend strongly
on the problem, so one seed's few hundred answers are a noisy sample and passes average it out. The learning
rate is tiny so the policy, and so the length distribution, stays the same across configurations: we measure
the system, not learning. One torch thread; every time is recorded as process CPU time (robust on a shared
machine) next to wall time, and the load average is logged per configuration.

Reported per M: time per step and per trained sample (median over passes of each pass's mean), speedup over
M=1, the step broken into phases (gen = engine prefill forwards + decode forwards + the rest of the rollout;
reward; update; other), per-step counts (rounds, decode iterations, live rows per iteration, prefill tokens as
computed (padded for `--engine hf`), context tokens read), decode-slot utilisation (useful tokens / (batch rows x
decode iterations)),
re-prefill tokens as a share of decoded tokens, mean staleness (versions between a sample's first segment and its
update), and two bounds: `ideal_speedup` = E[longest answer of a synchronous round] / E[answer length]
= 1 / utilisation at M=1 (the slot waste segment rollout can remove), and `amdahl_bound` = step / (step - gen)
at M=1 (the speedup if rollout cost nothing; the update is the same for every M).

    python benchmarks/bench_segments.py [--quick] [--model PATH] [--out docs/bench_segments.json]

The last line printed is one JSON object with at least `speedup` per M and `ideal_speedup`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from benchlib import quiet_torch, write_result  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


class Probe:
    """Per-step phase times (CPU and wall) and the engine's work, measured from outside the package.

    Wraps `rollout.round`, `reward.score` and `learner.update`, and the engine's forward passes: for the torch
    engine its runner's `prefill` (packed real tokens) and `decode` (the context positions its attention reads:
    each row its own context); for the hf engine a hook on the model's forward (more than one input position: a prefill of B x P padded
    tokens; one position: a decode iteration over B rows attending to the attention-mask length).
    """

    def __init__(self, s) -> None:
        self.c: Counter = Counter()
        self._in_gen = False
        self._t0: dict[str, float] = {}
        self._wrap(s.rollout, "round", "gen")
        self._wrap(s.reward, "score", "reward")
        self._wrap(s.learner, "update", "update")
        gen = s.engine.generate

        def generate(*a, **k):
            self._in_gen = True
            self.c["rounds"] += 1
            try:
                return gen(*a, **k)
            finally:
                self._in_gen = False

        s.engine.generate = generate
        if hasattr(s.engine, "runner"):
            self._wrap_runner(s.engine.runner)
        else:
            s.model.register_forward_pre_hook(self._pre, with_kwargs=True)
            s.model.register_forward_hook(self._post, with_kwargs=True)

    def _wrap_runner(self, run) -> None:
        run.prefill = self._timed(run.prefill, "prefill_fwd", lambda cache, seqs, tables: {
            "prefill_tokens": sum(map(len, seqs)), "prefill_sq": sum(len(x) ** 2 for x in seqs)})

        def reads(cache, tokens, pos, block, plan):  # the positions the decode attention reads (each row's own)
            return {"ctx_sum": int(pos.sum()) + len(pos)}

        run.decode = self._timed(run.decode, "decode_fwd", reads)

    def _wrap(self, obj, name: str, phase: str) -> None:
        counts = {"reward": lambda texts, *a, **k: {"finished": len(texts)},  # one text per finished sample
                  "update": lambda trajs, *a, **k: {  # the trained batch
                      "trained_tokens": sum(len(t.prompt_tokens) + t.response_len for t in trajs)}}.get(phase)
        setattr(obj, name, self._timed(getattr(obj, name), phase, counts))

    def _timed(self, fn, key: str, counts=None):
        """`fn` with its CPU and wall time added to `{key}_{clock}`, and `counts(*args)` to the counters."""
        def run(*a, **k):
            if counts:
                self.c.update(counts(*a, **k))
            t = {c: f() for c, f in CLOCKS.items()}
            try:
                return fn(*a, **k)
            finally:
                for c, f in CLOCKS.items():
                    self.c[f"{key}_{c}"] += f() - t[c]
        return run

    def _pre(self, module, args, kwargs) -> None:
        if self._in_gen:
            self._t0 = {c: f() for c, f in CLOCKS.items()}

    def _post(self, module, args, kwargs, out) -> None:
        if not self._in_gen:
            return
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        B, P = ids.shape
        kind = "prefill" if P > 1 else "decode"
        for c, f in CLOCKS.items():
            self.c[f"{kind}_fwd_{c}"] += f() - self._t0[c]
        if P > 1:
            self.c.update(prefill_tokens=B * P, prefill_sq=B * P * P)
        else:
            self.c.update(ctx_sum=B * mask.shape[1])

    def take(self) -> Counter:
        c, self.c = self.c, Counter()
        return c


def run_config(model_path: str, m: int, seed: int, args) -> dict:
    from ulorl.config import load_run_config
    from ulorl.run.session import open_session
    from ulorl.run.loop import train_step

    run_dir = Path(args.work) / f"M{m}-{time.time_ns()}"
    cfg = load_run_config(None, [
        f"model.path={model_path}", "model.warm_start=none", "data.eval=null", "logging.progress=false",
        "logging.loggers=[jsonl]", f"rollout.num_segments={m}", f"rollout.max_response_len={args.max_len}",
        f"rollout.decode_batch={args.decode_batch}", f"rollout.group_size={args.group_size}",
        f"train.train_groups={args.groups}", "train.lr=1e-9", "algo.dynamic_sampling=false", "checkpoint.every=0",
        "reward.num_workers=1", f"train.seed={seed}", f"data.seed={seed}", "train.max_rounds_per_step=1000",
        f"rollout.engine={args.engine}"])
    s = open_session(cfg, run_dir)
    probe = Probe(s)
    rows, load = [], [os.getloadavg()[0]]
    try:
        for i in range(args.warmup + args.steps):
            probe.take()
            st = s.engine.stats
            it0, slots0 = st.decode_iterations, st.decode_slots
            t = {c: f() for c, f in CLOCKS.items()}
            met = train_step(s)
            dt = {c: f() - t[c] for c, f in CLOCKS.items()}
            if i < args.warmup:
                continue
            c = probe.take()
            r = {"updates": 1.0, "iterations": st.decode_iterations - it0, "row_iters": st.decode_slots - slots0,
                 "rounds": c["rounds"], "prefill_tokens": c["prefill_tokens"], "prefill_sq": c["prefill_sq"],
                 "ctx_sum": c["ctx_sum"], "decoded": met["rollout/decoded_tokens"],
                 "reprefill": met["rollout/reprefill_tokens"],
                 "slots": met["rollout/decoded_tokens"] / max(met["rollout/slot_utilisation"], 1e-9),
                 "trained_tokens": c["trained_tokens"], "finished": c["finished"]}
            for clk in CLOCKS:
                r[f"step_{clk}"] = dt[clk]
                for ph in ("gen", "reward", "update", "prefill_fwd", "decode_fwd"):
                    r[f"{ph}_{clk}"] = c[f"{ph}_{clk}"]
                r[f"other_{clk}"] = dt[clk] - r[f"gen_{clk}"] - r[f"reward_{clk}"] - r[f"update_{clk}"]
                r[f"gen_rest_{clk}"] = r[f"gen_{clk}"] - r[f"prefill_fwd_{clk}"] - r[f"decode_fwd_{clk}"]
            rows.append(r)
        staleness, groups = measured_window(run_dir, args.warmup)
    finally:
        s.close()
    load.append(os.getloadavg()[0])
    n = args.groups * args.group_size
    mean = {k: statistics.fmean(r[k] for r in rows) for k in rows[0]}
    return {"M": m, "seed": seed, "run_dir": str(run_dir), "load_avg": statistics.fmean(load), **mean,
            "step_cpu_median": statistics.median(r["step_cpu"] for r in rows),
            "s_per_sample_cpu": mean["step_cpu"] / n, "s_per_sample_wall": mean["step_wall"] / n,
            "rows_per_iteration": mean["row_iters"] / max(mean["iterations"], 1),
            "iterations_per_round": mean["iterations"] / max(mean["rounds"], 1),
            "slot_utilisation": mean["decoded"] / max(mean["slots"], 1e-9),
            "reprefill_share": mean["reprefill"] / max(mean["decoded"], 1e-9),
            "mean_staleness": statistics.fmean(staleness) if staleness else 0.0, "groups": groups}


def measured_window(run_dir: Path, warmup: int) -> tuple[list[int], list[list[int]]]:
    """Staleness of every sample trained after `warmup` steps, and those samples' lengths by group."""
    staleness, groups = [], {}
    for line in (Path(run_dir) / "samples.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["status"] == "trained" and rec["step"] > warmup:
            staleness.append(rec["step"] - 1 - rec["versions"][0])
            groups.setdefault(rec["group_id"], []).append(rec["response_length"])
    return staleness, list(groups.values())


def find_model(work: str) -> str | None:
    for pattern in ("runs/sft/model", "runs/*/warm_start/model", "runs/*/sft/model", f"{work}/sft/model"):
        for p in sorted(Path(".").glob(pattern)):
            if (p / "model.safetensors").exists():
                return str(p)
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 passes of 4 warm-up + 8 measured steps per M (about 3 "
                   "minutes on one free core, given a model)")
    p.add_argument("--model", default=None, help="SFT model folder (default: an existing runs/.../model, else "
                   "a fresh `ulorl sft` warm start)")
    p.add_argument("--segments", default="1,2,4,8")
    p.add_argument("--engine", default="torch", help="rollout.engine (torch, the default, or hf)")
    p.add_argument("--repeats", type=int, default=5, help="alternating passes over the M values")
    p.add_argument("--steps", type=int, default=16, help="measured steps per configuration and pass")
    p.add_argument("--warmup", type=int, default=4, help="unmeasured steps first (pools fill up)")
    p.add_argument("--max-len", type=int, default=160)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--groups", type=int, default=8, help="groups per update (8 x G = the decode batch)")
    p.add_argument("--seed", type=int, default=0, help="pass k uses seed + k (train.seed and data.seed) for every M")
    p.add_argument("--clock", choices=list(CLOCKS), default="cpu", help="time the speedup is computed from")
    p.add_argument("--work", default="runs/bench_segments")
    p.add_argument("--out", default=None, help="also write the JSON result here")
    args = p.parse_args()
    if args.quick:  # one pass of 4 steps from 2 was a transient: paired passes spread 0.94-1.30x at M = 4
        args.repeats, args.steps, args.warmup = 2, 8, 4
    quiet_torch()
    model = args.model or find_model(args.work)
    if model is None:
        from ulorl.config import load_run_config
        from ulorl.run.sft import run_sft

        cfg = load_run_config("configs/demo.yaml", [])
        model = str(run_sft(cfg.model, cfg.sft, Path(args.work) / "sft", progress=False))
    print(f"model: {model}", file=sys.stderr)
    ms = [int(x) for x in args.segments.split(",")]
    per_m: dict[int, list[dict]] = {m: [] for m in ms}
    for rep in range(args.repeats):
        for m in ms:
            r = run_config(model, m, args.seed + rep, args)
            per_m[m].append(r)
            print(f"pass {rep + 1} M={m}: {r['s_per_sample_cpu'] * 1000:.1f} ms CPU/sample "
                  f"({r['s_per_sample_wall'] * 1000:.1f} wall), gen {r['gen_cpu']:.2f} update {r['update_cpu']:.2f} "
                  f"s CPU/step, util {r['slot_utilisation']:.2f}, load {r['load_avg']:.1f}", file=sys.stderr,
                  flush=True)
    agg = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k not in ("M", "run_dir", "seed", "groups")}
           for m, rs in per_m.items()}
    for m, rs in per_m.items():
        agg[m]["run_dirs"] = [r["run_dir"] for r in rs]
        agg[m]["passes"] = rs
    key = f"s_per_sample_{args.clock}"
    base = agg[ms[0]]
    result = {"speedup": {str(m): base[key] / agg[m][key] for m in ms},
              "speedup_wall": {str(m): base["s_per_sample_wall"] / agg[m]["s_per_sample_wall"] for m in ms},
              "gen_speedup": {str(m): base[f"gen_{args.clock}"] / agg[m][f"gen_{args.clock}"] for m in ms},
              "ideal_speedup": 1.0 / base["slot_utilisation"] if ms[0] == 1 else None,
              "amdahl_bound": base[f"step_{args.clock}"] / (base[f"step_{args.clock}"] - base[f"gen_{args.clock}"]),
              "clock": args.clock, "load_avg": statistics.fmean(r["load_avg"] for rs in per_m.values() for r in rs),
              "model": model, "per_M": {str(m): agg[m] for m in ms},
              "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work")}}
    write_result(result, args.out)  # with every pass (bench_plan.py fits the planner on them)
    for v in result["per_M"].values():
        v.pop("passes")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
