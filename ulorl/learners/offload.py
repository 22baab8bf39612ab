"""`model.activation_offload`: the tensors the backbone's forward saves for backward live in CPU memory.

`torch.autograd.graph.save_on_cpu` moves every tensor autograd saves inside its context to the CPU (pinned
memory on CUDA) and copies it back when backward needs it. Entered around the backbone's forward by a
pair of forward hooks, so the model carries the setting as it carries `gradient_checkpointing`, through
every learner (local, process, sharded, Ray) without a new argument. With gradient checkpointing on, what
autograd saves is each checkpointed layer's input (the layers' insides are recomputed in backward), so the
two together keep `layers x S x hidden` values on the CPU and one layer's working set on the device.

On a CPU-only run it moves nothing (without pinned memory `save_on_cpu` packs a CPU tensor as itself): the
gradients are the same (tested) and so is the memory. The LM head's chunked log-probs (`ulorl.algo.logprobs`) run outside the backbone and keep
their `(chunk,)` buffers on the device.
"""

from __future__ import annotations

import torch


class _SaveOnCpuHooks:
    """Forward pre-hook / hook pair entering and leaving `save_on_cpu` (a class, so the model still pickles)."""

    def __init__(self) -> None:
        self._ctx: list = []

    def enter(self, module, args, kwargs):
        if torch.is_grad_enabled():
            ctx = torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available())
            ctx.__enter__()
            self._ctx.append(ctx)

    def leave(self, module, args, kwargs, output):
        if self._ctx:
            self._ctx.pop().__exit__(None, None, None)


def enable_activation_offload(model: torch.nn.Module) -> None:
    """Offload the saved activations of `model.base_model`'s forward to the CPU (idempotent)."""
    backbone = model.base_model
    if getattr(backbone, "_ulorl_offload", None) is not None:
        return
    hooks = _SaveOnCpuHooks()
    backbone.register_forward_pre_hook(hooks.enter, with_kwargs=True)
    backbone.register_forward_hook(hooks.leave, with_kwargs=True, always_call=True)
    backbone._ulorl_offload = hooks


def activation_offload_enabled(model: torch.nn.Module) -> bool:
    return getattr(model.base_model, "_ulorl_offload", None) is not None
