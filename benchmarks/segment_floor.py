"""What segment rollout can gain on the GPU check's workload, by arithmetic: the planner (`ulorl plan`'s simulation
of the real pools and rollout) priced with the bandwidth floor of the Qwen2.5-0.5B shape on an H200.

Issue 26 asks, on one H200, for M = 4 at >= 1.6x the trained samples per second of M = 1 on its long-tailed
workload (32 groups x 8 in a decode batch of 256, lengths geometric with mean L/8, L = 16k, 64-token prompts, the
0.5B shape), and for decode at <= 2x the bandwidth floor. This prices that workload with cost models built from
bytes, not from a run:

- `floor`: every decode iteration reads the weights once (`decode_fixed` = weight bytes / bandwidth) and each live
  row its context once (`decode_ctx` = K/V bytes a token / bandwidth); the logits and the sampler's passes per row
  (`decode_row`, 3 passes over bf16 logits); prefill at half the H200's dense bf16 peak (989 TFLOPS; an assumption,
  and a small term here);
- `floor+host`: plus the host's part of a decode step as `bench_host_step.py` measured it (on a CPU, the GPU path's
  code with the model's work taken out; `docs/bench_host_step.json`), fitted as a fixed and a per-row cost;
- `2x floor+host`: the decode terms at the issue's decode target, `2.65x floor+host` at flex's measured 2.6-2.7x
  (H200, 2026-12-04), both as if the cost above the floor grew with the bytes read;
- `floor+0.5ms`, `floor+1ms`: the floor plus a cost per iteration that grows with neither rows nor contexts (on a
  GPU: the latency of a step's hundreds of small kernels, even replayed from a graph; the host's step);
  `floor+4ms`: about what the launch-bound engine paid per iteration (H200, 2026-11-30).

The bandwidth is the one the check measured on the H200 (`docs/gpu_check_h200_2026-12-04.json`, mean of its two
calls). The GPU check itself reports each M's `decode_floor_s` from the counts of its own rollouts
(`gpu_paged_check.py`, `floor_speedup_M4`), so a run on the device can be read against this.

    python benchmarks/segment_floor.py [--out docs/segment_floor.json]   # ~10 s, no GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ulorl.logging.base import json_text  # noqa: E402
from ulorl.plan.cost import CostModel  # noqa: E402
from ulorl.plan.lengths import parse_lengths  # noqa: E402
from ulorl.plan.memory import ModelShape, kv_cache_bytes  # noqa: E402
from ulorl.plan.planner import Workload, predict, simulate_all  # noqa: E402

from gpu_paged_check import SHAPES  # noqa: E402  (a sibling script: benchmarks/ is on the path)

H200_RUN = ROOT / "docs" / "gpu_check_h200_2026-12-04.json"
HOST_STEP = ROOT / "docs" / "bench_host_step.json"
BF16_PEAK_FLOPS = 989e12  # H200 dense bfloat16 (NVIDIA's figure); prefill assumed at half of it
SEGMENTS = [1, 2, 4, 8]


def shape_bytes() -> dict:
    """Weight bytes and K/V bytes a token of the check's Qwen2.5-0.5B shape (its model ties the embeddings) in
    bfloat16, counted by the memory planner (`ulorl.plan.memory`)."""
    m = ModelShape.from_config({**SHAPES["qwen2.5-0.5b"], "tie_word_embeddings": True})
    return {"params": m.params, "weight_bytes": 2 * m.params, "vocab": m.vocab, "layers": m.layers,
            "hidden": m.hidden, "kv_bytes_per_token": int(kv_cache_bytes(m, tokens=1))}


def bandwidth() -> float:
    runs = json.loads(H200_RUN.read_text())
    return statistics.fmean(r["paged_engine"]["bandwidth"]["bytes_per_s"] for r in runs.values()
                            if isinstance(r, dict) and "bandwidth" in r.get("paged_engine", {}))


def host_costs() -> tuple[float, float]:
    """(seconds per step, seconds per row per step) through the measured 64- and 256-row host steps at 2k."""
    steps = {s["rows"]: s["ms_per_step"] / 1000 for s in json.loads(HOST_STEP.read_text())["steps"]
             if s["context"] == 2048}
    per_row = (steps[256] - steps[64]) / (256 - 64)
    return steps[64] - 64 * per_row, per_row


def cost_models(b: dict, bw: float) -> dict[str, CostModel]:
    flops_per_token = 2 * b["params"]
    floor = dict(decode_fixed=b["weight_bytes"] / bw, decode_ctx=b["kv_bytes_per_token"] / bw,
                 decode_row=3 * 2 * b["vocab"] / bw, prefill_token=flops_per_token / (BF16_PEAK_FLOPS / 2),
                 # causal attention of a prefix of n tokens: QK and PV, 2 FLOPs a multiply-add, n^2 / 2 pairs
                 prefill_sq=2 * b["hidden"] * b["layers"] / (BF16_PEAK_FLOPS / 2))
    host_fixed, host_row = host_costs()

    def scaled(k: float, fixed: float = 0.0, row: float = 0.0) -> CostModel:
        c = dict(floor)
        c.update(decode_fixed=k * floor["decode_fixed"] + fixed, decode_ctx=k * floor["decode_ctx"],
                 decode_row=k * floor["decode_row"] + row)
        return CostModel(**c, padded=False)

    return {"floor": scaled(1.0), "floor+host": scaled(1.0, host_fixed, host_row),
            "2x floor+host": scaled(2.0, host_fixed, host_row), "2.65x floor+host": scaled(2.65, host_fixed, host_row),
            "floor+0.5ms": scaled(1.0, 0.5e-3), "floor+1ms": scaled(1.0, 1e-3), "floor+4ms": scaled(1.0, 4e-3)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--seeds", type=int, default=5, help="simulation seeds (the spread of the predictions)")
    args = p.parse_args()
    b, bw = shape_bytes(), bandwidth()
    costs = cost_models(b, bw)
    out = {"shape": b, "bandwidth_bytes_per_s": bw, "costs": {k: c.to_dict() for k, c in costs.items()},
           "workloads": []}
    for batch in (256, 64):  # the batch (32 groups x 8), and 8 groups x 8
        w_out = {"decode_batch": batch, "train_groups": batch // 8, "lengths": "geometric:mean=2048,max=16384",
                 "L": 16384, "prompt_len": 64, "speedup": {}}
        sims = [simulate_all(Workload(parse_lengths(w_out["lengths"]), 16384, 8, batch, batch // 8, 64, seed=s),
                             SEGMENTS, padded=False) for s in range(args.seeds)]
        m1 = [s[1].counts for s in sims]
        w_out["m1_decode_share_weights"] = statistics.fmean(  # at the floor: the weights' part of M = 1's decode
            c["iterations"] * costs["floor"].decode_fixed / costs["floor"].phases(c)["decode"] for c in m1)
        for name, cost in costs.items():
            rows = [predict(s, cost) for s in sims]
            w_out["speedup"][name] = {str(m): [r[i].speedup for r in rows] for i, m in enumerate(SEGMENTS)}
            w_out["speedup"][name]["m1_step_s"] = [r[0].step_s for r in rows]
        out["workloads"].append(w_out)
        print(f"decode batch {batch}: weights are {w_out['m1_decode_share_weights']:.0%} of M = 1's decode floor")
        for name, sp in w_out["speedup"].items():
            print(f"  {name:>17}: " + "  ".join(f"M={m} {min(sp[str(m)]):.2f}-{max(sp[str(m)]):.2f}x"
                                                 for m in SEGMENTS[1:]))
    if args.out:
        Path(args.out).write_text(json_text(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
