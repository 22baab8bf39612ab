"""LoRA through peft (`model.lora.rank > 0`): adapters injected into the transformers model itself.

`peft.inject_adapter_in_model` replaces each targeted `nn.Linear` (`model.lora.target_modules`) by peft's
`lora.Linear` *in place*, so the model stays the transformers model the rest of ulorl expects: the torch
engine calls `attn.q_proj(h)` and gets the adapted projection, the learner's forward is the same model's,
and there is nothing to synchronise. peft freezes every base weight, so the learner's optimizer
(`requires_grad` parameters) holds the adapters only. peft's `PeftModel` wrapper is not used: it hides the
transformers model one level deeper (`model.base_model.model`), and transformers' own adapter integration
(`add_adapter`) refuses peft < 0.22 in transformers 5.

A LoRA policy is saved (`save_policy`, the checkpoint's `model/` folder) as a peft adapter folder:
`adapter_config.json` (its `base_model_name_or_path` is the absolute base folder), `adapter_model.safetensors`,
plus the base's `config.json` and the tokenizer. `load_policy_model` rebuilds it: the base folder, the same
adapters, the saved adapter weights; `merged_model` folds the adapters into plain weights (export).

Initialisation is peft's (A Kaiming-uniform, B zero: the adapted model starts equal to the base), drawn under
`seed` in a forked RNG, so a run's other random numbers do not depend on whether LoRA is on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ulorl.config import LoraConfig, ModelConfig
from ulorl.errors import UlorlError

ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
ADAPTER_NAME = "default"


class LoraError(UlorlError, ValueError):
    """LoRA cannot be applied or loaded as configured (a one-line CLI error naming the key)."""


def _peft():
    try:
        import peft
    except ImportError as e:
        raise LoraError("model.lora.rank > 0 needs the peft package: pip install peft (it is in ulorl's dev and "
                        "real extras)") from e
    return peft


def is_lora(model: torch.nn.Module) -> bool:
    """Whether `model` carries peft adapters (injected by `apply_lora`)."""
    return ADAPTER_NAME in (getattr(model, "peft_config", None) or {})


def apply_lora(model: torch.nn.Module, lora: LoraConfig, base_dir: str | os.PathLike, seed: int = 0
               ) -> torch.nn.Module:
    """Inject adapters into `model` in place (base weights frozen) and return it; `base_dir`: the folder the
    base weights came from, recorded for `load_policy_model`."""
    peft = _peft()
    present = {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    unknown = sorted(set(lora.target_modules) - present)
    if unknown:
        raise LoraError(f"model.lora.target_modules names {unknown}, which are not linear layers of this model "
                        f"(its linear layers: {sorted(present)})")
    config = peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                             target_modules=list(lora.target_modules), bias="none", task_type="CAUSAL_LM",
                             base_model_name_or_path=str(Path(base_dir).resolve()))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft.inject_adapter_in_model(config, model, adapter_name=ADAPTER_NAME)
    model.peft_config = {ADAPTER_NAME: config}
    # the embeddings are frozen, so their output needs requires_grad for gradient checkpointing (reentrant)
    # to pass gradients to the adapters of the first layers
    model.enable_input_require_grads()
    device = next(model.parameters()).device
    model.to(device)  # the adapters are created on the CPU
    return model


def adapter_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter weights only, under peft's saved names (`...q_proj.lora_A.weight`)."""
    return _peft().get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME)


def save_policy(model: torch.nn.Module, out_dir: str | os.PathLike) -> None:
    """Write `model` into `out_dir`: `save_pretrained` for a plain model; for a LoRA model the adapter folder
    described in the module docstring (the base weights are not copied)."""
    out = Path(out_dir)
    if not is_lora(model):
        model.save_pretrained(out, safe_serialization=True)
        return
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(out)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(out)
    state = {k: v.detach().to("cpu").contiguous() for k, v in adapter_state_dict(model).items()}
    save_file(state, out / ADAPTER_WEIGHTS, metadata={"format": "pt"})
    model.peft_config[ADAPTER_NAME].save_pretrained(out)


def adapter_base(folder: str | os.PathLike) -> Path | None:
    """The base model folder of the adapter folder `folder`, None when `folder` holds no adapters."""
    cfg = Path(folder) / ADAPTER_CONFIG
    if not cfg.is_file():
        return None
    base = json.loads(cfg.read_text()).get("base_model_name_or_path")
    if not base or not (Path(base) / "config.json").is_file():
        raise LoraError(f"{cfg}: its base model folder {base!r} is gone; the adapters in {folder} need it "
                        f"(restore that folder, or export a merged model from a machine that has it)")
    return Path(base)


def lora_settings(folder: str | os.PathLike) -> LoraConfig:
    """The `model.lora` settings an adapter folder was saved with."""
    d = json.loads((Path(folder) / ADAPTER_CONFIG).read_text())
    targets = d["target_modules"]
    return LoraConfig(rank=int(d["r"]), alpha=float(d["lora_alpha"]), dropout=float(d.get("lora_dropout") or 0.0),
                      target_modules=sorted(targets) if isinstance(targets, (list, set)) else [targets])


def load_adapter_weights(model: torch.nn.Module, folder: str | os.PathLike) -> None:
    """Load `folder`'s adapter weights into `model`'s adapters (every adapter tensor must be present)."""
    from safetensors.torch import load_file

    state = load_file(Path(folder) / ADAPTER_WEIGHTS)
    mine = adapter_state_dict(model)
    if set(state) != set(mine):
        raise LoraError(f"{folder}: its adapters ({len(state)} tensors) do not match model.lora's "
                        f"({len(mine)} tensors); resume with the model.lora settings the run was saved with")
    result = _peft().set_peft_model_state_dict(model, state, adapter_name=ADAPTER_NAME)
    if result.unexpected_keys:
        raise LoraError(f"{folder}: adapter tensors {result.unexpected_keys[:3]} have no place in the model")


def load_policy_model(m: ModelConfig, folder: str | os.PathLike, device: str = "cpu", seed: int = 0
                      ) -> torch.nn.Module:
    """The policy in `folder` as a run trains it: a plain folder, with adapters added when `model.lora.rank > 0`;
    an adapter folder (a LoRA checkpoint), rebuilt from its base and its saved adapter weights."""
    from ulorl.models.loading import load_model, resolve_model_path

    def base_model(path):
        return load_model(path, m.dtype, m.trust_remote_code, device, m.rope_scaling_factor, m.rope_original_max_len)

    base = adapter_base(resolve_model_path(folder))
    if base is not None:
        model = apply_lora(base_model(base), lora_settings(folder), base, seed)  # the structure it was saved with
        load_adapter_weights(model, folder)
        return model
    model = base_model(folder)
    if m.lora.rank:
        apply_lora(model, m.lora, resolve_model_path(folder), seed)
    return model


def merged_model(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with every adapter folded into its base weight (W + B A alpha / r) and peft's layers removed:
    a plain transformers model (changes `model` in place; returns it)."""
    if not is_lora(model):
        return model
    from peft.tuners.tuners_utils import BaseTunerLayer

    for name, module in list(model.named_modules()):
        if isinstance(module, BaseTunerLayer):
            module.merge(adapter_names=[ADAPTER_NAME])  # peft's own merge: W += B A alpha / r
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, module.get_base_layer())
    del model.peft_config
    return model
