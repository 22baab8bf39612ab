"""TensorBoard logger: every metric as a scalar in ``RUN_DIR/tensorboard``.

Uses ``torch.utils.tensorboard.SummaryWriter``, which needs the optional
``tensorboard`` package (``pip install 'ulorl[tensorboard]'``). Metric names
keep their ``/`` so TensorBoard groups them (``actor``, ``rollout``, ...). The
writer is flushed after every step so a crash loses nothing. NaN/inf are
written as-is (TensorBoard displays them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ulorl.logging.base import check_step, metric_value

INSTALL_HINT = "pip install 'ulorl[tensorboard]'"


class TensorBoardLogger:
    """Write scalars with a ``SummaryWriter`` into ``log_dir``."""

    def __init__(self, log_dir: str | Path, config: dict[str, Any] | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError(
                f"the tensorboard logger needs the 'tensorboard' package, which is not installed: "
                f"{INSTALL_HINT} (or drop 'tensorboard' from logging.loggers)"
            ) from e
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer: Any = SummaryWriter(log_dir=str(self.log_dir))
        if config is not None:
            text = json.dumps(config, indent=2, sort_keys=True, default=str)
            self._writer.add_text("config", "```\n" + text + "\n```", global_step=0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._writer is None:
            raise RuntimeError(f"TensorBoardLogger({self.log_dir}) is closed")
        check_step(step)
        for name, value in metrics.items():
            self._writer.add_scalar(name, float(metric_value(name, value)), global_step=step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
