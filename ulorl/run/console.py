"""What a run prints between progress bars: `say` writes one `[ulorl]` line above them.

The layers below the run report through the standard `logging` module (the step rule's note on
idle rounds: logger `ulorl.rollout`; a judge that fails every call: `ulorl.reward`); `show_library_notes`
routes those lines through `say`.
"""

from __future__ import annotations

import logging

ROLLOUT_LOGGER = "ulorl.rollout"
REWARD_LOGGER = "ulorl.reward"
# the loggers a run prints, and from which level: the rollout's notes, the reward's warnings
NOTES = {ROLLOUT_LOGGER: logging.INFO, REWARD_LOGGER: logging.WARNING}


def say(msg: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(f"[ulorl] {msg}")


class _SayHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        say(record.getMessage())


def show_library_notes() -> None:
    """Print the lines of the loggers in `NOTES` with `say`, from their level on (once per process; later calls
    change nothing)."""
    for name, level in NOTES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(h, _SayHandler) for h in logger.handlers):
            logger.addHandler(_SayHandler())
            logger.setLevel(level)
            logger.propagate = False
