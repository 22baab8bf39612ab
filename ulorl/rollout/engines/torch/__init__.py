"""The torch engine (default): continuous batching over a paged KV cache (`engine.py` says how it is built)."""

from ulorl.rollout.engines.torch.engine import TorchEngine

__all__ = ["TorchEngine"]
