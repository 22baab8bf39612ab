"""Engine registry: `rollout.engine` name -> constructor."""

from __future__ import annotations

from collections.abc import Callable

from ulorl.rollout.engines.base import Engine, EngineName
from ulorl.rollout.engines.hf import HFEngine


def _hf(model, tokenizer, eos_ids: list[int], **kw) -> Engine:
    return HFEngine(model, tokenizer.pad_token_id, eos_ids, max_batch=kw.get("max_batch", 256))


def _vllm(model, tokenizer, eos_ids: list[int], **kw) -> Engine:
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        raise ImportError("rollout.engine=vllm needs vLLM: pip install 'ulorl[vllm]' (GPU machines only)") from e
    raise NotImplementedError("the vLLM engine is not available in this release; use rollout.engine=hf")


ENGINES: dict[EngineName, Callable[..., Engine]] = {EngineName.HF: _hf, EngineName.VLLM: _vllm}


def build_engine(name: str, model, tokenizer, eos_ids: list[int], **kw) -> Engine:
    try:
        key = EngineName(name)
    except ValueError:
        raise ValueError(f"unknown engine {name!r}; choose one of: {', '.join(e.value for e in EngineName)}") from None
    return ENGINES[key](model, tokenizer, eos_ids, **kw)
