"""`logging:` the metrics sinks, progress bars and how much text `samples.jsonl` keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

from ulorl.config.checks import positive
from ulorl.config.loader import check_choice, check_field_types


@dataclass
class LoggingConfig:
    loggers: list[str] = field(default_factory=lambda: ["console", "jsonl"])  # + tensorboard, wandb
    progress: bool = True  # tqdm progress bars
    # a row of the console's metrics table every N steps (and on the first); null: `default_table_every(train.steps)`
    table_every: int | None = None
    wandb_project: str = "ulorl"
    # decoded response text per line of samples.jsonl (its start and end kept); 0: no text, null: all of it
    sample_text_chars: int | None = 2000

    def __post_init__(self) -> None:
        check_field_types(self, "logging.")
        from ulorl.logging import LoggerName

        for name in self.loggers:
            check_choice("logging.loggers", name, LoggerName)
        if self.table_every is not None:
            positive("logging.table_every", self.table_every)
        if self.sample_text_chars is not None:
            positive("logging.sample_text_chars", self.sample_text_chars, allow_zero=True)


def default_table_every(steps: int) -> int:
    """Every `steps // 10` steps, between 1 and 10: a row a step for runs of under 20 steps (the long run's 8 steps
    take about a minute each), every 10 steps from 100 on (30 rows for the demo's 300)."""
    return max(1, min(10, steps // 10))
