"""Engine registry: `rollout.engine` name (`EngineName`) -> constructor.

The implementations are imported when an engine is built, so the config layer can
validate `rollout.engine` against `EngineName` without importing any engine.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from ulorl.errors import check_choice
from ulorl.rollout.engines.base import Engine


class EngineName(str, Enum):
    """`rollout.engine`: the keys of `ENGINES`."""

    TORCH = "torch"  # default: continuous batching over a paged KV cache, CPU and CUDA (torch/)
    HF = "hf"  # transformers' generate-style loop: any causal LM, slower at long outputs (hf.py)
    VLLM = "vllm"  # GPU (vllm.py)


class DecodeAttention(str, Enum):
    """`rollout.torch.decode_attention`: how the torch engine's decode step attends over its paged cache (here, not
    in `torch/`, so the config validates it without importing the engine)."""

    AUTO = "auto"  # torch/engine.py's DEFAULT_DECODE_ATTENTION by device type
    SPLIT_K = "split_k"  # torch/attention.py: the pool's blocks as one batched call, shapes that follow the pool (CPU)
    FLEX = "flex"  # torch/table_attention.py: flex_attention over block tables (compiled on CUDA), graph-capturable
    GATHER = "gather"  # torch/table_attention.py: blocks gathered per row, graph-capturable, no compiler
    TRITON = "triton"  # torch/triton_decode.py: our split-KV Triton kernel over block tables, graph-capturable (CUDA)


class PrefillAttention(str, Enum):
    """`rollout.torch.prefill_attention`: the causal attention of the torch engine's packed prefill
    (torch/prefill_attention.py)."""

    AUTO = "auto"  # varlen where it runs (CUDA, float16 / bfloat16) and its start-up probe passes, else sdpa
    SDPA = "sdpa"  # one SDPA call per group of equal-length sequences (CPU; any device and dtype)
    VARLEN = "varlen"  # torch's varlen_attn (flash attention): one call per layer for the whole stream (CUDA)


def _torch(model, tokenizer, eos_ids: list[int], **kw) -> Engine:
    import torch

    from ulorl.rollout.engines.torch import TorchEngine

    dtype, opts = kw.get("dtype"), kw.get("torch")
    if opts is not None and opts.procs > 1:  # rows split between CPU processes, each with a one-process engine
        from dataclasses import replace

        from ulorl.rollout.engines.torch.processes import ProcessEngine

        child_kw = {k: kw[k] for k in ("max_batch", "kv_cache_gib", "dtype") if k in kw}
        return ProcessEngine(model, eos_ids, opts.procs, torch=replace(opts, procs=1), **child_kw)
    extra = {} if opts is None else dict(decode_attention=opts.decode_attention, cuda_graphs=opts.cuda_graphs,
                                         block_size=opts.block_size, prefill_attention=opts.prefill_attention,
                                         fused_sampler=opts.fused_sampler)
    return TorchEngine(model, eos_ids, max_batch=kw.get("max_batch", 256), kv_cache_gib=kw.get("kv_cache_gib", 4.0),
                       dtype=None if dtype in (None, "auto") else getattr(torch, dtype), **extra)


def _hf(model, tokenizer, eos_ids: list[int], **kw) -> Engine:
    from ulorl.rollout.engines.hf import HFEngine

    pad_id = kw["pad_id"] if "pad_id" in kw else tokenizer.pad_token_id
    return HFEngine(model, pad_id, eos_ids, max_batch=kw.get("max_batch", 256))


def _vllm(model, tokenizer, eos_ids: list[int], **kw) -> Engine:
    """vLLM loads the policy from `model_path` (the in-memory `model` only receives later weight syncs)."""
    from ulorl.rollout.engines.vllm import build_vllm_engine  # imports vllm itself, with an install hint

    return build_vllm_engine(eos_ids, model_path=kw.get("model_path"), options=kw.get("vllm"),
                             model_cfg=kw.get("model_cfg"), seed=kw.get("seed", 0))


ENGINES: dict[EngineName, Callable[..., Engine]] = {EngineName.TORCH: _torch, EngineName.HF: _hf,
                                                     EngineName.VLLM: _vllm}


def build_engine(name: str, model, tokenizer, eos_ids: list[int], **kw) -> Engine:
    """The engine `name` (an `EngineName` value) over `model`; `eos_ids` end a sample (an id outside the vocabulary:
    never stops early). An unknown name raises `ConfigError` listing the valid ones.

    Keywords, each read by the engines that use it: `max_batch`, `kv_cache_gib`, `dtype` (torch: "auto" or
    None for the model's, or a torch dtype name such as "bfloat16"), `torch` (a `rollout.torch`
    config), `pad_id` (hf; default
    `tokenizer.pad_token_id`, so `tokenizer` may be None when it is given), `model_path`, `vllm`, `model_cfg`,
    `seed` (vllm).
    """
    check_choice("engine", name, EngineName)
    return ENGINES[EngineName(name)](model, tokenizer, eos_ids, **kw)
