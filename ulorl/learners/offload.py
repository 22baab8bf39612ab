"""`model.activation_offload`: the tensors the backbone's forward saves for backward live in CPU memory.

`torch.autograd.graph.saved_tensors_hooks` with a pack hook that copies every saved tensor that is not on the
CPU into (pinned) CPU memory and an unpack hook that copies it back to its device when backward needs it:
what `torch.autograd.graph.save_on_cpu` does, except that a tensor already on the CPU is kept as it is
(`save_on_cpu` copies it too, which on a CPU-only run doubled the update time for nothing; measured in
benchmarks/bench_learner_long.py). Entered around the backbone's forward by a pair of forward hooks, so the
model carries the setting as it carries `gradient_checkpointing`, through every learner (local, process,
sharded, Ray) without a new argument. With gradient checkpointing on, what autograd saves is each
checkpointed layer's input (the layers' insides are recomputed in backward), so the two together keep
`layers x S x hidden` values on the CPU and one layer's working set on the device.

On a CPU-only run it moves nothing: the gradients are the same (tested) and so is the memory. The LM head's
chunked log-probs (`ulorl.algo.logprobs`) run outside the backbone and keep their buffers on the device.
"""

from __future__ import annotations

import torch


def _pack(t: torch.Tensor):
    if t.device.type == "cpu":
        return t
    cpu = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=torch.cuda.is_available())
    cpu.copy_(t, non_blocking=True)
    return t.device, cpu


def _unpack(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    device, cpu = packed
    return cpu.to(device, non_blocking=True)


def offload_saved_tensors():
    """The context whose saved tensors wait on the CPU (`_pack` / `_unpack`)."""
    return torch.autograd.graph.saved_tensors_hooks(_pack, _unpack)


class _SaveOnCpuHooks:
    """Forward pre-hook / hook pair entering and leaving `offload_saved_tensors` (a class: the model pickles)."""

    def __init__(self) -> None:
        self._ctx: list = []

    def enter(self, module, args, kwargs):
        if torch.is_grad_enabled():
            ctx = offload_saved_tensors()
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
