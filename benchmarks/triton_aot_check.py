"""Our Triton decode kernel compiled for the H100 / H200 (sm_90) on this machine, no GPU needed: every launch the
GPU check would make through it, with its shared memory, registers and spills.

`benchmarks/gpu_check.sh` runs the kernel only where a GPU is lent; the CPU tests run it under Triton's
interpreter, which accepts programs the real compiler rejects and says nothing of shared memory or registers.
This script compiles, through Triton's own CUDA backend and the ptxas it ships (`ulorl/rollout/engines/torch/
triton_aot.py`), the launches of every `triton` path of `gpu_paged_check.py` (`VARIANT_NAMES`) for both model
shapes (`SHAPES`, bfloat16) at 256 and 64 rows (slices per row as `auto_splits` picks them on an H200's 132 SMs,
unless the path fixes them), of `gpu_engine_check.py`'s float32 contract model, and the fused sampler
(`triton_sampler.py`) for 256 rows of the 0.5B shape's vocabulary in bfloat16 and float32; it reports each kernel's
dynamic shared memory against the architecture's limit, registers and local memory (spills) per thread. It times
nothing: run time needs the GPU.

    python benchmarks/triton_aot_check.py [--arch 90] [--out docs/triton_aot_sm90.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("triton_aot_check: Triton's interpreter is on (TRITON_INTERPRET); unset it to compile kernels")

import torch  # noqa: E402
import triton  # noqa: E402

from benchlib import emit, machine  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
from gpu_paged_check import SHAPES, VARIANT_NAMES  # noqa: E402

from ulorl.plan.memory import ModelShape  # noqa: E402
from ulorl.rollout.engines.torch.engine import BLOCK_SIZES  # noqa: E402
from ulorl.rollout.engines.torch.table_attention import auto_splits  # noqa: E402
from ulorl.rollout.engines.torch.triton_aot import compile_decode, compile_sample  # noqa: E402

H200_SMS = 132
CONTEXT = 8192  # the tables' width: the decode paths' point, 8k tokens
# gpu_engine_check.py's float32 model (the 1e-5 contract through the triton path): 4 heads / 2 KV heads, head size 64
CONTRACT = dict(dtype=torch.float32, kv_heads=2, group=2, head_dim=64)


def builds() -> list[dict]:
    """What to compile: one entry per (path, shape, rows), with `compile_decode`'s arguments."""
    out = []
    for name, (attention, _graphs, block_size, options) in VARIANT_NAMES.items():
        if attention != "triton":
            continue
        bs = block_size or BLOCK_SIZES["cuda"]
        for shape_name, shape in SHAPES.items():
            m = ModelShape.from_config(shape)
            for rows in (256, 64):
                width = CONTEXT // bs
                splits = options.get("splits") or auto_splits(rows, m.kv_heads, width, H200_SMS)
                out.append(dict(path=name, shape=shape_name, rows=rows, dtype=torch.bfloat16, kv_heads=m.kv_heads,
                                group=m.heads // m.kv_heads, head_dim=m.head_dim, block_size=bs, width=width,
                                splits=splits, num_warps=options.get("num_warps", 4),
                                num_stages=options.get("num_stages", 2)))
    bs = BLOCK_SIZES["cuda"]
    out.append(dict(path="triton (gpu_engine_check, float32)", shape="contract", rows=16, block_size=bs,
                    width=2048 // bs, splits=auto_splits(16, CONTRACT["kv_heads"], 2048 // bs, H200_SMS),
                    num_warps=4, num_stages=2, **CONTRACT))
    return out


def resources(kernels) -> str:
    """A build's kernels as printed: shared memory, registers and spills of each."""
    return "  ".join(f"{k.kernel}: {k.shared_bytes / 1024:.0f} KiB shared, {k.registers} regs, "
                     f"{k.local_bytes} B spilled" for k in kernels)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", type=int, default=90, help="compute capability as XY (90: H100 / H200)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows, t0 = [], time.perf_counter()
    for b in builds():
        spec = {k: v for k, v in b.items() if k not in ("path", "shape")}
        kernels = compile_decode(**spec, arch=args.arch)
        row = {**b, "dtype": str(b["dtype"]).removeprefix("torch."), "kernels": [k.as_dict() for k in kernels]}
        rows.append(row)
        print(f"{b['path']:<36} {b['shape']:<13} {b['rows']:>3} rows S={b['splits']:<2} " + resources(kernels),
              file=sys.stderr)
    for dtype in (torch.bfloat16, torch.float32):  # the fused sampler at the 0.5B shape's vocabulary
        kernels = compile_sample(dtype, 256, SHAPES["qwen2.5-0.5b"]["vocab_size"], args.arch)
        name = str(dtype).removeprefix("torch.")
        rows.append({"path": "fused sampler", "shape": "qwen2.5-0.5b", "rows": 256, "dtype": name,
                     "vocab": SHAPES["qwen2.5-0.5b"]["vocab_size"], "kernels": [k.as_dict() for k in kernels]})
        print(f"{'fused sampler':<36} {name:<13} 256 rows      " + resources(kernels), file=sys.stderr)
    kernels = [k for r in rows for k in r["kernels"]]
    result = {"benchmark": "triton_aot_check", "arch": args.arch, "triton": triton.__version__,
              "machine": machine(), "compile_s": round(time.perf_counter() - t0, 1), "builds": rows,
              "all_fit": all(k["fits"] for k in kernels), "max_shared_bytes": max(k["shared_bytes"] for k in kernels),
              "max_registers": max(k["registers"] for k in kernels),
              "spilling": sorted({k["kernel"] for k in kernels if k["local_bytes"]})}
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
