"""`enable_gradient_checkpointing` calls transformers' current name for it (`activation_checkpointing_enable`, 5.23+)
and the old one (`gradient_checkpointing_enable`, removed in v6) only where the current one does not exist."""

from __future__ import annotations

import warnings

import torch

from ulorl.learners.checkpointing import enable_gradient_checkpointing
from ulorl.models import load_model


class _Old:
    def __init__(self):
        self.calls = []

    def gradient_checkpointing_enable(self):
        self.calls.append("gradient")


class _New(_Old):
    def activation_checkpointing_enable(self):
        self.calls.append("activation")


def test_the_current_name_is_preferred_and_the_old_one_is_the_fallback():
    old, new = _Old(), _New()
    enable_gradient_checkpointing(old)
    enable_gradient_checkpointing(new)
    assert old.calls == ["gradient"] and new.calls == ["activation"]


def _mlp_forwards(model) -> int:
    """Calls of the first decoder layer's MLP in one training forward + backward (counted by wrapping its `forward`:
    module hooks do not run in the backward's recompute)."""
    mlp, calls = model.model.layers[0].mlp, []
    forward = mlp.forward
    mlp.forward = lambda *a, **k: (calls.append(1), forward(*a, **k))[1]
    model.train()
    model(input_ids=torch.tensor([[3, 4, 5, 6]])).logits.sum().backward()
    del mlp.forward
    return len(calls)


def test_the_installed_transformers_recomputes_each_layer_in_backward_without_a_deprecation_warning(tiny_model_dir):
    model = load_model(tiny_model_dir)
    assert _mlp_forwards(model) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        enable_gradient_checkpointing(model)
    assert _mlp_forwards(model) == 2  # once in forward, once more when backward recomputes it
