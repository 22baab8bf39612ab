"""Which settings decide a CPU run's floats, and what pinning them costs (`train.cpu_numerics`).

Each cell runs in a fresh interpreter: 5 AdamW updates of a built-in model on 4 x 256 random tokens, then the
SHA-256 of its weights (first 16 hex digits), torch's CPU kernel family and the mean time of updates 2-5. Run it on
two machines and compare the `portable` rows: the same hashes mean the same warm starts, samples and results
from one config (ulorl/run/numerics.py, docs/reproduction.md).

    python benchmarks/numerics_fingerprint.py --out docs/numerics_fingerprint_xeon.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchlib import emit, machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

from ulorl.run.numerics import CPU_NUMERICS, cpu_name

# name -> environment of the child (on top of this one, without the variables any row sets)
SETTINGS = {
    "native": {},
    "torch avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "mkl compatible": {"MKL_CBWR": "COMPATIBLE"},
    "portable": CPU_NUMERICS["portable"],
    "portable, mkl capped at avx2": {**CPU_NUMERICS["portable"], "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "torch avx2, mkl cbwr avx2 (intel only)": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    # what an AVX2-only CPU (a Zen 3) would dispatch, on an AVX-512 one: torch, MKL and oneDNN all capped
    "native, mkl and onednn capped at avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "torch avx2, mkl and onednn capped at avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                                                  "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
_CHILD = r"""
import hashlib, json, sys, time
import torch
from ulorl.models.loading import builtin_model_dir, load_model
torch.set_num_threads(int(sys.argv[1]))
model = load_model(builtin_model_dir(sys.argv[2]))
ids = torch.randint(0, model.config.vocab_size, (4, 256), generator=torch.Generator().manual_seed(0))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
times = []
for _ in range(5):
    t = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter() - t)
h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
print(json.dumps({"hash": h, "loss": loss.item(), "capability": torch.backends.cpu.get_cpu_capability(),
                  "update_ms": 1e3 * sum(times[1:]) / len(times[1:])}))
"""


def run_cell(env: dict, threads: int, preset: str) -> dict:
    pinned = {k for row in SETTINGS.values() for k in row}
    base = {k: v for k, v in os.environ.items() if k not in pinned}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(threads), preset], env={**base, **env},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="default,long")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows = []
    for preset in args.presets.split(","):
        for name, env in SETTINGS.items():
            for threads in (int(t) for t in args.threads.split(",")):
                cell = run_cell(env, threads, preset)
                rows.append({"preset": preset, "setting": name, "threads": threads, **cell})
                print(f"{preset:8s} {name:40s} threads {threads}: {cell['capability']:7s} {cell['hash']} "
                      f"{cell['update_ms']:7.1f} ms/update", file=sys.stderr)
    portable = {(r["preset"], r["hash"]) for r in rows if r["setting"].startswith("portable")}
    same = len(portable) == len(args.presets.split(","))
    print(f"portable: one hash per preset over threads and MKL's cap: {same}", file=sys.stderr)
    return emit({"cpu": cpu_name(), "machine": machine(), "rows": rows, "portable_one_hash_per_preset": same},
                args.out)


if __name__ == "__main__":
    sys.exit(main())
