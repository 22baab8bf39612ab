"""The ``Logger`` protocol every metrics sink implements, and value conversion shared by sinks.

A logger receives one flat ``{name: number}`` dict per training step (names are
verl-compatible, see ``docs/metrics.md``) and writes it somewhere. Values may be
Python numbers, numpy scalars or 0-d tensors; :func:`metric_value` turns them
into ``int``/``float``. Non-finite values (NaN, +-inf) are kept as floats by
sinks that understand them (TensorBoard, wandb) and written as ``null`` by the
JSON sink (JSON has no NaN); :func:`json_text` writes the run's JSON reports the same way.
"""

from __future__ import annotations

import json
import math
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Logger(Protocol):
    """A sink for per-step scalar metrics."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Record ``metrics`` as the values of training step ``step``."""
        ...

    def close(self) -> None:
        """Flush and release resources; calling it twice is harmless."""
        ...


def metric_value(name: str, value: Any) -> int | float:
    """Convert one metric value to a plain ``int`` or ``float``.

    Accepts bool, int, float, numpy scalars and one-element tensors/arrays
    (anything with ``.item()``). Raises ``TypeError`` naming the metric otherwise.
    """
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        try:
            value = value.item()
        except (ValueError, RuntimeError) as e:  # multi-element tensor / array
            raise TypeError(f"metric {name!r} must be a scalar, got {type(value).__name__} ({e})") from e
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value
    raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__}: {value!r}")


def json_value(name: str, value: Any) -> int | float | None:
    """Like :func:`metric_value`, but NaN and +-inf become ``None`` (JSON ``null``)."""
    return finite_or_null(metric_value(name, value))


def finite_or_null(value: Any) -> Any:
    """`value` (nested dicts, lists and tuples) with every NaN and +-inf float replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def json_text(value: Any, **kwargs) -> str:
    """`json.dumps` of `value` as strict JSON: NaN and +-inf written as ``null`` (Python's default writes the bare
    `NaN` that jq, JavaScript and most JSON readers refuse). For the run's reports (`summary.json`,
    `history.json`, `results.json`, ...); checkpoints keep Python's floats as they are."""
    return json.dumps(finite_or_null(value), allow_nan=False, **kwargs)


def check_step(step: Any) -> int:
    """Validate a step number (a non-negative int)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TypeError(f"step must be a non-negative int, got {step!r}")
    return step
