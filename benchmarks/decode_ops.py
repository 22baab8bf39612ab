"""Operations per decode step of the torch engine on a CUDA device, counted without one.

A decode step replayed from a CUDA graph still runs every kernel it captured, and at 256 rows of a small model
most of them are tiny (a norm over 256 x 896 values), so their number weighs on the step (docs/scale.md). This
counts the aten operations `ModelRunner.decode_table` dispatches for one step of the Qwen2.5-0.5B shape's 24
layers in bfloat16 on a `cuda` device made of fake tensors (`torch._subclasses.fake_tensor`: shapes and
dispatch, no memory, no GPU), so it needs a CUDA build of torch but no GPU. Two attentions: the gather (a
library-only path, its own ~18 operations a layer) and a stand-in of one operation a layer (what flex and the
Triton kernel launch is one to three), for the engine's step and for it with what it replaced: the transformers
RMSNorm module where `_norm` runs torch's fused kernel, and rotate_half where `_rope` rolls. Views and `prim`
queries launch nothing and are not counted. Counts, not times: the same
on every machine with the same torch.

    python benchmarks/decode_ops.py [--out docs/decode_ops.json]   # e.g. with torch 2.11.0's CUDA wheel
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

import torch

from benchlib import emit, machine
from gpu_paged_check import SHAPES
from prefill_ops import CountOps

from ulorl.rollout.engines.torch import runner as runner_mod

WIDTH = 8  # head_dim of the counted model (14 heads x 8): the count does not depend on widths


def module_norm(module, x):
    """The transformers module's RMSNorm (eight operations a norm in bfloat16)."""
    return module(x)


def rotate_half_rope(x, cos, sin):
    """transformers' formulation, `x * cos + rotate_half(x) * sin` (a neg and a cat where `_rope` rolls), given sin
    itself (`_signed_sin` replaced by `plain_sin`)."""
    half = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin[:, None]


def plain_sin(sin):
    return sin


# the engine's step, and with what it replaced: {name: {runner function: its replacement}}
ROTATE_HALF = {"_rope": rotate_half_rope, "_signed_sin": plain_sin}
VARIANTS = {"engine": {"_norm": runner_mod._norm, "_rope": runner_mod._rope}, "module norm": {"_norm": module_norm},
            "rotate_half": ROTATE_HALF,
            "module norm, rotate_half (the engine before 2026-12-06)": {"_norm": module_norm, **ROTATE_HALF}}


class OneOpAttention:
    """A decode attention of one operation a layer (its output), as a fused kernel launches."""

    name = "one operation"
    fixed_width = True

    def prepare(self, table, ctx, block_size, num_blocks, q_len):
        return None

    def attend(self, q, k_tokens, v_tokens, step, scale):
        return torch.empty_like(q)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--rows", type=int, default=256)
    args = p.parse_args()
    if not torch.backends.cuda.is_built():
        raise SystemExit(f"decode_ops: torch {torch.__version__} is a CPU build; this count needs a CUDA build of "
                         "torch (no GPU: the tensors are fake)")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoConfig, AutoModelForCausalLM

    from ulorl.rollout.engines.torch.kv_cache import PagedKVCache
    from ulorl.rollout.engines.torch.table_attention import GatherAttention

    kw = dict(SHAPES["qwen2.5-0.5b"], hidden_size=SHAPES["qwen2.5-0.5b"]["num_attention_heads"] * WIDTH,
              intermediate_size=64, vocab_size=512)
    cfg = AutoConfig.for_model(kw.pop("model_type"), tie_word_embeddings=True, **kw)
    n, dev = args.rows, torch.device("cuda")
    rows = []
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        torch.set_default_dtype(torch.bfloat16)
        try:
            with dev:
                model = AutoModelForCausalLM.from_config(cfg).eval()
        finally:
            torch.set_default_dtype(torch.float32)
        runner = runner_mod.ModelRunner(model)
        cache = PagedKVCache(runner.kv_shape(), 64, 64, dev)
        step = [torch.zeros(n, dtype=torch.long, device=dev) for _ in range(3)]  # tokens, positions, slots
        table = torch.zeros(n, 4, dtype=torch.long, device=dev)
        ctx = torch.ones(n, dtype=torch.long, device=dev)
        for name, replaced in VARIANTS.items():
            for attention in (OneOpAttention(), GatherAttention()):
                with mock.patch.multiple(runner_mod, **replaced), CountOps() as c:
                    runner.decode_table(cache, *step, table, ctx, attention)
                rows.append({"variant": name, "attention": attention.name, "operations": c.kernels,
                             "per_layer": c.kernels / cfg.num_hidden_layers})
                print(f"{name}, attention {attention.name}: {c.kernels} operations a step "
                      f"({c.kernels / cfg.num_hidden_layers:.1f} a layer)", file=sys.stderr)
    return emit({"rows": n, "layers": cfg.num_hidden_layers, "dtype": "bfloat16", "counts": rows,
                 "machine": machine()}, args.out)


if __name__ == "__main__":
    sys.exit(main())
