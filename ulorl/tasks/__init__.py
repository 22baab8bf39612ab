"""Built-in synthetic verifiable tasks, registered by source name (`builtin:<task>`).

- `builtin:chain`: a running sum with a countdown; answers of 6 to ~130 tokens (the demo's task).
- `builtin:odometer`: a 3-digit counter rolling down with a running value; answers of
  tens to ~4,000 tokens (the long run's task).

Each task module has `make_rows(n, seed, split, **size_law) -> list[dict]` (rows in
verl's schema) and `DATA_SOURCE`. Data loaders and SFT resolve a source through
`task_rows`, so a new task is one module plus one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from ulorl.tasks import chain, odometer

BUILTIN_PREFIX = "builtin:"


class BuiltinTask(str, Enum):
    """Source names of the built-in tasks."""

    CHAIN = "builtin:chain"
    ODOMETER = "builtin:odometer"


SMALLEST_SIZE = 2  # every built-in task's smallest problem, in steps (`min_size` of their size laws)
# the tasks whose size law takes `uniform` (a share of sizes uniform on [2, max_size]): `data.uniform`
UNIFORM_TASKS = frozenset({BuiltinTask.ODOMETER.value})

TASKS: dict[str, Callable[..., list[dict]]] = {
    BuiltinTask.CHAIN.value: chain.make_rows,
    BuiltinTask.ODOMETER.value: odometer.make_rows,
}


def task_rows(source: str, n: int, seed: int, split: str = "train", **size_law) -> list[dict]:
    """`n` rows of the built-in task named `source` (e.g. `builtin:odometer`). A size-law setting left at its
    default (`alpha=None`, `uniform=0`) is not forwarded, so the task's own law applies and a task without
    that setting (`chain` has no `uniform`) accepts it."""
    if source not in TASKS:
        raise ValueError(f"unknown built-in task {source!r}; valid: {sorted(TASKS)}")
    law = {k: v for k, v in size_law.items() if not (k == "alpha" and v is None or k == "uniform" and not v)}
    return TASKS[source](n, seed=seed, split=split, **law)


__all__ = ["BUILTIN_PREFIX", "SMALLEST_SIZE", "UNIFORM_TASKS", "BuiltinTask", "TASKS", "task_rows"]
