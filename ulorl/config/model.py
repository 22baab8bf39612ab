"""`model:` the policy to train (path, dtype, memory savers) and its LoRA adapters (`model.lora`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ulorl.config.checks import positive
from ulorl.config.loader import ConfigError, check_choice, check_field_types

# peft's names of the Llama/Qwen linear layers: attention and MLP projections (not the LM head)
LORA_ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


MODEL_DTYPES = ("float32", "bfloat16", "float16")  # what the model is loaded in (`load_model`'s dtype)


@dataclass
class LoraConfig:
    """`model.lora`: low-rank adapters through peft (`ulorl.models.lora`); rank 0 trains every weight."""

    rank: int = 0  # r; 0: full fine-tuning (no adapters)
    alpha: float = 32.0  # scaling alpha / rank, as peft's lora_alpha
    dropout: float = 0.0  # on the adapter's input while training; > 0 makes the learner's log-probs differ from the engine's
    target_modules: list[str] = field(default_factory=lambda: list(LORA_ALL_LINEAR))  # module names peft wraps

    def __post_init__(self) -> None:
        check_field_types(self, "model.lora.")
        positive("model.lora.rank", self.rank, allow_zero=True)
        positive("model.lora.alpha", self.alpha)
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"model.lora.dropout={self.dropout} must be in [0, 1)")
        if not self.target_modules or not all(isinstance(m, str) and m for m in self.target_modules):
            raise ConfigError(f"model.lora.target_modules={self.target_modules!r} must be a non-empty list of module "
                              f"names, e.g. {LORA_ALL_LINEAR}")


@dataclass
class ModelConfig:
    path: str = "builtin"  # 'builtin' (tiny Qwen3 made in code) or a local HF model folder
    dtype: str = "float32"  # one of MODEL_DTYPES
    trust_remote_code: bool = False  # never on unless asked
    warm_start: str = "sft"  # sft: run `ulorl sft` before RL (built-in task); none: start RL from `path`
    gradient_checkpointing: bool = False  # keep each decoder layer's input, recompute the rest in backward
    # the learner's saved activations go to CPU memory during forward and come back in backward
    # (torch.autograd.graph.save_on_cpu); with gradient_checkpointing, that is the layer inputs it keeps
    activation_offload: bool = False
    rope_scaling_factor: float | None = None  # YaRN factor (paper's 140k run: 1.5)
    rope_original_max_len: int | None = None  # YaRN original context (paper: ~93k)
    lora: LoraConfig = field(default_factory=LoraConfig)  # rank > 0: train adapters only (RL; the SFT warm start is full)

    def __post_init__(self) -> None:
        check_field_types(self, "model.")
        check_choice("model.dtype", self.dtype, list(MODEL_DTYPES))
        check_choice("model.warm_start", self.warm_start, ["sft", "none"])
        if self.rope_scaling_factor is not None and self.rope_scaling_factor <= 1.0:
            raise ConfigError(f"model.rope_scaling_factor={self.rope_scaling_factor} must be > 1 (or null)")
