"""torch's variable-length attention kernel (`torch.nn.attention.varlen.varlen_attn`, flash attention's varlen
kernel): whether it runs here, and the keywords that make it causal with grouped-query attention.

Used where sequences of different lengths are packed into one token stream: the torch engine's packed prefill
(`ulorl.rollout.engines.torch.prefill_attention`) and the learner's packed micro-batches (`ulorl.learners.varlen`).
One call per layer covers every sequence, each attending causally over itself, where the fallback (SDPA per
sequence) makes one call per sequence.

`varlen_attn` is CUDA only, in float16 / bfloat16 (flash attention has no float32 kernel), for head sizes that
are multiples of 8 up to 256. Its keywords changed between torch releases: 2.10 took `is_causal`, 2.11
`window_size=(-1, 0)` for causal attention, 2.13 also `enable_gqa` (without it 2.13 refuses fewer K/V heads than
query heads; 2.11, which has no such keyword, hands them to flash attention as they are, which takes any divisor of
the query heads). `causal_keywords` reads the installed function's signature and gives what it accepts.
"""

from __future__ import annotations

import inspect

import torch

HALF = (torch.float16, torch.bfloat16)


def varlen_attn():
    """torch's `varlen_attn`, or an ImportError naming the torch that lacks it (added in 2.10)."""
    try:
        from torch.nn.attention.varlen import varlen_attn as fn
    except ImportError as e:
        raise ImportError(f"torch.nn.attention.varlen.varlen_attn needs torch >= 2.10 (this is {torch.__version__}): "
                          f"{e}") from e
    return fn


def causal_keywords(fn) -> dict:
    """The keywords that make `fn` (a `varlen_attn`) causal with native GQA, by what its signature accepts."""
    params = inspect.signature(fn).parameters
    kw = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}
    if "enable_gqa" in params:
        kw["enable_gqa"] = True
    return kw


def varlen_unavailable(device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why `varlen_attn` cannot run for `dtype` and `head_dim` on `device`, or None when it can."""
    if device.type != "cuda":
        return f"varlen_attn calls flash attention's CUDA kernel (this device: {device.type})"
    if dtype not in HALF:
        return f"flash attention has no {dtype} kernel (float16 and bfloat16 only)"
    if head_dim % 8 or head_dim > 256:
        return f"flash attention takes head sizes that are multiples of 8 up to 256 (this model's: {head_dim})"
    try:
        varlen_attn()
    except ImportError as e:
        return str(e)
    return None
