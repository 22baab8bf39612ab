"""`rollout:` segment rollout (L, M, G, the decode batch), sampling, the engine and its vLLM options."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ulorl.config.checks import positive
from ulorl.config.loader import ConfigError, check_choice, check_field_types
from ulorl.rollout.engines.base import check_sampling
from ulorl.rollout.engines.registry import DecodeAttention, EngineName, PrefillAttention


@dataclass
class VLLMConfig:
    """`rollout.vllm`: options of the vLLM engine (used when rollout.engine=vllm)."""

    gpu_memory_utilization: float = 0.5  # share of GPU memory for vLLM (weights + KV cache); the learner needs the rest
    tensor_parallel_size: int = 1  # GPUs per engine
    max_model_len: int | None = None  # prompt + response context; None: the model's (x YaRN factor when set)
    dtype: str = "auto"  # auto (config dtype; float32 checkpoints run in bfloat16) | bfloat16 | float16 | float32
    enable_sleep_mode: bool = False  # free vLLM's GPU memory while the learner updates (learner on the same GPU)
    enable_prefix_caching: bool = True  # reuse KV of shared prefixes (reset after every weight sync)
    enforce_eager: bool = False  # no CUDA graphs: faster start, slower decode
    max_num_seqs: int | None = None  # requests decoded at once; None: vLLM's default
    seeded: bool = True  # per-request seeds (reproducible; vLLM samples seeded rows one by one)

    def __post_init__(self) -> None:
        check_field_types(self, "rollout.vllm.")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"rollout.vllm.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1]")
        positive("rollout.vllm.tensor_parallel_size", self.tensor_parallel_size)
        for k in ("max_model_len", "max_num_seqs"):
            if getattr(self, k) is not None:
                positive(f"rollout.vllm.{k}", getattr(self, k))
        check_choice("rollout.vllm.dtype", self.dtype, ["auto", "bfloat16", "float16", "float32"])


@dataclass
class TorchEngineConfig:
    """`rollout.torch`: options of the torch engine (used when rollout.engine=torch)."""

    # DecodeAttention: auto (split_k on CPU, flex on CUDA) | split_k | flex | triton (our kernel, CUDA) | gather
    decode_attention: str = "auto"
    # PrefillAttention: auto (varlen on CUDA in float16 / bfloat16, else sdpa) | sdpa | varlen (torch's varlen_attn)
    prefill_attention: str = "auto"
    cuda_graphs: bool = True  # CUDA, flex/triton/gather: capture each padded decode shape once as a CUDA graph
    fused_sampler: bool = True  # CUDA: temperature sampling (no top-k / top-p) in one Triton kernel (triton_sampler.py)
    block_size: int | None = None  # tokens per KV block; None: 32 on CPU, 64 on CUDA
    # CPU: engine processes, one torch thread each; every call's rows are split between them (torch/processes.py)
    procs: int = 1

    def __post_init__(self) -> None:
        check_field_types(self, "rollout.torch.")
        check_choice("rollout.torch.decode_attention", self.decode_attention, DecodeAttention)
        check_choice("rollout.torch.prefill_attention", self.prefill_attention, PrefillAttention)
        if self.block_size is not None:
            positive("rollout.torch.block_size", self.block_size)
        positive("rollout.torch.procs", self.procs)


@dataclass
class RolloutConfig:
    engine: str = "torch"  # EngineName: torch (default: CPU and CUDA) | hf (any transformers LM, slower) | vllm (GPU)
    max_response_len: int = 160  # global cap L on response tokens
    num_segments: int = 4  # M; each rollout round decodes at most L / M tokens
    group_size: int = 8  # G samples per prompt
    decode_batch: int = 64  # target samples per round: unfinished + new prompts x G
    temperature: float = 0.85
    top_p: float = 1.0
    top_k: int = -1  # -1 = off
    max_batch: int = 256  # rows decoded at once (torch, hf); the rest wait in the queue for a free row
    kv_cache_gib: float = 4.0  # torch engine: KV block pool size (one sequence of prefix + L must fit; rows beyond wait)
    dtype: str = "auto"  # torch engine weights and KV: auto (the model's) | float32 | bfloat16; log-probs stay float32
    torch: TorchEngineConfig = field(default_factory=TorchEngineConfig)  # rollout.engine=torch only
    vllm: VLLMConfig = field(default_factory=VLLMConfig)  # rollout.engine=vllm only

    def __post_init__(self) -> None:
        check_field_types(self, "rollout.")
        check_choice("rollout.engine", self.engine, EngineName)
        if not (math.isfinite(self.kv_cache_gib) and self.kv_cache_gib > 0):
            raise ConfigError(f"rollout.kv_cache_gib={self.kv_cache_gib} must be a positive number of GiB")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError(f"rollout.dtype={self.dtype!r} must be one of auto, float32, bfloat16, float16")
        for k in ("max_response_len", "num_segments", "group_size", "decode_batch", "max_batch"):
            positive(f"rollout.{k}", getattr(self, k))
        if self.max_response_len % self.num_segments:
            divisors = [m for m in range(1, min(self.max_response_len, 64) + 1) if self.max_response_len % m == 0]
            raise ConfigError(
                f"rollout.num_segments={self.num_segments} must divide rollout.max_response_len="
                f"{self.max_response_len}; allowed values: {divisors}"
            )
        if self.decode_batch < self.group_size:
            raise ConfigError(f"rollout.decode_batch={self.decode_batch} must be >= rollout.group_size={self.group_size}")
        check_sampling(self.temperature, self.top_p, self.top_k, "rollout.")

    @property
    def segment_len(self) -> int:
        return self.max_response_len // self.num_segments
