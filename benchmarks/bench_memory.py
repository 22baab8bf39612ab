"""Long-sequence memory: peak memory of one learner update on a single T-token response, chunked vs naive logits.

A tiny Qwen3 model with a 32k vocabulary (hidden 64, 1 layer by default: the LM head, not the body, is what
grows with V) and one response of T tokens (T = 2k ... 32k, prompt 16 tokens). One `Learner.update` (default
config: POIS, DMMPT, AdamW) with

- `chunked`: the learner as it is: log-probs and entropies from the LM head one chunk of `train.logit_chunk`
  positions at a time, recomputed in backward (never a `(T, V)` tensor);
- `naive`: the same update with `forward` replaced by the straightforward code: `model(...).logits`,
  `log_softmax(logits / temperature)` over the full `(T, V)` logits, the log-probs of the sampled tokens
  gathered from it and the entropy `-(p * log p).sum(-1)` from the same log-probs (no grad).

Each (variant, T) runs in a fresh subprocess; its peak is `ru_maxrss` after the update minus `ru_maxrss` just
before it (model, optimizer-free learner and inputs already built), so imports and the model do not count.
A naive run whose predicted peak (from the smaller T: naive memory is about proportional to T) exceeds
`--naive-max-gib` or 60% of the free memory is skipped and reported as extrapolated (a least-squares line
through the measured naive points).

    python benchmarks/bench_memory.py [--quick] [--out docs/bench_memory.json] [--plot docs/figures/bench_memory.png]

The last line printed is one JSON object with `peak_mib` per variant and T, the chunked/naive ratios and the
fitted growth (MiB per 1k tokens) of each variant.
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


def _child(args) -> None:
    torch.set_num_threads(1)
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.utils import logging as hf_logging

    from ulorl.config import AlgoConfig, TrainConfig
    from ulorl.learners.local import LocalLearner
    from ulorl.trajectory import Trajectory

    hf_logging.set_verbosity_error()

    class NaiveLearner(LocalLearner):
        def forward(self, mb):
            logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits  # (b, S, V)
            logp = torch.log_softmax(logits.float() / self.temperature, dim=-1)
            lp_flat = logp[mb.hidden_rows, mb.hidden_cols, mb.targets]
            with torch.no_grad():  # lean: from the same log-probs (a separate entropy pass would hold more copies)
                ent_flat = -(logp.exp() * logp).sum(-1)[mb.hidden_rows, mb.hidden_cols]
            logprobs = torch.zeros(mb.response_mask.shape).index_put((mb.sample_rows, mb.target_cols), lp_flat)
            entropy = torch.zeros(mb.response_mask.shape)
            entropy[mb.sample_rows, mb.target_cols] = ent_flat
            return logprobs, entropy

    T, V = args.T, args.vocab
    config = Qwen3Config(vocab_size=V, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=args.hidden // 2, max_position_embeddings=T + 64, tie_word_embeddings=True,
                         pad_token_id=0, eos_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(2, V, (16,), generator=g).tolist()
    t = Trajectory(sample_id="g0/0", group_id="g0", prompt_id=0, prompt_tokens=prompt, ground_truth="0",
                   data_source="bench", reward=1.0, stop_reason="eos")
    half = T // 2  # two segments: one a version old
    toks, lps = torch.randint(2, V, (T,), generator=g).tolist(), (-torch.rand(T, generator=g) * 3).tolist()
    t.append_segment(toks[:half], lps[:half], 0)
    t.append_segment(toks[half:], lps[half:], 1)
    cls = NaiveLearner if args.variant == "naive" else LocalLearner
    ln = cls(model, TrainConfig(lr=1e-6, micro_batch_tokens=T + 16, logit_chunk=args.chunk), AlgoConfig(),
             temperature=0.85, pad_id=0)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    w0, c0 = time.perf_counter(), time.process_time()
    m = ln.update([t], 1)
    w1, c1 = time.perf_counter(), time.process_time()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"variant": args.variant, "T": T, "peak_mib": (peak - base) / 1024, "base_mib": base / 1024,
                      "wall_s": w1 - w0, "cpu_s": c1 - c0, "entropy": m["actor/entropy"],
                      "micro_batches": m["actor/micro_batches"]}))


def run_child(variant: str, T: int, args) -> dict:
    cmd = [sys.executable, __file__, "--child", "--variant", variant, "--T", str(T), "--vocab", str(args.vocab),
           "--hidden", str(args.hidden), "--layers", str(args.layers), "--chunk", str(args.chunk)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"variant": variant, "T": T, "error": r.stderr[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def free_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares line `a + b T` through (T, MiB); through the origin for a single point."""
    n = len(points)
    if n == 1:
        return 0.0, points[0][1] / points[0][0]
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sum((p[0] - mx) ** 2 for p in points)
    return my - b * mx, b


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for variant, style in (("chunked", "o-"), ("naive", "s-")):
        pts = sorted((int(T), v) for T, v in result["peak_mib"][variant].items() if v is not None)
        if pts:
            ax.plot([p[0] / 1024 for p in pts], [p[1] / 1024 for p in pts], style, label=f"{variant} (measured)")
    ext = result.get("naive_extrapolated_mib", {})
    if ext:
        last = sorted((int(T), v) for T, v in result["peak_mib"]["naive"].items() if v is not None)[-1:]
        pts = last + sorted((int(T), v) for T, v in ext.items())
        ax.plot([p[0] / 1024 for p in pts], [p[1] / 1024 for p in pts], "s--", color="C1", alpha=0.6,
                label="naive (extrapolated)")
    ax.set_xlabel("response length T (tokens)")
    ax.set_ylabel("peak memory of one update (GiB)")
    ax.set_title(f"V = {result['settings']['vocab']}, logit chunk {result['settings']['chunk']}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ts = sorted({int(T) for v in result["peak_mib"].values() for T in v})
    ax.set_xticks([T / 1024 for T in ts], [f"{T // 1024}k" for T in ts])
    ys = [2.0 ** k for k in range(-3, 6)]
    ax.set_yticks(ys, [f"{y:g}" for y in ys])
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small run (< 2 minutes on 2 cores)")
    p.add_argument("--lengths", default="2048,4096,8192,16384,32768")
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--chunk", type=int, default=1024, help="train.logit_chunk")
    p.add_argument("--naive-max-gib", type=float, default=12.0, help="skip naive runs predicted above this")
    p.add_argument("--out", default=None, help="also write the JSON result here")
    p.add_argument("--plot", default=None, help="write the memory-vs-T plot (PNG) here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="chunked", help=argparse.SUPPRESS)
    p.add_argument("--T", type=int, default=2048, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args)
        return 0
    if args.quick:
        args.lengths, args.naive_max_gib = "1024,4096", min(args.naive_max_gib, 1.5)
    lengths = [int(x) for x in args.lengths.split(",")]
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    runs, skipped = [], []
    for T in lengths:
        runs.append(run_child("chunked", T, args))
        print(json.dumps(runs[-1])[:300], file=sys.stderr, flush=True)
        done = [(r["T"], r["peak_mib"]) for r in runs if r["variant"] == "naive" and "peak_mib" in r]
        if done:
            a, b = fit(done)
            need = max(a + b * T, done[-1][1] * T / done[-1][0])  # naive memory is about proportional to T
        else:
            need = 5 * 4 * T * args.vocab / 2**20  # about five float32 (T, V) copies
        if need > args.naive_max_gib * 1024 or need > 0.6 * free_mib():
            skipped.append(T)
            print(f"naive T={T} skipped: predicted {need / 1024:.1f} GiB", file=sys.stderr, flush=True)
            continue
        runs.append(run_child("naive", T, args))
        print(json.dumps(runs[-1])[:300], file=sys.stderr, flush=True)
    peak = {v: {str(r["T"]): r.get("peak_mib") for r in runs if r["variant"] == v} for v in ("chunked", "naive")}
    growth = {}
    for v in ("chunked", "naive"):
        pts = [(int(T), m) for T, m in peak[v].items() if m is not None]
        if pts:
            a, b = fit(pts)
            growth[v] = {"intercept_mib": a, "mib_per_1k_tokens": 1024 * b}
    extrap = {}
    if skipped and "naive" in growth:
        g = growth["naive"]
        extrap = {str(T): g["intercept_mib"] + g["mib_per_1k_tokens"] * T / 1024 for T in skipped}
    ratio = {T: peak["chunked"][T] / (peak["naive"].get(T) or extrap.get(T) or float("nan"))
             for T in peak["chunked"] if peak["chunked"][T] is not None}
    result = {
        "peak_mib": peak, "chunked_over_naive": ratio, "naive_extrapolated_mib": extrap, "growth": growth,
        "logits_copy_mib": {str(T): 4 * T * args.vocab / 2**20 for T in lengths},
        "targets": {"chunked_over_naive_max": 0.25},
        "runs": runs,
        "machine": machine(load_before),
        "elapsed_s": time.perf_counter() - t0,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "plot", "child", "variant", "T")},
    }
    if args.plot:
        plot(result, Path(args.plot))
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
