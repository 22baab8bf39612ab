"""Generation engines behind one protocol: HF (CPU default) and vLLM (GPU)."""

from ulorl.rollout.engines.base import Engine, EngineName, EngineStats, GenerationOutput, SamplingParams
from ulorl.rollout.engines.hf import HFEngine

__all__ = ["Engine", "EngineName", "EngineStats", "GenerationOutput", "HFEngine", "SamplingParams"]
