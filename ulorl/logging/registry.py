"""Logger registry keyed by :class:`LoggerName`, and :func:`make_loggers` used by the trainer.

``jsonl`` is always on: :func:`make_loggers` adds it when it is not listed,
because ``metrics.jsonl`` is what ``ulorl plot`` and the tests read. Names are
validated before any logger is built, so a typo never leaves half-created
sinks behind; an unknown name fails listing the valid ones.

Files in the run directory: ``metrics.jsonl`` (jsonl), ``tensorboard/``
(tensorboard), ``wandb/`` (wandb, offline).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ulorl.logging.base import Logger
from ulorl.logging.console import ConsoleLogger
from ulorl.logging.jsonl import METRICS_FILE, JsonlLogger
from ulorl.logging.multi import MultiLogger
from ulorl.logging.tensorboard_logger import TensorBoardLogger
from ulorl.logging.wandb_logger import WandbLogger


class LoggerName(str, Enum):
    """The available metrics sinks."""

    CONSOLE = "console"
    JSONL = "jsonl"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"


@dataclass(frozen=True)
class LoggerContext:
    """Everything a logger builder may need."""

    run_dir: Path
    table_every: int
    project: str
    resume_step: int | None
    config: dict[str, Any] | None


LOGGERS: dict[LoggerName, Callable[[LoggerContext], Logger]] = {
    LoggerName.CONSOLE: lambda c: ConsoleLogger(table_every=c.table_every),
    LoggerName.JSONL: lambda c: JsonlLogger(c.run_dir / METRICS_FILE, resume_step=c.resume_step),
    LoggerName.TENSORBOARD: lambda c: TensorBoardLogger(c.run_dir / "tensorboard", config=c.config),
    LoggerName.WANDB: lambda c: WandbLogger(c.run_dir, project=c.project, config=c.config),
}


def parse_logger_name(name: str | LoggerName) -> LoggerName:
    """``"tensorboard"`` -> ``LoggerName.TENSORBOARD``; unknown names raise listing the valid ones."""
    try:
        return LoggerName(name)
    except ValueError:
        valid = ", ".join(n.value for n in LoggerName)
        raise ValueError(f"unknown logger {name!r}; valid loggers: {valid}") from None


def make_loggers(
    names: Iterable[str | LoggerName],
    run_dir: str | Path,
    *,
    table_every: int = 10,
    project: str = "ulorl",
    resume_step: int | None = None,
    config: dict[str, Any] | None = None,
) -> MultiLogger:
    """Build the requested loggers (plus ``jsonl``, always) writing into ``run_dir``.

    Args:
        names: logger names, e.g. ``["console", "tensorboard"]``; duplicates are ignored.
        run_dir: the run directory (created if missing).
        table_every: console table period in steps.
        project: wandb project name.
        resume_step: the step of the resumed checkpoint (``metrics.jsonl`` lines after it
            are dropped), or ``None`` for a fresh run.
        config: the run's configuration as a plain dict (attached to tensorboard/wandb).
    """
    if isinstance(names, str):
        raise TypeError(f"names must be a list of logger names, not the string {names!r}")
    parsed = [parse_logger_name(n) for n in names]
    if LoggerName.JSONL not in parsed:
        parsed.insert(0, LoggerName.JSONL)
    parsed = list(dict.fromkeys(parsed))
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ctx = LoggerContext(run_dir, table_every, project, resume_step, config)
    built: list[Logger] = []
    try:
        for name in parsed:
            built.append(LOGGERS[name](ctx))
    except BaseException:
        MultiLogger(built).close()
        raise
    return MultiLogger(built)
