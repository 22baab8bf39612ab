"""Engine registry: `rollout.engine` name -> constructor."""

from __future__ import annotations

from collections.abc import Callable

from ulorl.rollout.engines.base import Engine, EngineName
from ulorl.rollout.engines.hf import HFEngine
from ulorl.rollout.engines.torch_engine import TorchEngine


def _torch(model, tokenizer, eos_ids: list[int], **kw) -> Engine:
    return TorchEngine(model, eos_ids, max_batch=kw.get("max_batch", 256), kv_cache_gib=kw.get("kv_cache_gib", 4.0))


def _hf(model, tokenizer, eos_ids: list[int], **kw) -> Engine:
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
    """The engine `name` over `model`; `eos_ids` end a sample (an id outside the vocabulary: never stops early).

    Keywords, each read by the engines that use it: `max_batch`, `kv_cache_gib` (torch), `pad_id` (hf; default
    `tokenizer.pad_token_id`, so `tokenizer` may be None when it is given), `model_path`, `vllm`, `model_cfg`,
    `seed` (vllm).
    """
    try:
        key = EngineName(name)
    except ValueError:
        raise ValueError(f"unknown engine {name!r}; choose one of: {', '.join(e.value for e in EngineName)}") from None
    return ENGINES[key](model, tokenizer, eos_ids, **kw)
