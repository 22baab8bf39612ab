"""The paged torch engine against the slot engine it replaced, side by side in one process (CPU).

The slot engine (`torch_engine.py`, `decoder.py`, `kv_cache.py`, `token_sampling.py` at commit `--old`) is
read from git into a temporary package, so both run on the same model, the same prefixes and the same
length schedule (forced EOS, `forced_eos.py`), alternating so that the drift of a shared machine cancels.
Workloads, shaped like the configs' rollout rounds and evaluation:

- `demo`: the built-in model, 64 rows (6 groups x 8 fresh 20-token prompts, 16 continued samples of 40-115
  tokens), 40 new tokens, lengths drawn with mean 30;
- `long`: `builtin:long`, 64 rows (6 groups x 8 fresh prompts, 8 continued of 512-1,408 tokens, 8 of
  2,560-3,456: the long run's tail), 512 new tokens, lengths drawn with mean 150;
- `eval` (`--eval`, one fresh subprocess per engine, for peak RSS): `builtin:long`, 300 prompts x 4 samples,
  4,096 new tokens, max_batch 256, lengths drawn with mean 90 (the long task's answers: docs/task.md).

Reported: CPU seconds per call (median over `--repeats`), new / old, and for `eval` the peak RSS over the
process's RSS before the call, the KV memory each engine held at its peak (slots: the whole cache; paged:
the blocks in use) next to the tokens alive at that moment.

    python benchmarks/bench_paged_engine.py [--repeats 3] [--eval] [--out docs/bench_paged_engine.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from benchlib import emit, machine, quiet_torch
from forced_eos import ForcedEOS, draw_lengths

ROOT = Path(__file__).resolve().parents[1]
OLD_FILES = ("torch_engine", "decoder", "kv_cache", "token_sampling")


def load_old_engine(commit: str):
    """The slot engine's `torch_engine` module as it was at `commit`."""
    pkg = Path(tempfile.mkdtemp()) / "old_slot_engine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in OLD_FILES:
        src = subprocess.run(["git", "show", f"{commit}:ulorl/rollout/engines/{name}.py"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        for other in OLD_FILES:
            src = src.replace(f"ulorl.rollout.engines.{other}", f"old_slot_engine.{other}")
        (pkg / f"{name}.py").write_text(src)
    sys.path.insert(0, str(pkg.parent))
    import old_slot_engine.torch_engine as old

    return old


def old_stops(old, eos_id: int, stop) -> None:
    """The slot engine with rows ended by `stop(run, rows)` -> one bool per live row (its `req`), called after each
    sample: a stopped row's token becomes `eos_id` and it finishes as on a real EOS. `run.seed` is the call's seed."""
    base = old.__dict__.setdefault("_PlainRun", old._Run)  # not a previous workload's subclass

    class Run(base):
        def __init__(self, eng, prefixes, max_new, params, seed, progress=None):
            super().__init__(eng, prefixes, max_new, params, seed, progress)
            self.seed = seed

        def _retire(self, tok):
            for i, (r, hit) in enumerate(zip(self.req, stop(self, self.req))):
                if hit:
                    tok[i] = eos_id
                    self.tokens[r, self.n_new[r] - 1] = eos_id
            return super()._retire(tok)

    old._Run = Run


def old_forced(old, eng, lengths: list[int], eos_id: int) -> None:
    """The slot engine with the same forced EOS: row r ends at `lengths[r]` tokens."""
    old_stops(old, eos_id, lambda run, rows: [run.n_new[r] >= lengths[r] for r in rows])


def prefix(i: int, n: int) -> list[int]:
    return [5 + (i * 7 + j) % 40 for j in range(n)]


def workload(name: str):
    """(model name, prefixes, new tokens, lengths, max_batch)."""
    fresh = [prefix(g, 20) for g in range(6) for _ in range(8)]
    if name == "demo":
        prefixes = fresh + [prefix(100 + i, 40 + 5 * i) for i in range(16)]
        return "builtin", prefixes, 40, draw_lengths(64, 30, 40, seed=1), 64
    if name == "long":
        prefixes = fresh + [prefix(100 + i, 512 + 128 * i) for i in range(8)] + \
            [prefix(200 + i, 2560 + 128 * i) for i in range(8)]
        return "builtin:long", prefixes, 512, draw_lengths(64, 150, 512, seed=2), 64
    prefixes = [prefix(p, 16 + p % 9) for p in range(300) for _ in range(4)]
    return "builtin:long", prefixes, 4096, draw_lengths(1200, 90, 4096, seed=3), 256


def build(kind: str, model, lengths, max_batch: int, commit: str):
    eos = model.config.vocab_size + 7  # never sampled: lengths come from the schedule
    if kind == "old":
        old = load_old_engine(commit)
        eng = old.TorchEngine(model, [eos], max_batch=max_batch)
        old_forced(old, eng, lengths, eos)
    else:
        from ulorl.rollout.engines.torch import TorchEngine

        eng = TorchEngine(model, [eos], max_batch=max_batch)
        ForcedEOS.install(eng, lengths, eos)
    return eng


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident memory of this process."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def one_eval(kind: str, commit: str) -> dict:
    from ulorl.models import load_model
    from ulorl.rollout.engines import SamplingParams

    name, prefixes, new, lengths, mb = workload("eval")
    model = load_model(name)
    model.eval()
    eng = build(kind, model, lengths, mb, commit)
    before, _ = rss_mib()
    c0, w0 = time.process_time(), time.perf_counter()
    outs = eng.generate(prefixes, new, SamplingParams(temperature=0.85), seed=0)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    _, peak = rss_mib()
    assert [len(o.tokens) for o in outs] == lengths
    res = {"cpu_s": cpu, "wall_s": wall, "rss_before_mib": before, "rss_peak_mib": peak,
           "rss_growth_mib": peak - before, "new_tokens": sum(lengths)}
    if kind == "old":
        res["kv_mib"] = eng.cache.nbytes / 2**20
    else:
        x = eng.stats.extra
        res["kv_mib"] = x["peak_blocks"] * eng.cache.block_bytes / 2**20
        res["live_tokens_at_peak"] = x["live_tokens_at_peak"]
        res["kv_tokens_at_peak"] = x["peak_blocks"] * eng.block_size
        res["kv_over_live"] = res["kv_tokens_at_peak"] / x["live_tokens_at_peak"]
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--old", default="938417f", help="the commit of the slot engine")
    p.add_argument("--workloads", default="demo,long")
    p.add_argument("--eval", action="store_true", help="also the evaluation workload (two subprocesses)")
    p.add_argument("--one-eval", choices=("old", "new"), help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    quiet_torch(1)
    if args.one_eval:
        print(json.dumps(one_eval(args.one_eval, args.old)))
        return 0
    from ulorl.models import load_model
    from ulorl.rollout.engines import SamplingParams

    load_before = os.getloadavg()
    result: dict = {"benchmark": "bench_paged_engine", "old_commit": args.old, "repeats": args.repeats}
    params = SamplingParams(temperature=0.85)
    for w in args.workloads.split(","):
        name, prefixes, new, lengths, mb = workload(w)
        model = load_model(name)
        model.eval()
        engines = {k: build(k, model, lengths, mb, args.old) for k in ("old", "new")}
        secs: dict[str, list[float]] = {k: [] for k in engines}
        for rep in range(args.repeats):
            for k in (("old", "new") if rep % 2 == 0 else ("new", "old")):
                c0 = time.process_time()
                outs = engines[k].generate(prefixes, new, params, seed=rep)
                secs[k].append(time.process_time() - c0)
                assert [len(o.tokens) for o in outs] == lengths
                print(f"{w:5s} {k}: {secs[k][-1]:.2f} s", flush=True)
        med = {k: statistics.median(v) for k, v in secs.items()}
        result[w] = {"model": name, "rows": len(prefixes), "new_tokens": new, "decoded": sum(lengths),
                     "cpu_s": med, "cpu_s_all": secs, "new_over_old": med["new"] / med["old"]}
    if args.eval:
        result["eval"] = {}
        for k in ("old", "new"):
            out = subprocess.run([sys.executable, __file__, "--one-eval", k, "--old", args.old], check=True,
                                 capture_output=True, text=True, cwd=ROOT / "benchmarks").stdout
            result["eval"][k] = json.loads(out.strip().splitlines()[-1])
            print(f"eval {k}: {result['eval'][k]}", flush=True)
        e = result["eval"]
        result["eval"]["new_over_old_cpu"] = e["new"]["cpu_s"] / e["old"]["cpu_s"]
    result["machine"] = machine(load_before)
    return emit(result, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
