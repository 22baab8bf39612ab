"""Attention of a packed row, one sample at a time: no `S x S` mask and no attention across samples.

transformers (5.x) turns a packed row's restarting position ids into a dense block-causal mask for `sdpa`
and `eager`: `S x S` booleans, and attention computed over the whole row (measured on CPU: a 4,096-token
row of the demo's samples took 3x the padded update). `flash_attention_2` reads `cu_seq_lens_q/k` instead
(varlen attention). This module gives the same to `sdpa`/`eager`: `install_varlen` registers an attention
function that, given `cu_seq_lens_q` (passed by the learner with a packed micro-batch, `(n + 1,)`
boundaries), calls sdpa once per sample (causal within it) and concatenates the outputs; with no
boundaries it is sdpa with transformers' own mask, so every other caller of the model (the rollout
engines, padded micro-batches) is unchanged. While the learner runs a packed
forward (`packed_forward()`), the mask function returns None, so no dense mask is built; the mask is made
once per model call and handed to the layers as an argument, so gradient checkpointing's recomputation
reuses it. Cost: attention work `sum(len_i^2)` as in the padded layout, plus one kernel call per sample
and layer.

On CUDA the whole row can take one call per layer instead: torch's `varlen_attn` (flash attention's varlen kernel,
`ulorl.kernels.varlen`), in the autocast dtype (bfloat16 / float16; q, k, v are cast to it as SDPA's autocast
would), with a backward. `packed_kernel` chooses it once per learner, where it runs for the model's head shape and
dtype and a probe on two short sequences (forward and backward) agrees with SDPA; elsewhere (CPU, float32, a probe
that fails, with a warning) SDPA per sample. The choice travels with each packed forward as the keyword
`packed_kernel`, so gradient checkpointing's recomputation uses the same kernel as the forward.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from types import SimpleNamespace

import torch

from ulorl.kernels.varlen import causal_keywords, varlen_attn, varlen_unavailable

ATTN_NAME = "ulorl_varlen"
NATIVE_VARLEN = ("flash_attention_2", "flash_attention_3")  # read cu_seq_lens_q themselves
SDPA, VARLEN = "sdpa", "varlen"  # `packed_kernel`: SDPA per sample, or torch's varlen_attn over the row
_packed = contextvars.ContextVar("ulorl_packed_forward", default=False)


@contextlib.contextmanager
def packed_forward():
    """While active, models routed through `ATTN_NAME` build no attention mask."""
    token = _packed.set(True)
    try:
        yield
    finally:
        _packed.reset(token)


def varlen_attention(module, query, key, value, attention_mask, cu_seq_lens_q=None, packed_kernel=SDPA,
                     **kwargs):
    """`query` `(1, H, S, D)`, `key`/`value` `(1, Hkv, S, D)` -> `(1, S, H, D)`: each `[cu[i], cu[i+1])` slice
    attends causally within itself (sdpa per slice, or `packed_kernel="varlen"`: torch's varlen_attn over the
    row); without `cu_seq_lens_q`, plain sdpa with the mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    max_len = kwargs.pop("max_length_q", None)
    for k in ("cu_seq_lens_k", "max_length_k"):
        kwargs.pop(k, None)
    if packed_kernel == VARLEN:
        return varlen_row(varlen_attn(), query, key, value, cu_seq_lens_q, max_len, kwargs.get("scaling")), None
    bounds = cu_seq_lens_q.tolist()
    outs = [sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None, **kwargs)[0]
            for a, b in zip(bounds[:-1], bounds[1:])]
    return torch.cat(outs, dim=1), None


def varlen_row(fn, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seq: torch.Tensor,
               max_len: int | None, scale: float | None) -> torch.Tensor:
    """One packed row through `fn` (a `varlen_attn`): `query` `(1, H, S, D)`, `key`/`value` `(1, Hkv, S, D)`,
    `cu_seq` `(n + 1,)` int32 sample bounds -> `(1, S, H, D)`, in the autocast dtype where autocast is on (as SDPA
    under autocast computes), else in the inputs' dtype."""
    dev = query.device.type
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else query.dtype
    q, k, v = (t[0].transpose(0, 1).to(dtype).contiguous() for t in (query, key, value))  # (S, heads, D)
    if max_len is None:
        max_len = int((cu_seq[1:] - cu_seq[:-1]).max())
    return fn(q, k, v, cu_seq, cu_seq, max_len, max_len, scale=scale, **causal_keywords(fn))[None]


