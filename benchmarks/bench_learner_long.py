"""One long sample through the learner: peak memory and seconds per trained token, against `ulorl plan --memory`.

A mid-size Qwen3 built in code (8 layers, hidden 512, 8 heads, 4 KV heads, head_dim 64, MLP 1536, the
built-in tokenizer's 448-token vocabulary; 25M parameters, float32, sdpa attention) and one `Learner.update`
(default config: POIS, DMMPT, AdamW) on samples of L tokens (a 16-token prompt), for

- `plain`: no gradient checkpointing;
- `ckpt`: `model.gradient_checkpointing`;
- `ckpt_offload`: checkpointing + `model.activation_offload` (on a CPU the offload moves nothing: it
  shows the cost of the hooks, not a saving);
- `sp2_ckpt`: checkpointing + `train.sequence_parallel=2` (two gloo processes of one thread each; the
  peak is the larger rank's);
- `batch_padded` / `batch_packed`: 8 samples of long-tailed lengths (40, 20, 12, 8, 8, 5, 4, 3% of L)
  with checkpointing and `train.micro_batch_tokens=L`, padded vs packed (`train.packing`).

Each (variant, L) runs in a fresh subprocess with one torch thread and glibc's mmap threshold fixed at
64 KiB (`MALLOC_MMAP_THRESHOLD_`), so freed tensors leave the resident set and `ru_maxrss` follows the
live tensors. The peak is `ru_maxrss` after the update minus the resident set just before it (model and
AdamW state already there after a 64-token warm-up update): gradients + activations + the head's buffers,
what `ulorl.plan.memory.learner_memory` calls `update_increment`; the JSON has both and their ratio.
A point whose prediction exceeds `--max-gib` or 60% of the available memory is skipped.

    python benchmarks/bench_learner_long.py [--quick] [--lengths 2048,4096,8192,16384] \
        [--out docs/bench_learner_long.json] [--plot docs/figures/bench_learner_long.png]

The last line printed is the JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchlib import emit, machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

ROOT = Path(__file__).resolve().parents[1]
SHAPE = dict(model_type="qwen3", num_hidden_layers=8, hidden_size=512, num_attention_heads=8, num_key_value_heads=4,
             head_dim=64, intermediate_size=1536, vocab_size=448, tie_word_embeddings=True)
VARIANTS = ("plain", "ckpt", "ckpt_offload", "sp2_ckpt", "batch_padded", "batch_packed")
BATCH_SHARES = (0.40, 0.20, 0.12, 0.08, 0.08, 0.05, 0.04, 0.03)


def build_model(shape: dict, max_len: int, seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**{k: v for k, v in shape.items() if k != "model_type"}, max_position_embeddings=max_len + 64,
                      pad_token_id=0, eos_token_id=1, bos_token_id=None, attn_implementation="sdpa")
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg)


def sample(length: int, vocab: int, seed: int, prompt: int = 16):
    from ulorl.trajectory import Trajectory

    g = torch.Generator().manual_seed(seed)
    n = length - prompt
    t = Trajectory(sample_id=f"g0/{seed}", group_id="g0", prompt_id=0,
                   prompt_tokens=torch.randint(2, vocab, (prompt,), generator=g).tolist(), ground_truth="0",
                   data_source="bench", reward=float(seed % 2), stop_reason="eos")
    toks, lps = torch.randint(2, vocab, (n,), generator=g).tolist(), (-torch.rand(n, generator=g) * 3).tolist()
    t.append_segment(toks[: n // 2], lps[: n // 2], 0)  # two segments: one a version old
    t.append_segment(toks[n // 2 :], lps[n // 2 :], 1)
    return t


def rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def trajs_for(variant: str, L: int) -> list:
    if variant.startswith("batch"):
        return [sample(max(32, int(L * f)), SHAPE["vocab_size"], seed=i) for i, f in enumerate(BATCH_SHARES)]
    return [sample(L, SHAPE["vocab_size"], seed=0)]


def measure(ln, trajs) -> dict:
    """Warm up on 64 tokens (AdamW state allocated), then one update on `trajs`: the resident-set increment."""
    ln.update([sample(64, SHAPE["vocab_size"], seed=7)], 1)
    base = rss_bytes()
    w0 = time.perf_counter()
    m = ln.update(trajs, 1)
    wall = time.perf_counter() - w0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"peak_increment_mib": (peak - base) / 2 ** 20, "base_mib": base / 2 ** 20, "wall_s": wall,
            "trained_tokens": sum(t.response_len for t in trajs), "pad_ratio": m["perf/pad_ratio"],
            "micro_batches": m["actor/micro_batches"], "entropy": m["actor/entropy"]}


def _learner(variant: str, L: int, sp: int = 1):
    from ulorl.config import AlgoConfig, TrainConfig
    from ulorl.learners.checkpointing import enable_gradient_checkpointing
    from ulorl.learners.offload import enable_activation_offload

    model = build_model(SHAPE, L)
    if variant != "plain":
        enable_gradient_checkpointing(model)
    if variant == "ckpt_offload":
        enable_activation_offload(model)
    train = TrainConfig(lr=1e-6, micro_batch_tokens=L, packing=variant != "batch_padded", sequence_parallel=sp)
    return model, train, AlgoConfig()


def _sp_rank(rank: int, L: int, out: str) -> None:
    torch.set_num_threads(1)
    from ulorl.distributed.sharded_learner import ShardedLearner, init_process_group

    init_process_group(rank, 2, rendezvous_file=f"{out}.rendezvous")
    model, train, algo = _learner("sp2_ckpt", L, sp=2)
    ln = ShardedLearner(model, train, algo, temperature=0.85, pad_id=0, sharding="replicate")
    Path(f"{out}.{rank}").write_text(json.dumps(measure(ln, trajs_for("sp2_ckpt", L))))
    import torch.distributed as dist

    dist.destroy_process_group()


def child(variant: str, L: int) -> dict:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)
    if variant == "sp2_ckpt":
        import tempfile

        import torch.multiprocessing as mp

        with tempfile.TemporaryDirectory() as d:
            out = f"{d}/r"
            mp.start_processes(_sp_rank, args=(L, out), nprocs=2, start_method="fork")
            ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(2)]
        best = max(ranks, key=lambda x: x["peak_increment_mib"])
        return {**best, "wall_s": max(r["wall_s"] for r in ranks), "ranks": ranks}
    from ulorl.learners.local import LocalLearner

    model, train, algo = _learner(variant, L)
    return measure(LocalLearner(model, train, algo, temperature=0.85, pad_id=0), trajs_for(variant, L))


def predicted_mib(variant: str, L: int) -> float:
    from dataclasses import replace

    from ulorl.plan.memory import LearnerSetup, ModelShape, learner_memory

    shape = ModelShape.from_config(SHAPE)
    setup = LearnerSetup(tokens=L, checkpointing=variant != "plain", offload=False,
                         sequence_parallel=2 if variant == "sp2_ckpt" else 1, replicated=variant == "sp2_ckpt")
    if not variant.startswith("batch_"):
        return learner_memory(shape, setup)["update_increment"] / 2 ** 20
    from ulorl.learners.micro_batch import pack_first_fit, split_sorted

    lens = sorted((max(32, int(L * f)) for f in BATCH_SHARES), reverse=True)
    if variant == "batch_padded":  # micro-batches of rows padded to their longest
        batches = [((hi - lo) * lens[lo], hi - lo) for lo, hi in split_sorted(lens, L)]
    else:  # packed rows, no mask
        batches = [(sum(lens[i] for i in row), 0) for row in pack_first_fit(lens, L)]
    # the peak is the largest over micro-batches; from the second on every gradient is held
    return max(learner_memory(shape, replace(setup, tokens=t, padded_rows=rows, grads_held=i > 0))
               ["update_increment"] for i, (t, rows) in enumerate(batches)) / 2 ** 20


def run_child(variant: str, L: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536",
           "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, __file__, "--child", variant, str(L)], capture_output=True, text=True,
                       env=env)
    if r.returncode != 0:
        return {"error": r.stderr[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for i, v in enumerate(VARIANTS):
        pts = sorted((int(L), p) for L, p in result["points"].get(v, {}).items() if "peak_increment_mib" in p)
        if not pts:
            continue
        xs = [L / 1024 for L, _ in pts]
        a1.plot(xs, [p["peak_increment_mib"] * 1024 / L for L, p in pts], "o-", color=f"C{i}", label=v)
        a1.plot(xs, [p["predicted_mib"] * 1024 / L for L, p in pts], "x--", color=f"C{i}", alpha=0.6)
        a2.plot(xs, [1e3 * p["wall_s"] / p["trained_tokens"] for _, p in pts], "o-", color=f"C{i}", label=v)
    a1.set_ylabel("peak memory per token (KiB; x: ulorl plan --memory)")
    a2.set_ylabel("ms per trained token")
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xlabel("tokens per sample L (k)")
        a.grid(True, alpha=0.3)
    a1.set_yscale("log", base=2)
    a1.legend(fontsize=8)
    fig.suptitle("one learner update, 8 layers x hidden 512, float32, 1 CPU thread per process")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", nargs=2, metavar=("VARIANT", "L"), help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="2k and 4k only")
    p.add_argument("--lengths", default="2048,4096,8192,16384")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--max-gib", type=float, default=8.0, help="skip points predicted above this")
    p.add_argument("--max-seconds", type=float, default=300.0,
                   help="skip a variant's longer points once one took this long (time grows at least as L)")
    p.add_argument("--out")
    p.add_argument("--update", action="store_true", help="keep the other points already in --out")
    p.add_argument("--repredict", action="store_true",
                   help="measure nothing: recompute the predictions of the points in --out (and --plot)")
    p.add_argument("--plot")
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return 0
    if args.repredict:
        result = json.loads(Path(args.out).read_text())
        for v, by_len in result["points"].items():
            for L, pt in by_len.items():
                pt["predicted_mib"] = predicted_mib(v, int(L))
                if "peak_increment_mib" in pt:
                    pt["predicted_over_measured"] = pt["predicted_mib"] / pt["peak_increment_mib"]
        if args.plot:
            plot(result, Path(args.plot))
        emit(result, args.out)
        return 0
    load = os.getloadavg()
    lengths = [2048, 4096] if args.quick else [int(x) for x in args.lengths.split(",")]
    points: dict[str, dict[str, dict]] = {}
    if args.update and args.out and Path(args.out).exists():  # add to the points measured before
        points = json.loads(Path(args.out).read_text())["points"]
    for v in args.variants.split(","):
        slow = False
        for L in lengths:
            pred = predicted_mib(v, L)
            if slow or pred > min(args.max_gib * 1024, 0.6 * available_mib()):
                points.setdefault(v, {})[str(L)] = {"skipped": "too slow" if slow else "predicted memory",
                                                    "predicted_mib": pred}
                continue
            got = run_child(v, L)
            got["predicted_mib"] = pred
            if "peak_increment_mib" in got:
                got["predicted_over_measured"] = pred / got["peak_increment_mib"]
                got["ms_per_trained_token"] = 1e3 * got["wall_s"] / got["trained_tokens"]
                slow = got["wall_s"] * 2 > args.max_seconds
            points.setdefault(v, {})[str(L)] = got
            print(f"{v:13s} L={L:6d}  measured {got.get('peak_increment_mib', float('nan')):8.1f} MiB  "
                  f"predicted {pred:8.1f} MiB  {got.get('wall_s', float('nan')):7.1f} s", file=sys.stderr,
                  flush=True)
    result = {"benchmark": "bench_learner_long", "machine": machine(load), "model": SHAPE,
              "command": " ".join(sys.argv[1:]),
              "settings": {"threads_per_process": 1, "prompt_tokens": 16, "batch_shares": BATCH_SHARES},
              "points": points}
    if args.plot:
        plot(result, Path(args.plot))
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
