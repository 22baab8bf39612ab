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
and layer. On CUDA, `torch.nn.attention.varlen.varlen_attn` (flash; no CPU kernel in torch 2.13) could take
all samples in one call; it is not used, as nothing here has run it.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

ATTN_NAME = "ulorl_varlen"
NATIVE_VARLEN = ("flash_attention_2", "flash_attention_3")  # read cu_seq_lens_q themselves
_packed = contextvars.ContextVar("ulorl_packed_forward", default=False)


@contextlib.contextmanager
def packed_forward():
    """While active, models routed through `ATTN_NAME` build no attention mask."""
    token = _packed.set(True)
    try:
        yield
    finally:
        _packed.reset(token)


def varlen_attention(module, query, key, value, attention_mask, cu_seq_lens_q=None, **kwargs):
    """`query` `(1, H, S, D)`, `key`/`value` `(1, Hkv, S, D)` -> `(1, S, H, D)`: each `[cu[i], cu[i+1])` slice
    attends causally within itself (sdpa per slice); without `cu_seq_lens_q`, plain sdpa with the mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if cu_seq_lens_q is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    for k in ("cu_seq_lens_k", "max_length_q", "max_length_k"):
        kwargs.pop(k, None)
    bounds = cu_seq_lens_q.tolist()
    outs = [sdpa_attention_forward(module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None, **kwargs)[0]
            for a, b in zip(bounds[:-1], bounds[1:])]
    return torch.cat(outs, dim=1), None


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
