"""Small helpers shared by the ``ulorl.algo`` modules (not public API).

- :func:`parse_mode` turns a ``str`` or ``str``-Enum member into the Enum,
  failing with the list of valid names (every registry uses it).
- :func:`group_index` maps group ids (a tensor or a sequence of hashables)
  to dense integer indices ``0..G-1`` so group statistics can be computed
  with scatter operations instead of Python loops.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from enum import Enum
from typing import TypeVar

import torch
from torch import Tensor

E = TypeVar("E", bound=Enum)

GroupIds = Tensor | Sequence[Hashable]


def parse_mode(enum_cls: type[E], value: str | E) -> E:
    """Return ``enum_cls(value)``; raise ``ValueError`` listing valid names otherwise."""
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(value)
    except ValueError:
        valid = ", ".join(repr(m.value) for m in enum_cls)
        raise ValueError(
            f"unknown {enum_cls.__name__} {value!r}; valid values are: {valid}"
        ) from None


def group_index(group_ids: GroupIds, device: torch.device | None = None) -> tuple[Tensor, int]:
    """Dense group index of every sample.

    Args:
        group_ids: ``(N,)`` tensor, or a length-``N`` sequence of hashables
            (e.g. prompt uids as strings).
        device: device of the returned index.

    Returns:
        ``(index, num_groups)`` where ``index`` is a ``(N,)`` long tensor with
        values in ``[0, num_groups)``; equal ids get equal indices.
    """
    if isinstance(group_ids, Tensor):
        if group_ids.dim() != 1:
            raise ValueError(f"group_ids must be 1-D (N,), got shape {tuple(group_ids.shape)}")
        uniq, index = torch.unique(group_ids, return_inverse=True)
        return index.to(device or group_ids.device), int(uniq.numel())
    # Hashable ids: one dictionary pass (order of first appearance), then tensors.
    mapping: dict[Hashable, int] = {}
    index_list = [mapping.setdefault(g, len(mapping)) for g in group_ids]
    return torch.tensor(index_list, dtype=torch.long, device=device), len(mapping)


def check_same_shape(**tensors: Tensor | None) -> None:
    """Raise ``ValueError`` unless all given (non-None) tensors share one shape."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shape mismatch: {shapes}")
