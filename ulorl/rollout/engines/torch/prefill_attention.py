"""Causal attention of a packed prefill: sequences of any lengths in one token stream, each attending over itself.

`ModelRunner.prefill` packs every sequence it prefills into one stream (no padding) and calls one of these per
layer, with a layout of the stream computed once per prefill (`layout`), read by every layer:

- `sdpa` (`SDPAPrefill`): one `scaled_dot_product_attention` call per group of equal-length sequences (the G
  samples of a prompt are prefilled once, so a group is typically one sequence), K/V heads repeated for GQA. No
  torch kernel for ragged causal attention runs on CPU (`varlen_attn` calls flash attention's CUDA op), so this is
  the CPU path and the reference.
- `varlen` (`VarlenPrefill`): one call of torch's `torch.nn.attention.varlen.varlen_attn` per layer, flash
  attention's variable-length kernel over the whole stream with the sequences' offsets (`cu_seq`), GQA read
  natively (no repeated K/V). CUDA only, in float16 / bfloat16 (flash attention has no float32 kernel), head sizes
  that are multiples of 8 up to 256. A prefill of S sequences of distinct lengths is then one launch per layer
  instead of S calls of ~7 kernels each (gathers, repeats for GQA, SDPA, scatter; `benchmarks/prefill_ops.py`),
  which matters when a round re-prefills many continued samples or prefills many short prompts.

`varlen_attn`'s keywords changed between torch releases; `VarlenPrefill` passes what the installed function accepts
(`ulorl.kernels.varlen`, shared with the learner's packed micro-batches); on a torch without `enable_gqa` the
K/V heads go to flash attention as they are, which takes any divisor of the query heads. `prefill_backend("auto",
...)` tries the varlen call once on a tiny input of the model's shape before choosing it, so a torch or device where
it fails falls back to `sdpa` with a warning at the engine's start, not in the middle of a rollout.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ulorl.errors import ConfigError, check_choice
from ulorl.kernels.varlen import HALF, causal_keywords, varlen_attn
from ulorl.kernels.varlen import varlen_unavailable as kernel_unavailable
from ulorl.rollout.engines.registry import PrefillAttention


class SDPAPrefill:
    """One SDPA call per group of equal-length sequences (any device, any dtype)."""

    name = PrefillAttention.SDPA.value

    def layout(self, lens: list[int], device: torch.device) -> list[torch.Tensor]:
        """For each distinct length n among `lens` (stream order), the `(n_g, n)` stream positions of its n_g
        sequences' tokens."""
        starts = [0, *itertools.accumulate(lens)][:-1]
        by_len: dict[int, list[int]] = {}
        for start, n in zip(starts, lens):
            by_len.setdefault(n, []).append(start)
        return [torch.tensor(s, device=device)[:, None] + torch.arange(n, device=device) for n, s in by_len.items()]

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: list[torch.Tensor],
                 scale: float) -> torch.Tensor:
        """q `(N, H, D)`, k/v `(N, H_kv, D)` -> `(N, H, D)`."""
        group = q.shape[1] // k.shape[1]
        out = torch.empty_like(q)
        for idx in layout:
            kg, vg = k[idx].transpose(1, 2), v[idx].transpose(1, 2)  # (n_g, H_kv, n, D)
            if group > 1:
                kg, vg = kg.repeat_interleave(group, dim=1), vg.repeat_interleave(group, dim=1)
            og = F.scaled_dot_product_attention(q[idx].transpose(1, 2), kg, vg, is_causal=True, scale=scale)
            out[idx] = og.transpose(1, 2)
        return out


@dataclass(frozen=True)
class VarlenLayout:
    cu_seq: torch.Tensor  # (S + 1,) int32: where each sequence starts in the stream, then the stream's length
    max_len: int


class VarlenPrefill:
    """torch's `varlen_attn` (flash attention's varlen kernel) over the whole stream: one call per layer."""

    name = PrefillAttention.VARLEN.value

    def __init__(self, fn=None) -> None:
        """`fn`: the `varlen_attn` to call (default torch's; tests pass a stand-in with the same signature)."""
        self.fn = fn or varlen_attn()
        self.keywords = causal_keywords(self.fn)

    def layout(self, lens: list[int], device: torch.device) -> VarlenLayout:
        return VarlenLayout(torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=device),
                            max(lens))

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: VarlenLayout,
                 scale: float) -> torch.Tensor:
        """q `(N, H, D)`, k/v `(N, H_kv, D)` -> `(N, H, D)`."""
        return self.fn(q, k, v, layout.cu_seq, layout.cu_seq, layout.max_len, layout.max_len, scale=scale,
                       **self.keywords)


def varlen_unavailable(device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why `varlen` cannot run for a model of `dtype` and `head_dim` on `device`, or None when it can."""
    why = kernel_unavailable(device, dtype, head_dim)
    return f"{why}: set rollout.dtype=bfloat16" if why and dtype not in HALF and device.type == "cuda" else why


def _probe(backend: VarlenPrefill, device: torch.device, dtype: torch.dtype, heads: int, kv_heads: int,
           head_dim: int) -> None:
    """One varlen call on two sequences (3 and 5 tokens) of the model's head shape, checked against SDPA; raises
    what the call raises, or an AssertionError when its result is wrong."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    lens = [3, 5]
    q, k, v = (torch.randn(sum(lens), h, head_dim, generator=gen).to(device, dtype)
               for h in (heads, kv_heads, kv_heads))
    got = backend(q, k, v, backend.layout(lens, device), head_dim ** -0.5)
    ref = SDPAPrefill()
    want = ref(q, k, v, ref.layout(lens, device), head_dim ** -0.5)
    err = (got.float() - want.float()).abs().max().item()
    assert err < 0.05, f"varlen_attn differs from SDPA by {err:.3g} on a probe of two sequences"


def prefill_backend(name: str, device: torch.device, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int,
                    fn=None):
    """The prefill backend for `rollout.torch.prefill_attention` = `name` (a `PrefillAttention` value) and a model
    of `heads` / `kv_heads` heads of `head_dim` in `dtype` on `device`.

    `auto`: `varlen` where it runs and a probe call agrees with SDPA (else `sdpa`, with a warning when the probe
    failed); `varlen` where it cannot run or fails its probe: a ValueError saying why. `fn`: a stand-in for torch's
    `varlen_attn` (tests)."""
    check_choice("rollout.torch.prefill_attention", name, PrefillAttention)
    choice = PrefillAttention(name)
    if choice is PrefillAttention.SDPA:
        return SDPAPrefill()
    why = None if fn is not None else varlen_unavailable(device, dtype, head_dim)
    if why is None:
        try:
            backend = VarlenPrefill(fn)
            _probe(backend, device, dtype, heads, kv_heads, head_dim)
            return backend
        except Exception as e:  # a torch or device where the call fails: the per-length SDPA path instead
            why = f"its probe call failed: {type(e).__name__}: {str(e)[:400]}"
            if choice is PrefillAttention.AUTO:
                warnings.warn(f"torch engine prefill: varlen -> sdpa ({why})", stacklevel=3)
    if choice is PrefillAttention.VARLEN:
        raise varlen_refused(why)
    return SDPAPrefill()


def varlen_refused(why: str) -> ConfigError:
    """The error of `rollout.torch.prefill_attention=varlen` where it cannot run, `why` saying why."""
    return ConfigError(f"rollout.torch.prefill_attention=varlen cannot run here: {why}; use sdpa (or auto)")
