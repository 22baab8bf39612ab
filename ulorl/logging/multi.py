"""``MultiLogger``: fan one step's metrics out to several loggers.

``close`` closes every logger even when one of them fails, then re-raises the
first error. Usable as a context manager.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from ulorl.logging.base import Logger


class MultiLogger:
    """Forward ``log``/``close`` to each logger, in order."""

    def __init__(self, loggers: Iterable[Logger]) -> None:
        self.loggers: tuple[Logger, ...] = tuple(loggers)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for lg in self.loggers:
            lg.log(metrics, step)

    def close(self) -> None:
        first: BaseException | None = None
        for lg in self.loggers:
            try:
                lg.close()
            except Exception as e:  # close the others regardless
                first = first or e
        if first is not None:
            raise first

    def __enter__(self) -> MultiLogger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
