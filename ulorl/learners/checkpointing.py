"""`model.gradient_checkpointing`: each decoder layer keeps its input and recomputes the rest in backward.

transformers does it; only the method's name moved inside the range ulorl supports: `activation_checkpointing_enable`
since 5.23, `gradient_checkpointing_enable` before (from 5.23 a deprecated alias that warns, to be removed in v6).
`enable_gradient_checkpointing` calls whichever the installed transformers has, so one code path serves 5.0 (and the
GPU machine's 5.17) and 6. The checkpoint function is transformers' default, non-reentrant `torch.utils.checkpoint`.
"""

from __future__ import annotations

import torch


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Turn on transformers' gradient (activation) checkpointing of `model` (a PreTrainedModel or a peft wrapper)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is None:
        enable = model.gradient_checkpointing_enable
    enable()
