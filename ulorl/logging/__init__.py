"""Metrics sinks for training runs: console table, ``metrics.jsonl``, TensorBoard, wandb.

The trainer calls :func:`make_loggers` once and then ``loggers.log(metrics, step)``
each step. Every sink implements the :class:`Logger` protocol. Metric names
and meanings: ``docs/metrics.md``.

(This package is ``ulorl.logging``; it never shadows the standard library's
``logging``, which its modules import by absolute name.)
"""

from ulorl.logging.base import Logger, json_value, metric_value
from ulorl.logging.console import DEFAULT_COLUMNS, ConsoleLogger
from ulorl.logging.jsonl import METRICS_FILE, JsonlLogger, read_metrics, truncate_after
from ulorl.logging.multi import MultiLogger
from ulorl.logging.registry import LOGGERS, LoggerName, make_loggers, parse_logger_name
from ulorl.logging.tensorboard_logger import TensorBoardLogger
from ulorl.logging.wandb_logger import WandbLogger

__all__ = [
    "DEFAULT_COLUMNS",
    "LOGGERS",
    "METRICS_FILE",
    "ConsoleLogger",
    "JsonlLogger",
    "Logger",
    "LoggerName",
    "MultiLogger",
    "TensorBoardLogger",
    "WandbLogger",
    "json_value",
    "make_loggers",
    "metric_value",
    "parse_logger_name",
    "read_metrics",
    "truncate_after",
]
