"""`logging:` the metrics sinks, progress bars and how much text `samples.jsonl` keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

from ulorl.config.checks import positive
from ulorl.config.loader import check_choice


@dataclass
class LoggingConfig:
    loggers: list[str] = field(default_factory=lambda: ["console", "jsonl"])  # + tensorboard, wandb
    progress: bool = True  # tqdm progress bars
    table_every: int = 10  # print a metrics table every N steps (console logger)
    wandb_project: str = "ulorl"
    # decoded response text per line of samples.jsonl (its start and end kept); 0: no text, null: all of it
    sample_text_chars: int | None = 2000

    def __post_init__(self) -> None:
        from ulorl.logging import LoggerName

        for name in self.loggers:
            check_choice("logging.loggers", name, LoggerName)
        if self.sample_text_chars is not None:
            positive("logging.sample_text_chars", self.sample_text_chars, allow_zero=True)