def _probe(device: torch.device, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int) -> None:
    """A packed row of two samples (5 and 11 tokens) through `varlen_attention` with the varlen kernel and with
    SDPA per sample: outputs and the gradients of q, k and v compared; raises what the call raises, or an
    AssertionError naming what differs."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    cu = torch.tensor([0, 5, 16], dtype=torch.int32, device=device)
    layer = SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True)  # what the fallback reads
    ins = [torch.randn(1, h, 16, head_dim, generator=gen).to(device, dtype).requires_grad_()
           for h in (heads, kv_heads, kv_heads)]
    ref = [t.detach().clone().requires_grad_() for t in ins]
    w = torch.randn(1, 16, heads, head_dim, generator=gen).to(device, dtype)  # the gradient flowing back
    with torch.enable_grad(), torch.autocast(device.type, enabled=False):
        got = varlen_attention(layer, *ins, None, cu_seq_lens_q=cu, packed_kernel=VARLEN, scaling=head_dim ** -0.5)[0]
        want = varlen_attention(layer, *ref, None, cu_seq_lens_q=cu, packed_kernel=SDPA, scaling=head_dim ** -0.5)[0]
        (got.float() * w).sum().backward()
        (want.float() * w).sum().backward()
    grads = [(f"d{n}", torch.zeros_like(a) if a.grad is None else a.grad, b.grad) for n, a, b in zip("qkv", ins, ref)]
    for name, x, y in [("output", got, want), *grads]:
        err = (x.float() - y.float()).abs().max().item()
        assert err < 0.05 * max(1.0, y.float().abs().max().item()), f"varlen_attn's {name} is {err:.3g} from SDPA's"


def packed_kernel(model: torch.nn.Module, device: str | torch.device, autocast: str = "none") -> str:
    """`"varlen"` where torch's varlen_attn runs for `model`'s heads in the forward's dtype (`autocast`, else the
    weights') on `device` and passes its probe, else `"sdpa"` (a probe that fails warns)."""
    cfg, device = model.config, torch.device(device)
    dtype = getattr(torch, autocast) if autocast != "none" else next(model.parameters()).dtype
    heads, kv_heads = cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    if getattr(cfg, "attention_dropout", 0.0) or varlen_unavailable(device, dtype, head_dim):
        return SDPA  # (varlen_attn has no dropout)
    try:
        _probe(device, dtype, heads, kv_heads, head_dim)
    except Exception as e:  # a torch or device where the call fails: SDPA per sample
        warnings.warn(f"learner packed attention: varlen -> sdpa per sample (its probe failed: {type(e).__name__}: "
                      f"{str(e)[:400]})", stacklevel=2)
        return SDPA
    return VARLEN


def _mask(*args, **kwargs):
    from transformers.masking_utils import sdpa_mask

    return None if _packed.get() else sdpa_mask(*args, **kwargs)


def install_varlen(model: torch.nn.Module) -> bool:
    """Route an `sdpa` model's attention through `varlen_attention`; True when the model's attention reads
    `cu_seq_lens_q` afterwards (also flash-attn's own), False for any other implementation (eager, or one of
    ours such as sequence parallelism's), which then gets transformers' dense mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ATTN_NAME, varlen_attention)  # in every process (a model may arrive pickled)
    if ATTN_NAME not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionMaskInterface.register(ATTN_NAME, _mask)
    current = model.config._attn_implementation
    if current in (ATTN_NAME, *NATIVE_VARLEN):
        return True
    if current != "sdpa" or "sliding_attention" in (getattr(model.config, "layer_types", None) or []):
        return False  # (per-sample causal attention has no sliding window: those get the dense mask)
    model.set_attn_implementation(ATTN_NAME)
    return True
