"""Operations per packed prefill through each prefill attention: what a GPU launches, counted on a CPU.

On a GPU a prefill of many short sequences is bound by launches, not by arithmetic: per-length SDPA
(`prefill_attention.SDPAPrefill`) runs ~18 operations per group of equal-length sequences per layer (index,
transpose, repeat for GQA, SDPA, scatter), `varlen_attn` one per layer. This counts the aten operations that
`ModelRunner.prefill` dispatches for `gpu_paged_check.py`'s two prefill cases, with the Qwen2.5-0.5B shape's 24
layers and head layout (14 query heads, 2 KV heads) at a small width (the count does not depend on widths), on
CPU: every operation, and those that are not views (a view launches nothing; the rest are about one kernel
each). torch's `varlen_attn` has no CPU kernel, so the varlen count uses a stand-in of one operation, as torch's
custom op is. Counts, not times: the same on every machine.

    python benchmarks/prefill_ops.py [--out docs/prefill_ops.json]
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchlib import emit, machine
from gpu_paged_check import PREFILL_CASES, QUICK, build_model, engine_for

from ulorl.rollout.engines.torch.prefill_attention import SDPAPrefill, VarlenPrefill


class CountOps(TorchDispatchMode):
    """Counts the aten operations dispatched inside it: all, and those that launch work (`kernels`: not views, not
    `prim` queries such as `prim.device`, not `_unsafe_view`; the last two show on fake CUDA tensors,
    `decode_ops.py`)."""

    def __init__(self) -> None:
        super().__init__()
        self.all = self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        self.all += 1
        self.kernels += not (func.is_view or name.startswith("prim.") or "_unsafe_view" in name)
        return func(*args, **(kwargs or {}))


def varlen_stand_in(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                    window_size=(-1, -1)):
    """torch 2.11's signature; one operation (its output), as torch's custom op dispatches one."""
    return torch.empty_like(query)


def count(runner, cache, blocks, lens: list[int], backend) -> dict:
    seqs = [[5 + (i * 7 + j) % 400 for j in range(n)] for i, n in enumerate(lens)]
    tables = [blocks.allocate(blocks.blocks_for(n), i) for i, n in enumerate(lens)]
    runner.prefill_attention = backend
    with torch.no_grad(), CountOps() as c:
        runner.prefill(cache, seqs, tables)
    for i, t in enumerate(tables):
        blocks.release(t, i)
    return {"ops": c.all, "non_view_ops": c.kernels}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    shape = dict(QUICK["qwen2.5-0.5b"], num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 hidden_size=14 * 8)
    model = build_model(shape, torch.device("cpu"), torch.float32)
    eng, _ = engine_for(model, 0.5, 8, "split_k", False)
    cache, blocks = eng._pool_for(max(max(lens) for lens in PREFILL_CASES.values()) + 1)
    rows = []
    for name, lens in PREFILL_CASES.items():
        sdpa = count(eng.runner, cache, blocks, lens, SDPAPrefill())
        varlen = count(eng.runner, cache, blocks, lens, VarlenPrefill(varlen_stand_in))
        rows.append({"case": name, "sequences": len(lens), "distinct_lengths": len(set(lens)), "tokens": sum(lens),
                     "sdpa": sdpa, "varlen": varlen})
        print(f"{name}: {len(lens)} sequences, {sum(lens)} tokens: sdpa {sdpa['non_view_ops']} non-view ops "
              f"({sdpa['ops']} in all), varlen {varlen['non_view_ops']} ({varlen['ops']})", file=sys.stderr)
    return emit({"layers": shape["num_hidden_layers"], "cases": rows, "machine": machine()}, args.out)


if __name__ == "__main__":
    sys.exit(main())
