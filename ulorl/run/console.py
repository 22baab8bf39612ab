"""What a run prints between progress bars: `say` writes one `[ulorl]` line above them.

The layers below the run report through the standard `logging` module (the step rule's note on
idle rounds: logger `ulorl.rollout`); `show_rollout_notes` routes those lines through `say`.
"""

from __future__ import annotations

import logging

ROLLOUT_LOGGER = "ulorl.rollout"


def say(msg: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(f"[ulorl] {msg}")


class _SayHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        say(record.getMessage())


def show_rollout_notes() -> None:
    """Print the rollout layer's INFO lines with `say` (once per process; later calls change nothing)."""
    logger = logging.getLogger(ROLLOUT_LOGGER)
    if not any(isinstance(h, _SayHandler) for h in logger.handlers):
        logger.addHandler(_SayHandler())
        logger.setLevel(logging.INFO)
        logger.propagate = False
