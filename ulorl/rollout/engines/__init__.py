"""Generation engines behind one protocol: torch (default, CPU and CUDA), HF (any transformers LM) and vLLM (GPU)."""

from ulorl.rollout.engines.base import Engine, EngineStats, GenerationOutput, SamplingParams
from ulorl.rollout.engines.hf import HFEngine
from ulorl.rollout.engines.registry import EngineName
from ulorl.rollout.engines.torch_engine import TorchEngine

__all__ = ["Engine", "EngineName", "EngineStats", "GenerationOutput", "HFEngine", "SamplingParams", "TorchEngine"]
