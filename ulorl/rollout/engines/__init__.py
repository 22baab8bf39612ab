"""Generation engines behind one protocol: torch (default, CPU and CUDA), HF (any transformers LM) and vLLM (GPU)."""

from ulorl.lazy_exports import lazy_exports

# public name -> the submodule that defines it, imported on first use (see ulorl/lazy_exports.py)
_EXPORTS = {
    "Engine": "base",
    "EngineName": "registry",
    "EngineStats": "base",
    "GenerationOutput": "base",
    "HFEngine": "hf",
    "SamplingParams": "base",
    "TorchEngine": "torch",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
