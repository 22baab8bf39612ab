"""`checkpoint:` how often a run saves, how many checkpoints it keeps, and the final export."""

from __future__ import annotations

from dataclasses import dataclass

from ulorl.config.checks import positive
from ulorl.config.loader import check_field_types


@dataclass
class CheckpointConfig:
    every: int = 10  # save every N steps (0: only at the end and on SIGTERM/SIGINT)
    keep: int = 2  # keep the last K complete checkpoints
    export: bool = True  # at the end of a run, the last checkpoint as a plain HF folder in RUN/export (ulorl.run.export)

    def __post_init__(self) -> None:
        check_field_types(self, "checkpoint.")
        positive("checkpoint.every", self.every, allow_zero=True)
        positive("checkpoint.keep", self.keep)
